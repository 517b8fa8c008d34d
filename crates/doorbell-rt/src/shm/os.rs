//! The only `unsafe` of the shared-memory port's plumbing: `memfd_create`,
//! `eventfd`, `pipe2`, a connect that does not wait, passing descriptors over a
//! Unix socket (`SCM_RIGHTS`), the peer's credentials (`SO_PEERCRED`) and
//! `poll`. Thin wrappers over
//! `libc`; everything above is safe. (`unsafe_code` is allowed for this
//! module alone, where `shm.rs` declares it.)

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// An anonymous memory file of `len` bytes, for a ring.
pub(crate) fn memfd(name: &str, len: u64) -> io::Result<File> {
    let c = std::ffi::CString::new(name).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: `c` is a NUL-terminated string that outlives the call.
    let fd = unsafe { libc::memfd_create(c.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by the kernel and is owned by no one
    // else.
    let f = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    f.set_len(len)?;
    // Sealed at its size: a process it is sent to can map all of it
    // without fearing that it shrinks under the mapping (SIGBUS).
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on a descriptor `f` owns, with an integer argument.
    if unsafe { libc::fcntl(f.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(f)
}

/// Whether `f` can no longer shrink (a memfd sealed by its maker).
pub(crate) fn cannot_shrink(f: &File) -> bool {
    // SAFETY: fcntl on a descriptor `f` owns; F_GET_SEALS takes no argument.
    let seals = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GET_SEALS) };
    seals >= 0 && seals & libc::F_SEAL_SHRINK != 0
}

/// Whether `f` lives in tmpfs, as every memfd made without
/// `MFD_HUGETLB` does. A page of such a file that its maker punches out
/// comes back as a fresh zero page when touched; one of a hugetlbfs file
/// needs a page from the huge-page pool, and a mapping touched while
/// the pool is empty faults (SIGBUS).
pub(crate) fn on_tmpfs(f: &File) -> bool {
    // SAFETY: an all-zero statfs is a valid value of the plain C struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs on a descriptor `f` owns, writing into `st`.
    let rc = unsafe { libc::fstatfs(f.as_raw_fd(), &mut st) };
    rc == 0 && st.f_type == libc::TMPFS_MAGIC
}

/// Rings a peer's bell takes in one read.
const BELL_READ: usize = 512;
/// Reads [`clear_peer_bell`] makes at most: a whole pipe's worth of
/// rings (64 KiB), so one rung while its receiver was awake is emptied at
/// once, and a peer that keeps ringing costs the thread a bounded turn.
const BELL_READS: usize = 128;

/// A non-blocking eventfd: what wakes a NIC's own parked receiver. Its
/// file is the NIC's alone.
pub(crate) fn eventfd() -> io::Result<File> {
    // SAFETY: plain syscall with flag arguments.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as in `memfd`.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Empties the NIC's own eventfd bell: one read takes its whole count,
/// and cannot block (the file is non-blocking, and nobody else holds it).
pub(crate) fn clear_own_bell(bell: &File) {
    let mut count = [0u8; 8];
    let _ = (&*bell).read(&mut count);
}

/// A peer's bell: a pipe (read end, write end), both ends non-blocking.
/// The sender makes it and sends the read end: so the write end's file,
/// and its non-blocking flag, is the sender's alone, and no receiver can
/// make a ring wait (an eventfd's one file, shared, could be made blocking
/// and filled by either side). The sender keeps its copy of the read end
/// too, so that the pipe never loses its last reader: a write to a pipe
/// without one raises SIGPIPE, which would end a program that has not
/// set it aside.
pub(crate) fn bell_pipe() -> io::Result<(File, File)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just returned by the kernel and are owned by no
    // one else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((File::from(read), File::from(write)))
}

/// Reads what a peer's bell holds, up to `buf.len()` bytes, without ever
/// waiting: the read asks not to (`RWF_NOWAIT`) rather than trust the
/// file's own flag, which the peer, who holds the same file, can clear.
/// `Ok(0)`: no writer is left.
fn read_peer_bell(bell: &File, buf: &mut [u8]) -> io::Result<usize> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: one iovec over `buf`, which lives across the call; offset
    // -1 reads at the file's position, as read() does.
    let rc = unsafe { libc::preadv2(bell.as_raw_fd(), &raw mut iov, 1, -1, libc::RWF_NOWAIT) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc as usize)
}

/// Whether `f`, sent by a peer as its bell, is one the receiver thread can
/// poll and empty without ever waiting or spinning: the read end of a
/// pipe (not a regular file, device, socket or eventfd, which poll as
/// always ready or may block), opened for reading only, with a writer,
/// whose reads honour `RWF_NOWAIT` (a named FIFO on some kernels does
/// not, and its flag is the peer's to clear). The probe may take a ring,
/// which only spares the thread a wake.
pub(crate) fn is_peer_bell(f: &File) -> bool {
    let Ok(meta) = f.metadata() else {
        return false;
    };
    // SAFETY: fcntl on a descriptor `f` owns; F_GETFL takes no argument.
    let flags = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETFL) };
    if !meta.file_type().is_fifo() || flags < 0 || flags & libc::O_ACCMODE != libc::O_RDONLY {
        return false;
    }
    let mut one = [0u8; 1];
    match read_peer_bell(f, &mut one) {
        Ok(n) => n > 0,
        Err(e) => e.kind() == io::ErrorKind::WouldBlock,
    }
}

