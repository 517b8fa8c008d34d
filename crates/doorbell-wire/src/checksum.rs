//! The Internet checksum (RFC 1071) for the IPv4 header and UDP.

/// Adds `data` to a running one's-complement sum of big-endian 16-bit words;
/// an odd final byte is padded with zero. Feed pieces of even length except
/// the last.
pub fn ones_sum(mut acc: u64, data: &[u8]) -> u64 {
    let mut words = data.chunks_exact(2);
    for w in &mut words {
        acc += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [b] = words.remainder() {
        acc += u64::from(*b) << 8;
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

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: words 0001 f203 f4f5 f6f7 sum to ddf2 (before complement).
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(ones_sum(0, &d)), 0xddf2);
        assert_eq!(internet_checksum(&d), !0xddf2);
        assert_eq!(internet_checksum(&[0xab]), !0xab00);
    }
}
