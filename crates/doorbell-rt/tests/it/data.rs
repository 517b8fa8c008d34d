//! Data integrity of every opcode at sizes that straddle WQEBB, MTU and page
//! boundaries, through both doorbell and BlueFlame, by pointer and inline.

use doorbell_types::Psn;
use doorbell_verbs::{
    Access, AddressVector, Ah, QpAttrs, QpCaps, QpInitAttr, QpState, QpType, RemoteAddr, SendFlags,
    SendWr, UdTarget, WcOpcode, WcStatus, WrOpcode,
};

use crate::common::*;

const SIZES: [usize; 8] = [0, 1, 63, 64, 65, 4095, 4096, 1 << 20];
/// Where the target buffer starts in the remote MR: not page aligned.
const AT: u64 = 100;

fn remote(p: &Pair) -> RemoteAddr {
    RemoteAddr {
        addr: p.b.mr.addr() + AT,
        rkey: p.b.mr.rkey(),
    }
}

#[test]
fn rdma_write_every_size_by_pointer_and_inline() {
    write_every_size(&pair());
}

#[test]
fn rdma_write_and_read_every_size_on_process_memory() {
    let p = pair_on_process_memory();
    write_every_size(&p);
    read_every_size(&p);
}

fn write_every_size(p: &Pair) {
    let max_inline = p.a.qp.caps().max_inline_data as usize;
    for (i, &len) in SIZES.iter().enumerate() {
        for inline in [false, true] {
            if inline && len > max_inline {
                continue;
            }
            let data = pattern(len, i as u8 + inline as u8);
            p.a.mr.write(0, &data).unwrap();
            p.b.mr.write(AT, &vec![0x5a; len + 8]).unwrap();
            let sge = p.a.mr.sge(0, len as u32).unwrap();
            let flags = if inline {
                SendFlags::SIGNALED | SendFlags::INLINE
            } else {
                SendFlags::SIGNALED
            };
            post(
                &p.a.qp,
                SendWr {
                    wr_id: i as u64,
                    sg_list: &[sge],
                    opcode: WrOpcode::RdmaWrite(remote(p)),
                    flags,
                    ud: None,
                },
            );
            let wc = wait(&p.a.cq, 1);
            assert_eq!(
                (wc[0].status, wc[0].wr_id, wc[0].opcode),
                (WcStatus::Success, i as u64, WcOpcode::RdmaWrite)
            );
            let mut got = vec![0u8; len + 8];
            p.b.mr.read(AT, &mut got).unwrap();
            assert_eq!(&got[..len], &data[..], "size {len} inline {inline}");
            assert_eq!(&got[len..], &[0x5a; 8], "bytes past the write untouched");
        }
    }
}

#[test]
fn rdma_write_with_imm_every_size() {
    let p = pair();
    for (i, &len) in SIZES.iter().enumerate() {
        let data = pattern(len, 3 + i as u8);
        p.a.mr.write(0, &data).unwrap();
        post_recv(&p.b.qp, 500 + i as u64, &[]);
        let sge = p.a.mr.sge(0, len as u32).unwrap();
        let imm = 0x1234_0000 + i as u32;
        post(
            &p.a.qp,
            SendWr {
                wr_id: i as u64,
                sg_list: &[sge],
                opcode: WrOpcode::RdmaWriteWithImm(remote(&p), imm),
                flags: SendFlags::SIGNALED,
                ud: None,
            },
        );
        let s = wait(&p.a.cq, 1)[0];
        assert_eq!(
            (s.status, s.opcode),
            (WcStatus::Success, WcOpcode::RdmaWrite)
        );
        let r = wait(&p.b.cq, 1)[0];
        assert_eq!(
            (r.status, r.opcode, r.wr_id, r.imm_data, r.byte_len),
            (
                WcStatus::Success,
                WcOpcode::RecvRdmaWithImm,
                500 + i as u64,
                Some(imm),
                len as u32
            )
        );
        let mut got = vec![0u8; len];
        p.b.mr.read(AT, &mut got).unwrap();
        assert_eq!(got, data, "size {len}");
    }
}

