//! The rules of MODIFY_QP: which transitions exist for each service type,
//! which attributes each requires and allows, and the range of each value
//! (IBTA Vol 1 §11.2.5; Linux `ib_modify_qp_is_ok`).
//!
//! UC takes RC's attributes minus those of RC's reliability and of READ
//! and atomics: no `max_dest_rd_atomic` or `min_rnr_timer` at RTR, no
//! `timeout`, `retry_cnt`, `rnr_retry` or `max_rd_atomic` at RTS.
//!
//! They live in the host interface, not in the device, because both sides
//! apply them: the device refuses a bad MODIFY_QP, and host software (the C
//! library) answers EINVAL before a command is ever sent.

use doorbell_types::Qpn;

use crate::error::{CmdError, Param};
use crate::qp::{QpAttr, QpAttrs, QpState, QpType, Transition};

/// What a transition requires and allows.
struct Rule {
    transition: Transition,
    required: &'static [QpAttr],
    optional: &'static [QpAttr],
}

fn rule(from: QpState, to: QpState, ty: QpType) -> Option<Rule> {
    use QpAttr::*;
    use QpState::*;
    let r = |transition, required, optional| {
        Some(Rule {
            transition,
            required,
            optional,
        })
    };
    match (from, to, ty) {
        (_, Reset, _) => r(Transition::ToReset, &[], &[]),
        (_, Err, _) => r(Transition::ToErr, &[], &[]),
        (Reset, Init, QpType::Rc | QpType::Uc) => {
            r(Transition::RstToInit, &[PkeyIndex, Port, Access], &[])
        }
        (Reset, Init, QpType::Ud) => r(Transition::RstToInit, &[PkeyIndex, Port, Qkey], &[]),
        (Init, Init, QpType::Rc | QpType::Uc) => {
            r(Transition::InitToInit, &[], &[PkeyIndex, Port, Access])
        }
        (Init, Init, QpType::Ud) => r(Transition::InitToInit, &[], &[PkeyIndex, Port, Qkey]),
        (Init, Rtr, QpType::Rc) => r(
            Transition::InitToRtr,
            &[Av, PathMtu, DestQpn, RqPsn, MaxDestRdAtomic, MinRnrTimer],
            &[PkeyIndex, Access],
        ),
        (Init, Rtr, QpType::Uc) => r(
            Transition::InitToRtr,
            &[Av, PathMtu, DestQpn, RqPsn],
            &[PkeyIndex, Access],
        ),
        (Init, Rtr, QpType::Ud) => r(Transition::InitToRtr, &[], &[PkeyIndex, Qkey]),
        (Rtr, Rts, QpType::Rc) => r(
            Transition::RtrToRts,
            &[SqPsn, Timeout, RetryCnt, RnrRetry, MaxRdAtomic],
            &[CurState, Access, MinRnrTimer],
        ),
        (Rtr, Rts, QpType::Uc) => r(Transition::RtrToRts, &[SqPsn], &[CurState, Access]),
        (Rtr, Rts, QpType::Ud) => r(Transition::RtrToRts, &[SqPsn], &[CurState, Qkey]),
        (Rts, Rts, QpType::Rc) => r(Transition::RtsToRts, &[], &[CurState, Access, MinRnrTimer]),
        (Rts, Rts, QpType::Uc) => r(Transition::RtsToRts, &[], &[CurState, Access]),
        (Rts, Rts, QpType::Ud) => r(Transition::RtsToRts, &[], &[CurState, Qkey]),
        (Sqe, Rts, QpType::Uc) => r(Transition::SqerrToRts, &[], &[CurState, Access]),
        (Sqe, Rts, QpType::Ud) => r(Transition::SqerrToRts, &[], &[CurState, Qkey]),
        _ => None,
    }
}

/// Checks a MODIFY_QP of QP `qpn` of type `ty` from `from` to `to` with
/// attributes `a`: the transition must exist, every attribute it requires
/// must be present and no attribute it does not take, and every value must
/// be in range. Returns the transition.
pub fn check_modify(
    qpn: Qpn,
    ty: QpType,
    from: QpState,
    to: QpState,
    a: &QpAttrs,
) -> Result<Transition, CmdError> {
    let qpn = qpn.get();
    if let Some(cur) = a.cur_state
        && cur != from
    {
        return Err(CmdError::BadTransition { qpn, from, to });
    }
    let rule = rule(from, to, ty).ok_or(CmdError::BadTransition { qpn, from, to })?;
    if let Some(&attr) = rule.required.iter().find(|&&r| !a.has(r)) {
        return Err(CmdError::MissingAttr {
            qpn,
            transition: rule.transition,
            attr,
        });
    }
    if let Some(attr) = a
        .present()
        .find(|p| !rule.required.contains(p) && !rule.optional.contains(p))
    {
        return Err(CmdError::ExtraAttr {
            qpn,
            transition: rule.transition,
            attr,
        });
    }
    check_values(a)?;
    Ok(rule.transition)
}

