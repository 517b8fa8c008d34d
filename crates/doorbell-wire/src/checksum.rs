//! The Internet checksum (RFC 1071) for the IPv4 header and UDP.

/// Adds `data` to a running one's-complement sum of big-endian 16-bit words;
/// an odd final byte is padded with zero. Feed pieces of even length except
/// the last.
pub fn ones_sum(mut acc: u64, data: &[u8]) -> u64 {
    // Four bytes at a time: a big-endian u32 is two 16-bit words, and
    // `hi * 2^16 + lo` is `hi + lo` modulo 2^16 - 1, which is all a
    // one's-complement sum keeps (`fold` carries the rest around).
    let mut quads = data.chunks_exact(4);
    for q in &mut quads {
        acc += u64::from(u32::from_be_bytes([q[0], q[1], q[2], q[3]]));
    }
    match *quads.remainder() {
        [a, b, c] => acc += u64::from(u16::from_be_bytes([a, b])) + (u64::from(c) << 8),
        [a, b] => acc += u64::from(u16::from_be_bytes([a, b])),
        [a] => acc += u64::from(a) << 8,
        _ => {}
    }
    acc
}

/// Folds a running sum to 16 bits with end-around carry.
pub fn fold(mut acc: u64) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The Internet checksum of `data`: the complement of its one's-complement
/// sum. Over a header whose checksum field is filled in, a correct checksum
/// makes this return 0.
pub fn internet_checksum(data: &[u8]) -> u16 {
    !fold(ones_sum(0, data))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The RFC's definition, a 16-bit word at a time.
    fn by_words(data: &[u8]) -> u16 {
        let mut acc = 0u64;
        for w in data.chunks(2) {
            acc += u64::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]));
        }
        fold(acc)
    }

    proptest::proptest! {
        #[test]
        fn four_bytes_at_a_time_sum_as_words_do(
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            cut in 0usize..100,
        ) {
            proptest::prop_assert_eq!(fold(ones_sum(0, &data)), by_words(&data));
            // Pieces of even length, then the rest, sum as the whole.
            let cut = (cut * 2).min(data.len() & !1);
            let (a, b) = data.split_at(cut);
            proptest::prop_assert_eq!(fold(ones_sum(ones_sum(0, a), b)), by_words(&data));
        }
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: words 0001 f203 f4f5 f6f7 sum to ddf2 (before complement).
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(ones_sum(0, &d)), 0xddf2);
        assert_eq!(internet_checksum(&d), !0xddf2);
        assert_eq!(internet_checksum(&[0xab]), !0xab00);
    }
}
