//! A port NIC's frames whose payload it left in its host memory, filled in
//! before anything sees them (decision record 0055).
//!
//! A NIC on a UDP port leaves each WRITE's, SEND's and READ response's
//! payload in memory ([`doorbell_device::NicConfig::leave_payload`]) and
//! hands a run of a message's MIDDLE packets on as one frame
//! ([`doorbell_device::NicConfig::max_segments`]). Before the engine seals
//! the frames and gives them to the port, [`Filler::fill`] turns each such
//! frame into the packets it stands for, each a whole frame: its headers
//! as the run gives them ([`doorbell_device::Split`]; the run's with the
//! packet's own PSN, but at a FIRST or LAST that a run of another NIC may
//! hold), and its payload read from the NIC's memory: the run's payloads,
//! which lie back to back, in one read spread over its packets. A port, a capture, a fault relay
//! and a timeline then see exactly the frames a NIC that reads its
//! payloads builds.
//!
//! The NIC checked, counted and timed the payload's DMA read when it built
//! the frame; the read itself happens here, in the same turn. Memory that
//! no longer holds the payload by then (a program that unmapped a
//! registered buffer while a WRITE from it was being sent) loses the
//! packet, as a wire would: the receiver asks for it again, and the NIC,
//! building it again, finds the memory gone and completes the request in
//! error.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use doorbell_device::{Frame, Unfilled};
use doorbell_host::HostMemory;

/// Most spare buffers a filler keeps: a window's packets (256 KiB) at a
/// path MTU of 1024 bytes.
const KEEP: usize = 256;

/// Buffers at least this large are taken for runs of datagrams.
const RUN_BUFFER: usize = 16 * 1024;
/// Most run buffers a filler keeps: a window's (256 KiB) runs.
const KEEP_RUNS: usize = 8;

/// The ranges `ranges` of `buf`, in order and apart, as slices.
fn disjoint<'a>(
    buf: &'a mut [u8],
    ranges: &'a [std::ops::Range<usize>],
) -> impl Iterator<Item = &'a mut [u8]> + 'a {
    let mut rest = buf;
    let mut done = 0;
    ranges.iter().map(move |r| {
        let tail = std::mem::take(&mut rest);
        let (_, from) = tail.split_at_mut(r.start - done);
        let (piece, after) = from.split_at_mut(r.len());
        rest = after;
        done = r.end;
        piece
    })
}

/// Fills in a NIC's frames whose payload it left in memory.
pub(crate) struct Filler {
    mem: Arc<dyn HostMemory>,
    /// The frames filled in, swapped with the NIC's.
    filled: Vec<Frame>,
    /// Buffers for the packets of runs: each run's own frame, and as many
    /// taken back from the port as it was given beyond the NIC's frames
    /// ([`Self::keep`]). Kept here rather than taken from the thread's
    /// spares (`crate::buffers`) for the reason the NIC's own buffers come
    /// straight back to it: a run's 63 extra buffers would overflow the
    /// thread's few and go through the process's store and its lock one at
    /// a time, and come out of it emptied, their payload bytes zeroed again
    /// before they are overwritten.
    spare: Vec<Vec<u8>>,
    /// Where each packet of the run being filled takes its payload, reused.
    packets: Vec<Unfilled>,
    /// Packets lost because memory no longer held their payload
    /// ([`crate::PortCounters::tx_payload_lost`]).
    lost: Arc<AtomicU64>,
    /// Whether a run's packets after its first are made one frame of
    /// datagrams ([`Frame::segment`]): for a UDP port that nothing else
    /// sees the frames of (no capture, timeline or fault relay).
    runs_whole: bool,
    /// Buffers for runs of datagrams, kept apart from the packets' so that
    /// a run does not grow a packet's buffer.
    run_spare: Vec<Vec<u8>>,
    /// A packet's bytes, built before its datagram is copied into a run.
    scratch: Vec<u8>,
    /// Where each packet's payload goes in a run of datagrams, reused.
    pieces: Vec<std::ops::Range<usize>>,
}

