//! The only `unsafe` of the UDP port: socket options std does not offer,
//! and batched `recvmmsg`/`sendmmsg` with the IPv4 destination address of
//! each datagram (`IP_PKTINFO`) and the socket's drop count
//! (`SO_RXQ_OVFL`). Thin wrappers over `libc`; everything above is safe.
//!
//! Every pointer handed to the kernel points into buffers owned by the
//! batch structs below and is rebuilt right before each call, so nothing
//! dangles when a struct moves. (`unsafe_code` is allowed for this module
//! alone, where `lib.rs` declares it.)

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;

/// Bytes of one receive buffer: the largest UDP payload, so that a run of
/// datagrams the kernel hands over coalesced (`UDP_GRO`) fits whole; a
/// single datagram longer than a RoCEv2 packet is dropped by the parser.
pub(crate) const RECV_BUF_LEN: usize = 65536;
/// Datagrams taken per `recvmmsg`.
pub(crate) const RECV_BATCH: usize = 32;
/// Datagrams given per `sendmmsg`.
const SEND_BATCH: usize = 64;
/// Room for the control messages of one datagram: `in_pktinfo` and the
/// `SO_RXQ_OVFL` counter, with headers and alignment.
const CMSG_LEN: usize = 128;

fn setsockopt_int(sock: &UdpSocket, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: `value` is a live c_int and the length passed is its size;
    // the kernel copies it before returning. The fd is owned by `sock`.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            name,
            std::ptr::from_ref(&value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sets what makes the kernel's IPv4 header the one the ICRC was computed
/// over (DF set, so the identification is 0 on an unconnected socket; TTL
/// 64; TOS 0), asks for each datagram's destination address and the
/// socket's drop count, and enlarges the receive buffer to `rcvbuf` bytes
/// (beyond `rmem_max` where the process may, as root may).
pub(crate) fn configure(sock: &UdpSocket, rcvbuf: i32) -> io::Result<()> {
    setsockopt_int(
        sock,
        libc::IPPROTO_IP,
        libc::IP_MTU_DISCOVER,
        libc::IP_PMTUDISC_DO,
    )?;
    setsockopt_int(sock, libc::IPPROTO_IP, libc::IP_TTL, 64)?;
    setsockopt_int(sock, libc::IPPROTO_IP, libc::IP_TOS, 0)?;
    setsockopt_int(sock, libc::IPPROTO_IP, libc::IP_PKTINFO, 1)?;
    setsockopt_int(sock, libc::SOL_SOCKET, libc::SO_RXQ_OVFL, 1)?;
    // Runs of datagrams arrive coalesced, with their segment size (Linux
    // 5.0 on); where the kernel cannot, one by one as before.
    let _ = setsockopt_int(sock, libc::SOL_UDP, libc::UDP_GRO, 1);
    if setsockopt_int(sock, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, rcvbuf).is_err() {
        setsockopt_int(sock, libc::SOL_SOCKET, libc::SO_RCVBUF, rcvbuf)?;
    }
    let _ = setsockopt_int(sock, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, rcvbuf);
    Ok(())
}

/// Waits until `sock` has something to read (or was shut), at most
/// `timeout`; tells whether it has.
pub(crate) fn wait_readable(sock: &UdpSocket, timeout: std::time::Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd: sock.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one pollfd, a live local the kernel writes `revents` of.
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    n > 0
}

/// Ends receiving on `sock` (`shutdown(SHUT_RD)`): a thread waiting in
/// [`wait_readable`] returns at once, and so does every later receive,
/// without a datagram on the wire. Linux does this for an unconnected UDP
/// socket too, answering ENOTCONN, which is expected and ignored.
pub(crate) fn shut_rd(sock: &UdpSocket) {
    // SAFETY: shutdown takes the fd `sock` owns and a constant; it touches
    // no memory of ours.
    let _ = unsafe { libc::shutdown(sock.as_raw_fd(), libc::SHUT_RD) };
}

/// The name of the interface that holds `ipv4`: the one whose IPv4
/// network contains it, the longest prefix winning (127.0.88.2 is lo's, as
/// 127.0.0.0/8 is), from `getifaddrs`. `None` if no interface does.
pub(crate) fn interface_of(ipv4: [u8; 4]) -> Option<String> {
    let want = u32::from_be_bytes(ipv4);
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes the head of a list it allocates into
    // `head`, or fails and writes nothing.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return None;
    }
    let mut best: Option<(u32, String)> = None;
    let mut p = head;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs returned, not yet
        // freed; its address and netmask, when not NULL, are sockaddrs of
        // the family `sa_family` says, here AF_INET (a sockaddr_in), and
        // its name a NUL-terminated string.
        unsafe {
            let ifa = &*p;
            if !ifa.ifa_addr.is_null()
                && !ifa.ifa_netmask.is_null()
                && i32::from((*ifa.ifa_addr).sa_family) == libc::AF_INET
            {
                let addr =
                    u32::from_be((*ifa.ifa_addr.cast::<libc::sockaddr_in>()).sin_addr.s_addr);
                let mask = u32::from_be(
                    (*ifa.ifa_netmask.cast::<libc::sockaddr_in>())
                        .sin_addr
                        .s_addr,
                );
                let prefix = mask.count_ones();
                if want & mask == addr & mask && best.as_ref().is_none_or(|(b, _)| prefix > *b) {
                    let name = std::ffi::CStr::from_ptr(ifa.ifa_name);
                    best = Some((prefix, name.to_string_lossy().into_owned()));
                }
            }
            p = ifa.ifa_next;
        }
    }
    // SAFETY: the list getifaddrs returned, freed once, not used after.
    unsafe { libc::freeifaddrs(head) };
    best.map(|(_, name)| name)
}

