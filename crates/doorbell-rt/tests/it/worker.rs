//! The NIC's own thread: it sleeps while callers drive the NIC, and what
//! it is handed or leaves for a poll never waits for its timeout.

use std::time::Instant;

use doorbell_verbs::{RemoteAddr, SendFlags, SendWr, WrOpcode};

use crate::common::*;

/// WRITEs posted one at a time, each waited for, on a pair whose callers
/// do all the work: the ACK timer each WRITE arms, after the previous
/// WRITE's ACK stopped it, is 67 ms out and must not wake the worker.
/// Woken for each, the worker would wake about as often as WRITEs go
/// (and contend for the lock with the caller that is running the NIC).
#[test]
fn a_timer_armed_by_each_message_does_not_wake_the_worker() {
    const WRITES: u64 = 2_000;
    let p = pair();
    let start = Instant::now();
    let before = p.a.nic.worker_wakes();
    for i in 0..WRITES {
        p.a.qp
            .post_send(&[SendWr {
                wr_id: i,
                sg_list: &[p.a.mr.sge(0, 8).unwrap()],
                opcode: WrOpcode::RdmaWrite(RemoteAddr {
                    addr: p.b.mr.addr(),
                    rkey: p.b.mr.rkey(),
                }),
                flags: SendFlags::SIGNALED | SendFlags::INLINE,
                ud: None,
            }])
            .unwrap();
        wait(&p.a.cq, 1);
    }
    let wakes = p.a.nic.worker_wakes() - before;
    // A wake-up per tick of the busy worker (10 ms) and per expiry of the
    // ACK timer (67 ms), whatever the machine's speed, and a few more.
    let ms = start.elapsed().as_millis() as u64;
    let bound = ms / 10 + ms / 67 + 20;
    assert!(
        wakes <= bound,
        "the worker woke {wakes} times in {ms} ms for {WRITES} WRITEs (at most {bound})"
    );
}

/// Inputs that waited for a NIC's worker's timeout (`LiveNic::inbox_stalls`):
/// on a quiet machine none; a thread preempted between queueing an input
/// and running it may cause one or two.
const FEW_STALLS: u64 = 2;

/// 64 KiB transfers of `opcode`, `window` outstanding, `n` in all, each
/// polled for.
fn stream(p: &Pair, n: u64, window: u64, opcode: impl Fn(u64) -> WrOpcode) {
    const LEN: u32 = 64 << 10;
    let sge = [p.a.mr.sge(0, LEN).unwrap()];
    let (mut posted, mut done) = (0, 0);
    while done < n {
        while posted < n && posted - done < window {
            post(&p.a.qp, signaled(posted, &sge, opcode(posted)));
            posted += 1;
        }
        done += wait(&p.a.cq, 1).len() as u64;
    }
}

fn stalls(p: &Pair) -> (u64, u64) {
    (p.a.nic.inbox_stalls(), p.b.nic.inbox_stalls())
}

/// Between NICs of one process, a WRITE's payload is copied in by the
/// receiver's worker and its ACKs are left for the program's poll; a
/// READ's responses go to the requester's worker. None of the frames
/// waits for a worker's timeout: each has a thread on its way to it.
/// (A first version left the READ requests that a worker sent for a poll
/// of the responder's CQ that no program makes: they waited for the
/// responder's worker's 10 ms tick, and READs ran at a sixtieth of their
/// speed.)
#[test]
fn streams_between_nics_of_one_process_wait_for_no_timeout() {
    let p = pair();
    let (addr, rkey) = (p.b.mr.addr(), p.b.mr.rkey());
    let at = |i: u64| RemoteAddr {
        addr: addr + (i % 16) * (64 << 10),
        rkey,
    };
    stream(&p, 400, 16, |i| WrOpcode::RdmaWrite(at(i)));
    let (a, b) = stalls(&p);
    assert!(
        a <= FEW_STALLS && b <= FEW_STALLS,
        "WRITEs: A stalled {a} times, B {b}"
    );
    stream(&p, 400, 16, |i| WrOpcode::RdmaRead(at(i)));
    let (a, b) = stalls(&p);
    assert!(
        a <= FEW_STALLS && b <= FEW_STALLS,
        "READs: A stalled {a} times, B {b}"
    );
}