impl Filler {
    /// A filler that reads payloads from `mem`, the NIC's host memory, and
    /// counts the packets it loses in `lost`.
    pub(crate) fn new(mem: Arc<dyn HostMemory>, lost: Arc<AtomicU64>) -> Self {
        Self {
            mem,
            filled: Vec::new(),
            spare: Vec::new(),
            packets: Vec::new(),
            lost,
            runs_whole: false,
            run_spare: Vec::new(),
            scratch: Vec::new(),
            pieces: Vec::new(),
        }
    }

    /// Makes each run's packets after its first one frame of datagrams
    /// ([`Frame::segment`]) from now on: for a UDP port that nothing else
    /// sees the frames of.
    pub(crate) fn runs_whole(&mut self) {
        self.runs_whole = true;
    }

    /// Replaces `out`, the frames a NIC built, with each packet they stand
    /// for as a whole frame, in order; a frame with its payload in it stays
    /// as it is. Returns how many more frames there are than before: the
    /// buffers, beyond the NIC's own, that the port hands back after
    /// sending them ([`Self::keep`]).
    pub(crate) fn fill(&mut self, out: &mut Vec<Frame>) -> usize {
        if out.iter().all(|f| f.unfilled.is_none()) {
            return 0;
        }
        let before = out.len();
        let mut lost = 0u64;
        self.filled.clear();
        for mut f in out.drain(..) {
            let Some(u) = f.unfilled else {
                self.filled.push(f);
                continue;
            };
            if u.segments <= 1 && u.last.is_none() {
                if u.fill(&mut f.bytes, &*self.mem).is_ok() {
                    f.unfilled = None;
                    self.filled.push(f);
                } else {
                    lost += 1;
                    self.spare.push(f.bytes);
                }
                continue;
            }
            let Some(split) = u.split(&f.bytes) else {
                // No NIC makes such a run; lose it whole.
                lost += u64::from(u.segments);
                self.spare.push(f.bytes);
                continue;
            };
            // Every packet's headers first, then the run's payloads, which
            // lie back to back, in one read into the packets: one look at
            // the memory for the run rather than one a packet. Where that
            // read fails (memory gone under part of the run), each packet
            // is read alone, and only those whose payload is gone are lost.
            if self.runs_whole && u.segments > 2 && self.fill_whole(&f, u, &split) {
                self.spare.push(f.bytes);
                continue;
            }
            let first = self.filled.len();
            self.packets.clear();
            for k in 0..u.segments {
                let mut bytes = self.spare.pop().unwrap_or_default();
                let Some(one) = split.packet(k, &mut bytes) else {
                    lost += 1;
                    self.spare.push(bytes);
                    continue;
                };
                self.packets.push(one);
                self.filled.push(Frame {
                    dst: f.dst,
                    bytes,
                    ready: f.ready,
                    unfilled: None,
                    train: 1,
                    segment: 0,
                    headers: Vec::new(),
                });
            }
            if !self.read_run(u, first) {
                lost += self.fill_one_by_one(first);
            }
            self.spare.push(f.bytes);
        }
        std::mem::swap(out, &mut self.filled);
        self.spare.truncate(KEEP);
        if lost > 0 {
            // Counters only: Relaxed.
            self.lost.fetch_add(lost, Ordering::Relaxed);
        }
        out.len().saturating_sub(before)
    }