/// Reads an integer socket option.
#[cfg(test)]
pub(crate) fn getsockopt_int(sock: &UdpSocket, level: i32, name: i32) -> io::Result<i32> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are live locals of the sizes the kernel is
    // told; it writes at most `len` bytes to `value`.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            level,
            name,
            std::ptr::from_mut(&mut value).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// What the kernel told about one received datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecvMeta {
    /// Sender's address and port.
    pub(crate) src: SocketAddrV4,
    /// The IPv4 header's destination address (`IP_PKTINFO`), if given.
    pub(crate) dst: Option<Ipv4Addr>,
    /// Bytes of UDP payload in the buffer.
    pub(crate) len: usize,
    /// The datagram was longer than the buffer.
    pub(crate) truncated: bool,
    /// Datagrams the socket has dropped for want of buffer space since it
    /// was opened (`SO_RXQ_OVFL`), if told.
    pub(crate) socket_drops: Option<u32>,
    /// The buffer holds a run of datagrams of this size each (the last
    /// may be shorter), coalesced by the kernel (`UDP_GRO`).
    pub(crate) segment: Option<usize>,
}

/// Bytes a UDP port writes before each datagram it hands its NIC as a
/// frame: the IPv4 and UDP headers ([`crate::datagrams::HEADERS_LEN`]).
pub(crate) const HEADROOM: usize = crate::datagrams::HEADERS_LEN;

/// Most datagrams the kernel coalesces into one receive (`UDP_GRO`; its
/// `UDP_GRO_CNT_MAX`).
const GRO_MAX: usize = 64;

/// Pieces a receive buffer is cut into: one per datagram of a run, and one
/// for the rest of [`RECV_BUF_LEN`].
const PIECES: usize = GRO_MAX + 1;

/// Bytes of a run long enough that the receive buffers are cut to its
/// segment size.
const LONG_RUN: usize = RECV_BUF_LEN / 4;

/// Bytes of one receive buffer: [`RECV_BUF_LEN`] of datagrams, with
/// [`HEADROOM`] before each piece.
pub(crate) const RECV_SPAN: usize = RECV_BUF_LEN + HEADROOM * PIECES;

/// What [`RecvBatch::take`] gives for one received datagram or run.
pub(crate) enum Taken<'a> {
    /// A run the kernel coalesced, each datagram where a frame's bytes
    /// after its headers go (datagram `k` at `HEADROOM + k * (HEADROOM +
    /// seg)`, `seg` the run's segment size), the headers before each
    /// written: the frames back to back, with nothing copied.
    Frames { buf: Vec<u8>, count: usize },
    /// The datagram's bytes, or a run's back to back: a datagram alone
    /// where the kernel put it, a run of another segment size than the
    /// batch expected gathered into a buffer of the batch's.
    Bytes(&'a [u8]),
}

