//! The work queues of a QP as the device keeps them: the send queue with
//! its WQE cache and the messages sent and not yet completed, the receive
//! queue, and the inbound messages in progress. Data only; the engines
//! move it.

use std::collections::VecDeque;

use doorbell_layout::wqe::{WQEBB_LEN, WqeOpcode};
use doorbell_roce::{ImpliedNak, PsnRange};
use doorbell_types::{Instant, Psn};

use crate::pool::Pool;

/// A local scatter/gather entry from a data segment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sge {
    pub(crate) lkey: u32,
    pub(crate) addr: u64,
    pub(crate) len: u32,
}

/// Where a message's data comes from.
pub(crate) enum Payload {
    /// Copied into the WQE.
    Inline(InlineData),
    /// Named by data segments.
    Sges(Vec<Sge>),
}

/// Inline payloads of at most this many bytes are kept in the message
/// itself ([`InlineData::Short`]): as much as an RDMA WRITE's inline
/// segment holds in its WQE's first WQEBB (64 bytes, less the control and
/// remote address segments and the inline header), and as much as the
/// message's payload field holds without growing.
pub(crate) const SHORT_INLINE: usize = 28;
const _: () = assert!(
    SHORT_INLINE <= u8::MAX as usize,
    "a short length fits its u8"
);

/// The bytes of an inline payload: a short one in place, so that the
/// commonest small message takes no buffer from the spares and gives none
/// back; a longer one in a buffer from the spares.
pub(crate) enum InlineData {
    /// `len` bytes at the start of `bytes`.
    Short { len: u8, bytes: [u8; SHORT_INLINE] },
    /// More than [`SHORT_INLINE`] bytes.
    Long(Vec<u8>),
}

impl std::ops::Deref for InlineData {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            InlineData::Short { len, bytes } => &bytes[..usize::from(*len)],
            InlineData::Long(v) => v,
        }
    }
}

/// Inline payloads and SGE lists of retired messages, kept for the next
/// WQEs parsed ([`crate::wqe::parse_wqe`]), so that executing a WQE takes
/// nothing from the allocator: 256 of each at most, inline buffers of up
/// to 1 KiB (mlx5's largest WQE).
#[derive(Default)]
pub(crate) struct Spares {
    inline: Pool<u8, 256, 1024>,
    sges: Pool<Sge, 256, 64>,
}

impl Spares {
    /// The inline payload `data`: kept in place if it is short, else
    /// copied into a buffer from the spares.
    pub(crate) fn inline(&mut self, data: &[u8]) -> InlineData {
        if data.len() <= SHORT_INLINE {
            let mut bytes = [0u8; SHORT_INLINE];
            bytes[..data.len()].copy_from_slice(data);
            // At most SHORT_INLINE, which fits a u8 (asserted above).
            InlineData::Short {
                len: data.len() as u8,
                bytes,
            }
        } else {
            let mut v = self.inline.take();
            v.extend_from_slice(data);
            InlineData::Long(v)
        }
    }

    /// An empty list for SGEs.
    pub(crate) fn sges(&mut self) -> Vec<Sge> {
        self.sges.take()
    }

    /// Keeps the SGE list of a receive WQE that is done with.
    pub(crate) fn recycle_sges(&mut self, v: Vec<Sge>) {
        self.sges.give(v);
    }

    /// Keeps `p`'s storage for a later WQE. (Inlined: a short inline
    /// payload, the commonest, has none.)
    #[inline]
    pub(crate) fn recycle(&mut self, p: Payload) {
        match p {
            Payload::Inline(InlineData::Long(v)) => self.inline.give(v),
            Payload::Inline(InlineData::Short { .. }) => {}
            Payload::Sges(v) => self.sges.give(v),
        }
    }
}

impl Payload {
    /// Bytes of data.
    pub(crate) fn len(&self) -> u64 {
        match self {
            Payload::Inline(v) => v.len() as u64,
            Payload::Sges(s) => s.iter().map(|s| u64::from(s.len)).sum(),
        }
    }
}