    /// Fills in the run `u` of `f` as two frames: its first packet alone,
    /// and the rest as one frame of datagrams ([`Frame::segment`]), their
    /// payloads read in one read. False, having pushed nothing, where the
    /// run's datagrams after its first are not all as long as the first of
    /// them but the last, or the read fails: the run is then filled packet
    /// by packet.
    fn fill_whole(&mut self, f: &Frame, u: Unfilled, split: &doorbell_device::Split<'_>) -> bool {
        const HEADERS: usize = crate::datagrams::HEADERS_LEN;
        let mut first = self.spare.pop().unwrap_or_default();
        let mut run = self.run_spare.pop().unwrap_or_default();
        let mut scratch = std::mem::take(&mut self.scratch);
        self.pieces.clear();
        let mut ok = true;
        let (mut at, mut seg, mut short) = (HEADERS, 0usize, false);
        let mut head = None;
        for k in 0..u.segments {
            let into = if k == 0 { &mut first } else { &mut scratch };
            let Some(one) = split.packet(k, into) else {
                ok = false;
                break;
            };
            let (pay, pay_end) = (one.at as usize, one.at as usize + one.len as usize);
            if k == 0 {
                self.pieces.push(pay..pay_end);
                head = Some(one);
                continue;
            }
            let p = &scratch;
            let len = p.len().saturating_sub(HEADERS);
            // An IPv4 header without options, as a run's shared headers
            // must be.
            let plain = doorbell_wire::Ipv4Header::new_checked(&p[..]).is_ok_and(|h| {
                h.version() == 4 && h.header_len() == doorbell_wire::ipv4::HEADER_LEN
            });
            if !plain || len == 0 || pay < HEADERS || pay_end > p.len() {
                ok = false;
                break;
            }
            if k == 1 {
                seg = len;
                if run.len() < HEADERS {
                    run.resize(HEADERS, 0);
                }
                run[..HEADERS].copy_from_slice(&p[..HEADERS]);
            } else if short || len > seg {
                ok = false;
                break;
            }
            short = len < seg;
            if run.len() < at + len {
                run.resize(at + len, 0);
            }
            let d = &mut run[at..at + len];
            d[..pay - HEADERS].copy_from_slice(&p[HEADERS..pay]);
            d[pay_end - HEADERS..].copy_from_slice(&p[pay_end..]);
            self.pieces.push(at + pay - HEADERS..at + pay_end - HEADERS);
            at += len;
        }
        self.scratch = scratch;
        let read = ok && head.is_some() && {
            run.truncate(at);
            let total = self.pieces.iter().map(|r| r.len()).sum();
            let (p0, rest) = self.pieces.split_first().expect("the first packet's");
            let mut pieces =
                std::iter::once(&mut first[p0.clone()]).chain(disjoint(&mut run, rest));
            self.mem.read_into(u.from, total, &mut pieces).is_ok()
        };
        if !read {
            self.spare.push(first);
            self.run_spare.push(run);
            return false;
        }
        let frame = |bytes, train, segment| Frame {
            dst: f.dst,
            bytes,
            ready: f.ready,
            unfilled: None,
            train,
            segment,
            headers: Vec::new(),
        };
        self.filled.push(frame(first, 1, 0));
        self.filled.push(frame(run, u.segments - 1, seg as u32));
        true
    }

    /// Reads the payloads of the run `u`, whose packets are the frames from
    /// `first` on (where [`Self::packets`] says), in one read; false if
    /// some packet of the run was not built, or the read failed.
    fn read_run(&mut self, u: Unfilled, first: usize) -> bool {
        let span = |p: &Unfilled| p.at as usize..p.at as usize + p.len as usize;
        let built = &mut self.filled[first..];
        if self.packets.len() != u.segments as usize
            || built.len() != self.packets.len()
            || built
                .iter()
                .zip(&self.packets)
                .any(|(f, p)| span(p).end > f.bytes.len())
        {
            return false;
        }
        let len = self.packets.iter().map(|p| p.len as usize).sum();
        let mut pieces = built
            .iter_mut()
            .zip(&self.packets)
            .map(|(f, p)| &mut f.bytes[span(p)]);
        self.mem.read_into(u.from, len, &mut pieces).is_ok()
    }

    /// Reads the payload of each frame from `first` on alone, as
    /// [`Self::packets`] says; drops those whose payload memory no longer
    /// holds, and returns how many.
    fn fill_one_by_one(&mut self, first: usize) -> u64 {
        let mut lost = 0;
        let mut at = first;
        for p in &self.packets {
            if p.fill(&mut self.filled[at].bytes, &*self.mem).is_ok() {
                at += 1;
            } else {
                lost += 1;
                let gone = self.filled.remove(at);
                self.spare.push(gone.bytes);
            }
        }
        lost
    }

