//! The context one input's work runs in: the time it has reached, the bus,
//! the tables it may read, and the queues its outputs go to.

use std::collections::{BTreeMap, VecDeque};

use doorbell_hif::NicEvent;
use doorbell_pcie::{Dma, DmaTag};
use doorbell_types::{Cqn, Duration, HostAddr, Instant, Psn, Qpn, Srqn};
use doorbell_wire::{AethRepr, BthOpcode, BthRepr, ExtHeaders, RoceIp, RoceRepr, Seal};

use crate::config::{Frame, NicConfig, NicCounters, PacketHeaders};
use crate::cq::Cq;
use crate::dma::{dma_read, dma_write};
use crate::mkey::MkeyTable;
use crate::srq::Srq;

/// The most headers a list kept for reuse holds room for
/// ([`Outputs::header_lists`]): a train's, at [`crate::MAX_TRAIN_BYTES`]
/// of the smallest packets.
const HEADER_LIST_LEN: usize = 128;

/// Shared outputs and tables a QP's engines need.
pub(crate) struct Ctx<'a, D: Dma> {
    /// When the input that started this work arrived.
    pub(crate) now: Instant,
    /// How far this work has got: advanced by processing costs and by the
    /// bus's answers. Frames leave, and DMAs are issued, at this time.
    pub(crate) t: Instant,
    /// Processing-unit time this work has used.
    pub(crate) busy: Duration,
    pub(crate) atomic_free: &'a mut BTreeMap<u64, Instant>,
    pub(crate) dma: &'a mut D,
    pub(crate) cqs: &'a mut BTreeMap<Cqn, Cq>,
    pub(crate) mkeys: &'a MkeyTable,
    pub(crate) srqs: &'a mut BTreeMap<Srqn, Srq>,
    pub(crate) out: &'a mut Outputs,
    pub(crate) cfg: &'a NicConfig,
    /// A CQE of this work's QP was lost (its CQ overran or is in error):
    /// the QP goes to the error state once the engine returns, with
    /// [`NicEvent::QpFatal`], as an mlx5 QP does whose CQ overran.
    pub(crate) cqe_lost: bool,
}

impl<D: Dma> Ctx<'_, D> {
    /// Spends `d` of processing-unit time.
    pub(crate) fn charge(&mut self, d: Duration) {
        self.t = self.t.add(d);
        self.busy = self.busy.add(d);
    }

    /// A DMA read at the current time; the work waits for its data.
    pub(crate) fn read(&mut self, tag: DmaTag, addr: HostAddr, buf: &mut [u8]) -> bool {
        dma_read(self.dma, &mut self.t, tag, addr, buf)
    }

    /// Raises `event` at the current time.
    pub(crate) fn raise(&mut self, event: NicEvent) {
        self.out.events.push_back((event, self.t));
    }

    /// A DMA write at the current time.
    pub(crate) fn write(&mut self, tag: DmaTag, addr: HostAddr, data: &[u8]) -> bool {
        dma_write(self.dma, &mut self.t, tag, addr, data)
    }
}

