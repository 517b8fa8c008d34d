//! Payload read straight into the frames that carry it: SGEs that do not
//! line up with the MTU still arrive whole, and each contiguous run is
//! still one DMA read.

use std::sync::Arc;

use doorbell_pcie::DmaPurpose;
use doorbell_rt::LoopbackLink;
use doorbell_types::Psn;
use doorbell_verbs::{
    Access, Context, QpCaps, RecvWr, RemoteAddr, SendFlags, SendWr, WcStatus, WrOpcode,
};

use crate::{FULL, poll_all, rc_pair};

/// The three SGEs of each message: odd lengths at odd offsets, 5 099 bytes
/// in all, so that packets of MTU 1024 start and end inside SGEs.
const PARTS: [(u64, u32); 3] = [(3, 700), (1000, 1501), (4097, 2898)];

#[test]
fn a_payload_of_several_sges_arrives_whole_and_each_sge_is_one_read() {
    let link = Arc::new(LoopbackLink::new("loop0", [10, 0, 0, 9]));
    let ctx = Context::open(link.clone()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let cap = QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 4,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let (a, b) = rc_pair(&ctx, &pd, &cq, cap, Psn::new(0x20));
    let src = pd.reg_mr(8192, Access(FULL)).unwrap();
    let dst = pd.reg_mr(16384, Access(FULL)).unwrap();
    let pattern: Vec<u8> = (0..8192u32).map(|i| (i * 7 + i / 251) as u8).collect();
    src.write(0, &pattern).unwrap();
    let sges: Vec<_> = PARTS.iter().map(|&(o, l)| src.sge(o, l).unwrap()).collect();
    let want: Vec<u8> = PARTS
        .iter()
        .flat_map(|&(o, l)| pattern[o as usize..(o + u64::from(l)) as usize].to_vec())
        .collect();

    // A WRITE, then a SEND into a posted receive.
    b.post_recv(&[RecvWr {
        wr_id: 2,
        sg_list: &[dst.sge(8192, 8192).unwrap()],
    }])
    .unwrap();
    for (wr_id, opcode) in [
        (
            1,
            WrOpcode::RdmaWrite(RemoteAddr {
                addr: dst.addr(),
                rkey: dst.rkey(),
            }),
        ),
        (3, WrOpcode::Send),
    ] {
        let (before, _) = link.counters(Some(a.qpn()));
        a.post_send(&[SendWr {
            wr_id,
            sg_list: &sges,
            opcode,
            flags: SendFlags::SIGNALED,
            ud: None,
        }])
        .unwrap();
        let (after, _) = link.counters(Some(a.qpn()));
        let d = after.since(&before);
        assert_eq!(d.reads(DmaPurpose::Payload), 3, "one read per SGE");
        assert_eq!(d.read_bytes(DmaPurpose::Payload), want.len() as u64);
    }
    let wc = poll_all(&cq);
    assert_eq!(wc.len(), 3, "{wc:?}");
    assert!(wc.iter().all(|w| w.status == WcStatus::Success), "{wc:?}");
    let recv = wc.iter().find(|w| w.wr_id == 2).unwrap();
    assert_eq!(recv.byte_len as usize, want.len());
    for at in [0, 8192] {
        let mut got = vec![0u8; want.len()];
        dst.read(at, &mut got).unwrap();
        assert!(got == want, "bytes at {at} differ from the SGEs'");
    }
}
