//! The byte form of commands and results: every value survives a round trip,
//! and no input makes the decoder panic.
#![allow(missing_docs, unreachable_pub)]

use doorbell_hif::codec::{decode_result, encode_result};
use doorbell_hif::{
    Access, AddressVector, CmdError, CmdOut, Command, CqParams, DeviceCaps, EqParams, MkeyParams,
    ObjKind, Param, QpAttr, QpAttrs, QpParams, QpState, QpType, SrqParams, Transition,
};
use doorbell_types::{Cqn, Eqn, HostAddr, Mkey, Pdn, Psn, Qpn, Srqn, UarIndex};
use proptest::prelude::*;

fn state() -> impl Strategy<Value = QpState> {
    proptest::sample::select(QpState::ALL.to_vec())
}

fn pages() -> impl Strategy<Value = Vec<HostAddr>> {
    proptest::collection::vec(any::<u64>().prop_map(HostAddr::new), 0..8)
}

fn attrs() -> impl Strategy<Value = QpAttrs> {
    let av = (any::<[u8; 16]>(), any::<[u8; 4]>()).prop_map(|(dgid, b)| AddressVector {
        dgid,
        sgid_index: b[0],
        hop_limit: b[1],
        traffic_class: b[2],
        sl: b[3],
    });
    (
        (
            proptest::option::of(state()),
            proptest::option::of(any::<u16>()),
            proptest::option::of(any::<u8>()),
            proptest::option::of(any::<u32>().prop_map(Access)),
            proptest::option::of(any::<u32>()),
            proptest::option::of(av),
            proptest::option::of(any::<u32>()),
            proptest::option::of(any::<u32>().prop_map(Qpn::new)),
        ),
        (
            proptest::option::of(any::<u32>().prop_map(Psn::new)),
            proptest::option::of(any::<u32>().prop_map(Psn::new)),
            proptest::collection::vec(proptest::option::of(any::<u8>()), 6),
        ),
    )
        .prop_map(
            |((cs, pk, port, acc, qkey, av, mtu, dq), (rq, sq, b))| QpAttrs {
                cur_state: cs,
                pkey_index: pk,
                port,
                access: acc,
                qkey,
                av,
                path_mtu: mtu,
                dest_qpn: dq,
                rq_psn: rq,
                sq_psn: sq,
                max_dest_rd_atomic: b[0],
                max_rd_atomic: b[1],
                min_rnr_timer: b[2],
                timeout: b[3],
                retry_cnt: b[4],
                rnr_retry: b[5],
            },
        )
}

fn mkey_params() -> impl Strategy<Value = MkeyParams> {
    (
        any::<u32>(),
        any::<u32>(),
        any::<u64>(),
        any::<u64>(),
        pages(),
    )
        .prop_map(|(pd, acc, start, len, mtt)| MkeyParams {
            pd: Pdn::new(pd),
            access: Access(acc),
            start,
            len,
            mtt,
        })
}

fn command() -> impl Strategy<Value = Command> {
    let ty = prop_oneof![Just(QpType::Rc), Just(QpType::Uc), Just(QpType::Ud)];
    prop_oneof![
        Just(Command::QueryCaps),
        Just(Command::AllocUar),
        Just(Command::AllocPd),
        any::<u32>().prop_map(|u| Command::DeallocUar(UarIndex::new(u))),
        any::<u32>().prop_map(|p| Command::DeallocPd(Pdn::new(p))),
        mkey_params().prop_map(Command::CreateMkey),
        (any::<u32>(), mkey_params()).prop_map(|(k, m)| Command::ModifyMkey(Mkey::from_raw(k), m)),
        any::<u32>().prop_map(|k| Command::DestroyMkey(Mkey::from_raw(k))),
        proptest::option::of(any::<bool>()).prop_map(Command::AccessPaos),
        (
            any::<u8>(),
            any::<u32>(),
            any::<u64>(),
            any::<u16>(),
            pages()
        )
            .prop_map(|(l, u, d, c, pas)| {
                Command::CreateCq(CqParams {
                    log_size: l,
                    uar: UarIndex::new(u),
                    dbr_addr: HostAddr::new(d),
                    cqe_bytes: c,
                    pas,
                })
            }),
        any::<u32>().prop_map(|c| Command::DestroyCq(Cqn::new(c))),
        (any::<u32>(), any::<u8>(), pages()).prop_map(|(c, log_size, pas)| Command::ResizeCq {
            cqn: Cqn::new(c),
            log_size,
            pas,
        }),
        (
            ty,
            any::<[u32; 4]>(),
            any::<[u8; 3]>(),
            any::<u64>(),
            pages(),
            proptest::option::of(any::<u32>().prop_map(Srqn::new)),
            any::<bool>(),
        )
            .prop_map(
                |(qp_type, ids, logs, dbr, pas, srq, gsi)| Command::CreateQp(QpParams {
                    // A GSI QP is UD; its byte form says so.
                    qp_type: if gsi { QpType::Ud } else { qp_type },
                    pd: Pdn::new(ids[0]),
                    send_cq: Cqn::new(ids[1]),
                    recv_cq: Cqn::new(ids[2]),
                    uar: UarIndex::new(ids[3]),
                    log_sq_size: logs[0],
                    log_rq_size: logs[1],
                    log_rq_stride: logs[2],
                    dbr_addr: HostAddr::new(dbr),
                    pas,
                    srq,
                    gsi,
                    user_index: ids[0].rotate_left(7) ^ dbr as u32,
                })
            ),
        (any::<u32>(), state(), attrs()).prop_map(|(q, state, attrs)| Command::ModifyQp {
            qpn: Qpn::new(q),
            state,
            attrs,
        }),
        any::<u32>().prop_map(|q| Command::QueryQp(Qpn::new(q))),
        any::<u32>().prop_map(|q| Command::DestroyQp(Qpn::new(q))),
        (any::<u32>(), any::<[u8; 2]>(), any::<u64>(), pages()).prop_map(|(pd, logs, dbr, pas)| {
            Command::CreateSrq(SrqParams {
                pd: Pdn::new(pd),
                log_size: logs[0],
                log_stride: logs[1],
                dbr_addr: HostAddr::new(dbr),
                pas,
            })
        }),
        (any::<u32>(), any::<u32>()).prop_map(|(s, limit)| Command::ModifySrq {
            srqn: Srqn::new(s),
            limit,
        }),
        any::<u32>().prop_map(|s| Command::QuerySrq(Srqn::new(s))),
        any::<u32>().prop_map(|s| Command::DestroySrq(Srqn::new(s))),
        (
            any::<u8>(),
            any::<u32>(),
            any::<u16>(),
            any::<u64>(),
            pages()
        )
            .prop_map(
                |(log_size, u, vector, events, pas)| Command::CreateEq(EqParams {
                    log_size,
                    uar: UarIndex::new(u),
                    vector,
                    events,
                    pas,
                })
            ),
        any::<u32>().prop_map(|e| Command::DestroyEq(Eqn::new(e))),
    ]
}

