//! What a NIC is configured with, what it hands out, and what it counts.

use doorbell_hif::DeviceCaps;
use doorbell_host::{HostMemory, MemError};
use doorbell_types::{Duration, HostAddr, Instant};
use doorbell_wire::{BthOpcode, ExtHeaders, RoceRepr, Seal};

/// Static configuration of one NIC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicConfig {
    /// The port's IPv4 address; its GID 0 is the IPv4-mapped form.
    pub ipv4: [u8; 4],
    /// What the device reports.
    pub caps: DeviceCaps,
    /// Processing costs (all zero: work takes no time of its own).
    pub timing: NicTiming,
    /// UDP source port of every frame. `None`: per QP, `0xC000 | (qpn &
    /// 0x3fff)`, as rxe picks flow entropy. A port that sends through a UDP
    /// socket sets the socket's own port here, since the ICRC covers the
    /// source port the kernel writes.
    pub udp_src_port: Option<u16>,
    /// Adaptive retransmission's floor, or `None` to resend only when a
    /// QP's ACK timer expires. Each RC requester measures its round trip
    /// and, when an acknowledgement is overdue by more than the round trip
    /// and its variation allow (SRTT + max(floor, 4 RTTVAR), never more
    /// than the QP's `timeout`), sends again early without using a retry,
    /// as ConnectX's adaptive retransmission does
    /// ([`doorbell_roce::RequesterConfig::adaptive_floor`]).
    pub adaptive_retransmit_floor: Option<Duration>,
    /// When the NIC writes each frame's ICRC: with the headers
    /// ([`Seal::Now`], the default), or never ([`Seal::Later`]): the
    /// runtime then writes it ([`doorbell_wire::seal_roce`]) wherever a
    /// frame could be seen or changed (a port, a capture, a fault relay),
    /// as an operating system leaves a checksum to the link that carries
    /// the packet. For NICs of one process whose frames go straight from
    /// one to the other, which takes them without checking the ICRC
    /// ([`crate::Nic::handle_emitted_frame`]); and for a port whose
    /// runtime writes the ICRCs of a burst's frames two at a time, faster
    /// than one by one ([`doorbell_wire::seal_roce_pair`]).
    pub icrc: Seal,
    /// Most frames the NIC lets wait for the port before its RC send
    /// engine stops building request packets (`None`, the default: it
    /// builds all the window allows). The rest of the window is built by
    /// [`crate::Nic::resume_transmit`], which a runtime that sets this
    /// calls once it has taken the frames built so far: a runtime that
    /// hands each burst on before the next is read (NICs of one process)
    /// copies a payload out of its frame while its bytes are still in the
    /// cache. A burst changes when a window's frames are built, not what
    /// they are: the packets, their order and the ones that ask for an ACK
    /// (at the window's end, not a burst's).
    pub tx_burst: Option<u32>,
    /// Most READ response packets a READ builds when its request arrives,
    /// less the frames already waiting for the port (`None`, the default:
    /// all of them, their reads issued at once, as the simulator models
    /// a READ). The rest are built by [`crate::Nic::resume_transmit`] a
    /// burst at a time, as the runtime takes the frames, and the QP's
    /// later answers (ACKs, NAKs, atomic responses, other READs') wait
    /// behind them: a long READ holds a burst of frames at a time, not all
    /// of its responses. The frames are the same, in the same order; when
    /// they are built, and when their payloads are read, is not (so a
    /// WRITE taken after the READ may show in responses built after it),
    /// and a QP that goes to ERR does not send what it still owes.
    pub read_burst: Option<u32>,
    /// Whether an RC WRITE, SEND or READ response packet whose payload lies
    /// in one run of host memory leaves it there ([`Frame::unfilled`]) instead of reading
    /// it into the frame: `false` by default. For NICs of one process whose
    /// frames go straight from one to the other: the receiver copies the
    /// payload from the sender's memory into its own
    /// ([`crate::Nic::handle_unfilled_frame`]), once instead of twice, and
    /// the runtime fills the frame in ([`Unfilled::fill`]) wherever else it
    /// could be seen. The DMA read is checked, counted and timed as
    /// before, when the packet is built.
    pub leave_payload: bool,
    /// Most packets a NIC that leaves payloads hands on as one frame: a
    /// run of MIDDLE packets of one message, their payloads one after the
    /// other in one run of host memory, none asking for an ACK
    /// ([`Unfilled::segments`]; with its FIRST and its LAST, which may
    /// ask for one, if [`Self::runs_with_ends`]), [`MAX_SEGMENTS`] at the
    /// most. 1 by default: every packet its own frame.
    /// The receiver takes each packet of a run as it would have taken it
    /// alone, without parsing headers that the first's give; the
    /// runtime splits a run into its packets ([`Unfilled::segment`])
    /// wherever else it could be seen, as an operating system leaves the
    /// segmentation of a large send to where it must happen.
    pub max_segments: u32,
    /// Whether a run ([`Self::max_segments`]) may also hold its message's
    /// FIRST packet, ahead of its MIDDLEs, and its LAST, after them
    /// ([`Unfilled::last`]): a WRITE or SEND whose payload lies in one run
    /// of host memory then goes as one frame, however many packets it is.
    /// `false` by default. For NICs of one process on two cores or more,
    /// where a frame costs less for its bytes than for the cache lines of
    /// its headers that cross from one core to the other (decision record
    /// 0062). A port that has the kernel cut a run into datagrams of one
    /// length (UDP GSO) would gain nothing: a WRITE FIRST's RETH makes it
    /// longer than its MIDDLEs.
    pub runs_with_ends: bool,
    /// Most packets a NIC hands on as one frame when their bytes are all
    /// in it (no payload left in memory): whole packets from one QP to one
    /// QP, back to back ([`Frame::train`]), no more than
    /// [`MAX_TRAIN_BYTES`] of them. 1 by default: every packet its own
    /// frame. For NICs of one process whose frames go straight from one to
    /// the other (as [`Self::leave_payload`]): the receiver takes each
    /// packet as it would have taken it alone, and the runtime hands on one
    /// buffer for them all. Such a NIC also hands over the headers of each
    /// packet whose bytes are all in its frame parsed, and leaves them
    /// unwritten ([`Frame::headers`]; but a UD packet's): the receiver
    /// takes them as they are ([`crate::Nic::handle_parsed_frame`]). The
    /// runtime writes them ([`Frame::write_headers`]) and splits a train
    /// into its packets ([`Frame::packet_ranges`]) wherever else a frame
    /// could be seen. Where [`NicTiming::wqe`] is zero, such a NIC sends a
    /// doorbell's RC messages once it has executed their WQEs, in one
    /// pass of its send window, rather than each as it executes it; the
    /// packets and their times are the same.
    pub max_train: u32,
}