/// A program that polls until its WRITE's data has landed and then waits
/// for the completion event: the ACK the receiver's worker left for its
/// poll (it had just polled) is run by that worker when no poll comes,
/// not at the sender's next timer (the ACK timer, 67 ms out).
#[test]
fn an_ack_left_for_a_poll_that_does_not_come_is_run_by_the_worker() {
    const LEN: u64 = 64 << 10;
    let p = pair();
    let sge = [p.a.mr.sge(0, LEN as u32).unwrap()];
    let mut buf = [doorbell_verbs::Wc::default(); 4];
    let mut by_event = 0;
    for i in 0..20u8 {
        let mark = i + 1;
        p.a.mr.write(LEN - 1, &[mark]).unwrap();
        p.a.cq.req_notify(false).unwrap();
        post(
            &p.a.qp,
            signaled(
                u64::from(i),
                &sge,
                WrOpcode::RdmaWrite(RemoteAddr {
                    addr: p.b.mr.addr(),
                    rkey: p.b.mr.rkey(),
                }),
            ),
        );
        // Polls, as a program that looks before it sleeps, until the
        // WRITE's last byte is in: its ACK leaves B just after, for a CQ
        // polled a moment ago.
        let mut got = 0;
        let mut last = [0u8];
        while got == 0 {
            p.b.mr.read(LEN - 1, &mut last).unwrap();
            if last[0] == mark {
                break;
            }
            got = p.a.cq.poll(&mut buf).unwrap();
        }
        if got == 0 {
            assert_eq!(
                p.a.ctx.get_cq_event(std::time::Duration::from_secs(10)),
                Some(p.a.cq.cqn()),
                "WRITE {i}: no completion event"
            );
            p.a.cq.ack_event();
            got = wait(&p.a.cq, 1).len();
            by_event += 1;
        }
        assert_eq!(got, 1);
    }
    assert!(
        by_event >= 10,
        "only {by_event} WRITEs waited for the event"
    );
    let (a, b) = stalls(&p);
    assert!(
        a <= FEW_STALLS && b <= FEW_STALLS,
        "A stalled {a} times, B {b}"
    );
}

/// The 64 KiB WRITE stream of [`streams_between_nics_of_one_process_wait_for_no_timeout`];
/// returns how many deliveries B's worker was handed.
fn hand_offs_in_a_write_stream() -> u64 {
    let p = pair();
    let (addr, rkey) = (p.b.mr.addr(), p.b.mr.rkey());
    let before = p.b.nic.worker_hand_offs();
    stream(&p, 200, 16, |i| {
        WrOpcode::RdmaWrite(RemoteAddr {
            addr: addr + (i % 16) * (64 << 10),
            rkey,
        })
    });
    p.b.nic.worker_hand_offs() - before
}

/// A stream's payloads go to the receiver's worker only where the process
/// has a second core for it. On one (`taskset -c 0`), the worker took turns
/// with the program's thread and spent its turns waiting 50 µs for more:
/// 64 KiB WRITEs in process ran at 1.9 GB/s against 21 taken in the
/// sending thread.
#[test]
fn on_one_cpu_a_stream_is_not_handed_to_the_receivers_worker() {
    let on_one = std::thread::spawn(|| {
        keep_to_one_cpu();
        hand_offs_in_a_write_stream()
    })
    .join()
    .unwrap();
    assert_eq!(on_one, 0, "deliveries handed to B's worker on one CPU");
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let on_all = hand_offs_in_a_write_stream();
    if cpus > 1 {
        assert!(on_all > 0, "on {cpus} CPUs, no delivery went to B's worker");
    } else {
        assert_eq!(on_all, 0, "on one CPU, deliveries went to B's worker");
    }
}

