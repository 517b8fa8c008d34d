//! Re-registration (`ibv_rereg_mr`) and the CQ clean that a QP reset does.

use doorbell_verbs::{Access, MrChange, QpAttrs, QpState, SendFlags, WcStatus};

use crate::{FULL, poll_all, rig, write_wr};

#[test]
fn rereg_keeps_the_keys_and_the_device_enforces_the_new_access() {
    let mut r = rig();
    let (lkey, rkey) = (r.mr.lkey(), r.mr.rkey());
    r.mr.rereg(MrChange {
        access: Some(Access(Access::LOCAL_WRITE)),
        ..MrChange::default()
    })
    .unwrap();
    assert_eq!((r.mr.lkey(), r.mr.rkey()), (lkey, rkey));
    assert_eq!(r.mr.access(), Access(Access::LOCAL_WRITE));
    // The peer still holds the old rkey, which no longer allows writes.
    let sge = [r.mr.sge(0, 8).unwrap()];
    r.a.post_send(&[write_wr(&r, &sge, SendFlags::SIGNALED)])
        .unwrap();
    let wc = poll_all(&r.cq);
    assert_eq!(wc[0].status, WcStatus::RemAccessErr, "{wc:?}");
}

#[test]
fn a_region_over_the_callers_memory_moves_and_keeps_its_key() {
    let r = rig();
    let pd = r.mr.pd().clone();
    let mut m = pd.reg_mr_at(r.mr.addr(), 4096, Access(FULL)).unwrap();
    let key = m.lkey();
    m.rereg(MrChange {
        range: Some((r.mr.addr() + 4096, 2048)),
        ..MrChange::default()
    })
    .unwrap();
    assert_eq!(
        (m.lkey(), m.addr(), m.len()),
        (key, r.mr.addr() + 4096, 2048)
    );
    m.write(0, b"moved").unwrap();
    let mut got = [0u8; 5];
    r.mr.read(4096, &mut got).unwrap();
    assert_eq!(&got, b"moved");
    // A range the host never handed out is refused; the region stays.
    let e = m
        .rereg(MrChange {
            range: Some((r.mr.addr() + (1 << 30), 4096)),
            ..MrChange::default()
        })
        .unwrap_err();
    assert_eq!(e.errno(), libc::EFAULT);
    assert_eq!((m.lkey(), m.addr()), (key, r.mr.addr() + 4096));
    m.write(0, b"still").unwrap();
}

#[test]
fn what_cannot_be_reregistered_is_refused_unchanged() {
    let mut r = rig();
    // A region that owns its buffer cannot move.
    let e =
        r.mr.rereg(MrChange {
            range: Some((r.mr.addr(), 16)),
            ..MrChange::default()
        })
        .unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    // Remote write needs local write, as at registration.
    let e =
        r.mr.rereg(MrChange {
            access: Some(Access(Access::REMOTE_WRITE)),
            ..MrChange::default()
        })
        .unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    assert_eq!(r.mr.access(), Access(FULL));
    // A PD of another context.
    let other = doorbell_verbs::Context::open(r.link.clone()).unwrap();
    let e =
        r.mr.rereg(MrChange {
            pd: Some(other.alloc_pd().unwrap()),
            ..MrChange::default()
        })
        .unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    // While a clone shares it.
    let clone = r.mr.clone();
    let e = r.mr.rereg(MrChange::default()).unwrap_err();
    assert_eq!(e.errno(), libc::EBUSY);
    drop(clone);
    r.mr.rereg(MrChange::default()).unwrap();
}

#[test]
fn resetting_a_qp_removes_its_completions_and_keeps_the_others_in_order() {
    let r = rig();
    let sge = [r.mr.sge(0, 8).unwrap()];
    let mut wr = write_wr(&r, &sge, SendFlags::SIGNALED);
    for (qp, id) in [(&r.a, 1), (&r.b, 2), (&r.a, 3), (&r.b, 4)] {
        wr.wr_id = id;
        qp.post_send(&[wr]).unwrap();
    }
    r.a.modify(QpState::Reset, &QpAttrs::default()).unwrap();
    let ids: Vec<u64> = poll_all(&r.cq).iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [2, 4]);
    assert!(poll_all(&r.cq).is_empty());
}
