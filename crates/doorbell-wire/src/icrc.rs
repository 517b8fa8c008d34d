//! Invariant CRC (IBTA Vol 1 §7.8.1, RoCEv2 annex A17.4.3.1; reference A.6).
//!
//! CRC-32 (the zlib/`crc32fast` one) over eight 0xFF bytes standing in for
//! the IB LRH, then the packet from the IP header to the end of the pad, with
//! the fields routers may change forced to all ones:
//!
//! | header | masked to all ones |
//! |---|---|
//! | IPv4 | DSCP/ECN byte, TTL, header checksum |
//! | IPv6 | traffic class, flow label, hop limit |
//! | UDP | checksum |
//! | BTH | byte 4 (FECN, BECN, reserved) |
//!
//! The IP and UDP lengths are covered as they are, so they must already count
//! the 4 ICRC bytes. The result goes on the wire least-significant byte first
//! (`icrc.to_le_bytes()`).
//!
//! Nothing here allocates: the masked headers are copied to a small stack
//! buffer and the payload is fed to the hasher in place.

use crc32fast::Hasher;

use crate::{bth, ipv4, ipv6, udp};

/// CRC-32 of the eight 0xFF bytes that stand in for the LRH: the finished
/// value, `!0xDEBB20E3` (rxe seeds its raw state with 0xDEBB20E3).
pub const LRH_SEED: u32 = !0xdebb_20e3;

/// Length of the ICRC trailer.
pub const ICRC_LEN: usize = 4;

/// Largest masked prefix: IPv4 with 40 bytes of options, UDP, BTH.
const MAX_PREFIX: usize = 60 + udp::HEADER_LEN + bth::HEADER_LEN;

/// Packets up to this long are copied to the stack whole, and hashed in
/// one update: the CRC's folding path needs 64 bytes, and two short
/// updates (the masked headers, then the rest) cost a third more than one
/// (a 60-byte ACK: 33 against 25 ns on the 2-core VM of
/// docs/benchmarks.md).
const WHOLE_MAX: usize = 256;
const _: () = assert!(WHOLE_MAX >= MAX_PREFIX, "the masked prefix fits");

/// Hashes `packet`, copying its first `prefix_len` bytes (the whole packet,
/// if short) to the stack and OR-ing each `(offset, bits)` of `masks` into
/// them. Offsets at or past the masked prefix are skipped, so short input
/// cannot panic.
fn masked_crc(packet: &[u8], prefix_len: usize, masks: &[(usize, u8)]) -> u32 {
    let n = prefix_len.min(packet.len()).min(MAX_PREFIX);
    let copied = if packet.len() <= WHOLE_MAX {
        packet.len()
    } else {
        n
    };
    let mut buf = [0u8; WHOLE_MAX];
    buf[..copied].copy_from_slice(&packet[..copied]);
    for &(i, bits) in masks {
        if i < n {
            buf[i] |= bits;
        }
    }
    let mut h = Hasher::new_with_initial(LRH_SEED);
    h.update(&buf[..copied]);
    h.update(&packet[copied..]);
    h.finalize()
}

/// Masks of an IPv4 packet: the length of the masked prefix (IP, UDP and
/// BTH headers, the IP header `IHL` × 4 bytes long) and each `(offset,
/// bits)` set to ones.
fn ipv4_masks(packet: &[u8]) -> (usize, [(usize, u8); 7]) {
    let ihl = match packet.first() {
        Some(b) => usize::from(b & 0x0f) * 4,
        None => ipv4::HEADER_LEN,
    };
    let udp_at = ihl;
    let bth_at = udp_at + udp::HEADER_LEN;
    (
        bth_at + bth::HEADER_LEN,
        [
            (ipv4::field::DSCP_ECN, 0xff),
            (ipv4::field::TTL, 0xff),
            (ipv4::field::CHECKSUM.start, 0xff),
            (ipv4::field::CHECKSUM.start + 1, 0xff),
            (udp_at + udp::field::CHECKSUM.start, 0xff),
            (udp_at + udp::field::CHECKSUM.start + 1, 0xff),
            (bth_at + bth::field::FECN_BECN, 0xff),
        ],
    )
}

/// Masks of an IPv6 packet, as [`ipv4_masks`].
fn ipv6_masks() -> (usize, [(usize, u8); 8]) {
    let udp_at = ipv6::HEADER_LEN;
    let bth_at = udp_at + udp::HEADER_LEN;
    let tc_flow = ipv6::field::VER_TC_FLOW;
    (
        bth_at + bth::HEADER_LEN,
        [
            // Traffic class and flow label: all of the first word but the
            // version nibble.
            (tc_flow.start, 0x0f),
            (tc_flow.start + 1, 0xff),
            (tc_flow.start + 2, 0xff),
            (tc_flow.start + 3, 0xff),
            (ipv6::field::HOP_LIMIT, 0xff),
            (udp_at + udp::field::CHECKSUM.start, 0xff),
            (udp_at + udp::field::CHECKSUM.start + 1, 0xff),
            (bth_at + bth::field::FECN_BECN, 0xff),
        ],
    )
}