/// Queues of outputs and the counters.
pub(crate) struct Outputs {
    tx: VecDeque<Frame>,
    /// Packets in `tx` beyond one per frame: those of its runs
    /// ([`crate::Unfilled::segments`]).
    tx_joined: usize,
    /// Events raised, each with the time the work that raised it had
    /// reached: its EQE is written no earlier (after the CQE it reports).
    pub(crate) events: VecDeque<(NicEvent, Instant)>,
    pub(crate) counters: NicCounters,
    /// Buffers of frames handed back ([`crate::Nic::recycle`]), for the
    /// frames [`crate::emit::emit`] builds: 256 at most, none larger than
    /// a frame of MTU 4096 with its headers.
    pub(crate) spare: crate::pool::Pool<u8, 256, { 6 * 1024 }>,
    /// Lists of headers handed back ([`crate::Nic::recycle_headers`]), for
    /// the frames whose headers this NIC hands over parsed
    /// ([`Frame::headers`]).
    pub(crate) header_lists: crate::pool::Pool<PacketHeaders, 8, { HEADER_LIST_LEN }>,
    /// The payload storage of retired messages, for the WQEs parsed next.
    pub(crate) payloads: crate::wq::Spares,
    /// The frames being built, reused ([`Building`]).
    pub(crate) building: Vec<Building>,
    /// The buffer send WQEs are fetched into, reused.
    pub(crate) wqe_scratch: Vec<u8>,
    /// A plain ACK queued behind every frame of `tx`, not yet built: a
    /// later ACK of its QP replaces it (ACKs are cumulative), so a burst
    /// of requests costs one ACK frame, not one built per request and
    /// thrown away. It is built when another frame is queued behind it,
    /// or when it is the next to leave.
    pub(crate) held_ack: Option<AckHeaders>,
    /// When frames get their ICRC ([`crate::NicConfig::icrc`]).
    pub(crate) seal: Seal,
    /// QPs whose send engine stopped at a burst
    /// ([`crate::NicConfig::tx_burst`]) with more in its window.
    pub(crate) tx_pending: Vec<doorbell_types::Qpn>,
    /// QPs that owe READ responses ([`crate::NicConfig::read_burst`]).
    /// With `tx_pending`, the work of [`crate::Nic::resume_transmit`].
    pub(crate) owing: Vec<doorbell_types::Qpn>,
    /// Times a held ACK would have been built or dropped by now: whenever
    /// a frame was queued, the held ACK built or replaced by another QP's,
    /// the port found nothing before it, or the queue was dropped. A plain
    /// ACK owed behind a READ replaces the one before it only while this
    /// stays what it was then, as a held ACK is replaced only while
    /// nothing is queued behind it ([`crate::wq::Answer::Ack`]).
    pub(crate) held_ends: u64,
    /// Times a QP's send engine stopped with packets left to send because
    /// its window was full ([`crate::Nic::window_stops`]).
    pub(crate) window_stops: u64,
    /// Most packets a train holds ([`crate::NicConfig::max_train`]).
    max_train: u32,
    /// The QP the last frame of `tx` goes to, while further packets to it
    /// may join that frame as a train ([`Self::push_packet`]).
    train_to: Option<Qpn>,
}

impl Outputs {
    /// Nothing queued, nothing kept; frames sealed as `seal` says, up to
    /// `max_train` packets a train ([`crate::NicConfig::max_train`]).
    pub(crate) fn new(seal: Seal, max_train: u32) -> Self {
        Self {
            tx: VecDeque::new(),
            tx_joined: 0,
            events: VecDeque::new(),
            counters: NicCounters::default(),
            spare: crate::pool::Pool::default(),
            header_lists: crate::pool::Pool::default(),
            payloads: crate::wq::Spares::default(),
            building: Vec::new(),
            wqe_scratch: Vec::new(),
            held_ack: None,
            seal,
            tx_pending: Vec::new(),
            owing: Vec::new(),
            held_ends: 0,
            window_stops: 0,
            max_train,
            train_to: None,
        }
    }
}

/// A frame being built with its payload read straight into its buffer (a
/// request's packets, a READ's responses): the buffer, the headers, where
/// in the buffer the payload goes, and when that payload is in.
pub(crate) struct Building {
    pub(crate) bytes: Vec<u8>,
    pub(crate) repr: doorbell_wire::RoceRepr,
    pub(crate) payload: std::ops::Range<usize>,
    pub(crate) ready: Instant,
    /// Where the payload is in host memory, if it is left there
    /// ([`crate::NicConfig::leave_payload`]).
    pub(crate) left: Option<doorbell_types::HostAddr>,
    /// The packets the frame stands for ([`crate::Unfilled::segments`]):
    /// one, or a run whose payloads follow `left` in memory.
    pub(crate) segments: u32,
    /// The run's LAST, if it ends with one ([`crate::Unfilled::last`]).
    pub(crate) last: Option<crate::config::RunLast>,
}

impl Building {
    /// The bytes of payload of the packets the frame stands for.
    pub(crate) fn run_len(&self) -> u64 {
        let each = self.payload.len() as u64;
        match self.last {
            Some(last) => u64::from(self.segments.saturating_sub(1)) * each + u64::from(last.len),
            None => u64::from(self.segments) * each,
        }
    }
}

/// Hands over the headers `repr` of the packet of `len` bytes at `at` in
/// its frame, its payload at `payload`: the next of `list`.
pub(crate) fn hand_over(
    list: &mut Vec<PacketHeaders>,
    repr: &RoceRepr,
    at: usize,
    payload: std::ops::Range<usize>,
    len: usize,
) {
    let payload_len = payload.len();
    list.push(PacketHeaders {
        repr: *repr,
        packet: at..at + len,
        payload,
    });
    // (Made as a parse would give them where they lie, not copied again.)
    if let Some(h) = list.last_mut() {
        h.repr.make_parsed(payload_len);
    }
}