/// The most packets one frame may stand for ([`Unfilled::segments`]): a
/// NIC makes no longer run, whatever [`NicConfig::max_segments`] says,
/// and drops a longer one it is handed, so that no frame keeps it busy
/// for long. As many as the largest send window
/// ([`doorbell_roce::window_psns`] at MTU 256).
pub const MAX_SEGMENTS: u32 = 1024;

/// Most bytes of packets a train holds ([`NicConfig::max_train`]): its
/// buffer stays one that the spares of a NIC and of the runtime keep.
pub const MAX_TRAIN_BYTES: usize = 4096;

/// The default adaptive retransmission floor: a few round trips
/// of an unloaded link between two hosts.
pub const ADAPTIVE_RETRANSMIT_FLOOR: Duration = Duration::from_us(16);

impl NicConfig {
    /// A NIC on `ipv4` with default capabilities and no processing costs.
    pub fn new(ipv4: [u8; 4]) -> Self {
        Self {
            ipv4,
            caps: DeviceCaps::default(),
            timing: NicTiming::default(),
            udp_src_port: None,
            adaptive_retransmit_floor: Some(ADAPTIVE_RETRANSMIT_FLOOR),
            icrc: Seal::Now,
            tx_burst: None,
            read_burst: None,
            leave_payload: false,
            max_segments: 1,
            runs_with_ends: false,
            max_train: 1,
        }
    }

