//! RoCEv2 frames and their headers, as `doorbell_wire` parses them.

use doorbell_rt::crc::crc32_pair;
use doorbell_wire::icrc::LRH_SEED;
use doorbell_wire::{
    AethHeader, AethRepr, AtomicAckEthHeader, AtomicAckEthRepr, AtomicEthHeader, AtomicEthRepr,
    BthHeader, BthOpcode, BthRepr, DethHeader, DethRepr, Error, ExtHeaders, IethHeader, IethRepr,
    ImmDtHeader, ImmDtRepr, RethHeader, RethRepr, icrc_matches_in_place,
    icrc_matches_in_place_pair, parse_roce, parse_roce_emitted, seal_roce, seal_roce_pair,
};

use crate::input::Input;

/// Target `roce_frame`: the input is a frame from its IP header on.
///
/// [`parse_roce`] and [`parse_roce_emitted`] must agree (they differ only
/// in the ICRC check), and a frame that parses must be rebuilt by
/// `RoceRepr::emit` into one that parses to the same headers and payload.
/// Checked or sealed beside another (the same bytes, and the same with
/// its last byte changed), with the runtime's two-at-a-time CRC, the
/// frame must fare as alone.
pub fn roce_frame(data: &[u8]) {
    in_pairs(data);
    let checked = parse_roce(data);
    let emitted = parse_roce_emitted(data);
    match (&checked, &emitted) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "the ICRC check changed what was parsed"),
        (Ok(_), Err(e)) => panic!("parses with its ICRC checked, not without: {e:?}"),
        (Err(Error::BadIcrc), _) => {}
        (Err(e), Ok(_)) => panic!("parses without its ICRC checked, not with: {e:?}"),
        (Err(a), Err(b)) => assert_eq!(a, b, "the ICRC check changed the error"),
    }
    let Ok(parsed) = emitted else { return };
    let payload = &data[parsed.payload.clone()];
    let mut out = Vec::new();
    parsed
        .repr
        .emit_to_vec(payload, &mut out)
        .expect("a parsed repr emits");
    assert_eq!(out.len(), parsed.repr.frame_len(payload.len()));
    let again = parse_roce(&out).expect("an emitted frame parses");
    assert_eq!(again.repr, parsed.repr, "emit changed the headers");
    assert_eq!(
        &out[again.payload.clone()],
        payload,
        "emit changed the payload"
    );
}

/// The pair functions against the one-frame ones, on `data` and a copy
/// whose last byte differs.
fn in_pairs(data: &[u8]) {
    let hash = |p: [&[u8]; 2]| crc32_pair(LRH_SEED, p);
    let mut other = data.to_vec();
    if let Some(last) = other.last_mut() {
        *last ^= 0x5a;
    }
    let (mut a, mut b) = (data.to_vec(), other.clone());
    let alone = [icrc_matches_in_place(&mut a), icrc_matches_in_place(&mut b)];
    assert_eq!(
        icrc_matches_in_place_pair(&mut a, &mut b, hash),
        alone,
        "checked in a pair, not as alone"
    );
    assert!(a == data && b == other, "a check changed the bytes");
    let (mut sa, mut sb) = (data.to_vec(), other.clone());
    let sealed = (seal_roce(&mut sa), seal_roce(&mut sb));
    let paired = seal_roce_pair(&mut a, &mut b, hash);
    match sealed {
        (Ok(()), Ok(())) => {
            assert_eq!(paired, Ok(()));
            assert!(a == sa && b == sb, "sealed in a pair, not as alone");
        }
        _ => {
            assert!(paired.is_err(), "a pair with no frame in it was sealed");
            assert!(a == data && b == other, "a failed seal changed the bytes");
        }
    }
}

/// Which header [`ext_header`] takes apart, by its first byte (mod 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderKind {
    /// BTH.
    Bth = 0,
    /// RETH.
    Reth = 1,
    /// AETH.
    Aeth = 2,
    /// AtomicETH.
    AtomicEth = 3,
    /// AtomicAckETH.
    AtomicAckEth = 4,
    /// ImmDt.
    ImmDt = 5,
    /// IETH.
    Ieth = 6,
    /// DETH.
    Deth = 7,
    /// The extension headers of an opcode, as a set (`ExtHeaders`); the
    /// opcode is the next byte.
    Set = 8,
}