/// An ACK's or NAK's headers by what varies between them
/// ([`AckHeaders::repr`] makes the headers): a plain ACK owed and not yet
/// built ([`Outputs::held_ack`]) is one, so that an ACK that replaces
/// another costs a few stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AckHeaders {
    pub(crate) qpn: Qpn,
    /// This NIC's IPv4 address and the peer's.
    pub(crate) src: [u8; 4],
    pub(crate) dst: [u8; 4],
    pub(crate) src_port: u16,
    /// The peer's QP, the BTH's destination.
    pub(crate) dest_qp: Qpn,
    pub(crate) psn: Psn,
    pub(crate) aeth: AethRepr,
    /// When the NIC had it ready: the time of the latest ACK it stands for.
    pub(crate) ready: Instant,
}

impl AckHeaders {
    /// The ACK's headers.
    pub(crate) fn repr(&self) -> RoceRepr {
        RoceRepr {
            ip: RoceIp::v4(self.src, self.dst),
            src_port: self.src_port,
            bth: BthRepr::new(BthOpcode::RcAck, self.dest_qp, self.psn),
            ext: ExtHeaders {
                aeth: Some(self.aeth),
                ..ExtHeaders::default()
            },
        }
    }
}

impl Outputs {
    /// Queues `frame` for the port, behind the held ACK.
    #[inline]
    pub(crate) fn push(&mut self, frame: Frame) {
        self.train_to = None;
        self.build_held_ack();
        self.tx_joined += frame.packets() as usize - 1;
        self.tx.push_back(frame);
    }

    /// Queues `frame`, one packet whose bytes are all in it, to QP `to`, as
    /// [`Self::push`] does; but as the next packet of the last frame queued
    /// if [`Self::train_for`] takes it. Its buffer then goes back to the
    /// spares.
    pub(crate) fn push_packet(&mut self, frame: Frame, to: Qpn) {
        debug_assert!(frame.unfilled.is_none() && frame.train == 1);
        let parsed = !frame.headers.is_empty();
        if let Some(last) = self.train_for(to, frame.dst, frame.bytes.len(), parsed) {
            let at = last.bytes.len();
            last.bytes.extend_from_slice(&frame.bytes);
            last.ready = last.ready.max(frame.ready);
            last.headers
                .extend(frame.headers.into_iter().map(|h| PacketHeaders {
                    packet: at + h.packet.start..at + h.packet.end,
                    payload: at + h.payload.start..at + h.payload.end,
                    ..h
                }));
            self.spare.give(frame.bytes);
            // (With an ACK held it would not have joined, but been queued.)
            self.held_ends += 1;
            return;
        }
        self.push(frame);
        if self.max_train > 1 {
            self.train_to = Some(to);
        }
    }

    /// The last frame queued, counted one packet longer, if a packet of
    /// `len` bytes to QP `to` at `dst` may join it as the train's next
    /// ([`crate::NicConfig::max_train`]): it is a train to that QP (nothing
    /// queued since its first packet, a held ACK included) with room for
    /// the packet, whose headers are handed over parsed if `parsed` is, as
    /// the train's are ([`Frame::headers`]). The caller puts the packet's
    /// bytes at its end.
    pub(crate) fn train_for(
        &mut self,
        to: Qpn,
        dst: [u8; 4],
        len: usize,
        parsed: bool,
    ) -> Option<&mut Frame> {
        if self.train_to != Some(to) || self.held_ack.is_some() {
            return None;
        }
        let last = self.tx.back_mut()?;
        if last.dst != dst
            || last.headers.is_empty() == parsed
            || last.train >= self.max_train
            || last.bytes.len() + len > crate::config::MAX_TRAIN_BYTES
        {
            return None;
        }
        last.train += 1;
        self.tx_joined += 1;
        Some(last)
    }

    /// Holds `ack` behind every frame queued, the ACK held until now
    /// built first.
    pub(crate) fn push_held(&mut self, ack: AckHeaders) {
        self.build_held_ack();
        self.held_ack = Some(ack);
    }

