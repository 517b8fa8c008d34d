//! Integration tests of doorbell-wire (STYLE R15: one binary per crate).
//!
//! `scapy_vectors` holds frames built by scapy's `scapy.contrib.roce`
//! (generator: `tests/gen_vectors.py`, exact python there). For each one we
//! check that `parse_roce` accepts scapy's ICRC and decodes the headers, and
//! that `RoceRepr::emit` of the same headers reproduces scapy's bytes
//! exactly, ICRC and (IPv6) UDP checksum included.

mod scapy_vectors;

use doorbell_types::{Psn, Qpn, Rkey};
use doorbell_wire::icrc::icrc;
use doorbell_wire::{
    AethRepr, AethSyndrome, AtomicEthRepr, BthOpcode, BthRepr, DethRepr, Error, ExtHeaders,
    ImmDtRepr, RethRepr, RoceIp, RoceRepr, parse_roce,
};

fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2));
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

const SRC4: [u8; 4] = [192, 0, 2, 1];
const DST4: [u8; 4] = [192, 0, 2, 2];

/// scapy's IPv4 defaults: tos 0, id 1, no flags, ttl 64.
fn scapy_v4() -> RoceIp {
    RoceIp::V4 {
        src: SRC4,
        dst: DST4,
        dscp_ecn: 0,
        ident: 1,
        dont_frag: false,
        ttl: 64,
    }
}

fn v6_addr(last: u8) -> [u8; 16] {
    let mut a = [0; 16];
    a[0] = 0xfd;
    a[15] = last;
    a
}

/// Checks one scapy frame both ways.
fn check(hex: &str, repr: RoceRepr, payload: &[u8]) {
    let frame = unhex(hex);

    // Our ICRC equals scapy's, stored least-significant byte first.
    let n = frame.len() - 4;
    let wire = u32::from_le_bytes(frame[n..].try_into().unwrap());
    assert_eq!(icrc(&frame[..n]), Some(wire), "ICRC");

    // Parse accepts it and finds the same headers and payload.
    let parsed = parse_roce(&frame).expect("scapy frame parses");
    assert_eq!(parsed.repr.ip, repr.ip);
    assert_eq!(parsed.repr.src_port, repr.src_port);
    assert_eq!(parsed.repr.ext, repr.ext);
    assert_eq!(
        parsed.repr.bth,
        BthRepr {
            pad_count: payload.len().wrapping_neg() as u8 & 3,
            ..repr.bth
        }
    );
    assert_eq!(&frame[parsed.payload.clone()], payload);

    // Emit of the same headers gives the same bytes.
    let mut ours = Vec::new();
    repr.emit_to_vec(payload, &mut ours).unwrap();
    assert_eq!(hex_of(&ours), hex_of(&frame));

    // And a flipped payload/pad bit is an ICRC error, which a NIC counts.
    let mut bad = frame.clone();
    bad[n - 1] ^= 0x01;
    assert_eq!(parse_roce(&bad), Err(Error::BadIcrc));
}