/// Buffers for one `recvmmsg` of up to [`RECV_BATCH`] datagrams or runs.
///
/// Each entry's buffer is cut into pieces of the segment size the batch
/// expects (`stride`: the last run's), [`HEADROOM`] bytes apart, and
/// the kernel fills one piece after another: a run of that segment size
/// lands with each datagram where its frame's headers end, so the frames
/// are made by writing headers between them, not by copying the run
/// ([`RecvBatch::take`]). A run taken so leaves with its buffer, and a
/// spare takes its place. Runs of another size are copied out, and the
/// batch expects their size from the next receive on.
///
/// The headers and iovecs point into the batch's own heap buffers (the
/// entries' buffers' spare capacity), set before a receive for every
/// entry whose buffer or stride changed: a buffer is never grown, only
/// replaced whole, and the vectors of headers and iovecs are never
/// resized, so nothing they point at moves when the batch does. After
/// each call the fields the kernel wrote are reset, for the headers it
/// used only (a receive that finds nothing costs no setup).
pub(crate) struct RecvBatch {
    /// One buffer per entry, of [`RECV_SPAN`] bytes' capacity and no
    /// length: the kernel writes its spare capacity.
    bufs: Vec<Vec<u8>>,
    /// Datagram bytes per piece: the segment size of the last run.
    stride: usize,
    /// The stride the next receive cuts the buffers by.
    next_stride: usize,
    /// Entries whose iovecs point at their buffer, cut by `stride`.
    laid: Vec<bool>,
    /// u64 elements keep each control buffer aligned for `cmsghdr`.
    cmsgs: Vec<[u64; CMSG_LEN / 8]>,
    names: Vec<libc::sockaddr_in>,
    /// [`PIECES`] per entry.
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    metas: Vec<RecvMeta>,
    /// Bytes the pieces split, copied back together.
    gathered: Vec<u8>,
}

// SAFETY: the raw pointers in the headers and iovecs point only into the
// batch's own heap buffers, which stay put when the batch moves (the
// vectors are never resized, the entries' buffers never grown); no
// pointer is dereferenced by Rust code. Moving the batch to another
// thread, or using it from one thread at a time under a lock, is then
// like moving its `Vec`s.
unsafe impl Send for RecvBatch {}

impl RecvBatch {
    pub(crate) fn new() -> Self {
        // SAFETY: sockaddr_in, iovec and mmsghdr are plain C structs for
        // which all-zero bytes are a valid value.
        let (name, iov, hdr) = unsafe {
            (
                std::mem::zeroed::<libc::sockaddr_in>(),
                std::mem::zeroed::<libc::iovec>(),
                std::mem::zeroed::<libc::mmsghdr>(),
            )
        };
        let mut b = Self {
            bufs: (0..RECV_BATCH)
                .map(|_| Vec::with_capacity(RECV_SPAN))
                .collect(),
            // Until a run says otherwise, a datagram alone fills a buffer.
            stride: RECV_BUF_LEN,
            next_stride: RECV_BUF_LEN,
            laid: vec![false; RECV_BATCH],
            cmsgs: vec![[0u64; CMSG_LEN / 8]; RECV_BATCH],
            names: vec![name; RECV_BATCH],
            iovs: vec![iov; RECV_BATCH * PIECES],
            hdrs: vec![hdr; RECV_BATCH],
            metas: Vec::with_capacity(RECV_BATCH),
            gathered: Vec::with_capacity(RECV_BUF_LEN),
        };
        for i in 0..RECV_BATCH {
            let h = &mut b.hdrs[i].msg_hdr;
            h.msg_name = std::ptr::from_mut(&mut b.names[i]).cast();
            h.msg_control = b.cmsgs[i].as_mut_ptr().cast();
        }
        b.reset(RECV_BATCH);
        b
    }

    /// The pieces of a buffer cut by `stride`: (offset, length) of each
    /// in the buffer, in the order the kernel fills them. Whole pieces of
    /// `stride` bytes as many as a run may hold, then the rest of
    /// [`RECV_BUF_LEN`]; each after [`HEADROOM`] bytes.
    fn pieces(stride: usize) -> impl Iterator<Item = (usize, usize)> {
        let (whole, rest) = Self::cut(stride);
        (0..whole)
            .map(move |k| (HEADROOM + k * (HEADROOM + stride), stride))
            .chain((rest > 0).then_some((HEADROOM + whole * (HEADROOM + stride), rest)))
    }

    /// How a buffer cut by `stride` divides: its whole pieces, and the
    /// bytes of the piece after them (0 if none).
    fn cut(stride: usize) -> (usize, usize) {
        let whole = (RECV_BUF_LEN / stride).min(GRO_MAX);
        (whole, RECV_BUF_LEN - whole * stride)
    }

    /// Points entry `i`'s iovecs at its buffer's pieces.
    fn lay(&mut self, i: usize) {
        let buf = &mut self.bufs[i];
        debug_assert!(buf.capacity() >= RECV_SPAN && buf.is_empty());
        let base = buf.as_mut_ptr();
        let iovs = &mut self.iovs[i * PIECES..(i + 1) * PIECES];
        let mut n = 0;
        for (iov, (at, len)) in iovs.iter_mut().zip(Self::pieces(self.stride)) {
            // (Offsets within the capacity: at most HEADROOM * PIECES +
            // RECV_BUF_LEN = RECV_SPAN, asserted above.)
            *iov = libc::iovec {
                iov_base: base.wrapping_add(at).cast(),
                iov_len: len,
            };
            n += 1;
        }
        let h = &mut self.hdrs[i].msg_hdr;
        h.msg_iov = iovs.as_mut_ptr();
        h.msg_iovlen = n as _;
        self.laid[i] = true;
    }