    /// The next frame for the port.
    pub(crate) fn pop(&mut self) -> Option<Frame> {
        if self.tx.is_empty() {
            self.build_held_ack();
        }
        let f = self.tx.pop_front()?;
        self.tx_joined -= f.packets() as usize - 1;
        Some(f)
    }

    /// Moves every frame queued, the held ACK last, to the end of `out`:
    /// as [`Self::pop`] until `None`, each frame moved once.
    pub(crate) fn drain_into(&mut self, out: &mut Vec<Frame>) {
        move_all(&mut self.tx, out);
        self.build_held_ack();
        move_all(&mut self.tx, out);
        self.tx_joined = 0;
    }

    /// Packets queued for the port, the held ACK included.
    pub(crate) fn queued(&self) -> usize {
        self.tx.len() + self.tx_joined + usize::from(self.held_ack.is_some())
    }

    /// Packets an engine stopped at `burst` may still build now: any
    /// number without a burst; with one, the burst (at least one) less
    /// what already waits for the port (a doorbell may run an engine more
    /// than once before the runtime takes anything).
    pub(crate) fn room(&self, burst: Option<u32>) -> u32 {
        burst.map_or(u32::MAX, |b| {
            b.max(1)
                .saturating_sub(u32::try_from(self.queued()).unwrap_or(u32::MAX))
        })
    }

    /// Drops every frame queued for the port, the held ACK included.
    pub(crate) fn clear(&mut self) {
        self.held_ends += 1;
        self.held_ack = None;
        self.train_to = None;
        self.tx_joined = 0;
        for f in self.tx.drain(..) {
            self.spare.give(f.bytes);
        }
    }

    /// Builds the held ACK into `tx`, behind everything there.
    fn build_held_ack(&mut self) {
        self.held_ends += 1;
        let Some(h) = self.held_ack.take() else {
            return;
        };
        // An ACK's headers always fit (the emit checks them anyway).
        let repr = h.repr();
        let len = repr.frame_len(0);
        let mut bytes = self.spare.take_len(len);
        // Handed over parsed by a NIC that makes trains, as a request's
        // (`crate::emit::finish`).
        let mut headers = Vec::new();
        if self.max_train > 1 {
            headers = self.header_lists.take();
            let at = repr.header_len();
            hand_over(&mut headers, &repr, 0, at..at, len);
        } else if repr.emit_checked(&mut bytes, 0, len, self.seal).is_err() {
            self.spare.give(bytes);
            return;
        }
        self.train_to = None;
        self.tx.push_back(Frame {
            dst: h.dst,
            bytes,
            ready: h.ready,
            unfilled: None,
            train: 1,
            segment: 0,
            headers,
        });
    }
}

/// Moves every frame of `tx` to the end of `out`, in order. (A drain of
/// the deque into the vector goes through the general extend, which cost
/// more than the few frames a call usually moves: one pop and one push
/// each does less.)
fn move_all(tx: &mut VecDeque<Frame>, out: &mut Vec<Frame>) {
    out.reserve(tx.len());
    while let Some(f) = tx.pop_front() {
        out.push(f);
    }
}

#[cfg(test)]
mod tests {
    use doorbell_types::{HostAddr, Instant};

    use super::*;
    use crate::Unfilled;

    fn frame(segments: Option<u32>) -> Frame {
        Frame {
            dst: [10, 0, 0, 2],
            bytes: vec![0; 100],
            ready: Instant::ZERO,
            unfilled: segments.map(|segments| Unfilled {
                from: HostAddr::new(0x1000),
                at: 60,
                len: 40,
                segments,
                last: None,
            }),
            train: 1,
            segment: 0,
            headers: Vec::new(),
        }
    }

    /// A plain ACK from QP 0x101 to QP 0x100, PSN 7.
    fn plain_ack() -> AckHeaders {
        AckHeaders {
            qpn: Qpn::new(0x101),
            src: [10, 0, 0, 1],
            dst: [10, 0, 0, 2],
            src_port: 0xc000,
            dest_qp: Qpn::new(0x100),
            psn: Psn::new(7),
            aeth: AethRepr {
                syndrome: doorbell_wire::AethSyndrome::Ack { credits: 0x1f },
                msn: 1,
            },
            ready: Instant::ZERO,
        }
    }