fn hex_of(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn v4_send_only() {
    let repr = RoceRepr {
        ip: scapy_v4(),
        src_port: 0xc001,
        bth: BthRepr {
            solicited: true,
            ack_req: true,
            ..BthRepr::new(BthOpcode::RcSendOnly, Qpn::new(0x12), Psn::new(0x12_3456))
        },
        ext: ExtHeaders::NONE,
    };
    check(scapy_vectors::V4_SEND_ONLY, repr, b"hello");
}

#[test]
fn v4_write_only_with_reth_and_pad() {
    let repr = RoceRepr {
        ip: RoceIp::V4 {
            src: SRC4,
            dst: DST4,
            dscp_ecn: 0x02,
            ident: 0x1234,
            dont_frag: true,
            ttl: 63,
        },
        src_port: 0xc123,
        bth: BthRepr {
            ack_req: true,
            ..BthRepr::new(
                BthOpcode::RcRdmaWriteOnly,
                Qpn::new(0xab_cdef),
                Psn::new(0xff_ffff),
            )
        },
        ext: ExtHeaders {
            reth: Some(RethRepr {
                va: 0x7f00_0000_1000,
                rkey: Rkey::from_raw(0x1234),
                dma_len: 13,
            }),
            ..ExtHeaders::NONE
        },
    };
    check(scapy_vectors::V4_WRITE_ONLY, repr, b"RoCE payload!");
}

#[test]
fn v4_ack() {
    let repr = RoceRepr {
        ip: scapy_v4(),
        src_port: 0xc002,
        bth: BthRepr::new(BthOpcode::RcAck, Qpn::new(0x11), Psn::new(7)),
        ext: ExtHeaders {
            aeth: Some(AethRepr {
                syndrome: AethSyndrome::Ack { credits: 0x1f },
                msn: 0x01_0203,
            }),
            ..ExtHeaders::NONE
        },
    };
    check(scapy_vectors::V4_ACK, repr, b"");
}

#[test]
fn v4_cnp_becn_is_masked() {
    let repr = RoceRepr {
        ip: scapy_v4(),
        src_port: 0xc003,
        bth: BthRepr {
            becn: true,
            ..BthRepr::new(BthOpcode::Cnp, Qpn::new(0x42), Psn::new(0))
        },
        ext: ExtHeaders::NONE,
    };
    check(scapy_vectors::V4_CNP, repr, b"");
}

#[test]
fn v4_ud_send_with_immediate() {
    let repr = RoceRepr {
        ip: scapy_v4(),
        src_port: 0xc004,
        bth: BthRepr::new(
            BthOpcode::UdSendOnlyWithImmediate,
            Qpn::new(1),
            Psn::new(0x100),
        ),
        ext: ExtHeaders {
            deth: Some(DethRepr {
                qkey: 0x1111_1111,
                src_qp: Qpn::new(0x33),
            }),
            immdt: Some(ImmDtRepr { imm: 0xcafe_f00d }),
            ..ExtHeaders::NONE
        },
    };
    check(
        scapy_vectors::V4_UD_SEND_IMM,
        repr,
        &[0, 1, 2, 3, 4, 5, 6, 7],
    );
}

#[test]
fn v4_compare_swap() {
    let repr = RoceRepr {
        ip: scapy_v4(),
        src_port: 0xc005,
        bth: BthRepr {
            ack_req: true,
            ..BthRepr::new(BthOpcode::RcCompareSwap, Qpn::new(0x99), Psn::new(0x42))
        },
        ext: ExtHeaders {
            atomic_eth: Some(AtomicEthRepr {
                va: 0x2000,
                rkey: Rkey::from_raw(0x77),
                swap_add: 0x1111_2222_3333_4444,
                compare: 0x5555_6666_7777_8888,
            }),
            ..ExtHeaders::NONE
        },
    };
    check(scapy_vectors::V4_CMP_SWAP, repr, b"");
}

#[test]
fn v6_send_only_with_immediate() {
    let repr = RoceRepr {
        ip: RoceIp::V6 {
            src: v6_addr(1),
            dst: v6_addr(2),
            traffic_class: 0x0a,
            flow_label: 0x12345,
            hop_limit: 64,
        },
        src_port: 0xc006,
        bth: BthRepr {
            ack_req: true,
            ..BthRepr::new(
                BthOpcode::RcSendOnlyWithImmediate,
                Qpn::new(0x200),
                Psn::new(0),
            )
        },
        ext: ExtHeaders {
            immdt: Some(ImmDtRepr { imm: 0x0102_0304 }),
            ..ExtHeaders::NONE
        },
    };
    check(scapy_vectors::V6_SEND_ONLY_IMM, repr, b"abcdef");
}

#[test]
fn v6_read_request() {
    let repr = RoceRepr {
        ip: RoceIp::v6(v6_addr(1), v6_addr(2)),
        src_port: 0xffff,
        bth: BthRepr {
            ack_req: true,
            ..BthRepr::new(
                BthOpcode::RcRdmaReadRequest,
                Qpn::new(0x300),
                Psn::new(0x80_0000),
            )
        },
        ext: ExtHeaders {
            reth: Some(RethRepr {
                va: 0x10,
                rkey: Rkey::from_raw(0xabcd),
                dma_len: 4096,
            }),
            ..ExtHeaders::NONE
        },
    };
    check(scapy_vectors::V6_READ_REQUEST, repr, b"");
}