    /// Resets what the kernel writes in the first `n` headers: the
    /// lengths it shortens, the flags and the byte count.
    fn reset(&mut self, n: usize) {
        for m in &mut self.hdrs[..n] {
            m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            m.msg_hdr.msg_controllen = CMSG_LEN as _;
            m.msg_hdr.msg_flags = 0;
            m.msg_len = 0;
        }
    }

    /// Takes what is already queued, up to the batch size, without waiting
    /// (WouldBlock if nothing is). Returns how many were taken.
    pub(crate) fn recv(&mut self, sock: &UdpSocket) -> io::Result<usize> {
        self.reset(self.metas.len());
        self.metas.clear();
        if self.next_stride != self.stride {
            self.stride = self.next_stride;
            self.laid.fill(false);
        }
        for i in 0..RECV_BATCH {
            if !self.laid[i] {
                self.lay(i);
            }
        }
        // SAFETY: every header points at a name, its entry's iovecs and a
        // control buffer of the sizes it states (names and control
        // buffers set by `new`, the iovecs by `lay` just now or since,
        // each within its buffer's capacity, which `lay` checked and
        // which no one has grown or freed since: a buffer taken away was
        // replaced and laid again above; the lengths reset since the
        // kernel last wrote them), all in heap buffers owned by `self`;
        // the kernel writes within those sizes only.
        let n = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                self.hdrs.as_mut_ptr(),
                RECV_BATCH as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        for i in 0..n {
            let h = &self.hdrs[i].msg_hdr;
            let name = &self.names[i];
            let src = SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(name.sin_addr.s_addr)),
                u16::from_be(name.sin_port),
            );
            let mut meta = RecvMeta {
                src,
                dst: None,
                len: (self.hdrs[i].msg_len as usize).min(RECV_BUF_LEN),
                truncated: h.msg_flags & libc::MSG_TRUNC != 0,
                socket_drops: None,
                segment: None,
            };
            // SAFETY: the kernel filled `msg_control` up to
            // `msg_controllen`, which the CMSG macros respect; each data
            // pointer is read only after its level, type and length say it
            // holds the type read, with read_unaligned since CMSG_DATA
            // gives no alignment guarantee for the payload type.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(h);
                while !c.is_null() {
                    let (level, ty) = ((*c).cmsg_level, (*c).cmsg_type);
                    // size_t on glibc, socklen_t elsewhere.
                    let len: usize = (*c).cmsg_len as _;
                    let data = libc::CMSG_DATA(c);
                    if level == libc::IPPROTO_IP
                        && ty == libc::IP_PKTINFO
                        && len
                            >= libc::CMSG_LEN(std::mem::size_of::<libc::in_pktinfo>() as u32)
                                as usize
                    {
                        let info: libc::in_pktinfo = std::ptr::read_unaligned(data.cast());
                        meta.dst = Some(Ipv4Addr::from(u32::from_be(info.ipi_addr.s_addr)));
                    } else if level == libc::SOL_SOCKET
                        && ty == libc::SO_RXQ_OVFL
                        && len >= libc::CMSG_LEN(4) as usize
                    {
                        meta.socket_drops = Some(std::ptr::read_unaligned(data.cast::<u32>()));
                    } else if level == libc::SOL_UDP
                        && ty == libc::UDP_GRO
                        && len >= libc::CMSG_LEN(4) as usize
                    {
                        // An int, the segment size.
                        let seg = std::ptr::read_unaligned(data.cast::<i32>());
                        meta.segment = usize::try_from(seg).ok().filter(|&s| s > 0);
                    }
                    c = libc::CMSG_NXTHDR(h, c);
                }
            }
            // A long run of another size: the next receive expects its
            // size. Not a short one: a stream's runs are long ones of its
            // middle packets between short ones (a message's first
            // packet, longer by its RETH, and the next packet, sent with
            // it as a run of two), whose copy costs little, and which
            // would otherwise have the long ones copied too.
            if let Some(seg) = meta.segment
                && seg != self.stride
                && seg <= RECV_BUF_LEN
                && meta.len >= LONG_RUN
            {
                self.next_stride = seg;
            }
            self.metas.push(meta);
        }
        Ok(n)
    }

    /// What the kernel told of datagram (or run) `i` of the last
    /// [`RecvBatch::recv`].
    pub(crate) fn meta(&self, i: usize) -> Option<RecvMeta> {
        self.metas.get(i).copied()
    }

    /// Datagram (or run) `i` of the last [`RecvBatch::recv`], once: a run
    /// of the segment size the buffers were cut by as frames, `headers`
    /// giving the [`HEADROOM`] bytes before a datagram of the length it is
    /// given, its buffer replaced by `spare` (which must hold
    /// [`RECV_SPAN`] bytes); anything else as its bytes.
    pub(crate) fn take(
        &mut self,
        i: usize,
        mut headers: impl FnMut(usize) -> [u8; HEADROOM],
        spare: impl FnOnce() -> Vec<u8>,
    ) -> Option<Taken<'_>> {
        let m = *self.metas.get(i)?;
        let stride = self.stride;
        let whole_run = m.segment == Some(stride)
            && m.len > stride
            && !m.truncated
            && m.len.div_ceil(stride) <= {
                let (whole, rest) = Self::cut(stride);
                whole + usize::from(rest > 0)
            };
        if whole_run {
            let mut replacement = spare();
            replacement.clear();
            replacement.reserve(RECV_SPAN);
            let mut buf = std::mem::replace(&mut self.bufs[i], replacement);
            self.laid[i] = false;
            let count = m.len.div_ceil(stride);
            let last = m.len - (count - 1) * stride;
            let room = buf.spare_capacity_mut();
            for k in 0..count {
                let at = k * (HEADROOM + stride);
                let h = headers(if k + 1 == count { last } else { stride });
                for (d, s) in room[at..at + HEADROOM].iter_mut().zip(h) {
                    d.write(s);
                }
            }
            let len = (count - 1) * (HEADROOM + stride) + HEADROOM + last;
            // SAFETY: the first `len` bytes are initialized: the kernel
            // wrote the run's `m.len` bytes into the pieces one after
            // another, whole pieces of `stride` bytes for all but the last
            // datagram (the run's segment size is the stride), so datagram
            // `k` lies at `HEADROOM + k * (HEADROOM + stride)`; the
            // headers before each were written just above. `len` is
            // within the capacity: `count` datagrams fit the pieces.
            unsafe { buf.set_len(len) };
            return Some(Taken::Frames { buf, count });
        }
        let buf = &self.bufs[i];
        let base = buf.as_ptr();
        if let Some((at, first)) = Self::pieces(stride).next()
            && m.len <= first
        {
            // SAFETY: the kernel wrote `m.len` bytes into the first piece,
            // at `at` in the buffer's capacity (`lay` made it so).
            return Some(Taken::Bytes(unsafe {
                std::slice::from_raw_parts(base.add(at), m.len)
            }));
        }
        self.gathered.clear();
        let mut left = m.len;
        for (at, len) in Self::pieces(stride) {
            if left == 0 {
                break;
            }
            let n = len.min(left);
            // SAFETY: the kernel filled the pieces one after another with
            // `m.len` bytes: this piece's first `n` are written.
            let bytes = unsafe { std::slice::from_raw_parts(base.add(at), n) };
            self.gathered.extend_from_slice(bytes);
            left -= n;
        }
        Some(Taken::Bytes(&self.gathered))
    }
}

