//! Long runs that wrap the send, receive and completion rings many times,
//! with postlists and multi-WQEBB WQEs that straddle the end of the ring.

use doorbell_verbs::{
    ProviderConfig, QpCaps, RecvWr, RemoteAddr, SendFlags, SendWr, WcStatus, WrOpcode,
};

use crate::common::*;

#[test]
fn send_and_receive_rings_wrap_many_times() {
    // 16 send WRs of 256-byte WQEs (the 192 bytes mlx5 keeps for an RC
    // WQE's segments, then 60 bytes of inline data and its header): a
    // 64-WQEBB ring; 16 receive WQEs.
    let cap = QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 60,
    };
    let p = pair_with(ProviderConfig::default(), cap, 1 << 16, 32, 1024);
    assert_eq!(p.a.qp.sq_wqe_count(), 64);
    let rounds = 2_000u64;
    let mut sent = 0u64;
    let mut next_recv = 0u64;
    while sent < rounds {
        // A postlist of 1..=4 SENDs of 0..=60 bytes; long inline ones take 2 WQEBBs.
        let n = 1 + (sent % 4);
        let mut sges = Vec::new();
        for k in 0..n {
            let id = sent + k;
            let len = (id % 61) as usize;
            p.a.mr
                .write(id * 128 % 32768, &pattern(len, id as u8))
                .unwrap();
            sges.push(p.a.mr.sge(id * 128 % 32768, len as u32).unwrap());
        }
        for k in 0..n {
            let id = next_recv + k;
            let r = p.b.mr.sge(id * 128 % 32768, 128).unwrap();
            p.b.qp
                .post_recv(&[RecvWr {
                    wr_id: id,
                    sg_list: &[r],
                }])
                .unwrap();
        }
        next_recv += n;
        let wrs: Vec<SendWr<'_>> = (0..n)
            .map(|k| {
                let id = sent + k;
                let flags = if id.is_multiple_of(3) {
                    SendFlags::SIGNALED | SendFlags::INLINE
                } else {
                    SendFlags::SIGNALED
                };
                SendWr {
                    wr_id: id,
                    sg_list: std::slice::from_ref(&sges[k as usize]),
                    opcode: WrOpcode::Send,
                    flags,
                    ud: None,
                }
            })
            .collect();
        p.a.qp.post_send(&wrs).unwrap();
        let s = wait(&p.a.cq, n as usize);
        let r = wait(&p.b.cq, n as usize);
        for k in 0..n {
            let id = sent + k;
            assert_eq!(
                (s[k as usize].wr_id, s[k as usize].status),
                (id, WcStatus::Success)
            );
            assert_eq!(
                (r[k as usize].wr_id, r[k as usize].byte_len),
                (id, (id % 61) as u32),
                "in order, whole"
            );
            let mut got = vec![0u8; (id % 61) as usize];
            p.b.mr.read(id * 128 % 32768, &mut got).unwrap();
            assert_eq!(got, pattern((id % 61) as usize, id as u8), "message {id}");
        }
        sent += n;
    }
}

#[test]
fn unsignaled_writes_retire_with_the_next_signaled_one() {
    let cap = QpCaps {
        max_send_wr: 8,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 16,
    };
    let p = pair_with(ProviderConfig::default(), cap, 1 << 16, 8, 1024);
    let remote = RemoteAddr {
        addr: p.b.mr.addr(),
        rkey: p.b.mr.rkey(),
    };
    // 3 000 writes, one signalled in 4: the queue of 8 never overflows
    // because each CQE retires the unsignalled WRs before it.
    for i in 0..3_000u64 {
        let v = i.to_le_bytes();
        p.a.mr.write(8 * (i % 512), &v).unwrap();
        let sge = p.a.mr.sge(8 * (i % 512), 8).unwrap();
        let dst = RemoteAddr {
            addr: remote.addr + 8 * (i % 512),
            ..remote
        };
        let flags = if i % 4 == 3 {
            SendFlags::SIGNALED | SendFlags::INLINE
        } else {
            SendFlags::INLINE
        };
        p.a.qp
            .post_send(&[SendWr {
                wr_id: i,
                sg_list: &[sge],
                opcode: WrOpcode::RdmaWrite(dst),
                flags,
                ud: None,
            }])
            .unwrap();
        if i % 4 == 3 {
            let wc = wait(&p.a.cq, 1);
            assert_eq!((wc[0].wr_id, wc[0].status), (i, WcStatus::Success));
        }
    }
    let mut b = [0u8; 8];
    p.b.mr.read(8 * (2_999 % 512), &mut b).unwrap();
    assert_eq!(u64::from_le_bytes(b), 2_999);
}
