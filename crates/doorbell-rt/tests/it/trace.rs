//! `NicOptions::trace`: a live NIC's timeline, stamped with the wall clock.

use doorbell_rt::NicOptions;
use serde_json::Value;

use crate::common::*;
use crate::net::*;

/// The events of `nic`'s timeline that are not names, in file order.
fn events(side: &Side) -> Vec<Value> {
    let t = side.nic.take_trace().expect("the NIC records a timeline");
    let v: Value = serde_json::from_slice(&t.to_json()).unwrap();
    v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] != "M")
        .cloned()
        .collect()
}

fn position(ev: &[Value], tid: u64, prefix: &str) -> usize {
    ev.iter()
        .position(|e| e["tid"] == tid && e["name"].as_str().unwrap().starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix} on track {tid}: {ev:#?}"))
}

#[test]
fn a_send_crosses_the_timeline_in_order() {
    let traced = || NicOptions {
        trace: true,
        ..NicOptions::default()
    };
    let p = fabric_pair(
        [traced(), traced()],
        default_caps(),
        4096,
        Timers::default(),
    );
    // Setup is in the timeline too; start from the SEND.
    let _ = (events(&p.a), events(&p.b));
    p.a.mr.write(0, &pattern(256, 3)).unwrap();
    post_recv(&p.b.qp, 1, &[p.b.mr.sge(0, 256).unwrap()]);
    post(
        &p.a.qp,
        signaled(
            1,
            &[p.a.mr.sge(0, 256).unwrap()],
            doorbell_verbs::WrOpcode::Send,
        ),
    );
    assert!(wait(&p.a.cq, 1)[0].is_ok());
    assert_eq!(wait(&p.b.cq, 1)[0].byte_len, 256);
    let _ = settled(&p);
    let (a, b) = (events(&p.a), events(&p.b));
    // A: the doorbell reaches the NIC, which reads the payload and sends
    // the SEND; the ACK comes back and the CQE is written.
    let qpn = format!("{:#x}", p.a.qp.qpn().get());
    let db = position(&a, 2, "");
    assert_eq!(a[db]["args"]["qpn"], qpn.as_str());
    let read = position(&a, 3, "Payload read 256 B");
    let sent = position(&a, 4, "RcSendOnly");
    let ack = position(&a, 5, "RcAck");
    let cqe = position(&a, 3, "Cqe write");
    assert!(
        db <= read && read < sent && sent < ack && ack < cqe,
        "{a:#?}"
    );
    // B: the SEND comes in, its receive WQE is read, the data and the CQE
    // written, the ACK sent.
    let got = position(&b, 5, "RcSendOnly");
    let wqe = position(&b, 3, "RecvWqe read");
    let data = position(&b, 3, "Scatter write 256 B");
    let rcqe = position(&b, 3, "Cqe write");
    let acked = position(&b, 4, "RcAck");
    assert!(got < wqe && wqe < data && data < rcqe, "{b:#?}");
    assert!(got < acked);
    // The device's work is slices, the crossings instants, all in time
    // order.
    for ev in [&a, &b] {
        assert!(ev.iter().any(|e| e["ph"] == "X" && e["tid"] == 1));
        let ts: Vec<f64> = ev.iter().map(|e| e["ts"].as_f64().unwrap()).collect();
        assert!(ts.windows(2).all(|w| w[0] <= w[1]));
    }
    // Taken: the next take starts empty.
    assert!(events(&p.a).is_empty());
}

#[test]
fn no_timeline_unless_asked() {
    let p = fabric_pair(
        [exact(NicOptions::default()), exact(NicOptions::default())],
        default_caps(),
        4096,
        Timers::default(),
    );
    assert!(p.a.nic.take_trace().is_none());
}

/// Two NICs on the fabric, B recording a timeline (its events so far
/// taken) and A none, so that A hands on runs and trains.
fn traced_receiver(mr_len: usize) -> Pair {
    let traced = NicOptions {
        trace: true,
        ..NicOptions::default()
    };
    let p = fabric_pair(
        [NicOptions::default(), traced],
        default_caps(),
        mr_len,
        Timers::default(),
    );
    let _ = events(&p.b);
    p
}

#[test]
fn a_traced_nic_shows_each_packet_of_a_run_it_takes() {
    let p = traced_receiver(8192);
    // Six packets at MTU 1024: A, which records no timeline, hands the
    // WRITE on as one run, from its FIRST to its LAST.
    let data = pattern(6000, 5);
    p.a.mr.write(0, &data).unwrap();
    let write = doorbell_verbs::WrOpcode::RdmaWrite(doorbell_verbs::RemoteAddr {
        addr: p.b.mr.addr(),
        rkey: p.b.mr.rkey(),
    });
    post(&p.a.qp, signaled(1, &[p.a.mr.sge(0, 6000).unwrap()], write));
    assert!(wait(&p.a.cq, 1)[0].is_ok());
    let _ = settled(&p);
    let b = events(&p.b);
    let writes: Vec<(String, u64)> = b
        .iter()
        .filter(|e| e["tid"] == 5)
        .filter_map(|e| {
            let op = e["name"].as_str()?.split(' ').next()?;
            let psn = e["args"]["psn"].as_u64()?;
            op.starts_with("RcRdmaWrite").then(|| (op.to_string(), psn))
        })
        .collect();
    let names: Vec<&str> = writes.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "RcRdmaWriteFirst",
            "RcRdmaWriteMiddle",
            "RcRdmaWriteMiddle",
            "RcRdmaWriteMiddle",
            "RcRdmaWriteMiddle",
            "RcRdmaWriteLast"
        ],
        "{b:#?}"
    );
    let first = writes[0].1;
    for (k, (_, psn)) in writes.iter().enumerate() {
        assert_eq!(*psn, (first + k as u64) & 0xff_ffff, "packet {k}");
    }
    let mut got = vec![0u8; 6000];
    p.b.mr.read(0, &mut got).unwrap();
    assert_eq!(got, data);
}

