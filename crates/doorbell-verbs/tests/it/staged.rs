//! A post builds its WQEs in a staging area and writes them into the send
//! ring a run at a time: postlists longer than the area, runs that wrap
//! the ring, and a WR that fails right after the area was written out.

use doorbell_types::Psn;
use doorbell_verbs::{Access, QpCaps, RemoteAddr, SendFlags, SendWr, WcStatus, WrOpcode};

use super::{FULL, poll_all, rc_pair};

/// Bytes each WRITE carries inline: with the control and remote-address
/// segments, a WQE of two WQEBBs.
const LEN: usize = 64;

/// 25 such WQEs fill the staging area past the point where it is written
/// out before the next WQE is built.
const PER_AREA: usize = 25;

struct Deep {
    _ctx: doorbell_verbs::Context,
    cq: doorbell_verbs::Cq,
    a: doorbell_verbs::Qp,
    _b: doorbell_verbs::Qp,
    mr: doorbell_verbs::Mr,
}

/// A QP whose send ring holds 64 inline WRITEs of [`LEN`] bytes.
fn deep() -> Deep {
    let link = std::sync::Arc::new(doorbell_rt::LoopbackLink::new("loop0", [10, 0, 0, 9]));
    let ctx = doorbell_verbs::Context::open(link).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let cap = QpCaps {
        max_send_wr: 64,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: LEN as u32,
    };
    let (a, b) = rc_pair(&ctx, &pd, &cq, cap, Psn::new(0));
    let mr = pd.reg_mr(1 << 16, Access(FULL)).unwrap();
    Deep {
        _ctx: ctx,
        cq,
        a,
        _b: b,
        mr,
    }
}

/// The source bytes of WRITE `n`.
fn source(n: usize) -> [u8; LEN] {
    std::array::from_fn(|i| (n * 7 + i) as u8 ^ 0x5a)
}

impl Deep {
    /// WRITE `n`: its source at `n * LEN`, its target in the second half.
    fn wr<'a>(&self, n: usize, sge: &'a [doorbell_verbs::Sge], signaled: bool) -> SendWr<'a> {
        SendWr {
            wr_id: n as u64,
            sg_list: sge,
            opcode: WrOpcode::RdmaWrite(RemoteAddr {
                addr: self.mr.addr() + (1 << 15) + (n * LEN) as u64,
                rkey: self.mr.rkey(),
            }),
            flags: if signaled {
                SendFlags::INLINE | SendFlags::SIGNALED
            } else {
                SendFlags::INLINE
            },
            ud: None,
        }
    }

    fn sges(&self, range: std::ops::Range<usize>) -> Vec<[doorbell_verbs::Sge; 1]> {
        range
            .map(|n| {
                self.mr.write((n * LEN) as u64, &source(n)).unwrap();
                [self.mr.sge((n * LEN) as u64, LEN as u32).unwrap()]
            })
            .collect()
    }

    fn target(&self, n: usize) -> [u8; LEN] {
        let mut got = [0u8; LEN];
        self.mr
            .read((1 << 15) + (n * LEN) as u64, &mut got)
            .unwrap();
        got
    }
}

#[test]
fn a_postlist_longer_than_the_staging_area_and_wrapping_the_ring_arrives_whole() {
    let d = deep();
    // Ten single WRITEs first, so that the long list wraps the ring's end.
    let sges = d.sges(0..70);
    for (n, sge) in sges[..10].iter().enumerate() {
        d.a.post_send(&[d.wr(n, sge, true)]).unwrap();
    }
    assert_eq!(poll_all(&d.cq).len(), 10);
    let list: Vec<SendWr<'_>> = (10..70)
        .map(|n| d.wr(n, &sges[n], n % 16 == 15 || n == 69))
        .collect();
    d.a.post_send(&list).unwrap();
    let wc = poll_all(&d.cq);
    assert!(wc.iter().all(|w| w.status == WcStatus::Success), "{wc:?}");
    assert_eq!(wc.last().map(|w| w.wr_id), Some(69));
    for n in 0..70 {
        assert_eq!(d.target(n), source(n), "WRITE {n}");
    }
}

#[test]
fn a_wr_failing_right_after_the_area_was_written_out_leaves_those_before_posted() {
    let d = deep();
    let sges = d.sges(0..PER_AREA + 1);
    let too_long = [d.mr.sge(0, d.a.caps().max_inline_data + 1).unwrap()];
    let mut list: Vec<SendWr<'_>> = (0..PER_AREA)
        .map(|n| d.wr(n, &sges[n], n == PER_AREA - 1))
        .collect();
    list.push(d.wr(PER_AREA, &too_long, true));
    list.push(d.wr(PER_AREA, &sges[PER_AREA], true));
    let e = d.a.post_send_list(&list).unwrap_err();
    assert_eq!(e.index, PER_AREA, "the WR with too much inline data");
    let wc = poll_all(&d.cq);
    assert_eq!(wc.len(), 1, "{wc:?}");
    assert_eq!(
        (wc[0].status, wc[0].wr_id),
        (WcStatus::Success, PER_AREA as u64 - 1)
    );
    for n in 0..PER_AREA {
        assert_eq!(d.target(n), source(n), "WRITE {n}");
    }
    assert_eq!(d.target(PER_AREA), [0; LEN], "nothing after the failing WR");
    // The queue goes on from where the post left it.
    d.a.post_send(&[d.wr(PER_AREA, &sges[PER_AREA], true)])
        .unwrap();
    assert_eq!(poll_all(&d.cq).len(), 1);
    assert_eq!(d.target(PER_AREA), source(PER_AREA));
}