/// Most datagrams one `UDP_SEGMENT` send carries (the kernel's
/// `UDP_MAX_SEGMENTS`).
const GSO_MAX_SEGMENTS: usize = 64;
/// Most bytes one `UDP_SEGMENT` send carries.
const GSO_MAX_BYTES: usize = 65000;
/// Cleared the first time the kernel refuses `UDP_SEGMENT` (before Linux
/// 4.18, or where the route cannot do it): one datagram per send then.
static GSO: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Runs of the datagrams from `from` on that one send can carry, appended
/// to `runs`: same destination (`dsts`), every datagram but the last of the
/// run as long as the first (`len`), at most [`GSO_MAX_SEGMENTS`] and
/// [`GSO_MAX_BYTES`]. Each run is `(start, count, segment size)`.
fn gso_runs(
    dsts: &[SocketAddrV4],
    len: impl Fn(usize) -> usize,
    from: usize,
    gso: bool,
    runs: &mut Vec<(usize, usize, usize)>,
) {
    let mut i = from;
    while i < dsts.len() {
        let seg = len(i);
        let (mut n, mut bytes) = (1, seg);
        while gso
            && seg > 0
            && i + n < dsts.len()
            && n < GSO_MAX_SEGMENTS
            && dsts[i + n] == dsts[i]
            && len(i + n) <= seg
            && len(i + n) > 0
            && bytes + len(i + n) <= GSO_MAX_BYTES
            // Only the last of a run may be shorter.
            && len(i + n - 1) == seg
        {
            bytes += len(i + n);
            n += 1;
        }
        runs.push((i, n, seg));
        i += n;
    }
}