    /// Takes back `n` of the buffers the port handed back in `spent`, to
    /// carry the next runs' packets; the rest go back to the NIC.
    pub(crate) fn keep(&mut self, spent: &mut Vec<Vec<u8>>, n: usize) {
        if self.runs_whole {
            let mut k = 0;
            while k < spent.len() {
                if spent[k].capacity() >= RUN_BUFFER && self.run_spare.len() < KEEP_RUNS {
                    self.run_spare.push(spent.swap_remove(k));
                } else {
                    k += 1;
                }
            }
        }
        let n = n
            .min(spent.len())
            .min(KEEP.saturating_sub(self.spare.len()));
        self.spare.extend(spent.drain(spent.len() - n..));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use doorbell_device::Unfilled;
    use doorbell_host::HostRam;
    use doorbell_types::{HostAddr, Instant, Psn, Qpn, Rkey};
    use doorbell_wire::reth::RethRepr;
    use doorbell_wire::{
        BthOpcode, BthRepr, ExtHeaders, RoceIp, RoceRepr, parse_roce_emitted, seal_roce,
    };

    const LEN: usize = 256;
    const SRC: [u8; 4] = [10, 0, 0, 1];
    const DST: [u8; 4] = [10, 0, 0, 2];

    /// A packet to `DST`, sealed, as a NIC that reads its payloads sends it.
    fn whole(op: BthOpcode, psn: u32, payload: &[u8]) -> Vec<u8> {
        // A FIRST carries a RETH.
        let reth = (op == BthOpcode::RcRdmaWriteFirst).then(|| RethRepr {
            va: 0x1000,
            rkey: Rkey::from_raw(0x1207),
            dma_len: (5 * LEN) as u32,
        });
        let repr = RoceRepr {
            ip: RoceIp::v4(SRC, DST),
            src_port: 49152,
            bth: BthRepr::new(op, Qpn::new(0x11), Psn::new(psn)),
            ext: ExtHeaders {
                reth,
                ..ExtHeaders::default()
            },
        };
        let mut f = Vec::new();
        repr.emit_to_vec(payload, &mut f).unwrap();
        f
    }

    /// The frame a NIC that leaves payloads hands on for the packets of
    /// `op` from `psn`, `segments` of them, their payloads from `from`: the
    /// first packet's headers, its payload unwritten (here 0xEE), its ICRC
    /// unsealed.
    fn left(op: BthOpcode, psn: u32, from: HostAddr, segments: u32) -> Frame {
        let mut bytes = whole(op, psn, &[0xEE; LEN]);
        let at = parse_roce_emitted(&bytes).unwrap().payload.start;
        let n = bytes.len();
        bytes[n - 4..].fill(0);
        Frame {
            dst: DST,
            bytes,
            ready: Instant::ZERO,
            unfilled: Some(Unfilled {
                from,
                at: at as u32,
                len: LEN as u32,
                segments,
                last: None,
            }),
            train: 1,
            segment: 0,
            headers: Vec::new(),
        }
    }

    /// A run from a FIRST to a shorter LAST, five packets, its payloads
    /// from `at` (as [`payloads`] writes them); and the packets a reading
    /// NIC sends for it.
    fn first_to_last(at: HostAddr) -> (Frame, Vec<Vec<u8>>) {
        let mut run = left(BthOpcode::RcRdmaWriteFirst, 100, at, 5);
        if let Some(u) = &mut run.unfilled {
            u.last = Some(doorbell_device::RunLast {
                len: 100,
                ack_req: false,
            });
        }
        let want = vec![
            whole(BthOpcode::RcRdmaWriteFirst, 100, &[1; LEN]),
            whole(BthOpcode::RcRdmaWriteMiddle, 101, &[2; LEN]),
            whole(BthOpcode::RcRdmaWriteMiddle, 102, &[3; LEN]),
            whole(BthOpcode::RcRdmaWriteMiddle, 103, &[4; LEN]),
            whole(BthOpcode::RcRdmaWriteLast, 104, &[5; 100]),
        ];
        (run, want)
    }

    fn sealed(frames: &[Frame]) -> Vec<Vec<u8>> {
        frames
            .iter()
            .map(|f| {
                assert_eq!(f.unfilled, None, "every frame filled in");
                assert_eq!(f.train, 1);
                let mut b = f.bytes.clone();
                seal_roce(&mut b).unwrap();
                b
            })
            .collect()
    }

    /// Host memory holding `n` payloads of `LEN` bytes, payload `k` all
    /// `k + 1`; and its address.
    fn payloads(n: usize) -> (Arc<HostRam>, HostAddr) {
        let mem = Arc::new(HostRam::new());
        let at = mem.alloc((n * LEN) as u64).unwrap();
        for k in 0..n {
            let a = at.checked_add((k * LEN) as u64).unwrap();
            mem.write(a, &[k as u8 + 1; LEN]).unwrap();
        }
        (mem, at)
    }

    #[test]
    fn runs_and_single_frames_are_filled_into_the_packets_a_reading_nic_sends() {
        let (mem, at) = payloads(5);
        let lost = Arc::new(AtomicU64::new(0));
        let mut filler = Filler::new(mem.clone(), lost.clone());
        let ack = whole(BthOpcode::RcSendOnly, 3, b"in the frame");
        let mut out = vec![
            // A FIRST alone, a run of three MIDDLEs, a frame with its
            // payload in it, a LAST alone.
            left(BthOpcode::RcRdmaWriteFirst, 100, at, 1),
            left(
                BthOpcode::RcRdmaWriteMiddle,
                101,
                at.checked_add(LEN as u64).unwrap(),
                3,
            ),
            Frame {
                dst: DST,
                bytes: ack.clone(),
                ready: Instant::ZERO,
                unfilled: None,
                headers: Vec::new(),
                train: 1,
                segment: 0,
            },
            left(
                BthOpcode::RcRdmaWriteLast,
                104,
                at.checked_add(4 * LEN as u64).unwrap(),
                1,
            ),
        ];
        assert_eq!(filler.fill(&mut out), 2, "two more frames than the NIC's");
        let want: Vec<Vec<u8>> = vec![
            whole(BthOpcode::RcRdmaWriteFirst, 100, &[1; LEN]),
            whole(BthOpcode::RcRdmaWriteMiddle, 101, &[2; LEN]),
            whole(BthOpcode::RcRdmaWriteMiddle, 102, &[3; LEN]),
            whole(BthOpcode::RcRdmaWriteMiddle, 103, &[4; LEN]),
            ack,
            whole(BthOpcode::RcRdmaWriteLast, 104, &[5; LEN]),
        ];
        assert_eq!(sealed(&out), want);
        assert_eq!(lost.load(Ordering::Relaxed), 0);

        // Again over the buffers the port hands back, which hold the
        // last frames' bytes: the same frames.
        let mut spent: Vec<Vec<u8>> = out.drain(..).map(|f| f.bytes).collect();
        filler.keep(&mut spent, 2);
        assert_eq!(spent.len(), 4, "two kept, the NIC's four left to it");
        let mut again = vec![left(
            BthOpcode::RcRdmaWriteMiddle,
            101,
            at.checked_add(LEN as u64).unwrap(),
            3,
        )];
        assert_eq!(filler.fill(&mut again), 2);
        assert_eq!(sealed(&again), want[1..4].to_vec());
    }

    #[test]
    fn a_run_from_its_first_to_its_last_is_filled_into_the_packets_a_reading_nic_sends() {
        let (mem, at) = payloads(5);
        let lost = Arc::new(AtomicU64::new(0));
        let mut filler = Filler::new(mem.clone(), lost.clone());
        let (run, want) = first_to_last(at);
        let mut out = vec![run];
        assert_eq!(filler.fill(&mut out), 4, "five packets for one frame");
        assert_eq!(sealed(&out), want);
        assert_eq!(lost.load(Ordering::Relaxed), 0);
    }

    /// Each frame's packets, whole: a run of datagrams
    /// ([`Frame::segment`]) cut into the packets it carries.
    fn packets_of(frames: &[Frame]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for f in frames {
            if f.segment > 0 {
                crate::datagrams::each_packet(f, |h, d| out.push([&h[..], d].concat()));
            } else {
                out.push(f.bytes.clone());
            }
        }
        out
    }

    /// A filler that makes runs of datagrams fills the same packets, byte
    /// for byte once sealed, as one that makes a frame of each: a run's
    /// first packet alone, the rest in one buffer, a shorter LAST with its
    /// own lengths; a run of two stays packet by packet; and again over
    /// the buffers the port hands back.
    #[test]
    fn runs_of_datagrams_carry_the_packets_a_reading_nic_sends() {
        let (mem, at) = payloads(5);
        let lost = Arc::new(AtomicU64::new(0));
        let mut filler = Filler::new(mem.clone(), lost.clone());
        filler.runs_whole();
        let frames = || {
            let two = left(
                BthOpcode::RcRdmaWriteMiddle,
                200,
                at.checked_add(LEN as u64).unwrap(),
                2,
            );
            vec![first_to_last(at).0, two]
        };
        let mut want = first_to_last(at).1;
        want.push(whole(BthOpcode::RcRdmaWriteMiddle, 200, &[2; LEN]));
        want.push(whole(BthOpcode::RcRdmaWriteMiddle, 201, &[3; LEN]));
        for round in 0..2 {
            let mut out = frames();
            let more = filler.fill(&mut out);
            assert_eq!(
                out.iter().map(|f| (f.train, f.segment)).collect::<Vec<_>>(),
                [(1, 0), (4, 12 + LEN as u32 + 4), (1, 0), (1, 0)],
                "round {round}: the FIRST, one run of four, the run of two as packets"
            );
            assert_eq!(out.iter().map(Frame::packets).sum::<u32>(), 7);
            assert_eq!(out[1].packet_ranges().count(), 0, "no whole packet in it");
            crate::engine::seal_frames(&mut out);
            assert_eq!(packets_of(&out), want, "round {round}");
            assert_eq!(lost.load(Ordering::Relaxed), 0);
            let mut spent: Vec<Vec<u8>> = out.drain(..).map(|f| f.bytes).collect();
            filler.keep(&mut spent, more);
        }
    }

    #[test]
    fn a_packet_whose_payload_is_gone_is_lost_alone_and_counted() {
        let (mem, at) = payloads(3);
        let lost = Arc::new(AtomicU64::new(0));
        let mut filler = Filler::new(mem.clone(), lost.clone());
        // A run whose last packet's payload lies past the allocation, and
        // a packet whose memory was freed.
        let (other, gone) = payloads(1);
        let mut whole_filler = Filler::new(other.clone(), Arc::new(AtomicU64::new(0)));
        let mut freed = vec![left(BthOpcode::RcSendOnly, 9, gone, 1)];
        other.free(gone).unwrap();
        assert_eq!(whole_filler.fill(&mut freed), 0);
        assert!(freed.is_empty(), "nothing to send");

        let mut out = vec![left(
            BthOpcode::RcRdmaWriteMiddle,
            50,
            at.checked_add(LEN as u64).unwrap(),
            3,
        )];
        assert_eq!(filler.fill(&mut out), 1, "two of the three packets");
        assert_eq!(
            sealed(&out),
            vec![
                whole(BthOpcode::RcRdmaWriteMiddle, 50, &[2; LEN]),
                whole(BthOpcode::RcRdmaWriteMiddle, 51, &[3; LEN]),
            ]
        );
        assert_eq!(lost.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_run_whose_frame_is_no_roce_frame_is_lost_whole() {
        let (mem, at) = payloads(2);
        let lost = Arc::new(AtomicU64::new(0));
        let mut filler = Filler::new(mem, lost.clone());
        let mut f = left(BthOpcode::RcRdmaWriteMiddle, 1, at, 2);
        f.bytes.truncate(10);
        let mut out = vec![f];
        assert_eq!(filler.fill(&mut out), 0);
        assert!(out.is_empty());
        assert_eq!(lost.load(Ordering::Relaxed), 2);
    }
}