/// Empties a peer's bell (one taken by [`is_peer_bell`]) without ever
/// waiting, [`BELL_READ`] rings a read, at most [`BELL_READS`] reads; a
/// bell rung more often than that stays readable, and the next poll
/// returns at once. False if the bell is dead: no writer is left (the
/// peer closed it, and it would poll readable for ever) or it fails.
pub(crate) fn clear_peer_bell(bell: &File) -> bool {
    let mut rung = [0u8; BELL_READ];
    for _ in 0..BELL_READS {
        match read_peer_bell(bell, &mut rung) {
            Ok(0) => return false,
            Ok(n) if n < BELL_READ => return true,
            Ok(_) => {}
            Err(e) => {
                return matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                );
            }
        }
    }
    true
}

/// Clears `O_NONBLOCK` on `f`'s file (for [`crate::RawPeer`], a peer
/// that misbehaves).
pub(crate) fn set_blocking(f: &File) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor `f` owns, with an integer argument.
    let flags = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    let rc = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Most descriptors one message of the handshake carries.
pub(crate) const MAX_FDS: usize = 2;

/// Sends `bytes` over `s` with the descriptors `fds` attached (at most
/// [`MAX_FDS`]; none: `bytes` alone).
pub(crate) fn send_with_fds(s: &UnixStream, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr().cast_mut().cast(),
        iov_len: bytes.len(),
    };
    // u64 words keep the control buffer aligned for `cmsghdr`.
    let mut ctl = [0u64; 8];
    let data_len = size_of_val(fds) as u32;
    // SAFETY: msghdr is a plain C struct; all-zero is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        msg.msg_control = ctl.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE only computes a size.
        msg.msg_controllen = unsafe { libc::CMSG_SPACE(data_len) } as usize;
    }
    // SAFETY: the control buffer (64 bytes) holds one cmsghdr with up to
    // MAX_FDS descriptors (CMSG_SPACE of 8 bytes is 24), so CMSG_FIRSTHDR
    // is non-null when descriptors go and the data lies inside `ctl`;
    // `msg`, `iov`, `ctl`, `fds` and `bytes` live until sendmsg returns,
    // and the kernel only reads them.
    let rc = unsafe {
        if !fds.is_empty() {
            let c = libc::CMSG_FIRSTHDR(&raw const msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(data_len) as usize;
            let data = libc::CMSG_DATA(c).cast::<RawFd>();
            for (i, &fd) in fds.iter().enumerate() {
                data.add(i).write_unaligned(fd);
            }
        }
        libc::sendmsg(s.as_raw_fd(), &raw const msg, libc::MSG_NOSIGNAL)
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    if rc as usize != bytes.len() {
        return Err(io::ErrorKind::WriteZero.into());
    }
    Ok(())
}

/// Receives up to `buf.len()` bytes from `s` and the descriptors sent
/// with them (the first [`MAX_FDS`]); returns the byte count (0: the peer
/// closed).
pub(crate) fn recv_with_fds(s: &UnixStream, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut ctl = [0u64; 8];
    // SAFETY: msghdr is a plain C struct; all-zero is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.as_mut_ptr().cast();
    msg.msg_controllen = size_of_val(&ctl);
    // SAFETY: every pointer in `msg` points into `iov`, `buf` and `ctl`,
    // which live until recvmsg returns; the kernel writes at most the
    // lengths given. MSG_CMSG_CLOEXEC makes a received fd close on exec.
    let n = unsafe { libc::recvmsg(s.as_raw_fd(), &raw mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // Every descriptor received is ours now: the first MAX_FDS are kept,
    // any more (a peer that sent too many) are closed as they are dropped.
    let mut fds: Vec<OwnedFd> = Vec::new();
    // SAFETY: the CMSG_* macros walk the control buffer the kernel filled
    // (its length is in msg_controllen). A header of type SCM_RIGHTS
    // holds `(cmsg_len - CMSG_LEN(0)) / 4` descriptors after its data
    // pointer, inside that header, each one the kernel just installed in
    // this process and owned by no one else.
    unsafe {
        let header = libc::CMSG_LEN(0) as usize;
        let mut c = libc::CMSG_FIRSTHDR(&raw const msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let count = (*c).cmsg_len.saturating_sub(header) / size_of::<RawFd>();
                let data = libc::CMSG_DATA(c).cast::<RawFd>();
                for i in 0..count {
                    let raw = data.add(i).read_unaligned();
                    if raw >= 0 {
                        fds.push(OwnedFd::from_raw_fd(raw));
                    }
                }
            }
            c = libc::CMSG_NXTHDR(&raw const msg, c);
        }
    }
    fds.truncate(MAX_FDS);
    Ok((n as usize, fds))
}

/// Connects to the abstract Unix socket `name` without waiting: a
/// listener whose backlog is full refuses at once (`WouldBlock`) rather
/// than hold the caller. The stream is left non-blocking.
pub(crate) fn connect_abstract(name: &[u8]) -> io::Result<UnixStream> {
    // SAFETY: sockaddr_un is a plain C struct; all-zero is valid.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    // An abstract name: a NUL, then the name's bytes, not NUL-terminated.
    if name.len() + 1 > addr.sun_path.len() {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, &b) in addr.sun_path[1..].iter_mut().zip(name) {
        *d = b as libc::c_char;
    }
    let len = std::mem::offset_of!(libc::sockaddr_un, sun_path) + 1 + name.len();
    // SAFETY: plain syscall with flag arguments.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by the kernel and is owned by no one
    // else; the stream closes it on every path below.
    let s = UnixStream::from(unsafe { OwnedFd::from_raw_fd(fd) });
    // SAFETY: `addr` lives across the call and `len` is within its size
    // (checked above); the kernel only reads it.
    let rc = unsafe {
        libc::connect(
            s.as_raw_fd(),
            (&raw const addr).cast(),
            len as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(s)
}

/// The user id of the process at the other end of `s`.
pub(crate) fn peer_uid(s: &UnixStream) -> io::Result<u32> {
    // SAFETY: ucred is a plain C struct; all-zero is valid.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` live across the call and `len` is its size.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &raw mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// This process's effective user id.
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// Waits until one of `fds` is readable (or hung up), or `timeout` passes;
/// returns, for each, whether it is. Up to [`POLL_ON_STACK`] descriptors
/// take nothing from the allocator (a parked receiver thread polls its
/// bell, the rendezvous and each peer's connection every time it sleeps).
pub(crate) fn poll_readable(fds: &[RawFd], timeout: Duration, ready: &mut Vec<bool>) {
    let idle = libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    };
    let mut on_stack = [idle; POLL_ON_STACK];
    let mut on_heap = Vec::new();
    let p: &mut [libc::pollfd] = if fds.len() <= POLL_ON_STACK {
        &mut on_stack[..fds.len()]
    } else {
        on_heap.resize(fds.len(), idle);
        &mut on_heap
    };
    for (slot, &fd) in p.iter_mut().zip(fds) {
        slot.fd = fd;
        slot.events = libc::POLLIN;
    }
    // Rounded up: a wait of less than a millisecond must not become a
    // poll that returns at once (the caller would come round again).
    let ms = i32::try_from(timeout.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
    // SAFETY: `p` holds `p.len()` initialised pollfds and lives across the
    // call; the kernel writes only their `revents`.
    let rc = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, ms) };
    ready.clear();
    ready.extend(p.iter().map(|x| rc > 0 && x.revents != 0));
}

/// Descriptors [`poll_readable`] polls without allocating.
const POLL_ON_STACK: usize = 32;

/// Whether the peer at the other end of `s` is gone: after the handshake
/// nothing more is ever sent, so anything but "nothing to read yet" (end of
/// file, an error, or bytes out of turn) ends the connection.
pub(crate) fn hung_up(s: &UnixStream) -> bool {
    let mut b = 0u8;
    // SAFETY: one byte into `b`, which lives across the call; MSG_PEEK
    // leaves it in the socket and MSG_DONTWAIT never blocks.
    let n = unsafe {
        libc::recv(
            s.as_raw_fd(),
            (&raw mut b).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    !(n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Write;

    /// A memfd of `len` bytes that may still be sealed (as a peer's ring
    /// before its maker sealed it): for the test of the order of the
    /// receiver's checks (`shm::tests`).
    pub(crate) fn unsealed_memfd(len: u64) -> File {
        // SAFETY: a NUL-terminated name; the flags are plain integers.
        let fd = unsafe { libc::memfd_create(c"unsealed".as_ptr(), libc::MFD_ALLOW_SEALING) };
        assert!(fd >= 0, "{}", io::Error::last_os_error());
        // SAFETY: `fd` was just returned by the kernel and is owned by no
        // one else.
        let f = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        f.set_len(len).unwrap();
        f
    }

    /// Seals `f` against shrinking and against writes, as a peer may
    /// before it sends its ring (`f` must have no writable mapping left).
    pub(crate) fn seal_against_writes(f: &File) {
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_WRITE;
        // SAFETY: fcntl on a descriptor `f` owns, with an integer argument.
        let rc = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_ADD_SEALS, seals) };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
    }

    /// An empty memfd in hugetlbfs, sealed against shrinking, where the
    /// kernel has hugetlbfs.
    pub(crate) fn sealed_hugetlb_memfd() -> Option<File> {
        let flags = libc::MFD_HUGETLB | libc::MFD_ALLOW_SEALING | libc::MFD_CLOEXEC;
        // SAFETY: a NUL-terminated name; the flags are plain integers.
        let fd = unsafe { libc::memfd_create(c"huge".as_ptr(), flags) };
        if fd < 0 {
            return None;
        }
        // SAFETY: `fd` was just returned by the kernel and is owned by no
        // one else.
        let f = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        // SAFETY: fcntl on a descriptor `f` owns, with an integer argument.
        let rc = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) };
        (rc == 0).then_some(f)
    }

    /// Seals `f` at its size, as [`memfd`] does.
    pub(crate) fn seal_at_size(f: &File) {
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: fcntl on a descriptor `f` owns, with an integer argument.
        let rc = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_ADD_SEALS, seals) };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
    }

    #[test]
    fn a_memfd_is_on_tmpfs_and_other_files_are_not() {
        assert!(on_tmpfs(&memfd("tmpfs-test", 4096).unwrap()));
        assert!(!on_tmpfs(&File::open("/proc/self/status").unwrap()));
        // (Made only where the kernel has hugetlbfs.)
        if let Some(f) = sealed_hugetlb_memfd() {
            assert!(!on_tmpfs(&f), "a hugetlbfs memfd");
        }
    }

    #[test]
    fn descriptors_sent_beyond_the_first_two_are_closed_not_leaked() {
        // Four copies of a pipe's write end go over a socket in one
        // message. Once ours and the two kept are closed, the read end
        // sees the end of the pipe only if the two extra copies were
        // closed too.
        let mut p = [0; 2];
        // SAFETY: `p` has room for the two descriptors.
        assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
        let (a, b) = UnixStream::pair().unwrap();
        let fds = [p[1]; 4];
        let byte = [7u8];
        let mut iov = libc::iovec {
            iov_base: byte.as_ptr().cast_mut().cast(),
            iov_len: 1,
        };
        let mut ctl = [0u64; 8];
        // SAFETY: as in `send_with_fds`, with four descriptors (CMSG_SPACE
        // of 16 bytes is 32, inside the 64-byte buffer).
        let rc = unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &raw mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = ctl.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(size_of_val(&fds) as u32) as usize;
            let c = libc::CMSG_FIRSTHDR(&raw const msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(size_of_val(&fds) as u32) as usize;
            std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c).cast::<RawFd>(), 4);
            libc::sendmsg(a.as_raw_fd(), &raw const msg, 0)
        };
        assert_eq!(rc, 1);
        // SAFETY: our own write end, closed once; the copies in flight
        // keep the pipe open.
        unsafe { libc::close(p[1]) };
        let mut buf = [0u8; 4];
        let (n, kept) = recv_with_fds(&b, &mut buf).unwrap();
        assert_eq!((n, buf[0]), (1, 7));
        assert_eq!(kept.len(), MAX_FDS, "the first two descriptors are kept");
        let mut ready = Vec::new();
        poll_readable(&[p[0]], Duration::from_millis(50), &mut ready);
        assert_eq!(ready, [false], "the kept copies still hold the pipe open");
        drop(kept);
        poll_readable(&[p[0]], Duration::from_secs(5), &mut ready);
        assert_eq!(ready, [true], "every copy closed: the pipe has ended");
        // SAFETY: the read end is ours and closed once.
        unsafe { libc::close(p[0]) };
    }

    /// A receiver holds its bell's read end and may do what it likes with
    /// it: make it blocking, never empty it. Its sender's rings must still
    /// never wait: past a pipe's capacity (64 KiB of rings) they fail at
    /// once, and the write end stays non-blocking. (With an eventfd, whose
    /// one file both sides hold, the receiver's blocking flag was the
    /// sender's too.)
    #[test]
    fn a_receiver_cannot_make_its_senders_bell_wait() {
        let (read, write) = bell_pipe().unwrap();
        set_blocking(&read).unwrap();
        // SAFETY: fcntl on a descriptor `write` owns, no argument.
        let flags = unsafe { libc::fcntl(write.as_raw_fd(), libc::F_GETFL) };
        assert!(
            flags & libc::O_NONBLOCK != 0,
            "the write end stays non-blocking"
        );
        let (done, finished) = std::sync::mpsc::channel();
        let ringer = std::thread::spawn(move || {
            let (mut rung, mut refused) = (0u32, 0u32);
            for _ in 0..(1 << 17) {
                match (&write).write(&[1]) {
                    Ok(n) => rung += n as u32,
                    Err(_) => refused += 1,
                }
            }
            // The write end goes back, open: a closed one would leave the
            // read end readable for good (its end of file).
            let _ = done.send((rung, refused, write));
        });
        let (rung, refused, _write) = finished
            .recv_timeout(Duration::from_secs(10))
            .expect("a ring waited for its receiver");
        ringer.join().unwrap();
        assert!(
            rung >= 4096 && refused > 0,
            "{rung} rung, {refused} refused"
        );
        // Emptied in one turn, whatever the reader's own flag says.
        assert!(clear_peer_bell(&read), "the bell lives");
        let mut ready = Vec::new();
        poll_readable(&[read.as_raw_fd()], Duration::ZERO, &mut ready);
        assert_eq!(ready, [false], "every ring taken");
    }

    /// What a peer sends as its bell is polled and emptied by the receiver
    /// thread, so only a pipe's read end with a writer is taken: anything
    /// else polls as always ready (a spinning thread), or may block.
    #[test]
    fn only_a_pipes_read_end_with_a_writer_is_taken_as_a_bell() {
        let (read, write) = bell_pipe().unwrap();
        assert!(is_peer_bell(&read), "a pipe's read end");
        assert!(!is_peer_bell(&write), "a pipe's write end");
        (&write).write_all(&[1; 3]).unwrap();
        assert!(is_peer_bell(&read), "a bell rung already");
        let file = memfd("not-a-bell", 4096).unwrap();
        assert!(!is_peer_bell(&file), "a memory file (always readable)");
        assert!(!is_peer_bell(&eventfd().unwrap()), "an eventfd");
        let (sock, _other) = UnixStream::pair().unwrap();
        assert!(!is_peer_bell(&File::from(OwnedFd::from(sock))), "a socket");
        let (read, write) = bell_pipe().unwrap();
        drop(write);
        assert!(!is_peer_bell(&read), "a pipe without a writer");
    }

    /// A bell whose writer is gone polls readable for ever: it is dead, so
    /// that its ring is ended rather than spun on. What it held is taken
    /// first, and the next look finds it dead.
    #[test]
    fn a_bell_whose_writer_left_is_dead() {
        let (read, write) = bell_pipe().unwrap();
        (&write).write_all(&[1]).unwrap();
        assert!(clear_peer_bell(&read), "rung, and still written to");
        assert!(clear_peer_bell(&read), "empty, and still written to");
        (&write).write_all(&[1; 700]).unwrap();
        drop(write);
        assert!(clear_peer_bell(&read), "what it held is taken");
        assert!(!clear_peer_bell(&read), "no writer left");
        let mut ready = Vec::new();
        poll_readable(&[read.as_raw_fd()], Duration::ZERO, &mut ready);
        assert_eq!(ready, [true], "a dead pipe polls readable");
    }

    #[test]
    fn a_wait_shorter_than_a_millisecond_still_waits() {
        // A pipe that nothing is written to never becomes readable.
        let mut fds = [0; 2];
        // SAFETY: pipe writes two descriptors into `fds`, closed below.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let mut ready = Vec::new();
        let start = std::time::Instant::now();
        poll_readable(&fds[..1], Duration::from_micros(300), &mut ready);
        assert!(start.elapsed() >= Duration::from_micros(300));
        assert_eq!(ready, [false]);
        // SAFETY: both descriptors are ours and closed once.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
    }

    #[test]
    fn more_descriptors_than_fit_on_the_stack_are_polled_too() {
        // Pipes: the read ends are polled; only the last one has a byte.
        let pipes: Vec<[RawFd; 2]> = (0..POLL_ON_STACK + 3)
            .map(|_| {
                let mut fds = [0; 2];
                // SAFETY: `fds` has room for the two descriptors.
                assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
                fds
            })
            .collect();
        let last = pipes[pipes.len() - 1];
        // SAFETY: one byte from a live local into a pipe we own.
        assert_eq!(unsafe { libc::write(last[1], [1u8].as_ptr().cast(), 1) }, 1);
        let reads: Vec<RawFd> = pipes.iter().map(|p| p[0]).collect();
        let mut ready = Vec::new();
        poll_readable(&reads, Duration::from_millis(100), &mut ready);
        assert_eq!(ready.len(), reads.len());
        assert!(ready[reads.len() - 1], "the pipe with a byte");
        assert!(ready[..reads.len() - 1].iter().all(|r| !r));
        poll_readable(&reads[..2], Duration::from_micros(100), &mut ready);
        assert_eq!(ready, [false, false], "on the stack");
        for p in pipes {
            // SAFETY: each descriptor is ours and closed once.
            unsafe {
                libc::close(p[0]);
                libc::close(p[1]);
            }
        }
    }
}