impl HeaderKind {
    /// Every kind, by its number.
    pub const ALL: [Self; 9] = [
        Self::Bth,
        Self::Reth,
        Self::Aeth,
        Self::AtomicEth,
        Self::AtomicAckEth,
        Self::ImmDt,
        Self::Ieth,
        Self::Deth,
        Self::Set,
    ];
}

/// Parses a header view and repr, re-emits the repr into a buffer of
/// stale bytes and checks that it parses back the same.
macro_rules! roundtrip {
    ($bytes:expr, $view:ident, $repr:ident) => {{
        if let Ok(h) = $view::new_checked($bytes) {
            if let Ok(r) = $repr::parse(&h) {
                let mut buf = vec![0xa5u8; r.buffer_len()];
                r.emit(&mut $view::new_unchecked(&mut buf[..]));
                let back = $repr::parse(&$view::new_checked(&buf[..]).expect("emitted length"));
                assert_eq!(back, Ok(r), concat!(stringify!($repr), " round trip"));
            }
        }
    }};
}

/// Target `ext_header`: the first byte picks a [`HeaderKind`], the rest is
/// the header's bytes.
///
/// Every view's getters run after `new_checked`, every repr that parses
/// must emit and parse back to itself, and an `ExtHeaders` that parses must
/// fit its opcode and have the opcode's length.
pub fn ext_header(data: &[u8]) {
    let mut input = Input::new(data);
    let kind = HeaderKind::ALL[usize::from(input.u8()) % HeaderKind::ALL.len()];
    match kind {
        HeaderKind::Bth => {
            let bytes = input.rest();
            if let Ok(h) = BthHeader::new_checked(bytes) {
                let _ = (
                    h.opcode(),
                    h.solicited(),
                    h.mig_req(),
                    h.pad_count(),
                    h.tver(),
                );
                let _ = (
                    h.pkey(),
                    h.fecn(),
                    h.becn(),
                    h.dest_qp(),
                    h.ack_req(),
                    h.psn(),
                );
                let op = h.opcode();
                let _ = (op.is_request(), op.is_response(), op.is_uc(), op.rc_as_uc());
                let _ = (op.uc_as_rc(), op.ext_headers_len(), op.is_cnp());
            }
            roundtrip!(bytes, BthHeader, BthRepr);
        }
        HeaderKind::Reth => roundtrip!(input.rest(), RethHeader, RethRepr),
        HeaderKind::Aeth => {
            let bytes = input.rest();
            if let Ok(h) = AethHeader::new_checked(bytes) {
                let _ = (h.syndrome(), h.msn());
                if let Some(s) = doorbell_wire::AethSyndrome::decode(h.syndrome()) {
                    // Bit 7 is reserved: decode ignores it, encode writes 0.
                    assert_eq!(s.encode(), h.syndrome() & 0x7f, "AETH syndrome round trip");
                    let _ = s.is_ack();
                }
            }
            roundtrip!(bytes, AethHeader, AethRepr);
        }
        HeaderKind::AtomicEth => roundtrip!(input.rest(), AtomicEthHeader, AtomicEthRepr),
        HeaderKind::AtomicAckEth => {
            roundtrip!(input.rest(), AtomicAckEthHeader, AtomicAckEthRepr)
        }
        HeaderKind::ImmDt => roundtrip!(input.rest(), ImmDtHeader, ImmDtRepr),
        HeaderKind::Ieth => roundtrip!(input.rest(), IethHeader, IethRepr),
        HeaderKind::Deth => roundtrip!(input.rest(), DethHeader, DethRepr),
        HeaderKind::Set => {
            let opcode = BthOpcode::from(input.u8());
            let bytes = input.rest();
            let Ok(ext) = ExtHeaders::parse(opcode, bytes) else {
                return;
            };
            assert!(ext.fits(opcode), "parsed headers fit their opcode");
            let len = ext.buffer_len(opcode);
            assert_eq!(len, opcode.ext_headers_len());
            let mut buf = vec![0xa5u8; len];
            assert_eq!(ext.emit(opcode, &mut buf), len);
            assert_eq!(
                ExtHeaders::parse(opcode, &buf),
                Ok(ext),
                "ExtHeaders round trip"
            );
        }
    }
}