fn caps() -> impl Strategy<Value = DeviceCaps> {
    (any::<[u32; 14]>(), any::<[u8; 3]>()).prop_map(|(w, b)| DeviceCaps {
        log_max_qp: b[0],
        max_send_wqebb: w[0],
        max_recv_wr: w[1],
        max_sq_desc_sz: w[2],
        max_rq_desc_sz: w[3],
        max_cqe: w[4],
        max_mkeys: w[5],
        max_pd: w[6],
        max_uar: w[7],
        bf_reg_size: w[8],
        log_uar_size: b[1],
        num_uars_per_page: w[9],
        cache_line_size: w[10],
        max_rd_atomic: b[2],
        max_mtu: w[11],
        vendor_id: w[12],
        vendor_part_id: w[13],
    })
}

fn result() -> impl Strategy<Value = Result<CmdOut, CmdError>> {
    let kind = proptest::sample::select(ObjKind::ALL.to_vec());
    let attr = proptest::sample::select(QpAttr::ALL.to_vec());
    let tr = proptest::sample::select(Transition::ALL.to_vec());
    let param = proptest::sample::select(Param::ALL.to_vec());
    prop_oneof![
        Just(Ok(CmdOut::Done)),
        caps().prop_map(|c| Ok(CmdOut::Caps(c))),
        any::<u32>().prop_map(|u| Ok(CmdOut::Uar(UarIndex::new(u)))),
        any::<u32>().prop_map(|u| Ok(CmdOut::Pd(Pdn::new(u)))),
        any::<u32>().prop_map(|u| Ok(CmdOut::Mkey(Mkey::from_raw(u)))),
        any::<u32>().prop_map(|u| Ok(CmdOut::Cq(Cqn::new(u)))),
        any::<u32>().prop_map(|u| Ok(CmdOut::Qp(Qpn::new(u)))),
        (state(), attrs()).prop_map(|(state, attrs)| Ok(CmdOut::QpInfo { state, attrs })),
        any::<u32>().prop_map(|u| Ok(CmdOut::Srq(Srqn::new(u)))),
        any::<u32>().prop_map(|limit| Ok(CmdOut::SrqInfo { limit })),
        any::<bool>().prop_map(|up| Ok(CmdOut::PortUp(up))),
        any::<u32>().prop_map(|e| Ok(CmdOut::Eq(Eqn::new(e)))),
        kind.clone().prop_map(|k| Err(CmdError::Exhausted(k))),
        (kind.clone(), any::<u32>())
            .prop_map(|(kind, id)| Err(CmdError::NoSuchObject { kind, id })),
        (kind, any::<u32>()).prop_map(|(kind, id)| Err(CmdError::Busy { kind, id })),
        (param, any::<u64>()).prop_map(|(name, value)| Err(CmdError::BadParam { name, value })),
        (any::<u32>(), state(), state()).prop_map(|(qpn, from, to)| Err(CmdError::BadTransition {
            qpn,
            from,
            to
        })),
        (any::<u32>(), tr.clone(), attr.clone()).prop_map(|(qpn, transition, attr)| Err(
            CmdError::MissingAttr {
                qpn,
                transition,
                attr
            }
        )),
        (any::<u32>(), tr, attr).prop_map(|(qpn, transition, attr)| Err(CmdError::ExtraAttr {
            qpn,
            transition,
            attr
        })),
        Just(Err(CmdError::DeviceGone)),
    ]
}

proptest! {
    #[test]
    fn commands_round_trip(c in command()) {
        let mut b = Vec::new();
        c.encode(&mut b);
        prop_assert_eq!(Command::decode(&b).unwrap(), c);
    }

    #[test]
    fn results_round_trip(r in result()) {
        let mut b = Vec::new();
        encode_result(&r, &mut b);
        prop_assert_eq!(decode_result(&b).unwrap(), r);
    }

    #[test]
    fn any_truncation_of_a_command_is_an_error(c in command(), cut in any::<prop::sample::Index>()) {
        let mut b = Vec::new();
        c.encode(&mut b);
        let n = cut.index(b.len());
        prop_assert!(Command::decode(&b[..n]).is_err());
    }

    #[test]
    fn decoding_never_panics(b in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = Command::decode(&b);
        let _ = decode_result(&b);
    }
}