/// Datagrams on their way out through `sendmmsg`, with the kernel's
/// structures for them. Its vectors are filled and emptied inside each
/// [`Outbox::send`], so that a port's sends reuse their memory and no
/// pointer into a caller's bytes outlives the call that lent them.
#[derive(Default)]
pub(crate) struct Outbox {
    dsts: Vec<SocketAddrV4>,
    iovs: Vec<libc::iovec>,
    runs: Vec<(usize, usize, usize)>,
    names: Vec<libc::sockaddr_in>,
    /// One control message per run: UDP_SEGMENT's u16 segment size.
    ctls: Vec<[u64; 4]>,
    hdrs: Vec<libc::mmsghdr>,
}

// SAFETY: the raw pointers in `iovs` and `hdrs` (into the caller's bytes
// and into the other vectors) are written and used only inside
// `Outbox::send`, which empties every vector before it returns; between
// calls an outbox holds only capacity, which any thread may use.
unsafe impl Send for Outbox {}

impl Outbox {
    /// Sends each `(destination, bytes)` as one datagram, in order; runs of
    /// equal datagrams to one destination go as one segmented send
    /// (`UDP_SEGMENT`, generic segmentation offload) if `gso`, which the
    /// kernel cuts into the same datagrams after one pass through its stack
    /// (a capture on an interface that segments late, as lo and veth do,
    /// then shows the run as one datagram).
    /// A datagram the kernel refuses (no route, too long for the path with
    /// DF set, ...) is skipped, with the rest of its run. Returns `(sent,
    /// refused)`, in datagrams.
    pub(crate) fn send<'a>(
        &mut self,
        sock: &UdpSocket,
        msgs: impl IntoIterator<Item = (SocketAddrV4, &'a [u8])>,
        gso: bool,
    ) -> (usize, usize) {
        for (dst, b) in msgs {
            self.dsts.push(dst);
            self.iovs.push(libc::iovec {
                iov_base: b.as_ptr().cast_mut().cast(),
                iov_len: b.len(),
            });
        }
        let done = self.send_all(sock, gso);
        self.dsts.clear();
        self.iovs.clear();
        self.runs.clear();
        self.names.clear();
        self.ctls.clear();
        self.hdrs.clear();
        done
    }