/// A request message sent and not yet completed.
pub(crate) struct SentMsg {
    pub(crate) wqe_index: u16,
    pub(crate) opcode: WqeOpcode,
    pub(crate) signaled: bool,
    pub(crate) solicited: bool,
    pub(crate) imm: u32,
    pub(crate) raddr: u64,
    pub(crate) rkey: u32,
    pub(crate) swap_add: u64,
    pub(crate) compare: u64,
    pub(crate) payload: Payload,
    pub(crate) len: u64,
    /// PSNs the message uses: its packets, or for a READ its responses;
    /// none for a NOP, which only keeps its place in the completion order.
    pub(crate) psns: PsnRange,
    /// Packets of this message sent in the current pass (go-back-N sets it
    /// back). A READ or atomic has one request packet: `psns.len` once sent.
    pub(crate) sent: u32,
    /// READ response bytes already placed.
    pub(crate) done_bytes: u64,
    /// A READ or atomic whose response is all in and placed: it completes
    /// when everything posted before it has.
    pub(crate) answered: bool,
    /// Asking a READ or atomic again when its responses are found missing.
    pub(crate) implied: ImpliedNak,
}

impl SentMsg {
    pub(crate) fn first_psn(&self) -> Psn {
        self.psns.first
    }

    pub(crate) fn npsn(&self) -> u32 {
        self.psns.len
    }

    pub(crate) fn last_psn(&self) -> Psn {
        self.psns.last()
    }

    pub(crate) fn is_sent(&self) -> bool {
        self.sent >= self.psns.len
    }

    pub(crate) fn is_read_or_atomic(&self) -> bool {
        matches!(
            self.opcode,
            WqeOpcode::RdmaRead | WqeOpcode::AtomicCs | WqeOpcode::AtomicFa
        )
    }

    /// The response PSN a READ expects next (an atomic: its only one).
    pub(crate) fn expected_response(&self, mtu: u64) -> Psn {
        if self.opcode == WqeOpcode::RdmaRead {
            self.psns.nth((self.done_bytes / mtu) as u32)
        } else {
            self.psns.first
        }
    }
}

/// The send queue, in WQEBBs.
pub(crate) struct SendQueue {
    pub(crate) size: u16,
    pub(crate) ci: u16,
    pub(crate) pi: u16,
    /// WQEBBs fetched ahead of `ci` (a WQE cache), starting at `ci`.
    pub(crate) wqe_cache: VecDeque<[u8; WQEBB_LEN]>,
    /// Messages executed and not yet completed, in posting order.
    pub(crate) outstanding: VecDeque<SentMsg>,
    /// Every message of `outstanding` before this index is wholly sent:
    /// where the transmitter starts looking. A path that makes a message
    /// send again (go-back-N, a READ asked for again) resets it to 0.
    pub(crate) unsent_from: usize,
    /// READs and atomics among `outstanding`.
    pub(crate) reads: usize,
}

impl SendQueue {
    pub(crate) fn new(log_size: u8) -> Self {
        Self {
            size: 1 << log_size,
            ci: 0,
            pi: 0,
            wqe_cache: VecDeque::new(),
            outstanding: VecDeque::new(),
            unsent_from: 0,
            reads: 0,
        }
    }

    /// Adds a message just executed.
    pub(crate) fn push_outstanding(&mut self, m: SentMsg) {
        self.reads += usize::from(m.is_read_or_atomic());
        self.outstanding.push_back(m);
    }

    /// Drops the oldest outstanding message (it completed, and what its
    /// completion needs was read where it lay).
    pub(crate) fn drop_front(&mut self) {
        if let Some(m) = self.outstanding.front() {
            self.forget_front(m.is_read_or_atomic());
            self.outstanding.pop_front();
        }
    }

    /// Takes the oldest outstanding message off (it completed).
    pub(crate) fn pop_outstanding(&mut self) -> Option<SentMsg> {
        let m = self.outstanding.pop_front()?;
        self.forget_front(m.is_read_or_atomic());
        Some(m)
    }