    /// GID 0 of the port: `::ffff:a.b.c.d`.
    pub fn gid(&self) -> [u8; 16] {
        doorbell_wire::Gid::from_ipv4(self.ipv4).octets()
    }
}

/// How long the NIC's own work takes. Work runs on a pool of processing
/// units: each input (a doorbell, a frame, a timer) takes the unit that
/// frees up first, holds it for the costs it incurs, and waits for its DMA
/// reads without holding it longer (the device overlaps DMA with other
/// work). All zero by default: the live runtime runs at the host's speed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicTiming {
    /// Processing units (at least one).
    pub processing_units: u32,
    /// Per doorbell or BlueFlame burst taken in.
    pub doorbell: Duration,
    /// Per send WQE executed.
    pub wqe: Duration,
    /// Per packet built and sent.
    pub tx_packet: Duration,
    /// Per packet received.
    pub rx_packet: Duration,
    /// Per CQE written.
    pub cqe: Duration,
    /// Time an atomic holds its address bucket.
    pub atomic: Duration,
    /// Bytes of address that share one atomic bucket (a power of two).
    pub atomic_bucket_bytes: u64,
}

impl Default for NicTiming {
    fn default() -> Self {
        Self {
            processing_units: 1,
            doorbell: Duration::ZERO,
            wqe: Duration::ZERO,
            tx_packet: Duration::ZERO,
            rx_packet: Duration::ZERO,
            cqe: Duration::ZERO,
            atomic: Duration::ZERO,
            atomic_bucket_bytes: 64,
        }
    }
}

/// A frame for the fabric: an IPv4 packet carrying RoCEv2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Destination IPv4 address.
    pub dst: [u8; 4],
    /// The IP packet, ICRC included.
    pub bytes: Vec<u8>,
    /// When the NIC had it ready for the port.
    pub ready: Instant,
    /// Where its payload is, if the NIC left it in host memory
    /// ([`NicConfig::leave_payload`]): the bytes that hold it in `bytes`
    /// are then unwritten.
    pub unfilled: Option<Unfilled>,
    /// How many whole packets `bytes` holds, back to back, each as long as
    /// its IP header says ([`doorbell_wire::packet_len`]): at least one,
    /// more for a train ([`NicConfig::max_train`]), whose packets go from
    /// one QP to one QP. A frame whose payload is left in memory is one
    /// packet, or a run.
    pub train: u32,
    /// The headers of each of the frame's packets, in order, if the NIC
    /// handed them over parsed and left them unwritten in `bytes` (a NIC
    /// that makes trains, [`NicConfig::max_train`]): `bytes` then holds
    /// each packet's payload where it goes, and nothing else that matters
    /// until [`Self::write_headers`] writes the rest. Empty: every byte is
    /// written (but a payload left in memory, [`Self::unfilled`]).
    pub headers: Vec<PacketHeaders>,
    /// Zero, but for a run of datagrams for a UDP port, made only by the
    /// runtime that sends it (the NIC never makes one): then the length
    /// of each datagram's UDP payload (BTH to ICRC) but the last, which
    /// may be shorter, and `bytes` are the IPv4 and UDP headers of the
    /// first packet followed by the [`Self::train`] datagrams' UDP
    /// payloads back to back. Such a frame has no
    /// [`Self::packet_ranges`]: its packets are not whole in its bytes.
    pub segment: u32,
}

/// A packet's headers, handed over parsed ([`Frame::headers`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketHeaders {
    /// The headers, as a parse of the packet gives them
    /// ([`doorbell_wire::RoceRepr::as_parsed`]).
    pub repr: doorbell_wire::RoceRepr,
    /// Where the packet lies in the frame's bytes.
    pub packet: std::ops::Range<usize>,
    /// Where its payload lies in the frame's bytes.
    pub payload: std::ops::Range<usize>,
}

