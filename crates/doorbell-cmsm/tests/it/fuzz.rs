//! Garbage and well-formed-but-wrong MADs: no panic, no new handle, and the
//! connection already up stays up.

use doorbell_cm::{CmAttribute, CmMad, MAD_LEN, MadHeader, MadRepr};
use doorbell_cmsm::CmState;

use crate::harness::*;

/// xorshift64*: a seeded, dependency-free generator for the test.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn fill(&mut self, b: &mut [u8]) {
        for x in b {
            *x = self.next() as u8;
        }
    }
}

#[test]
fn random_mads_never_panic_and_never_create_a_connection() {
    let mut net = Net::new();
    let (a, b) = net.establish();
    let handles = net.b.conn_count();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut parsed = 0;
    for i in 0..20_000u32 {
        let mut buf = [0u8; MAD_LEN + 8];
        let len = (rng.next() % (buf.len() as u64 + 1)) as usize;
        rng.fill(&mut buf[..len]);
        if i % 2 == 0 {
            // A CM header and a random body: parses as one of the messages
            // more often than not, with IDs that name nothing.
            let attr = CmAttribute::from(0x10 + (rng.next() % 9) as u16);
            MadRepr::cm(attr, rng.next()).emit(&mut MadHeader::new_unchecked(&mut buf[..24]));
            if attr == CmAttribute::Req || attr == CmAttribute::SidrReq {
                // Not the service listened on.
                buf[24 + 8] ^= 0x80;
            }
        }
        let len = if i % 2 == 0 { MAD_LEN } else { len };
        if CmMad::parse(&buf[..len]).is_ok() {
            parsed += 1;
        }
        net.b.handle_mad(net.now, net.pa, &buf[..len]);
        while net.b.poll_transmit().is_some() {}
        assert!(net.b.poll_event().is_none(), "MAD {i} made an event");
        assert_eq!(net.b.conn_count(), handles, "MAD {i} made a handle");
    }
    assert!(
        parsed > 5_000,
        "the valid-but-wrong half mostly parses: {parsed}"
    );
    let st = net.b.stats();
    assert_eq!(st.received, 20_000 + 2);
    assert!(st.bad_mads >= 20_000 - parsed);
    assert_eq!(net.b.state(b), Some(CmState::Established));
    assert_eq!(net.a.state(a), Some(CmState::Established));
    assert!(net.b.poll_timeout().is_none(), "no timer started");
}

#[test]
fn the_real_conversation_from_another_gid_is_ignored() {
    let mut net = Net::new();
    net.establish();
    // Replay A's RTU from a third host: the right IDs, the wrong GID.
    let mut stranger = net.pa;
    stranger.gid = doorbell_wire::Gid::from_ipv4([10, 0, 0, 99]);
    let rtus: Vec<_> = net
        .sent(Side::A, CmAttribute::Rtu)
        .iter()
        .map(|s| s.bytes)
        .collect();
    for bytes in rtus {
        net.b.handle_mad(net.now, stranger, &bytes);
    }
    assert!(net.b.poll_event().is_none());
    assert!(net.b.poll_transmit().is_none());
    assert_eq!(net.b.stats().unmatched, 1);
}