    /// Counts the oldest outstanding message gone, a READ or atomic if
    /// `read_or_atomic`.
    fn forget_front(&mut self, read_or_atomic: bool) {
        self.unsent_from = self.unsent_from.saturating_sub(1);
        self.reads -= usize::from(read_or_atomic);
    }

    /// WQEBBs from the consumer index on that may be executed before what
    /// is outstanding would span more than the ring holds, from the first
    /// WQEBB of the oldest message not yet completed. Only a program that
    /// posts into slots whose WQEs have not completed (the ring's contract
    /// broken) runs out; its WQEs wait for completions, so that the
    /// outstanding messages always lie within one turn of the ring and
    /// [`posted_after`] tells their order.
    pub(crate) fn room_before_completions(&self) -> u16 {
        self.outstanding.front().map_or(self.size, |oldest| {
            self.size
                .saturating_sub(self.ci.wrapping_sub(oldest.wqe_index))
        })
    }

    /// WQEBBs posted and not yet consumed.
    pub(crate) fn posted(&self) -> u16 {
        self.pi.wrapping_sub(self.ci)
    }

    /// Steps over the WQE at the consumer index, taken as `n` WQEBBs (at
    /// least one, for a control segment that gives no size), when that
    /// many are posted: how execution and the flush pass a malformed WQE.
    /// False, leaving it in place, where its size runs past the producer
    /// index (nothing then tells where it ends).
    pub(crate) fn step_over(&mut self, n: u16) -> bool {
        let n = n.max(1);
        if n > self.posted() {
            return false;
        }
        self.consume(n);
        true
    }

    /// Consumes `n` WQEBBs at the consumer index.
    pub(crate) fn consume(&mut self, n: u16) {
        for _ in 0..n {
            self.wqe_cache.pop_front();
        }
        self.ci = self.ci.wrapping_add(n);
    }
}

/// How many WQEBBs WQE index `later` was posted after `earlier` (negative
/// if before): posting order modulo the 16-bit WQEBB counter. A send
/// queue holds at most 2^15 WQEBBs, and its outstanding messages never
/// span more than it holds ([`SendQueue::room_before_completions`]), so the
/// distance fits an `i16`.
pub(crate) fn posted_after(later: u16, earlier: u16) -> i16 {
    later.wrapping_sub(earlier) as i16
}

/// The receive queue, in WQEs.
pub(crate) struct RecvQueue {
    pub(crate) size: u32,
    pub(crate) stride: u32,
    pub(crate) ci: u16,
    /// The producer index last read from the doorbell record.
    pub(crate) pi: u16,
    /// In the error state: when to look at the receive doorbell record
    /// again for receives posted since, to flush them.
    pub(crate) flush_poll: Option<Instant>,
}

impl RecvQueue {
    pub(crate) fn new(log_size: u8, log_stride: u8) -> Self {
        Self {
            size: 1 << log_size,
            stride: 16 << log_stride,
            ci: 0,
            pi: 0,
            flush_poll: None,
        }
    }

    /// The receive queue of a QP with an SRQ: none.
    pub(crate) fn none() -> Self {
        Self {
            size: 0,
            stride: 0,
            ci: 0,
            pi: 0,
            flush_poll: None,
        }
    }

    /// Bytes of the receive queue: the send queue follows it in the QP
    /// buffer.
    pub(crate) fn bytes(&self) -> u64 {
        u64::from(self.size) * u64::from(self.stride)
    }
}

/// A receive WQE taken from the RQ.
pub(crate) struct RecvWqe {
    pub(crate) index: u16,
    pub(crate) sges: Vec<Sge>,
}

/// Progress of an inbound multi-packet SEND.
pub(crate) struct RecvInProgress {
    pub(crate) wqe_index: u16,
    pub(crate) sges: Vec<Sge>,
    pub(crate) offset: u64,
    pub(crate) imm: Option<u32>,
}