impl PacketHeaders {
    /// The packet's payload in the frame's `bytes`, if the entry may be
    /// taken: its headers fit their opcode, and the packet lies in the
    /// bytes with its payload inside it. (A list handed over is input
    /// like any frame: an entry that fails is a dropped packet.) Always
    /// inlined: where the caller knows the opcode, what the headers must
    /// fit folds away.
    #[inline(always)]
    pub(crate) fn payload_in<'a>(&self, bytes: &'a [u8]) -> Option<&'a [u8]> {
        let (packet, payload) = (&self.packet, &self.payload);
        let lies = packet.start <= payload.start
            && payload.start <= payload.end
            && payload.end <= packet.end
            && packet.end <= bytes.len();
        if !lies || !self.repr.ext.fits(self.repr.bth.opcode) {
            return None;
        }
        bytes.get(payload.clone())
    }
}

impl Frame {
    /// How many packets the frame stands for: more than one for a run
    /// ([`Unfilled::segments`]) or a train ([`Self::train`]).
    pub fn packets(&self) -> u32 {
        self.unfilled
            .map_or(self.train.max(1), |u| u.segments.max(1))
    }

    /// Where each whole packet of the frame lies in its bytes: one range
    /// for a frame that is not a train. For a train, the packets as their
    /// IP headers give their lengths, up to the first whose length does
    /// not fit (none, in a train a NIC built). For a frame whose headers
    /// were handed over parsed ([`Self::headers`]), where they say, up to
    /// the first that is no range within the bytes. None for a run of
    /// datagrams ([`Self::segment`]).
    pub fn packet_ranges(&self) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
        let headers = !self.headers.is_empty();
        let train = self.train > 1 && self.unfilled.is_none() && !headers;
        let mut given = self.headers.iter().map(|h| h.packet.clone());
        let mut at = 0;
        let mut left = if self.segment > 0 {
            0
        } else if train {
            self.train
        } else {
            1
        };
        std::iter::from_fn(move || {
            if headers {
                return given
                    .next()
                    .filter(|r| r.start <= r.end && r.end <= self.bytes.len());
            }
            if left == 0 {
                return None;
            }
            left -= 1;
            let len = if train {
                doorbell_wire::packet_len(self.bytes.get(at..)?).ok()?
            } else {
                self.bytes.len()
            };
            let r = at..at + len;
            at += len;
            Some(r)
        })
    }

    /// Writes the headers of each packet that its NIC handed over parsed
    /// ([`Self::headers`]) around its payload, ICRC included, and empties
    /// the list: the frame is then the bytes a NIC that writes every
    /// header would have built. Headers that do not fit where they are
    /// said to go are left unwritten (a NIC never hands such).
    pub fn write_headers(&mut self) {
        for h in self.headers.drain(..) {
            let len = h.packet.len();
            let at = h.payload.start.checked_sub(h.packet.start);
            let Some(packet) = self.bytes.get_mut(h.packet) else {
                continue;
            };
            if at == Some(h.repr.header_len())
                && h.repr.checked_frame_len(h.payload.len()) == Ok(len)
            {
                let _ = h.repr.emit_checked(packet, h.payload.len(), len, Seal::Now);
            }
        }
    }
}

/// A frame's payload left in the sending NIC's host memory
/// ([`NicConfig::leave_payload`]), and how many packets the frame stands
/// for ([`NicConfig::max_segments`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unfilled {
    /// Where the first packet's payload is in the sender's host memory.
    pub from: HostAddr,
    /// Where a packet's payload goes in the frame's bytes.
    pub at: u32,
    /// The length of each packet's payload.
    pub len: u32,
    /// How many packets the frame stands for, at least one. The frame's
    /// bytes are the first's; packet `k` differs in its PSN, `k` more, and
    /// its payload, `k * len` bytes on from `from`; and nothing else, but
    /// where the run has ends ([`NicConfig::runs_with_ends`]). A run of
    /// more than one is of MIDDLE packets that ask for no ACK, but that it
    /// may start with its message's FIRST (an RC WRITE's or SEND's), whose
    /// followers are MIDDLEs without its extension headers, and end with
    /// its LAST ([`Self::last`]). [`Self::packet_headers`] says what
    /// packet `k` is.
    pub segments: u32,
    /// The run's last packet, if it is its message's LAST rather than a
    /// MIDDLE: an RC WRITE's or SEND's, without an immediate.
    pub last: Option<RunLast>,
}