/// ICRC of an IPv4 RoCEv2 packet. `packet` runs from the first byte of the
/// IPv4 header to the last pad byte (the ICRC itself excluded). The UDP
/// header is found after IHL × 4 bytes.
///
/// Never panics; on input shorter than its IP, UDP and BTH headers the
/// result is a CRC of what is there and matches no valid packet.
pub fn icrc_ipv4(packet: &[u8]) -> u32 {
    let (prefix, masks) = ipv4_masks(packet);
    masked_crc(packet, prefix, &masks)
}

/// ICRC of an IPv6 RoCEv2 packet (no extension headers). `packet` runs from
/// the first byte of the IPv6 header to the last pad byte.
///
/// Never panics; see [`icrc_ipv4`] for short input.
pub fn icrc_ipv6(packet: &[u8]) -> u32 {
    let (prefix, masks) = ipv6_masks();
    masked_crc(packet, prefix, &masks)
}

/// [`icrc_ipv4`], hashing the packet where it lies: the masked fields are
/// set to ones for the hash and put back after it, so that the packet is
/// hashed in one update, not its headers from a copy and then the rest (a
/// 1 KiB packet in about two thirds of the time). `packet` is as it was
/// when this returns.
pub fn icrc_ipv4_in_place(packet: &mut [u8]) -> u32 {
    let (prefix, masks) = ipv4_masks(packet);
    masked_crc_in_place(packet, prefix, &masks)
}

/// [`icrc_ipv6`], hashing the packet where it lies, as
/// [`icrc_ipv4_in_place`].
pub fn icrc_ipv6_in_place(packet: &mut [u8]) -> u32 {
    let (prefix, masks) = ipv6_masks();
    masked_crc_in_place(packet, prefix, &masks)
}

/// [`masked_crc`] without the copy: ORs the masks into `packet` itself,
/// hashes it whole, and restores the bytes it changed. Short packets are
/// copied anyway, as `masked_crc` does; their copy is the cheaper part.
fn masked_crc_in_place(packet: &mut [u8], prefix_len: usize, masks: &[(usize, u8)]) -> u32 {
    if packet.len() <= WHOLE_MAX {
        return masked_crc(packet, prefix_len, masks);
    }
    with_masks(packet, prefix_len, masks, crc_from_seed)
}

/// The CRC of `bytes`, continued from [`LRH_SEED`].
fn crc_from_seed(bytes: &[u8]) -> u32 {
    let mut h = Hasher::new_with_initial(LRH_SEED);
    h.update(bytes);
    h.finalize()
}

/// Runs `f` on `packet` with each `(offset, bits)` of `masks` inside its
/// first `prefix_len` bytes OR-ed in, then puts the bytes it changed back.
fn with_masks<R>(
    packet: &mut [u8],
    prefix_len: usize,
    masks: &[(usize, u8)],
    f: impl FnOnce(&[u8]) -> R,
) -> R {
    let n = prefix_len.min(MAX_PREFIX);
    let mut saved = [0u8; 8];
    for (k, &(i, bits)) in masks.iter().enumerate().take(saved.len()) {
        if i < n && i < packet.len() {
            saved[k] = packet[i];
            packet[i] |= bits;
        }
    }
    let r = f(packet);
    // In reverse, so that an offset given twice gets its first byte back.
    for (k, &(i, _)) in masks.iter().enumerate().take(saved.len()).rev() {
        if i < n && i < packet.len() {
            packet[i] = saved[k];
        }
    }
    r
}

/// [`icrc_ipv4_in_place`] of two packets, hashed together by `hash`: given
/// the two masked packets, it answers each one's CRC-32 (the one
/// `crc32fast` computes) continued from [`LRH_SEED`], as
/// `crc32fast::Hasher::new_with_initial(LRH_SEED)` would. A caller that
/// can fold two CRCs side by side (where one short packet's fold cannot
/// keep a wide multiplier busy) hashes both in little more than the time
/// of one. Packets short enough to be copied
/// ([`icrc_ipv4_in_place`]) are hashed one by one, without `hash`. Both
/// packets are as they were when this returns.
pub fn icrc_ipv4_in_place_pair(
    a: &mut [u8],
    b: &mut [u8],
    hash: impl FnOnce([&[u8]; 2]) -> [u32; 2],
) -> [u32; 2] {
    if a.len() <= WHOLE_MAX || b.len() <= WHOLE_MAX {
        return [icrc_ipv4_in_place(a), icrc_ipv4_in_place(b)];
    }
    let (pa, ma) = ipv4_masks(a);
    let (pb, mb) = ipv4_masks(b);
    with_masks(a, pa, &ma, |a| with_masks(b, pb, &mb, |b| hash([a, b])))
}