#[test]
fn a_traced_nic_shows_each_packet_of_a_train_it_takes() {
    let p = traced_receiver(4096);
    // Six inline WRITEs posted as one list: A, which records no timeline,
    // hands them on as one train.
    p.a.mr.write(0, &pattern(48, 3)).unwrap();
    let sges: Vec<[doorbell_verbs::Sge; 1]> =
        (0..6).map(|i| [p.a.mr.sge(8 * i, 8).unwrap()]).collect();
    let wrs: Vec<doorbell_verbs::SendWr<'_>> = (0..6u64)
        .map(|i| doorbell_verbs::SendWr {
            flags: doorbell_verbs::SendFlags::INLINE
                | if i == 5 {
                    doorbell_verbs::SendFlags::SIGNALED
                } else {
                    doorbell_verbs::SendFlags::default()
                },
            ..signaled(
                i,
                &sges[i as usize],
                doorbell_verbs::WrOpcode::RdmaWrite(doorbell_verbs::RemoteAddr {
                    addr: p.b.mr.addr() + 8 * i,
                    rkey: p.b.mr.rkey(),
                }),
            )
        })
        .collect();
    p.a.qp.post_send(&wrs).unwrap();
    assert!(wait(&p.a.cq, 1)[0].is_ok());
    let _ = settled(&p);
    let b = events(&p.b);
    let writes: Vec<u64> = b
        .iter()
        .filter(|e| e["tid"] == 5)
        .filter(|e| {
            e["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("RcRdmaWriteOnly"))
        })
        .filter_map(|e| e["args"]["psn"].as_u64())
        .collect();
    assert_eq!(writes.len(), 6, "{b:#?}");
    for (k, psn) in writes.iter().enumerate() {
        assert_eq!(*psn, (writes[0] + k as u64) & 0xff_ffff, "packet {k}");
    }
    let mut got = vec![0u8; 48];
    p.b.mr.read(0, &mut got).unwrap();
    assert_eq!(got, pattern(48, 3));
}