/// A run's LAST packet ([`Unfilled::last`]): how it differs from a MIDDLE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLast {
    /// The length of its payload, which follows the run's MIDDLEs' in
    /// the sender's memory: at least one byte, at most theirs.
    pub len: u32,
    /// Whether it asks for an ACK.
    pub ack_req: bool,
}

/// The opcode of the packets that follow a run's first, `op`
/// ([`Unfilled::segments`]): the MIDDLE of its operation, if it has one
/// that may run.
pub(crate) fn run_middle(op: BthOpcode) -> Option<BthOpcode> {
    use BthOpcode::*;
    match op {
        RcRdmaWriteFirst | RcRdmaWriteMiddle => Some(RcRdmaWriteMiddle),
        RcSendFirst | RcSendMiddle => Some(RcSendMiddle),
        RcRdmaReadResponseMiddle => Some(RcRdmaReadResponseMiddle),
        _ => None,
    }
}

/// The opcode of the LAST that may end a run of `middle` packets
/// ([`Unfilled::last`]): one with no extension headers.
pub(crate) fn run_last(middle: BthOpcode) -> Option<BthOpcode> {
    use BthOpcode::*;
    match middle {
        RcRdmaWriteMiddle => Some(RcRdmaWriteLast),
        RcSendMiddle => Some(RcSendLast),
        _ => None,
    }
}

impl Unfilled {
    /// Reads the first packet's payload from `mem`, the sending NIC's host
    /// memory, into the frame `bytes`; fails if that memory no longer holds
    /// it, or if `bytes` has no room for it where it goes. A run of more
    /// than one packet is split first ([`Self::segment`]).
    pub fn fill(&self, bytes: &mut [u8], mem: &dyn HostMemory) -> Result<(), MemError> {
        let (at, len) = (self.at as usize, self.len as usize);
        let into = bytes.get_mut(at..at + len).ok_or(MemError::Unmapped {
            addr: self.from,
            len,
        })?;
        mem.read(self.from, into)
    }

    /// Packet `k` of the run whose frame is `bytes`, as a frame of its own:
    /// its bytes written to `into` (the payload still unfilled, the ICRC
    /// unsealed), and where its payload is. `None` if `k` is past the run,
    /// its payload's address would pass the end of the address space, or
    /// `bytes` is no RoCEv2 frame whose payload is where `self` says.
    pub fn segment(&self, bytes: &[u8], k: u32, into: &mut Vec<u8>) -> Option<Unfilled> {
        self.split(bytes)?.packet(k, into)
    }