/// The CRC an IPv4 RoCEv2 packet's ICRC starts from before its UDP
/// payload: [`LRH_SEED`] continued over `headers`, its IPv4 header (`IHL`
/// × 4 bytes) and UDP header, masked as the ICRC masks them. A packet's
/// [`icrc_ipv4`] is this continued over its UDP payload (BTH on, ICRC
/// excluded) with its BTH masked, as `crc32fast::Hasher::new_with_initial`
/// continues a CRC ([`icrc_datagram`]): packets whose headers differ in
/// no byte the ICRC reads share this part (the datagrams of one segmented
/// send).
pub fn icrc_ipv4_headers(headers: &[u8]) -> u32 {
    let (_, masks) = ipv4_masks(headers);
    masked_crc(headers, headers.len(), &masks)
}

/// Where in a RoCEv2 packet's UDP payload the byte lies that its ICRC
/// reads as all ones (the BTH's FECN, BECN and reserved bits).
const BTH_MASKED: usize = bth::field::FECN_BECN;

/// Runs `f` on `datagram` without its ICRC field (its last
/// [`ICRC_LEN`] bytes), the BTH byte the ICRC masks set to ones, and puts
/// that byte back.
fn datagram_masked<R>(datagram: &mut [u8], f: impl FnOnce(&[u8]) -> R) -> R {
    let covered = datagram.len().saturating_sub(ICRC_LEN);
    with_masks(
        &mut datagram[..covered],
        BTH_MASKED + 1,
        &[(BTH_MASKED, 0xff)],
        f,
    )
}

/// The ICRC of an IPv4 RoCEv2 packet given as the CRC of its IPv4 and UDP
/// headers (`headers`, from [`icrc_ipv4_headers`]) and its UDP payload
/// `datagram`, BTH first and ICRC field last (not read): the packet's
/// [`icrc_ipv4`], hashed where it lies as [`icrc_ipv4_in_place`]. The
/// datagrams of one segmented send share their headers' CRC, so it is
/// hashed once for all of them. `datagram` is as it was when this
/// returns.
///
/// Never panics; a datagram too short for a BTH and an ICRC gets a CRC
/// that matches no valid packet.
pub fn icrc_datagram(headers: u32, datagram: &mut [u8]) -> u32 {
    datagram_masked(datagram, |d| {
        let mut h = Hasher::new_with_initial(headers);
        h.update(d);
        h.finalize()
    })
}

/// [`icrc_datagram`] of two datagrams behind headers whose CRC is
/// `headers`, hashed together by `hash`: given that CRC and the two
/// masked datagrams without their ICRC fields, it answers each one's
/// CRC-32 continued from it, as
/// `crc32fast::Hasher::new_with_initial(headers)` would (see
/// [`icrc_ipv4_in_place_pair`] for why a caller hashes two together).
/// Both datagrams are as they were when this returns.
pub fn icrc_datagram_pair(
    headers: u32,
    a: &mut [u8],
    b: &mut [u8],
    hash: impl FnOnce(u32, [&[u8]; 2]) -> [u32; 2],
) -> [u32; 2] {
    datagram_masked(a, |a| datagram_masked(b, |b| hash(headers, [a, b])))
}

/// Each packet's CRC, one after the other: what the hash given to
/// [`icrc_ipv4_in_place_pair`] must answer, for tests.
#[cfg(test)]
pub(crate) fn pair_one_by_one(p: [&[u8]; 2]) -> [u32; 2] {
    p.map(crc_from_seed)
}