fn check_values(a: &QpAttrs) -> Result<(), CmdError> {
    let bad = |name, value: u64| Err(CmdError::BadParam { name, value });
    if let Some(m) = a.path_mtu
        && !matches!(m, 256 | 512 | 1024 | 2048 | 4096)
    {
        return bad(Param::PathMtu, m.into());
    }
    if let Some(p) = a.port
        && p != 1
    {
        return bad(Param::Port, p.into());
    }
    if let Some(t) = a.timeout
        && t > 31
    {
        return bad(Param::Timeout, t.into());
    }
    if let Some(t) = a.min_rnr_timer
        && t > 31
    {
        return bad(Param::MinRnrTimer, t.into());
    }
    if let Some(r) = a.retry_cnt
        && r > 7
    {
        return bad(Param::RetryCnt, r.into());
    }
    if let Some(r) = a.rnr_retry
        && r > 7
    {
        return bad(Param::RnrRetry, r.into());
    }
    // The responder remembers as many READs and atomics as this, to answer
    // their duplicates; more outstanding would outrun it.
    if let Some(n) = a.max_rd_atomic
        && n > crate::MAX_RD_ATOMIC
    {
        return bad(Param::MaxRdAtomic, n.into());
    }
    if let Some(n) = a.max_dest_rd_atomic
        && n > crate::MAX_RD_ATOMIC
    {
        return bad(Param::MaxDestRdAtomic, n.into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qp::tests::init_attrs;

    #[test]
    fn rules_name_the_missing_and_the_extra_attribute() {
        let q = Qpn::new(1);
        let mut a = init_attrs();
        a.access = None;
        assert_eq!(
            check_modify(q, QpType::Rc, QpState::Reset, QpState::Init, &a),
            Err(CmdError::MissingAttr {
                qpn: 1,
                transition: Transition::RstToInit,
                attr: QpAttr::Access
            })
        );
        let mut a = init_attrs();
        a.qkey = Some(1);
        assert_eq!(
            check_modify(q, QpType::Rc, QpState::Reset, QpState::Init, &a),
            Err(CmdError::ExtraAttr {
                qpn: 1,
                transition: Transition::RstToInit,
                attr: QpAttr::Qkey
            })
        );
        assert_eq!(
            check_modify(q, QpType::Rc, QpState::Reset, QpState::Init, &init_attrs()),
            Ok(Transition::RstToInit)
        );
    }

    /// RC's RTR and RTS attributes, as `ibv_rc_pingpong` sets them.
    fn rc_rtr_rts() -> (QpAttrs, QpAttrs) {
        let rtr = QpAttrs {
            av: Some(crate::AddressVector {
                dgid: [0; 16],
                sgid_index: 0,
                hop_limit: 64,
                traffic_class: 0,
                sl: 0,
            }),
            path_mtu: Some(1024),
            dest_qpn: Some(Qpn::new(7)),
            rq_psn: Some(doorbell_types::Psn::new(1)),
            max_dest_rd_atomic: Some(1),
            min_rnr_timer: Some(12),
            ..Default::default()
        };
        let rts = QpAttrs {
            sq_psn: Some(doorbell_types::Psn::new(2)),
            timeout: Some(14),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            max_rd_atomic: Some(1),
            ..Default::default()
        };
        (rtr, rts)
    }

    #[test]
    fn more_reads_and_atomics_outstanding_than_the_device_takes_are_refused() {
        use QpState::{Init, Rtr, Rts};
        let q = Qpn::new(3);
        let rc = |from, to, a: &QpAttrs| check_modify(q, QpType::Rc, from, to, a);
        let (mut rtr, mut rts) = rc_rtr_rts();
        rtr.max_dest_rd_atomic = Some(crate::MAX_RD_ATOMIC);
        rts.max_rd_atomic = Some(crate::MAX_RD_ATOMIC);
        assert_eq!(rc(Init, Rtr, &rtr), Ok(Transition::InitToRtr));
        assert_eq!(rc(Rtr, Rts, &rts), Ok(Transition::RtrToRts));
        rtr.max_dest_rd_atomic = Some(crate::MAX_RD_ATOMIC + 1);
        rts.max_rd_atomic = Some(crate::MAX_RD_ATOMIC + 1);
        assert_eq!(
            rc(Init, Rtr, &rtr),
            Err(CmdError::BadParam {
                name: Param::MaxDestRdAtomic,
                value: 17
            })
        );
        assert_eq!(
            rc(Rtr, Rts, &rts),
            Err(CmdError::BadParam {
                name: Param::MaxRdAtomic,
                value: 17
            })
        );
    }

    #[test]
    fn uc_takes_rc_attributes_minus_the_reliable_ones() {
        use QpState::{Init, Reset, Rtr, Rts, Sqe};
        let q = Qpn::new(2);
        let uc = |from, to, a: &QpAttrs| check_modify(q, QpType::Uc, from, to, a);
        assert_eq!(uc(Reset, Init, &init_attrs()), Ok(Transition::RstToInit));
        assert_eq!(
            uc(Init, Init, &QpAttrs::default()),
            Ok(Transition::InitToInit)
        );
        let (rc_rtr, rc_rts) = rc_rtr_rts();
        // RC's RTR set is refused, naming the first RC-only attribute.
        assert_eq!(
            uc(Init, Rtr, &rc_rtr),
            Err(CmdError::ExtraAttr {
                qpn: 2,
                transition: Transition::InitToRtr,
                attr: QpAttr::MaxDestRdAtomic
            })
        );
        let rtr = QpAttrs {
            max_dest_rd_atomic: None,
            min_rnr_timer: None,
            ..rc_rtr
        };
        assert_eq!(uc(Init, Rtr, &rtr), Ok(Transition::InitToRtr));
        for attr in [QpAttr::Av, QpAttr::PathMtu, QpAttr::DestQpn, QpAttr::RqPsn] {
            let mut a = rtr;
            match attr {
                QpAttr::Av => a.av = None,
                QpAttr::PathMtu => a.path_mtu = None,
                QpAttr::DestQpn => a.dest_qpn = None,
                _ => a.rq_psn = None,
            }
            assert_eq!(
                uc(Init, Rtr, &a),
                Err(CmdError::MissingAttr {
                    qpn: 2,
                    transition: Transition::InitToRtr,
                    attr
                })
            );
        }
        assert_eq!(
            uc(Rtr, Rts, &rc_rts),
            Err(CmdError::ExtraAttr {
                qpn: 2,
                transition: Transition::RtrToRts,
                attr: QpAttr::MaxRdAtomic
            })
        );
        let rts = QpAttrs {
            sq_psn: rc_rts.sq_psn,
            access: Some(crate::Access(crate::Access::REMOTE_WRITE)),
            ..Default::default()
        };
        assert_eq!(uc(Rtr, Rts, &rts), Ok(Transition::RtrToRts));
        for extra in [
            QpAttrs {
                timeout: Some(14),
                ..rts
            },
            QpAttrs {
                retry_cnt: Some(7),
                ..rts
            },
            QpAttrs {
                rnr_retry: Some(7),
                ..rts
            },
            QpAttrs {
                min_rnr_timer: Some(1),
                ..rts
            },
        ] {
            assert!(matches!(
                uc(Rtr, Rts, &extra),
                Err(CmdError::ExtraAttr { .. })
            ));
        }
        assert_eq!(uc(Rts, Rts, &QpAttrs::default()), Ok(Transition::RtsToRts));
        assert_eq!(
            uc(Sqe, Rts, &QpAttrs::default()),
            Ok(Transition::SqerrToRts)
        );
        assert_eq!(
            uc(Rts, QpState::Err, &QpAttrs::default()),
            Ok(Transition::ToErr)
        );
        // UC has no Q_Key.
        let mut a = init_attrs();
        a.qkey = Some(1);
        assert!(matches!(
            uc(Reset, Init, &a),
            Err(CmdError::ExtraAttr {
                attr: QpAttr::Qkey,
                ..
            })
        ));
        // RC's rules are unchanged by UC's.
        assert_eq!(
            check_modify(q, QpType::Rc, Init, Rtr, &rtr),
            Err(CmdError::MissingAttr {
                qpn: 2,
                transition: Transition::InitToRtr,
                attr: QpAttr::MaxDestRdAtomic
            })
        );
    }
}