    /// The run whose frame is `bytes`, its headers parsed once, to take
    /// packet by packet ([`Split::packet`]); `None` if `bytes` is no
    /// RoCEv2 frame whose payload is where `self` says, or `self` is no
    /// run a NIC makes of it ([`Self::is_made`]).
    pub fn split<'a>(&self, bytes: &'a [u8]) -> Option<Split<'a>> {
        let parsed = doorbell_wire::parse_roce_emitted(bytes).ok()?;
        let payload = parsed.payload;
        if payload.start != self.at as usize
            || payload.len() != self.len as usize
            || !self.is_made(&parsed.repr)
        {
            return None;
        }
        if parsed.repr.checked_frame_len(payload.len()).ok()? != bytes.len() {
            return None;
        }
        Some(Split {
            run: *self,
            bytes,
            bth_at: parsed.repr.ip.header_len() + doorbell_wire::udp::HEADER_LEN,
            first: parsed.repr,
        })
    }

    /// Whether this is a packet, or a run of at most [`MAX_SEGMENTS`]
    /// packets whose first has the headers `first`, of a kind a sending NIC
    /// hands on ([`NicConfig::max_segments`], [`NicConfig::runs_with_ends`]):
    /// each of its packets has headers ([`Self::packet_headers`]), and
    /// their payloads end within the address space. A receiver drops any
    /// other as malformed, and [`Self::split`] splits none.
    pub fn is_made(&self, first: &RoceRepr) -> bool {
        match self.segments {
            0 => false,
            1 => self.last.is_none(),
            n if n > MAX_SEGMENTS => false,
            n => {
                let last_len = self.last.map_or(self.len, |l| l.len);
                self.packet_headers(first, n - 1).is_some()
                    && self
                        .from
                        .checked_add(u64::from(n - 1) * u64::from(self.len) + u64::from(last_len))
                        .is_some()
            }
        }
    }

    /// The headers of packet `k` of the run whose first packet's are
    /// `first` (as a parse gives them), and the length of its payload, as
    /// [`Self::segments`] says; `None` if `k` is past the run, or the run
    /// is none a NIC makes: more than one packet, of which the first is no
    /// packet that may head a run, or asks for an ACK, or whose LAST
    /// ([`Self::last`]) its operation has not or carries no byte or more
    /// than a MIDDLE.
    pub fn packet_headers(&self, first: &RoceRepr, k: u32) -> Option<(RoceRepr, u32)> {
        if k >= self.segments {
            return None;
        }
        let mut r = *first;
        r.bth.psn = first.bth.psn.add(k);
        if k == 0 {
            return Some((r, self.len));
        }
        let middle = run_middle(first.bth.opcode).filter(|_| !first.bth.ack_req)?;
        r.bth.opcode = middle;
        r.ext = ExtHeaders::default();
        let mut len = self.len;
        if k + 1 == self.segments
            && let Some(last) = self.last
        {
            r.bth.opcode = run_last(middle).filter(|_| (1..=self.len).contains(&last.len))?;
            r.bth.ack_req = last.ack_req;
            len = last.len;
        }
        r.make_parsed(len as usize);
        Some((r, len))
    }
}

/// A run of packets ([`Unfilled::segments`]) whose frame was checked once
/// ([`Unfilled::split`]): packet `k` is the frame's bytes with its PSN `k`
/// more, so each is written without parsing or emitting headers again;
/// but the MIDDLEs after a FIRST and a LAST at the end
/// ([`NicConfig::runs_with_ends`]), whose headers are emitted.
#[derive(Debug, Clone, Copy)]
pub struct Split<'a> {
    run: Unfilled,
    bytes: &'a [u8],
    /// Where the BTH starts in the frame.
    bth_at: usize,
    /// The first packet's headers, as parsed.
    first: RoceRepr,
}

impl Split<'_> {
    /// Packet `k`, as [`Unfilled::segment`] gives it: its headers and ICRC
    /// field written to `into`, which becomes the frame's length (its
    /// payload bytes are left as `into` held them, zero where it grew),
    /// and where its payload is. `None` if `k` is past the run (which
    /// [`Unfilled::split`] checked is one a NIC makes).
    pub fn packet(&self, k: u32, into: &mut Vec<u8>) -> Option<Unfilled> {
        if k >= self.run.segments {
            return None;
        }
        let from = self
            .run
            .from
            .checked_add(u64::from(k) * u64::from(self.run.len))?;
        let same = k == 0
            || (run_middle(self.first.bth.opcode) == Some(self.first.bth.opcode)
                && (k + 1 < self.run.segments || self.run.last.is_none()));
        if !same {
            // A run's end ([`NicConfig::runs_with_ends`]): headers of
            // another length, emitted.
            let (repr, len) = self.run.packet_headers(&self.first, k)?;
            let frame_len = repr.checked_frame_len(len as usize).ok()?;
            into.resize(frame_len, 0);
            repr.emit_checked(into, len as usize, frame_len, Seal::Later)
                .ok()?;
            return Some(Unfilled {
                from,
                at: repr.header_len() as u32,
                len,
                segments: 1,
                last: None,
            });
        }
        let at = self.run.at as usize;
        let end = at + self.run.len as usize;
        into.resize(self.bytes.len(), 0);
        into[..at].copy_from_slice(&self.bytes[..at]);
        into[end..].copy_from_slice(&self.bytes[end..]);
        // Unsealed, as a NIC that leaves the ICRC emits it.
        let icrc_at = into.len().saturating_sub(doorbell_wire::icrc::ICRC_LEN);
        into[icrc_at..].fill(0);
        // `split` parsed a whole BTH at `bth_at` in a frame of this length,
        // so the setter stays inside the buffer, which is output and so
        // not checked.
        doorbell_wire::BthHeader::new_unchecked(&mut into[self.bth_at..])
            .set_psn(self.first.bth.psn.add(k));
        Some(Unfilled {
            from,
            segments: 1,
            last: None,
            ..self.run
        })
    }
}

