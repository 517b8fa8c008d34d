//! RC over a faulty simulated wire, byte for byte: the world driven by
//! hand (no workload, no CPU costs that matter), so that the memory of
//! both hosts can be checked after a run with loss, duplicates, reordering
//! and corruption on both directions.

use std::sync::Arc;

use doorbell_hif::DeviceLink;
use doorbell_types::{Instant, Psn};
use doorbell_verbs::{
    Access, Context, Cq, Mr, Qp, QpCaps, QpInitAttr, QpType, RcEndpoint, RecvWr, RemoteAddr,
    SendFlags, SendWr, Wc, WcStatus, WrOpcode,
};

use crate::profile::{Profile, WireFaults};
use crate::world::{LogLine, World, lock};

const MR_LEN: usize = 1 << 18;
const WRITES: u64 = 16;
const SENDS: u64 = 8;
const READS: u64 = 8;
const LEN: u32 = 4096;

struct End {
    _ctx: Context,
    cq: Cq,
    qp: Qp,
    mr: Mr,
}

fn end(link: Arc<dyn DeviceLink>) -> End {
    let ctx = Context::open(link).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            cap: QpCaps {
                max_send_wr: 64,
                max_recv_wr: 64,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
            srq: None,
        })
        .unwrap();
    let access = Access(
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
    );
    let mr = pd.reg_mr(MR_LEN, access).unwrap();
    End {
        _ctx: ctx,
        cq,
        qp,
        mr,
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

fn poll(cq: &Cq, out: &mut Vec<Wc>) {
    let mut buf = [Wc::default(); 32];
    loop {
        let n = cq.poll(&mut buf).unwrap();
        if n == 0 {
            return;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// What a run left behind.
#[derive(Debug, PartialEq)]
struct Outcome {
    log: Vec<LogLine>,
    end: Instant,
    a: Vec<(u64, WcStatus)>,
    b: Vec<(u64, WcStatus)>,
    mem_a: Vec<u8>,
    mem_b: Vec<u8>,
}

/// WRITEs, SENDs and READs from A to B over a wire with `faults`, run to
/// completion.
fn run(faults: Option<WireFaults>) -> (Outcome, World) {
    let mut p = Profile::builtin("connectib-haswell").unwrap().unwrap();
    p.network.faults = faults;
    let mut world = World::new(&p, [1, 1], 0);
    world.log = Some(Vec::new());
    let a = end(world.links[0].clone());
    let b = end(world.links[1].clone());
    let ea = RcEndpoint {
        gid: a._ctx.gid(),
        qpn: a.qp.qpn(),
        psn: Psn::new(0x00ff_ff80),
    };
    let eb = RcEndpoint {
        gid: b._ctx.gid(),
        qpn: b.qp.qpn(),
        psn: Psn::new(0x77),
    };
    a.qp.connect_rc(&ea, &eb, 1024).unwrap();
    b.qp.connect_rc(&eb, &ea, 1024).unwrap();
    // A's source data; B's READ source, at the top of its MR.
    let len = LEN as usize;
    let top = MR_LEN as u64 / 2;
    for i in 0..WRITES + SENDS {
        a.mr.write(i * LEN as u64, &pattern(len, i as u8)).unwrap();
    }
    for i in 0..READS {
        b.mr.write(top + i * LEN as u64, &pattern(len, 0x80 | i as u8))
            .unwrap();
    }
    for i in 0..SENDS {
        let sge = [b.mr.sge((WRITES + i) * LEN as u64, LEN).unwrap()];
        b.qp.post_recv(&[RecvWr {
            wr_id: 100 + i,
            sg_list: &sge,
        }])
        .unwrap();
    }
    world.drain();
    while world.step().is_some() {}
    lock(&world.cpu).t[0] = world.clock.now();
    for i in 0..WRITES + SENDS + READS {
        let (sge, opcode) = if i < WRITES {
            let remote = RemoteAddr {
                addr: b.mr.addr() + i * LEN as u64,
                rkey: b.mr.rkey(),
            };
            (a.mr.sge(i * LEN as u64, LEN), WrOpcode::RdmaWrite(remote))
        } else if i < WRITES + SENDS {
            (a.mr.sge(i * LEN as u64, LEN), WrOpcode::Send)
        } else {
            let k = i - WRITES - SENDS;
            let remote = RemoteAddr {
                addr: b.mr.addr() + top + k * LEN as u64,
                rkey: b.mr.rkey(),
            };
            (
                a.mr.sge(top + k * LEN as u64, LEN),
                WrOpcode::RdmaRead(remote),
            )
        };
        let sge = [sge.unwrap()];
        a.qp.post_send(&[SendWr {
            wr_id: i,
            sg_list: &sge,
            opcode,
            flags: SendFlags::SIGNALED,
            ud: None,
        }])
        .unwrap();
    }
    world.drain();
    let (mut wa, mut wb) = (Vec::new(), Vec::new());
    let total = (WRITES + SENDS + READS) as usize;
    while wa.len() < total || wb.len() < SENDS as usize {
        assert!(world.step().is_some(), "stalled: {} of {total}", wa.len());
        assert!(world.events < 1_000_000, "runaway");
        poll(&a.cq, &mut wa);
        poll(&b.cq, &mut wb);
    }
    let out = Outcome {
        log: world.log.take().unwrap_or_default(),
        end: world.clock.now(),
        a: wa.iter().map(|w| (w.wr_id, w.status)).collect(),
        b: wb.iter().map(|w| (w.wr_id, w.status)).collect(),
        mem_a: a.mr.to_vec().unwrap(),
        mem_b: b.mr.to_vec().unwrap(),
    };
    (out, world)
}

fn faults(seed: u64) -> WireFaults {
    let mut f = WireFaults::new(seed);
    f.loss = 0.05;
    f.duplicate = 0.02;
    f.reorder = 0.02;
    f.corrupt = 0.02;
    f.max_delay_ns = 20_000.0;
    f
}

#[test]
fn five_percent_loss_and_more_still_gets_every_byte_right() {
    let (clean, _) = run(None);
    let (lossy, world) = run(Some(faults(21)));
    let ids: Vec<(u64, WcStatus)> = (0..WRITES + SENDS + READS)
        .map(|i| (i, WcStatus::Success))
        .collect();
    assert_eq!(lossy.a, ids, "every WR of A, in order, successful");
    assert_eq!(
        lossy.b,
        (0..SENDS)
            .map(|i| (100 + i, WcStatus::Success))
            .collect::<Vec<_>>()
    );
    // Every byte where it belongs: both hosts' memory as in the clean run.
    assert!(lossy.mem_a == clean.mem_a, "A's memory differs");
    assert!(lossy.mem_b == clean.mem_b, "B's memory differs");
    let top = MR_LEN / 2;
    let len = LEN as usize;
    for i in 0..(WRITES + SENDS) as usize {
        assert!(lossy.mem_b[i * len..(i + 1) * len] == pattern(len, i as u8));
    }
    for i in 0..READS as usize {
        let at = top + i * len;
        assert!(lossy.mem_a[at..at + len] == pattern(len, 0x80 | i as u8));
    }
    // The faults happened, both ways, and cost time.
    for d in 0..2 {
        let s = world.fault_stats(d).unwrap();
        assert!(
            s.dropped > 0 && s.frames > s.dropped,
            "direction {d}: {s:?}"
        );
    }
    let s = world.fault_stats(0).unwrap();
    assert!(s.duplicated + s.delayed + s.corrupted > 0, "{s:?}");
    assert!(lossy.end > clean.end);
}

#[test]
fn the_same_seed_and_faults_replay_bit_for_bit() {
    let (a, _) = run(Some(faults(4)));
    let (b, _) = run(Some(faults(4)));
    assert_eq!(a, b);
    let (c, _) = run(Some(faults(5)));
    assert_ne!(a.log, c.log);
}