/// Progress of an inbound multi-packet RDMA WRITE.
pub(crate) struct WriteInProgress {
    pub(crate) va: u64,
    pub(crate) rkey: u32,
    pub(crate) len: u64,
    pub(crate) offset: u64,
}

/// The responder's messages in progress, beside its PSN state.
#[derive(Default)]
pub(crate) struct Inbound {
    pub(crate) recv: Option<RecvInProgress>,
    pub(crate) write: Option<WriteInProgress>,
    /// UC: the receive WQE of a SEND that was aborted (a packet of it was
    /// lost); the next SEND uses it, from its first byte (IBTA §9.7.5.2.4).
    /// RC: the receive WQE an RDMA WRITE with immediate took for a last
    /// packet that failed, which the QP's flush completes.
    pub(crate) spare: Option<RecvWqe>,
    /// UC: the rest of the current message is dropped, up to the next
    /// First or Only packet.
    pub(crate) uc_drop: bool,
}

impl Inbound {
    /// UC: gives up the message in progress; its receive WQE, if it had one,
    /// is kept for the next SEND.
    pub(crate) fn abort(&mut self) {
        if let Some(ip) = self.recv.take() {
            self.spare = Some(RecvWqe {
                index: ip.wqe_index,
                sges: ip.sges,
            });
        }
        self.write = None;
    }
}

/// What the responder owes a QP's peer behind a READ's responses still to
/// be built (`Qp::owed`, sent by the `owed` module), in PSN order.
pub(crate) enum Owed {
    /// The rest of a READ's responses.
    Read(ReadOwed),
    /// An answer without payload.
    Answer(Answer),
    /// The last item, after the NAK that ends the QP (if the QP has a
    /// peer to send it to): the QP goes to ERR once everything before it
    /// has been sent. `access_error`: that NAK's is a remote access error,
    /// counted when it leaves.
    End { access_error: bool },
}

/// An answer of the responder waiting behind a READ's responses.
pub(crate) enum Answer {
    /// A plain ACK of `psn` with `aeth`, ready at `ready`. A later one
    /// replaces it while `held_ends` is what the NIC's outputs count
    /// (`Outputs::held_ends`): as a held ACK is replaced while nothing has
    /// been queued behind it.
    Ack {
        psn: Psn,
        aeth: doorbell_wire::AethRepr,
        ready: Instant,
        held_ends: u64,
    },
    /// A NAK or an atomic's response.
    Packet(doorbell_wire::RoceRepr),
}

/// A READ taken, whose responses from `next` on are still to be built.
pub(crate) struct ReadOwed {
    /// The PSN of the READ's (or its duplicate's) first response.
    pub(crate) psn: Psn,
    /// Its responses, all told.
    pub(crate) n: u32,
    /// The first response not built yet.
    pub(crate) next: u32,
    /// The request's address.
    pub(crate) va: u64,
    /// The request's key.
    pub(crate) rkey: doorbell_types::Mkey,
    /// The request's length in bytes.
    pub(crate) len: u64,
    /// The MSN its responses carry: the responder's once it took the READ.
    pub(crate) msn: u32,
    /// False for a duplicate: one that fails is dropped, not NAKed.
    pub(crate) fresh: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inline_payload_keeps_its_bytes_in_place_up_to_short_inline() {
        let mut spares = Spares::default();
        let data: Vec<u8> = (1..=64).collect();
        for len in 0..=data.len() {
            let p = spares.inline(&data[..len]);
            assert_eq!(&p[..], &data[..len], "{len} bytes");
            assert_eq!(
                matches!(p, InlineData::Short { .. }),
                len <= SHORT_INLINE,
                "{len} bytes kept in place"
            );
            spares.recycle(Payload::Inline(p));
        }
        // Each long one took the buffer the one before gave back; short
        // ones took none and gave none.
        assert_eq!(spares.inline.len(), 1);
        let InlineData::Long(v) = spares.inline(&data) else {
            panic!("64 bytes in a buffer")
        };
        assert_eq!((spares.inline.len(), v.len()), (0, data.len()));
    }
}
