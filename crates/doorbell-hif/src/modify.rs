//! The rules of MODIFY_QP: which transitions exist for each service type,
//! which attributes each requires and allows, and the range of each value
//! (IBTA Vol 1 §11.2.5; Linux `ib_modify_qp_is_ok`).
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
        (Reset, Init, QpType::Rc) => r(Transition::RstToInit, &[PkeyIndex, Port, Access], &[]),
        (Reset, Init, QpType::Ud) => r(Transition::RstToInit, &[PkeyIndex, Port, Qkey], &[]),
        (Init, Init, QpType::Rc) => r(Transition::InitToInit, &[], &[PkeyIndex, Port, Access]),
        (Init, Init, QpType::Ud) => r(Transition::InitToInit, &[], &[PkeyIndex, Port, Qkey]),
        (Init, Rtr, QpType::Rc) => r(
            Transition::InitToRtr,
            &[Av, PathMtu, DestQpn, RqPsn, MaxDestRdAtomic, MinRnrTimer],
            &[PkeyIndex, Access],
        ),
        (Init, Rtr, QpType::Ud) => r(Transition::InitToRtr, &[], &[PkeyIndex, Qkey]),
        (Rtr, Rts, QpType::Rc) => r(
            Transition::RtrToRts,
            &[SqPsn, Timeout, RetryCnt, RnrRetry, MaxRdAtomic],
            &[CurState, Access, MinRnrTimer],
        ),
        (Rtr, Rts, QpType::Ud) => r(Transition::RtrToRts, &[SqPsn], &[CurState, Qkey]),
        (Rts, Rts, QpType::Rc) => r(Transition::RtsToRts, &[], &[CurState, Access, MinRnrTimer]),
        (Rts, Rts, QpType::Ud) => r(Transition::RtsToRts, &[], &[CurState, Qkey]),
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
}