#[test]
fn send_and_send_with_imm_every_size() {
    let p = pair();
    for (i, &len) in SIZES.iter().enumerate() {
        for imm in [None, Some(0xdead_0000 | i as u32)] {
            let data = pattern(len, 7 + i as u8);
            p.a.mr.write(0, &data).unwrap();
            p.b.mr.write(0, &vec![0x5a; len + 16]).unwrap();
            // Two receive SGEs, so that scatter crosses an SGE boundary.
            let half = (len / 2) as u32;
            let r1 = p.b.mr.sge(0, half).unwrap();
            let r2 =
                p.b.mr
                    .sge(u64::from(half), (len as u32 - half) + 16)
                    .unwrap();
            post_recv(&p.b.qp, 1000 + i as u64, &[r1, r2]);
            let sge = p.a.mr.sge(0, len as u32).unwrap();
            let opcode = imm.map_or(WrOpcode::Send, WrOpcode::SendWithImm);
            post(
                &p.a.qp,
                SendWr {
                    wr_id: i as u64,
                    sg_list: &[sge],
                    opcode,
                    flags: SendFlags::SIGNALED,
                    ud: None,
                },
            );
            let s = wait(&p.a.cq, 1)[0];
            assert_eq!(
                (s.status, s.opcode, s.wr_id),
                (WcStatus::Success, WcOpcode::Send, i as u64)
            );
            let r = wait(&p.b.cq, 1)[0];
            assert_eq!(
                (r.status, r.opcode, r.wr_id, r.byte_len, r.imm_data),
                (
                    WcStatus::Success,
                    WcOpcode::Recv,
                    1000 + i as u64,
                    len as u32,
                    imm
                )
            );
            let got = p.b.mr.to_vec().unwrap();
            assert_eq!(&got[..len], &data[..], "size {len}");
            assert_eq!(
                &got[len..len + 16],
                &[0x5a; 16],
                "bytes past the message untouched"
            );
        }
    }
}

#[test]
fn rdma_read_every_size() {
    read_every_size(&pair());
}

fn read_every_size(p: &Pair) {
    for (i, &len) in SIZES.iter().enumerate() {
        let data = pattern(len, 11 + i as u8);
        p.b.mr.write(AT, &data).unwrap();
        p.a.mr.write(0, &vec![0x5a; len + 8]).unwrap();
        let sge = p.a.mr.sge(0, len as u32).unwrap();
        post(
            &p.a.qp,
            SendWr {
                wr_id: 77,
                sg_list: &[sge],
                opcode: WrOpcode::RdmaRead(remote(p)),
                flags: SendFlags::SIGNALED,
                ud: None,
            },
        );
        let wc = wait(&p.a.cq, 1)[0];
        assert_eq!(
            (wc.status, wc.opcode, wc.byte_len),
            (WcStatus::Success, WcOpcode::RdmaRead, len as u32)
        );
        let mut got = vec![0u8; len + 8];
        p.a.mr.read(0, &mut got).unwrap();
        assert_eq!(&got[..len], &data[..], "size {len}");
        assert_eq!(&got[len..], &[0x5a; 8]);
    }
}