/// What the device counted. Where the kernel's RDMA `hw_counters` (mlx5's
/// q counters, `drivers/infiniband/hw/mlx5/counters.c`) have a counter for
/// the same event, the field has its name and meaning; [`Self::hw_counters`]
/// lists them under those names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NicCounters {
    /// Frames sent, retransmissions included.
    pub tx_packets: u64,
    /// Request packets sent again by go-back-N (after a NAK, a timeout, an
    /// adaptive timeout, an RNR wait or an implied NAK); READ and atomic
    /// requests included.
    pub tx_retransmits: u64,
    /// Frames received and accepted for processing.
    pub rx_packets: u64,
    /// Frames dropped for a bad ICRC (`rx_icrc_encapsulated`).
    pub rx_icrc_errors: u64,
    /// Frames dropped as malformed, or for an unknown or unready QP.
    pub rx_dropped: u64,
    /// Frames lost to a port whose link is down, both ways.
    pub link_down_dropped: u64,
    /// Responder: request packets that arrived ahead of the expected PSN and
    /// were dropped (`out_of_sequence`).
    pub out_of_sequence: u64,
    /// Requester: PSN-sequence-error NAKs received (`packet_seq_err`).
    pub packet_seq_err: u64,
    /// Requester: READ or atomic responses found missing because a later
    /// PSN was answered first, and asked for again (`implied_nak_seq_err`).
    pub implied_nak_seq_err: u64,
    /// Responder: requests received again after they were executed
    /// (`duplicate_request`).
    pub duplicate_request: u64,
    /// Requester: ACK timeouts that led to a retry, that is with retries
    /// left (`local_ack_timeout_err`).
    pub local_ack_timeout_err: u64,
    /// Requester: resends started by adaptive retransmission, before the
    /// ACK timer expired (`roce_adp_retrans`).
    pub roce_adp_retrans: u64,
    /// Requester: ACK timeouts that adaptive resends had not prevented: the
    /// QP's own timeout expired after at least one of them
    /// (`roce_adp_retrans_to`).
    pub roce_adp_retrans_to: u64,
    /// Requester: RNR NAKs received and retried, that is with RNR retries
    /// left (`rnr_nak_retry_err`).
    pub rnr_nak_retry_err: u64,
    /// Responder: RNR NAKs sent for want of a receive WQE.
    pub rnr_nak_sent: u64,
    /// Responder: messages that found no receive WQE: RNR NAKs sent, and UD
    /// datagrams dropped (`out_of_buffer`).
    pub out_of_buffer: u64,
    /// Requester: ACK timeouts or PSN-sequence NAKs with no retry left; the
    /// WQE completed with transport retry exceeded, syndrome 0x15
    /// (`req_transport_retries_exceeded`).
    pub req_transport_retries_exceeded: u64,
    /// Requester: RNR NAKs with no RNR retry left; the WQE completed with
    /// RNR retry exceeded, syndrome 0x16 (`req_rnr_retries_exceeded`).
    pub req_rnr_retries_exceeded: u64,
    /// Responder: RDMA WRITE requests executed (`rx_write_requests`).
    pub rx_write_requests: u64,
    /// Responder: requests NAKed with a remote access error: a bad rkey,
    /// an address outside the MR, an access the MR does not grant
    /// (`resp_remote_access_errors`).
    pub resp_remote_access_errors: u64,
    /// Responder: messages longer than the receive WQE's buffers
    /// (`resp_local_length_error`).
    pub resp_local_length_error: u64,
    /// Requester: remote access error NAKs received
    /// (`req_remote_access_errors`).
    pub req_remote_access_errors: u64,
    /// Requester: invalid request NAKs received
    /// (`req_remote_invalid_request`).
    pub req_remote_invalid_request: u64,
    /// Send-side CQEs written with an error other than a flush
    /// (`req_cqe_error`).
    pub req_cqe_error: u64,
    /// Send-side CQEs flushed by a QP in error (`req_cqe_flush_error`).
    pub req_cqe_flush_error: u64,
    /// Receive-side CQEs written with an error other than a flush
    /// (`resp_cqe_error`).
    pub resp_cqe_error: u64,
    /// Receive-side CQEs flushed by a QP in error (`resp_cqe_flush_error`).
    pub resp_cqe_flush_error: u64,
    /// Responder: RDMA READ requests executed, duplicates included
    /// (`rx_read_requests`).
    pub rx_read_requests: u64,
    /// Responder: atomic requests executed (`rx_atomic_requests`); replays
    /// from the response cache are not executions.
    pub rx_atomic_requests: u64,
    /// Doorbells dropped: unknown QP, or a UAR the QP does not own.
    pub bad_doorbells: u64,
    /// Doorbells for a QP not in a state that sends.
    pub doorbells_not_ready: u64,
    /// Send doorbells taken from a QP's doorbell record, because the
    /// register store itself was not seen (a provider that maps the UAR
    /// page itself): inferred, so which register (doorbell or BlueFlame,
    /// which half) and how many stores were coalesced is not known.
    pub doorbells_by_record: u64,
    /// CQ arms taken from a CQ's doorbell record, for the same reason.
    pub arms_by_record: u64,
    /// Events lost because their EQ was full or its EQE write faulted.
    pub events_lost: u64,
    /// Responder: ACKs not sent because a later ACK of the same QP, queued
    /// before the first had left, acknowledged the same and more (ACK
    /// coalescing; `tx_packets` counts only the ACKs sent).
    pub acks_coalesced: u64,
}