    #[test]
    fn the_queue_counts_each_packet_of_a_run() {
        let mut out = Outputs::new(Seal::Now, 1);
        out.push(frame(Some(5)));
        out.push(frame(None));
        out.push(frame(Some(1)));
        assert_eq!(out.queued(), 7);
        assert_eq!(out.pop().map(|f| f.packets()), Some(5));
        assert_eq!(out.queued(), 2);
        out.clear();
        assert_eq!(out.queued(), 0);
        out.push(frame(Some(3)));
        assert_eq!(out.queued(), 3);
    }

    #[test]
    fn packets_to_one_qp_join_a_train_until_another_frame_comes_between() {
        let mut out = Outputs::new(Seal::Now, 3);
        let one = |b: u8| Frame {
            dst: [10, 0, 0, 2],
            bytes: vec![b; 10],
            ready: Instant::from_ps(u64::from(b)),
            unfilled: None,
            train: 1,
            segment: 0,
            headers: Vec::new(),
        };
        let (q1, q2) = (Qpn::new(0x101), Qpn::new(0x102));
        out.push_packet(one(1), q1);
        out.push_packet(one(2), q1);
        // Another QP's packet starts a train of its own.
        out.push_packet(one(3), q2);
        out.push_packet(one(4), q2);
        // An ACK held behind them is queued before the next packet.
        out.push_held(plain_ack());
        for b in 5..=8 {
            out.push_packet(one(b), q2);
        }
        assert_eq!(out.queued(), 9, "each packet and the ACK");
        let got: Vec<Frame> = std::iter::from_fn(|| out.pop()).collect();
        let trains: Vec<u32> = got.iter().map(|f| f.train).collect();
        assert_eq!(trains, [2, 2, 1, 3, 1], "three at most");
        assert_eq!(got[0].bytes, [[1; 10], [2; 10]].concat());
        assert_eq!(got[3].bytes, [[5; 10], [6; 10], [7; 10]].concat());
        assert_eq!(got[3].ready, Instant::from_ps(7), "ready with its last");
        // The ACK's headers are handed over parsed, as a NIC that makes
        // trains hands them.
        let mut ack = got[2].clone();
        assert_eq!(ack.headers.len(), 1);
        ack.write_headers();
        assert!(doorbell_wire::parse_roce(&ack.bytes).is_ok(), "the ACK");
        assert_eq!(out.queued(), 0);
    }

    #[test]
    fn a_held_ack_leaves_as_the_ack_it_stands_for() {
        let held = AckHeaders {
            src_port: 0xc123,
            dest_qp: Qpn::new(0x2345),
            psn: Psn::new(0xab_cdef),
            aeth: AethRepr {
                msn: 0x12_3456,
                ..plain_ack().aeth
            },
            ready: Instant::from_ps(77),
            ..plain_ack()
        };
        let mut out = Outputs::new(Seal::Now, 1);
        out.push_held(held);
        let f = out.pop().expect("the held ACK, built");
        assert_eq!((f.dst, f.ready), (held.dst, held.ready));
        let got = doorbell_wire::parse_roce(&f.bytes).expect("a RoCEv2 frame, its ICRC right");
        let want = RoceRepr {
            ip: RoceIp::v4(held.src, held.dst),
            src_port: held.src_port,
            bth: BthRepr::new(BthOpcode::RcAck, held.dest_qp, held.psn),
            ext: ExtHeaders {
                aeth: Some(held.aeth),
                ..ExtHeaders::default()
            },
        };
        assert_eq!(got.repr, want);
        assert!(got.payload.is_empty());
        assert!(out.pop().is_none());
    }

    #[test]
    fn draining_the_queue_gives_what_popping_it_gives() {
        let fill = |out: &mut Outputs| {
            out.push(frame(Some(5)));
            out.push(frame(None));
            out.push_held(plain_ack());
        };
        let (mut popped, mut drained) = (Outputs::new(Seal::Now, 1), Outputs::new(Seal::Now, 1));
        fill(&mut popped);
        fill(&mut drained);
        let by_pop: Vec<Frame> = std::iter::from_fn(|| popped.pop()).collect();
        let mut by_drain = vec![frame(Some(2))];
        drained.drain_into(&mut by_drain);
        assert_eq!(by_pop.len(), 3, "two frames and the held ACK");
        assert_eq!(
            by_drain[1..],
            by_pop[..],
            "in the same order, after what was there"
        );
        assert_eq!(drained.queued(), 0);
    }
}