#[test]
fn atomics_apply_and_return_the_old_value() {
    let p = pair();
    let target = RemoteAddr {
        addr: p.b.mr.addr() + 64,
        rkey: p.b.mr.rkey(),
    };
    p.b.mr.write(64, &40u64.to_le_bytes()).unwrap();
    let old = p.a.mr.sge(8, 8).unwrap();
    // Fetch-and-add returns 40 and leaves 42.
    post(
        &p.a.qp,
        SendWr {
            wr_id: 1,
            sg_list: &[old],
            opcode: WrOpcode::AtomicFetchAdd {
                remote: target,
                add: 2,
            },
            flags: SendFlags::SIGNALED,
            ud: None,
        },
    );
    let wc = wait(&p.a.cq, 1)[0];
    assert_eq!(
        (wc.status, wc.opcode, wc.byte_len),
        (WcStatus::Success, WcOpcode::FetchAdd, 8)
    );
    let mut b = [0u8; 8];
    p.a.mr.read(8, &mut b).unwrap();
    assert_eq!(u64::from_le_bytes(b), 40);
    p.b.mr.read(64, &mut b).unwrap();
    assert_eq!(u64::from_le_bytes(b), 42);
    // A compare that fails swaps nothing and returns the current value.
    post(
        &p.a.qp,
        SendWr {
            wr_id: 2,
            sg_list: &[old],
            opcode: WrOpcode::AtomicCmpSwp {
                remote: target,
                compare: 7,
                swap: 9,
            },
            flags: SendFlags::SIGNALED,
            ud: None,
        },
    );
    assert_eq!(wait(&p.a.cq, 1)[0].opcode, WcOpcode::CompSwap);
    p.b.mr.read(64, &mut b).unwrap();
    assert_eq!(u64::from_le_bytes(b), 42);
    // A compare that matches swaps.
    post(
        &p.a.qp,
        SendWr {
            wr_id: 3,
            sg_list: &[old],
            opcode: WrOpcode::AtomicCmpSwp {
                remote: target,
                compare: 42,
                swap: u64::MAX,
            },
            flags: SendFlags::SIGNALED,
            ud: None,
        },
    );
    assert!(wait(&p.a.cq, 1)[0].is_ok());
    p.b.mr.read(64, &mut b).unwrap();
    assert_eq!(u64::from_le_bytes(b), u64::MAX);
    p.a.mr.read(8, &mut b).unwrap();
    assert_eq!(u64::from_le_bytes(b), 42);
}

#[test]
fn ud_send_every_size_up_to_the_mtu() {
    let fabric = doorbell_rt::Fabric::new();
    let cap = QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let mk = |name, ip| {
        let s = side(&fabric, name, ip, Default::default(), cap, 1 << 16, 64);
        let qp =
            s.pd.create_qp(&QpInitAttr {
                qp_type: QpType::Ud,
                send_cq: s.cq.clone(),
                recv_cq: s.cq.clone(),
                cap,
                sq_sig_all: true,
                srq: None,
            })
            .unwrap();
        qp.modify(
            QpState::Init,
            &QpAttrs {
                pkey_index: Some(0),
                port: Some(1),
                qkey: Some(0x1111_1111),
                ..Default::default()
            },
        )
        .unwrap();
        qp.modify(QpState::Rtr, &QpAttrs::default()).unwrap();
        qp.modify(
            QpState::Rts,
            &QpAttrs {
                sq_psn: Some(Psn::new(5)),
                ..Default::default()
            },
        )
        .unwrap();
        (s, qp)
    };
    let (a, qa) = mk("ud-a", [127, 0, 1, 2]);
    let (b, qb) = mk("ud-b", [127, 0, 1, 3]);
    let ah = Ah {
        av: AddressVector {
            dgid: b.ctx.gid(),
            sgid_index: 0,
            hop_limit: 64,
            traffic_class: 0,
            sl: 0,
        },
    };
    let target = UdTarget {
        ah,
        remote_qpn: qb.qpn(),
        remote_qkey: 0x1111_1111,
    };
    for (i, &len) in SIZES.iter().filter(|&&l| l <= 4096).enumerate() {
        let data = pattern(len, i as u8);
        a.mr.write(0, &data).unwrap();
        let r = b.mr.sge(0, 40 + len as u32).unwrap();
        qb.post_recv(&[doorbell_verbs::RecvWr {
            wr_id: i as u64,
            sg_list: &[r],
        }])
        .unwrap();
        let sge = a.mr.sge(0, len as u32).unwrap();
        let opcode = if i % 2 == 0 {
            WrOpcode::Send
        } else {
            WrOpcode::SendWithImm(i as u32)
        };
        qa.post_send(&[SendWr {
            wr_id: 9,
            sg_list: &[sge],
            opcode,
            flags: SendFlags::default(),
            ud: Some(target),
        }])
        .unwrap();
        assert!(wait(&a.cq, 1)[0].is_ok());
        let wc = wait(&b.cq, 1)[0];
        assert_eq!(
            (wc.status, wc.byte_len, wc.src_qp, wc.grh),
            (WcStatus::Success, 40 + len as u32, qa.qpn().get(), true)
        );
        assert_eq!(wc.imm_data, (i % 2 == 1).then_some(i as u32));
        let mut got = vec![0u8; 40 + len];
        b.mr.read(0, &mut got).unwrap();
        assert_eq!(&got[40..], &data[..], "size {len}");
        // The GRH area ends with the IPv4 header the datagram came in.
        assert_eq!(got[20] >> 4, 4);
        assert_eq!(&got[20 + 12..20 + 16], &[127, 0, 1, 2]);
        // And the SL bits say so, as mlx5 reports a RoCE packet's type:
        // UDP (RoCEv2) over IPv4. UCX finds the GID in the GRH by them.
        assert_eq!(wc.sl, 0x8 | 0x2);
    }
    // A datagram larger than the MTU fails locally.
    let sge = a.mr.sge(0, 4097).unwrap();
    qa.post_send(&[SendWr {
        wr_id: 10,
        sg_list: &[sge],
        opcode: WrOpcode::Send,
        flags: SendFlags::default(),
        ud: Some(target),
    }])
    .unwrap();
    assert_eq!(wait(&a.cq, 1)[0].status, WcStatus::LocLenErr);
}

