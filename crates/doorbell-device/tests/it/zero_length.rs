//! RDMA WRITEs and READs of no bytes: the responder checks neither the key
//! nor the address (IBTA C9-88), so a connection can be flushed or probed
//! with one (UCX does), and a WRITE of none touches no memory.

use doorbell_types::{Mkey, Psn};
use doorbell_wire::{AethSyndrome, BthOpcode, ExtHeaders, RethRepr, parse_roce};

use crate::{EPSN, Rig, aeth_of};

fn reth(rkey: Mkey) -> ExtHeaders {
    ExtHeaders {
        reth: Some(RethRepr {
            va: 0xdead_0000,
            rkey,
            dma_len: 0,
        }),
        ..ExtHeaders::default()
    }
}

#[test]
fn a_write_of_no_bytes_checks_no_key_and_is_acked() {
    let mut rig = Rig::new();
    let before = rig.mr_bytes(0, 64);
    let f = rig.request(
        BthOpcode::RcRdmaWriteOnly,
        EPSN,
        reth(Mkey::from_raw(0x1234_5678)),
        &[],
    );
    let out = rig.frame(&f);
    assert!(matches!(aeth_of(&out), AethSyndrome::Ack { .. }), "{out:?}");
    assert_eq!(rig.counters().rx_write_requests, 1);
    assert_eq!(rig.mr_bytes(0, 64), before, "no memory touched");
    // A WRITE of some bytes under the same key is still refused.
    let mut bad = reth(Mkey::from_raw(0x1234_5678));
    if let Some(r) = &mut bad.reth {
        r.dma_len = 8;
    }
    let f = rig.request(BthOpcode::RcRdmaWriteOnly, EPSN + 1, bad, &[0; 8]);
    assert!(!matches!(aeth_of(&rig.frame(&f)), AethSyndrome::Ack { .. }));
}

#[test]
fn a_read_of_no_bytes_checks_no_key_and_is_answered_empty() {
    let mut rig = Rig::new();
    let f = rig.request(
        BthOpcode::RcRdmaReadRequest,
        EPSN,
        reth(Mkey::from_raw(0x1234_5678)),
        &[],
    );
    let out = rig.frame(&f);
    assert_eq!(out.len(), 1, "one response: {out:?}");
    let r = parse_roce(&out[0].bytes).unwrap();
    assert_eq!(r.repr.bth.opcode, BthOpcode::RcRdmaReadResponseOnly);
    assert_eq!(r.repr.bth.psn, Psn::new(EPSN));
    assert!(r.payload.is_empty());
}
