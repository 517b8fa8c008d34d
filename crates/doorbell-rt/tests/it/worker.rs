//! The NIC's own thread sleeps while callers drive the NIC.

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