#[test]
fn receives_posted_after_the_error_state_are_flushed() {
    // The kernel's ib_drain_rq pattern: move the QP to ERR, post one more
    // receive, and wait for its flush completion.
    let p = pair();
    let sge = p.b.mr.sge(0, 64).unwrap();
    post_recv(&p.b.qp, 1, &[sge]);
    p.b.qp
        .modify(
            doorbell_verbs::QpState::Err,
            &doorbell_verbs::QpAttrs::default(),
        )
        .unwrap();
    let first = wait(&p.b.cq, 1)[0];
    assert_eq!((first.wr_id, first.status), (1, WcStatus::WrFlushErr));
    post_recv(&p.b.qp, 2, &[sge]);
    post_recv(&p.b.qp, 3, &[sge]);
    let later = wait(&p.b.cq, 2);
    assert_eq!(
        later
            .iter()
            .map(|w| (w.wr_id, w.status))
            .collect::<Vec<_>>(),
        vec![(2, WcStatus::WrFlushErr), (3, WcStatus::WrFlushErr)]
    );
}

#[test]
fn on_process_memory_a_vector_is_registered_in_place_and_foreign_memory_needs_a_grant() {
    let p = pair_on_process_memory();
    let v = vec![0u8; 4096];
    let at = v.as_ptr() as u64;
    let target =
        p.b.pd
            .reg_mr_buffer(v, Access(FULL))
            .map_err(|(e, _)| e)
            .unwrap();
    assert_eq!(target.addr(), at, "the vector's own address is the IOVA");
    let data = pattern(3000, 5);
    p.a.mr.write(0, &data).unwrap();
    post(
        &p.a.qp,
        SendWr {
            wr_id: 1,
            sg_list: &[p.a.mr.sge(0, 3000).unwrap()],
            opcode: WrOpcode::RdmaWrite(RemoteAddr {
                addr: target.addr() + 96,
                rkey: target.rkey(),
            }),
            flags: SendFlags::SIGNALED,
            ud: None,
        },
    );
    assert_eq!(wait(&p.a.cq, 1)[0].status, WcStatus::Success);
    let v = target.into_buffer().unwrap().unwrap();
    assert_eq!(v.as_ptr() as u64, at, "the same allocation came back");
    assert_eq!(&v[96..3096], &data[..]);
    // A buffer the NIC was not given cannot be registered: the kernel's
    // pin would fail with EFAULT.
    let foreign = vec![7u8; 4096];
    assert!(
        p.b.pd
            .reg_mr_at(foreign.as_ptr() as u64, foreign.len(), Access(FULL))
            .is_err()
    );
}