    fn send_all(&mut self, sock: &UdpSocket, gso: bool) -> (usize, usize) {
        use std::sync::atomic::Ordering;
        let (mut sent, mut refused) = (0usize, 0usize);
        let iovs = &self.iovs;
        gso_runs(
            &self.dsts,
            |i| iovs[i].iov_len,
            0,
            gso && GSO.load(Ordering::Relaxed),
            &mut self.runs,
        );
        let mut at = 0usize;
        while at < self.runs.len() {
            let chunk = &self.runs[at..self.runs.len().min(at + SEND_BATCH)];
            self.names.clear();
            self.names.extend(chunk.iter().map(|&(i, _, _)| {
                let a = self.dsts[i];
                libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from(*a.ip()).to_be(),
                    },
                    sin_zero: [0; 8],
                }
            }));
            self.ctls.clear();
            self.ctls.resize(chunk.len(), [0; 4]);
            self.hdrs.clear();
            for (k, &(i, n, seg)) in chunk.iter().enumerate() {
                // SAFETY: mmsghdr is a plain C struct; all-zero is valid.
                let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
                h.msg_hdr.msg_name = std::ptr::from_ref(&self.names[k]).cast_mut().cast();
                h.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
                // The kernel only reads a send's iovecs.
                h.msg_hdr.msg_iov = self.iovs[i..].as_ptr().cast_mut();
                h.msg_hdr.msg_iovlen = n as _;
                if n > 1 {
                    h.msg_hdr.msg_control = self.ctls[k].as_mut_ptr().cast();
                    // SAFETY: CMSG_SPACE only computes a size.
                    h.msg_hdr.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as _;
                    // SAFETY: the control buffer (32 bytes, 8-aligned) holds
                    // one cmsghdr and a u16 (CMSG_SPACE(2) is 24), so the
                    // header and its data pointer lie inside `ctls[k]`.
                    unsafe {
                        let c = libc::CMSG_FIRSTHDR(&raw const h.msg_hdr);
                        (*c).cmsg_level = libc::SOL_UDP;
                        (*c).cmsg_type = libc::UDP_SEGMENT;
                        (*c).cmsg_len = libc::CMSG_LEN(2) as _;
                        libc::CMSG_DATA(c).cast::<u16>().write_unaligned(seg as u16);
                    }
                }
                self.hdrs.push(h);
            }
            // SAFETY: each header points at a sockaddr_in, its run's iovecs
            // and its control buffer, which live (unmoved: nothing is pushed
            // to those vectors meanwhile) until the call returns; each iovec
            // points at a caller's slice of the length stated, borrowed for
            // the whole of `send`, which the kernel only reads.
            let r = unsafe {
                libc::sendmmsg(
                    sock.as_raw_fd(),
                    self.hdrs.as_mut_ptr(),
                    self.hdrs.len() as libc::c_uint,
                    0,
                )
            };
            if r > 0 {
                let r = r as usize;
                sent += chunk[..r].iter().map(|&(_, n, _)| n).sum::<usize>();
                at += r;
                continue;
            }
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            let (first, n, _) = chunk[0];
            if n > 1
                && matches!(
                    e.raw_os_error(),
                    Some(libc::EINVAL | libc::ENOPROTOOPT | libc::EIO)
                )
            {
                // No segmentation here: this run and the rest one by one.
                GSO.store(false, Ordering::Relaxed);
                self.runs.truncate(at);
                let iovs = &self.iovs;
                gso_runs(
                    &self.dsts,
                    |i| iovs[i].iov_len,
                    first,
                    false,
                    &mut self.runs,
                );
                continue;
            }
            // The run's first datagram was refused: skip the run.
            refused += n;
            at += 1;
        }
        (sent, refused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_join_equal_datagrams_to_one_place_and_end_at_a_shorter_one() {
        let a = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 4791);
        let b = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 4791);
        let runs_of = |msgs: &[(SocketAddrV4, usize)], from: usize, gso: bool| {
            let dsts: Vec<SocketAddrV4> = msgs.iter().map(|m| m.0).collect();
            let mut runs = Vec::new();
            gso_runs(&dsts, |i| msgs[i].1, from, gso, &mut runs);
            runs
        };
        let msgs = [
            (a, 1000),
            (a, 1000),
            (a, 300), // ends the run
            (a, 1000),
            (b, 1000), // another place
            (b, 1000),
        ];
        assert_eq!(
            runs_of(&msgs, 0, true),
            [(0, 3, 1000), (3, 1, 1000), (4, 2, 1000)]
        );
        assert_eq!(
            runs_of(&msgs, 0, false).len(),
            6,
            "one datagram per send without GSO"
        );
        assert_eq!(
            runs_of(&msgs, 3, true),
            [(3, 1, 1000), (4, 2, 1000)],
            "from the middle on"
        );
        // At most 64 segments and 65000 bytes a send.
        let many = [(a, 300); 200];
        let runs = runs_of(&many, 0, true);
        assert!(runs.iter().all(|&(_, n, _)| n <= GSO_MAX_SEGMENTS));
        assert_eq!(runs.iter().map(|r| r.1).sum::<usize>(), 200);
        let fat = [(a, 4000); 40];
        let runs = runs_of(&fat, 0, true);
        assert!(runs.iter().all(|&(_, n, seg)| n * seg <= GSO_MAX_BYTES));
    }

    /// Datagrams waiting in `sock`, by length, until none comes for 50 ms.
    fn lengths(sock: &UdpSocket) -> Vec<usize> {
        sock.set_read_timeout(Some(std::time::Duration::from_millis(50)))
            .unwrap();
        let mut buf = vec![0u8; 1 << 16];
        std::iter::from_fn(|| sock.recv(&mut buf).ok()).collect()
    }

    #[test]
    fn an_outbox_sends_each_datagram_skips_a_refused_one_and_empties() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let std::net::SocketAddr::V4(to) = rx.local_addr().unwrap() else {
            unreachable!("bound to IPv4")
        };
        let (small, big, huge) = ([1u8; 100], [2u8; 1000], vec![3u8; 70_000]);
        let mut out = Outbox::default();
        // Too long for any datagram: refused, and the rest still go.
        let msgs = [(to, &small[..]), (to, &huge[..]), (to, &small[..])];
        assert_eq!(out.send(&tx, msgs, false), (2, 1));
        assert_eq!(lengths(&rx), [100, 100]);
        // A run of equal datagrams, with GSO if the kernel has it: the
        // receiver (no UDP_GRO) sees each one.
        let msgs = [
            (to, &big[..]),
            (to, &big[..]),
            (to, &big[..]),
            (to, &small[..]),
        ];
        assert_eq!(out.send(&tx, msgs, true), (4, 0));
        assert_eq!(lengths(&rx), [1000, 1000, 1000, 100]);
        assert!(
            out.dsts.is_empty() && out.iovs.is_empty() && out.hdrs.is_empty(),
            "nothing outlives a send"
        );
    }

    /// `n` datagrams of `len` bytes and one of `last`, each of its own
    /// bytes.
    fn run_of(n: usize, len: usize, last: usize, seed: u8) -> Vec<Vec<u8>> {
        (0..=n)
            .map(|k| {
                let l = if k == n { last } else { len };
                (0..l).map(|j| (j * 7 + k * 31) as u8 ^ seed).collect()
            })
            .collect()
    }

    /// What a test took of a run: its frames and their count, or its bytes.
    #[derive(Debug, PartialEq)]
    enum Got {
        Frames(Vec<u8>, usize),
        Bytes(Vec<u8>),
    }

    /// Sends `run` with GSO and takes it from `batch` in one receive.
    fn send_and_take(
        tx: &UdpSocket,
        rx: &UdpSocket,
        to: SocketAddrV4,
        batch: &mut RecvBatch,
        run: &[Vec<u8>],
    ) -> (RecvMeta, Got) {
        let mut out = Outbox::default();
        let sent = out.send(tx, run.iter().map(|d| (to, &d[..])), true);
        assert_eq!(sent, (run.len(), 0));
        assert!(wait_readable(rx, std::time::Duration::from_secs(5)));
        assert_eq!(batch.recv(rx).expect("a receive"), 1, "one run");
        let meta = batch.meta(0).expect("its meta");
        // Headers that say which length they were made for.
        let headers = |len: usize| [(len % 251) as u8; HEADROOM];
        let taken = match batch.take(0, headers, || Vec::with_capacity(RECV_SPAN)) {
            Some(Taken::Frames { buf, count }) => Got::Frames(buf, count),
            Some(Taken::Bytes(b)) => Got::Bytes(b.to_vec()),
            None => panic!("nothing taken"),
        };
        (meta, taken)
    }

    #[test]
    fn a_run_of_the_expected_size_is_received_as_frames_and_any_other_as_its_bytes() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        configure(&rx, 1 << 20).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let std::net::SocketAddr::V4(to) = rx.local_addr().unwrap() else {
            unreachable!("bound to IPv4")
        };
        let mut batch = RecvBatch::new();
        let joined = |run: &[Vec<u8>]| run.concat();

        // The first run: the batch expects no size yet, and gives its bytes
        // as the kernel coalesced them.
        let a = run_of(20, 1000, 300, 1);
        let (meta, got) = send_and_take(&tx, &rx, to, &mut batch, &a);
        assert_eq!(meta.segment, Some(1000), "the kernel coalesced the run");
        assert_eq!(got, Got::Bytes(joined(&a)));

        // The next of that size: its frames, each datagram after headers
        // made for its length, back to back.
        let frames = |run: &[Vec<u8>]| {
            let mut want = Vec::new();
            for d in run {
                want.extend_from_slice(&[(d.len() % 251) as u8; HEADROOM]);
                want.extend_from_slice(d);
            }
            want
        };
        let b = run_of(20, 1000, 300, 2);
        let (_, got) = send_and_take(&tx, &rx, to, &mut batch, &b);
        assert_eq!(
            got,
            Got::Frames(frames(&b), 21),
            "the frames, byte for byte"
        );
        // And again, into the buffer that replaced the first.
        let c = run_of(63, 1000, 1000, 3);
        let (_, got) = send_and_take(&tx, &rx, to, &mut batch, &c);
        assert_eq!(got, Got::Frames(frames(&c), 64));

        // A short run of another size (a message's first packet, longer
        // by its RETH, and the next): gathered, and the size expected
        // stays.
        let d = run_of(1, 1016, 1000, 4);
        let (meta, got) = send_and_take(&tx, &rx, to, &mut batch, &d);
        assert_eq!(meta.segment, Some(1016));
        assert_eq!(got, Got::Bytes(joined(&d)));
        let e = run_of(20, 1000, 1000, 5);
        let (_, got) = send_and_take(&tx, &rx, to, &mut batch, &e);
        assert_eq!(got, Got::Frames(frames(&e), 21));

        // A datagram alone, longer than a piece: gathered whole.
        let f = run_of(0, 0, 1500, 6);
        let (meta, got) = send_and_take(&tx, &rx, to, &mut batch, &f);
        assert_eq!(meta.segment, None);
        assert_eq!(got, Got::Bytes(joined(&f)));
        // One shorter: where the kernel put it.
        let g = run_of(0, 0, 90, 7);
        let (_, got) = send_and_take(&tx, &rx, to, &mut batch, &g);
        assert_eq!(got, Got::Bytes(joined(&g)));

        // A long run of another size spans the pieces: gathered, and the
        // size the batch expects from then on.
        let h = run_of(29, 700, 700, 8);
        let (meta, got) = send_and_take(&tx, &rx, to, &mut batch, &h);
        assert_eq!(meta.segment, Some(700));
        assert_eq!(got, Got::Bytes(joined(&h)));
        let i = run_of(29, 700, 20, 9);
        let (_, got) = send_and_take(&tx, &rx, to, &mut batch, &i);
        assert_eq!(got, Got::Frames(frames(&i), 30));
    }
}