/// ICRC of a packet of either IP version, chosen by its version nibble;
/// `None` if it is neither 4 nor 6.
pub fn icrc(packet: &[u8]) -> Option<u32> {
    match packet.first().map(|b| b >> 4) {
        Some(4) => Some(icrc_ipv4(packet)),
        Some(6) => Some(icrc_ipv6(packet)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn seed_is_crc_of_eight_ones() {
        assert_eq!(crc32fast::hash(&[0xff; 8]), LRH_SEED);
    }

    /// The obvious, allocating implementation.
    fn reference(packet: &[u8], masks: &[usize], v6: bool) -> u32 {
        let mut m = std::vec::Vec::from(packet);
        if v6 {
            m[0] |= 0x0f;
        }
        for &i in masks {
            m[i] = 0xff;
        }
        let mut all = std::vec![0xffu8; 8];
        all.extend_from_slice(&m);
        crc32fast::hash(&all)
    }

    proptest! {
        #[test]
        fn a_pair_is_hashed_as_each_alone(
            a in proptest::collection::vec(any::<u8>(), 40..1200),
            b in proptest::collection::vec(any::<u8>(), 40..1200),
        ) {
            let (mut a, mut b) = (a, b);
            a[0] = 0x45;
            b[0] = 0x45;
            let (a0, b0) = (a.clone(), b.clone());
            let got = icrc_ipv4_in_place_pair(&mut a, &mut b, pair_one_by_one);
            prop_assert_eq!(got, [icrc_ipv4(&a0), icrc_ipv4(&b0)]);
            prop_assert_eq!(a, a0, "the first packet is as it was");
            prop_assert_eq!(b, b0, "the second packet is as it was");
        }

        #[test]
        fn a_datagram_behind_its_headers_crc_is_hashed_as_its_packet(
            headers in proptest::collection::vec(any::<u8>(), 28),
            a in proptest::collection::vec(any::<u8>(), 0..1200),
            b in proptest::collection::vec(any::<u8>(), 0..1200),
        ) {
            let mut headers = headers;
            headers[0] = 0x45;
            let from = icrc_ipv4_headers(&headers);
            // The packet as `icrc_ipv4` takes it: its ICRC field left out.
            let packet = |d: &[u8]| {
                let mut p = headers.clone();
                p.extend_from_slice(&d[..d.len().saturating_sub(ICRC_LEN)]);
                icrc_ipv4(&p)
            };
            let (mut a, mut b) = (a, b);
            let (a0, b0) = (a.clone(), b.clone());
            // Short datagrams (no whole BTH) are hashed, not checked: they
            // must only not panic.
            let long = |d: &[u8]| d.len() >= bth::HEADER_LEN + ICRC_LEN;
            let one = icrc_datagram(from, &mut a);
            if long(&a0) {
                prop_assert_eq!(one, packet(&a0));
            }
            let pair = icrc_datagram_pair(from, &mut a, &mut b, |from, p| {
                p.map(|d| {
                    let mut h = Hasher::new_with_initial(from);
                    h.update(d);
                    h.finalize()
                })
            });
            prop_assert_eq!(pair[0], one, "a pair's first is hashed as alone");
            if long(&b0) {
                prop_assert_eq!(pair[1], packet(&b0));
            }
            prop_assert_eq!(a, a0, "the first datagram is as it was");
            prop_assert_eq!(b, b0, "the second datagram is as it was");
        }

        #[test]
        fn matches_reference_v4(body in proptest::collection::vec(any::<u8>(), 40..400)) {
            let mut p = body;
            p[0] = 0x45;
            prop_assert_eq!(icrc_ipv4(&p), reference(&p, &[1, 8, 10, 11, 26, 27, 32], false));
        }

        #[test]
        fn matches_reference_v6(body in proptest::collection::vec(any::<u8>(), 60..400)) {
            let mut p = body;
            p[0] = 0x60 | (p[0] & 0x0f);
            prop_assert_eq!(icrc_ipv6(&p), reference(&p, &[1, 2, 3, 7, 46, 47, 52], true));
        }

        #[test]
        fn in_place_matches_reference_and_leaves_the_packet(
            body in proptest::collection::vec(any::<u8>(), 0..2000),
            ihl in 5u8..16,
        ) {
            let mut p = body;
            if let Some(b) = p.first_mut() {
                *b = 0x40 | ihl;
            }
            let before = p.clone();
            prop_assert_eq!(icrc_ipv4_in_place(&mut p), icrc_ipv4(&before));
            prop_assert_eq!(&p, &before);
            let h = usize::from(ihl) * 4;
            if p.len() > h + 12 {
                let masks = [1, 8, 10, 11, h + 6, h + 7, h + 8 + 4];
                prop_assert_eq!(icrc_ipv4_in_place(&mut p), reference(&before, &masks, false));
            }
            if let Some(b) = p.first_mut() {
                *b = 0x60 | ihl;
            }
            let before = p.clone();
            prop_assert_eq!(icrc_ipv6_in_place(&mut p), icrc_ipv6(&before));
            prop_assert_eq!(&p, &before);
            if p.len() >= 60 {
                prop_assert_eq!(
                    icrc_ipv6_in_place(&mut p),
                    reference(&before, &[1, 2, 3, 7, 46, 47, 52], true)
                );
            }
        }

        #[test]
        fn never_panics(p in proptest::collection::vec(any::<u8>(), 0..100)) {
            let _ = icrc_ipv4(&p);
            let _ = icrc_ipv6(&p);
            let _ = icrc(&p);
            let mut q = p.clone();
            let _ = icrc_ipv4_in_place(&mut q);
            let _ = icrc_ipv6_in_place(&mut q);
        }
    }
}
