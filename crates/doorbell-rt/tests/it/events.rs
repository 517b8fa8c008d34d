//! Events the way mlx5 delivers them: an EQE written by DMA into the
//! kernel's event queue, an MSI-X interrupt, the handler's EQ doorbell, and
//! only then the event at the completion channel or the async queue.

use std::time::Duration;

use doorbell_hif::NicEvent;
use doorbell_pcie::{Crossing, DmaPurpose};
use doorbell_verbs::{RemoteAddr, SendFlags, SendWr, WrOpcode};

use crate::common::{Pair, pair, post, wait};

fn write_8(p: &Pair, flags: SendFlags) {
    let sge = p.a.mr.sge(0, 8).unwrap();
    post(
        &p.a.qp,
        SendWr {
            wr_id: 1,
            sg_list: &[sge],
            opcode: WrOpcode::RdmaWrite(RemoteAddr {
                addr: p.b.mr.addr(),
                rkey: p.b.mr.rkey(),
            }),
            flags,
            ud: None,
        },
    );
}

fn eq_traffic(p: &Pair) -> (u64, u64) {
    let c = p.a.nic.counters(None).0;
    (c.writes(DmaPurpose::Eqe), c.writes(DmaPurpose::Msix))
}

#[test]
fn an_armed_completion_is_a_cqe_then_an_eqe_then_an_interrupt_then_a_doorbell() {
    let p = pair();
    p.a.nic.record(true);
    p.a.cq.req_notify(false).unwrap();
    write_8(&p, SendFlags::SIGNALED);
    assert_eq!(
        p.a.ctx.get_cq_event(Duration::from_secs(10)),
        Some(p.a.cq.cqn())
    );
    p.a.cq.ack_event();
    assert_eq!(wait(&p.a.cq, 1).len(), 1);
    // The handler's re-arm is an MMIO write that reaches the device after
    // the event: wait for it to show in the log.
    let mut log = Vec::new();
    for _ in 0..1000 {
        log.extend(p.a.nic.record(true));
        if log
            .iter()
            .any(|c| matches!(c, Crossing::Mmio { bytes: 4, .. }))
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let at = |want: &dyn Fn(&Crossing) -> bool, what: &str| {
        log.iter()
            .position(want)
            .unwrap_or_else(|| panic!("no {what} in {log:?}"))
    };
    let is_write = |p: DmaPurpose, len: u32| move |c: &Crossing| matches!(c, Crossing::DmaWrite { tag, bytes, .. } if tag.purpose == p && *bytes == len);
    let cqe = at(&is_write(DmaPurpose::Cqe, 64), "CQE write");
    let eqe = at(&is_write(DmaPurpose::Eqe, 64), "EQE write");
    let msix = at(&is_write(DmaPurpose::Msix, 4), "MSI-X");
    let rearm = at(
        &|c| {
            matches!(
                c,
                Crossing::Mmio {
                    qpn: None,
                    bytes: 4,
                    ..
                }
            )
        },
        "EQ doorbell",
    );
    assert!(cqe < eqe && eqe < msix && msix < rearm, "order in {log:?}");
    let eqes = log
        .iter()
        .filter(|c| is_write(DmaPurpose::Eqe, 64)(c))
        .count();
    assert_eq!(eqes, 1, "one EQE for one armed completion");
}

#[test]
fn an_unarmed_cq_costs_no_eqe_and_no_interrupt() {
    let p = pair();
    let before = eq_traffic(&p);
    for _ in 0..5 {
        write_8(&p, SendFlags::SIGNALED);
        wait(&p.a.cq, 1);
    }
    assert_eq!(eq_traffic(&p), before);
    assert_eq!(p.a.ctx.get_cq_event(Duration::from_millis(50)), None);
}

#[test]
fn each_arming_costs_one_eqe_and_one_interrupt() {
    let p = pair();
    let before = eq_traffic(&p);
    for _ in 0..3 {
        p.a.cq.req_notify(false).unwrap();
        write_8(&p, SendFlags::SIGNALED);
        assert_eq!(
            p.a.ctx.get_cq_event(Duration::from_secs(10)),
            Some(p.a.cq.cqn())
        );
        p.a.cq.ack_event();
        wait(&p.a.cq, 1);
    }
    assert_eq!(eq_traffic(&p), (before.0 + 3, before.1 + 3));
}

#[test]
fn async_events_take_the_async_eq() {
    let p = pair();
    let before = eq_traffic(&p);
    p.a.ctx.set_port_up(false).unwrap();
    assert_eq!(
        p.a.ctx.get_async_event(Duration::from_secs(10)),
        Some(NicEvent::PortDown(1))
    );
    p.a.ctx.set_port_up(true).unwrap();
    assert_eq!(
        p.a.ctx.get_async_event(Duration::from_secs(10)),
        Some(NicEvent::PortUp(1))
    );
    let (eqes, irqs) = eq_traffic(&p);
    assert_eq!(eqes - before.0, 2);
    // The handler re-arms before it hands an event on, and the re-arm
    // reaches the device before the next command: one interrupt each.
    assert_eq!(irqs - before.1, 2);
}

/// A thread waiting for the device's events returns when woken, not only
/// at its timeout: the C library's dispatcher waits a second at a time and
/// is woken to stop, so an idle device does not cost a wake-up every few
/// milliseconds, and closing it does not wait out the timeout.
#[test]
fn a_wait_for_events_ends_when_woken() {
    let p = pair();
    let ctx = p.a.ctx.clone();
    let waiting = std::thread::spawn(move || {
        let start = std::time::Instant::now();
        let ev = ctx.next_event_or_wake(Duration::from_secs(30));
        (ev.is_none(), start.elapsed())
    });
    // Woken before or after the thread begins to wait: either way its wait
    // ends (a wake with no waiter is kept for the next).
    std::thread::sleep(Duration::from_millis(20));
    p.a.ctx.wake_event_waiter();
    let (none, took) = waiting.join().unwrap();
    assert!(none, "a wake is not an event");
    assert!(
        took < Duration::from_secs(20),
        "the wait ran to its timeout ({took:?})"
    );
}

/// A wake is for the waits that ask for one: a plain wait for events (the
/// Rust API's, a completion channel's) does not end early on it, and does
/// not take it from the waiter it was for.
#[test]
fn a_wake_ends_only_a_wait_that_asks_for_it() {
    let p = pair();
    p.a.ctx.wake_event_waiter();
    let start = std::time::Instant::now();
    assert!(p.a.ctx.next_event(Duration::from_millis(30)).is_none());
    assert!(
        start.elapsed() >= Duration::from_millis(30),
        "a plain wait ended early"
    );
    let start = std::time::Instant::now();
    assert!(
        p.a.ctx
            .next_event_or_wake(Duration::from_secs(30))
            .is_none()
    );
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "the wake kept for the next waiter was lost"
    );
}