/// Empty polls each run of [`on_one_cpu_every_empty_poll_gives_the_cpu_away`] makes.
const EMPTY_POLLS: u64 = 256;

/// Where the polling thread may run on one CPU only, every poll of an
/// empty CQ gives up the CPU (decision record 0057): what the poll waits
/// for (the NIC's threads, a peer process) runs only then. Under `taskset
/// -c 0`, a yield every 64 empty polls, as on two cores, held each hop of
/// a ping-pong between two processes for 64 of the polls' waits in the
/// rings: `doorbell pingpong -s 8` took 690 µs a round trip, against 37–41
/// µs with a yield at each.
#[test]
fn on_one_cpu_every_empty_poll_gives_the_cpu_away() {
    let on_one = std::thread::spawn(|| {
        keep_to_one_cpu();
        yields_in_empty_polls()
    })
    .join()
    .unwrap();
    assert_eq!(
        on_one, EMPTY_POLLS,
        "yields in {EMPTY_POLLS} empty polls on one CPU"
    );
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let on_all = yields_in_empty_polls();
    let expect = if cpus > 1 {
        EMPTY_POLLS / 64
    } else {
        EMPTY_POLLS
    };
    assert_eq!(
        on_all, expect,
        "yields in {EMPTY_POLLS} empty polls on {cpus} CPUs"
    );
}

/// Polls A's empty CQ [`EMPTY_POLLS`] times, in a pair made by the
/// calling thread; returns how many of the polls gave up the CPU.
fn yields_in_empty_polls() -> u64 {
    let p = pair();
    let mut wc = [doorbell_verbs::Wc::default(); 4];
    for _ in 0..EMPTY_POLLS {
        assert_eq!(p.a.cq.poll(&mut wc).unwrap(), 0, "the CQ is empty");
    }
    p.a.cq.polls_that_yielded()
}

/// A READ of 8 MiB (8 192 responses at MTU 1024) is built and sent over
/// several turns: each flush stops after 1 024 packets and leaves the rest
/// to a later turn, other inputs taken in between, rather than one turn
/// (and, between NICs of one process, the program's post that started it)
/// sending all of it. Its data all arrives, and nothing waits for a
/// worker's timeout on the way.
#[test]
fn a_long_read_is_sent_over_several_turns() {
    const LEN: u32 = 8 << 20;
    let p = pair_with(
        doorbell_verbs::ProviderConfig::default(),
        default_caps(),
        LEN as usize,
        256,
        1024,
    );
    let data = pattern(LEN as usize, 21);
    p.b.mr.write(0, &data).unwrap();
    let before = p.b.nic.flushes_cut();
    let into = [p.a.mr.sge(0, LEN).unwrap()];
    post(
        &p.a.qp,
        signaled(
            1,
            &into,
            WrOpcode::RdmaRead(RemoteAddr {
                addr: p.b.mr.addr(),
                rkey: p.b.mr.rkey(),
            }),
        ),
    );
    assert!(wait(&p.a.cq, 1)[0].is_ok());
    let mut got = vec![0u8; LEN as usize];
    p.a.mr.read(0, &mut got).unwrap();
    assert!(got == data, "the READ brought B's bytes");
    let cut = p.b.nic.flushes_cut() - before;
    assert!(
        (7..=8).contains(&cut),
        "8 192 responses in flushes of 1 024: {cut} cut"
    );
    let (a, b) = stalls(&p);
    assert!(
        a <= FEW_STALLS && b <= FEW_STALLS,
        "A stalled {a} times, B {b}"
    );
}