/// The GSI QP: numbered 1, one per device, and a 256-byte MAD from one
/// GSI QP to the other arrives from QP 1 with the GSI Q_Key.
#[test]
fn gsi_qps_are_qp1_and_carry_mads_between_ports() {
    const GSI_QKEY: u32 = 0x8001_0000;
    let fabric = doorbell_rt::Fabric::new();
    let cap = QpCaps {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mk = |name, ip| {
        let s = side(&fabric, name, ip, Default::default(), cap, 1 << 16, 64);
        let attr = QpInitAttr {
            qp_type: QpType::Ud,
            send_cq: s.cq.clone(),
            recv_cq: s.cq.clone(),
            cap,
            sq_sig_all: true,
            srq: None,
        };
        let gsi = s.pd.create_gsi_qp(&attr).unwrap();
        assert_eq!(gsi.qpn().get(), 1, "the GSI QP is QP 1");
        assert_eq!(
            s.pd.create_gsi_qp(&attr).err().map(|e| e.errno()),
            Some(libc::EBUSY),
            "one GSI QP per device"
        );
        let rc = QpInitAttr {
            qp_type: QpType::Rc,
            ..attr.clone()
        };
        assert!(s.pd.create_gsi_qp(&rc).is_err(), "a GSI QP is UD");
        gsi.modify(
            QpState::Init,
            &QpAttrs {
                pkey_index: Some(0),
                port: Some(1),
                qkey: Some(GSI_QKEY),
                ..Default::default()
            },
        )
        .unwrap();
        gsi.modify(QpState::Rtr, &QpAttrs::default()).unwrap();
        gsi.modify(
            QpState::Rts,
            &QpAttrs {
                sq_psn: Some(Psn::new(0)),
                ..Default::default()
            },
        )
        .unwrap();
        (s, gsi)
    };
    let (a, qa) = mk("gsi-a", [127, 0, 9, 2]);
    let (b, qb) = mk("gsi-b", [127, 0, 9, 3]);
    let mad = pattern(256, 3);
    a.mr.write(0, &mad).unwrap();
    let r = b.mr.sge(0, 40 + 256).unwrap();
    qb.post_recv(&[doorbell_verbs::RecvWr {
        wr_id: 1,
        sg_list: &[r],
    }])
    .unwrap();
    let target = UdTarget {
        ah: Ah {
            av: AddressVector {
                dgid: b.ctx.gid(),
                sgid_index: 0,
                hop_limit: 64,
                traffic_class: 0,
                sl: 0,
            },
        },
        remote_qpn: doorbell_types::Qpn::new(1),
        remote_qkey: GSI_QKEY,
    };
    let sge = a.mr.sge(0, 256).unwrap();
    qa.post_send(&[SendWr {
        wr_id: 2,
        sg_list: &[sge],
        opcode: WrOpcode::Send,
        flags: SendFlags::default(),
        ud: Some(target),
    }])
    .unwrap();
    assert!(wait(&a.cq, 1)[0].is_ok());
    let wc = wait(&b.cq, 1)[0];
    assert_eq!(
        (wc.status, wc.byte_len, wc.src_qp, wc.qp_num.get()),
        (WcStatus::Success, 40 + 256, 1, 1)
    );
    let mut got = vec![0u8; 40 + 256];
    b.mr.read(0, &mut got).unwrap();
    assert_eq!(&got[40..], &mad[..]);
}