impl NicCounters {
    /// The counters the kernel's mlx5 driver also has, under its names (as
    /// `/sys/class/infiniband/*/ports/1/hw_counters/*` shows them).
    pub fn hw_counters(&self) -> [(&'static str, u64); 23] {
        [
            ("duplicate_request", self.duplicate_request),
            ("implied_nak_seq_err", self.implied_nak_seq_err),
            ("local_ack_timeout_err", self.local_ack_timeout_err),
            ("out_of_buffer", self.out_of_buffer),
            ("out_of_sequence", self.out_of_sequence),
            ("packet_seq_err", self.packet_seq_err),
            ("req_cqe_error", self.req_cqe_error),
            ("req_cqe_flush_error", self.req_cqe_flush_error),
            ("req_remote_access_errors", self.req_remote_access_errors),
            (
                "req_remote_invalid_request",
                self.req_remote_invalid_request,
            ),
            ("req_rnr_retries_exceeded", self.req_rnr_retries_exceeded),
            (
                "req_transport_retries_exceeded",
                self.req_transport_retries_exceeded,
            ),
            ("resp_cqe_error", self.resp_cqe_error),
            ("resp_cqe_flush_error", self.resp_cqe_flush_error),
            ("resp_local_length_error", self.resp_local_length_error),
            ("resp_remote_access_errors", self.resp_remote_access_errors),
            ("rnr_nak_retry_err", self.rnr_nak_retry_err),
            ("roce_adp_retrans", self.roce_adp_retrans),
            ("roce_adp_retrans_to", self.roce_adp_retrans_to),
            ("rx_atomic_requests", self.rx_atomic_requests),
            ("rx_icrc_encapsulated", self.rx_icrc_errors),
            ("rx_read_requests", self.rx_read_requests),
            ("rx_write_requests", self.rx_write_requests),
        ]
    }
}