/// ACKs that come while their NIC is busy wait in its inbox, here for
/// longer than their ACK timeout and more of them than one turn takes
/// (and than a turn's mid-way flush, after 64 packets, lets by):
/// the NIC takes them all before it looks at its timers, so none of their
/// requests is taken for lost. (Before, a turn that left messages queued
/// fired the timers due: a debug build's NIC that took four thousand QPs'
/// ACKs more slowly than their timeout sent each request again, its peer
/// answered each duplicate, and the backlog grew until requests ran out of
/// retries, on a fabric that loses nothing.)
#[test]
fn acks_queued_past_their_timeout_are_taken_before_the_timers() {
    use std::sync::mpsc;
    use std::time::Duration;

    use doorbell_types::Psn;
    use doorbell_verbs::{QpInitAttr, QpType, RcEndpoint, WcStatus};

    use crate::net::{Timers, caps, connect_qp, fabric_pair};

    // More ACKs than a turn takes (`BUDGET`, 256).
    const QPS: usize = 600;
    // 4.096 µs × 2^16, about 270 ms (the 600 posts, all sent before A is
    // held, must fit in it); no retry: a timeout fails its WRITE.
    let t = Timers {
        timeout: 16,
        retry_cnt: 0,
        ..Timers::default()
    };
    let opts = || doorbell_rt::NicOptions::default();
    let p = fabric_pair([opts(), opts()], caps(1), QPS * 8, t);
    let attr = |s: &Side| QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: s.cq.clone(),
        recv_cq: s.cq.clone(),
        cap: caps(1),
        sq_sig_all: false,
        srq: None,
    };
    let end = |s: &Side, qp: &doorbell_verbs::Qp| RcEndpoint {
        gid: s.ctx.gid(),
        qpn: qp.qpn(),
        psn: Psn::new(0x100),
    };
    let qps: Vec<_> = (0..QPS)
        .map(|_| {
            let qa = p.a.pd.create_qp(&attr(&p.a)).unwrap();
            let qb = p.b.pd.create_qp(&attr(&p.b)).unwrap();
            let (ea, eb) = (end(&p.a, &qa), end(&p.b, &qb));
            connect_qp(&qa, &ea, &eb, t);
            connect_qp(&qb, &eb, &ea, t);
            (qa, qb)
        })
        .collect();
    // B is held by another thread while A sends every WRITE: they wait in
    // B's inbox.
    let (release, released) = mpsc::channel::<()>();
    let (held_tx, held) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        let b = &p.b.nic;
        s.spawn(move || {
            b.with_turns_held(|| {
                held_tx.send(()).unwrap();
                released.recv().unwrap();
            });
        });
        held.recv().unwrap();
        for (i, (qa, _)) in qps.iter().enumerate() {
            qa.post_send(&[SendWr {
                wr_id: i as u64,
                sg_list: &[p.a.mr.sge((i * 8) as u64, 8).unwrap()],
                opcode: WrOpcode::RdmaWrite(RemoteAddr {
                    addr: p.b.mr.addr() + (i * 8) as u64,
                    rkey: p.b.mr.rkey(),
                }),
                flags: SendFlags::SIGNALED | SendFlags::INLINE,
                ud: None,
            }])
            .unwrap();
        }
        // Now A is held: B, let go, takes the WRITEs in the other thread,
        // and its ACKs wait in A's inbox until every timer is past due.
        p.a.nic.with_turns_held(|| {
            release.send(()).unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            while p.b.nic.counters(None).1.tx_packets < QPS as u64 {
                assert!(Instant::now() < deadline, "B never ACKed them all");
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(400));
        });
    });
    let wcs = wait(&p.a.cq, QPS);
    let failed: Vec<_> = wcs
        .iter()
        .filter(|w| w.status != WcStatus::Success)
        .map(|w| (w.wr_id, w.status))
        .collect();
    assert!(
        failed.is_empty(),
        "{} WRITEs failed, the first {:?}",
        failed.len(),
        failed.first()
    );
    let a = p.a.nic.counters(None).1;
    assert_eq!(
        (a.local_ack_timeout_err, a.tx_retransmits),
        (0, 0),
        "no request taken for lost"
    );
}
