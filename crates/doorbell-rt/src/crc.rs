//! CRC-32 of two buffers at once, for the ICRCs of frames that leave
//! through a port ([`doorbell_wire::seal_roce_pair`]).
//!
//! # Model
//! A packet's CRC is a fold: each 16-byte lane of the input is carried
//! forward by a carry-less multiply by a constant and XOR-ed into the
//! lane a fixed distance on, and the last lane is reduced to 32 bits
//! (Gopal et al., "Fast CRC Computation for Generic Polynomials Using
//! PCLMULQDQ Instruction", Intel, 2009). `crc32fast` folds a 1 064-byte
//! packet with 256-bit multiplies in about 40 ns on the 2-core VM of
//! `docs/benchmarks.md`, and two packets interleaved that way take no
//! less: the multiplier is busy. A 512-bit multiply does twice the work,
//! but one packet that short is too few steps to keep it busy: collapsing
//! the lanes and reducing them is a chain of dependent multiplies (about
//! 53 ns for the packet). Two packets' chains side by side keep it busy:
//! both in about 49 ns.
//!
//! Here each buffer is folded as eight lanes in two 512-bit registers
//! (`VPCLMULQDQ` on AVX-512), the two buffers' registers side by side;
//! the lanes collapse into one as a tree (four lanes 512 bits on, two
//! 256, one 128: three dependent folds where one lane after another
//! would take seven), and the whole 16-byte blocks left are folded in.
//! The bytes after the last whole block (fewer than 16) take one more
//! fold: two byte shuffles make them and the last lane into two whole
//! lanes. The Barrett reduction then gives 32 bits. Where the longer
//! buffer has a fold's worth of bytes or more past the shorter one's last
//! fold, all of those go through `crc32fast`. A CPU without those
//! instructions, or a buffer shorter than one fold's 128 bytes, is hashed
//! by `crc32fast`, one buffer after the other.
//!
//! The constants are `x^n mod P` for the reflected polynomial `P` =
//! 0x104C11DB7, bit-reflected and shifted left by one, for the fold
//! distances used (1024 bits between a lane and the one it is folded
//! into; 512, 256 and 128 bits while collapsing, then 64), and `P` and
//! `floor(x^64 / P)` for the reduction. A test derives them from the polynomial.

/// The CRC-32 of each buffer (IEEE, reflected: `crc32fast`'s), continued
/// from the finished CRC `init`, as `crc32fast::Hasher::new_with_initial`
/// would give it.
pub fn crc32_pair(init: u32, bufs: [&[u8]; 2]) -> [u32; 2] {
    #[cfg(target_arch = "x86_64")]
    if bufs.iter().all(|b| b.len() >= x86::BLOCK) && x86::available() {
        // SAFETY: `available` found every CPU feature `fold_pair` is
        // compiled for.
        let folded = unsafe { x86::fold_pair(init, bufs) };
        // The bytes the fold left, if any, through `crc32fast`.
        return [0, 1].map(|i| {
            let (crc, at) = folded[i];
            if at == bufs[i].len() {
                crc
            } else {
                one(crc, &bufs[i][at..])
            }
        });
    }
    bufs.map(|b| one(init, b))
}

/// `crc32fast`'s CRC of `buf`, continued from `init`.
fn one(init: u32, buf: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(init);
    h.update(buf);
    h.finalize()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::{
        __m128i, __m256i, __m512i, _mm_and_si128, _mm_blendv_epi8, _mm_clmulepi64_si128,
        _mm_cvtsi32_si128, _mm_extract_epi32, _mm_loadu_si128, _mm_set_epi64x, _mm_setr_epi32,
        _mm_shuffle_epi8, _mm_srli_si128, _mm_xor_si128, _mm256_castsi256_si128,
        _mm256_clmulepi64_epi128, _mm256_extracti128_si256, _mm256_set_epi64x, _mm256_xor_si256,
        _mm512_castsi128_si512, _mm512_castsi512_si256, _mm512_clmulepi64_epi128,
        _mm512_extracti64x4_epi64, _mm512_loadu_si512, _mm512_set_epi64, _mm512_ternarylogic_epi64,
        _mm512_xor_si512,
    };

    /// Bytes folded per step: two 512-bit registers of four lanes each.
    pub(super) const BLOCK: usize = 128;

    /// Folds a lane 1024 bits on: `x^(1024+32)` and `x^(1024-32)` mod P.
    pub(super) const K1024: (i64, i64) = (0x1_e88e_f372, 0x1_4a7f_e880);
    /// Folds a lane 512 bits on: `x^(512+32)` and `x^(512-32)` mod P.
    pub(super) const K512: (i64, i64) = (0x1_5444_2bd4, 0x1_c6e4_1596);
    /// Folds a lane 256 bits on: `x^(256+32)` and `x^(256-32)` mod P.
    pub(super) const K256: (i64, i64) = (0x0_f1da_05aa, 0x1_5a54_6366);
    /// Folds a lane 128 bits on: `x^(128+32)` and `x^(128-32)` mod P.
    pub(super) const K128: (i64, i64) = (0x1_7519_97d0, 0x0_ccaa_009e);
    /// Folds 64 bits on: `x^64` mod P.
    pub(super) const K64: i64 = 0x1_63cd_6124;
    /// P itself, and the Barrett constant `floor(x^64 / P)`, reflected.
    pub(super) const P: i64 = 0x1_db71_0641;
    pub(super) const MU: i64 = 0x1_f701_1641;

    /// Whether this CPU folds with `VPCLMULQDQ` on AVX-512.
    pub(super) fn available() -> bool {
        std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("vpclmulqdq")
            && std::is_x86_feature_detected!("pclmulqdq")
            && std::is_x86_feature_detected!("sse4.1")
    }

    /// The CRC of the first bytes of each of two buffers of at least
    /// [`BLOCK`] bytes, continued from `init`, and how many bytes it
    /// covers: all of a buffer, or all but the longer buffer's bytes past
    /// the shorter one's last fold, which `crc32fast` hashes faster, where
    /// they are a fold or more.
    ///
    /// # Safety
    /// The CPU must have AVX-512F, VPCLMULQDQ, PCLMULQDQ and SSE4.1
    /// ([`available`]).
    #[target_feature(enable = "avx512f,vpclmulqdq,pclmulqdq,sse4.1")]
    pub(super) unsafe fn fold_pair(init: u32, bufs: [&[u8]; 2]) -> [(u32, usize); 2] {
        let blocks = bufs[0].len().min(bufs[1].len()) / BLOCK;
        let k = _mm512_set_epi64(
            K1024.1, K1024.0, K1024.1, K1024.0, K1024.1, K1024.0, K1024.1, K1024.0,
        );
        // The first block of each buffer, the running CRC (inverted, as
        // the fold carries it) XOR-ed into its first four bytes.
        let mut acc = bufs.map(|b| {
            let seed = _mm512_castsi128_si512(_mm_cvtsi32_si128(!init as i32));
            [_mm512_xor_si512(load512(b, 0), seed), load512(b, 64)]
        });
        for at in (1..blocks).map(|i| i * BLOCK) {
            for (a, b) in acc.iter_mut().zip(bufs) {
                a[0] = fold512(a[0], load512(b, at), k);
                a[1] = fold512(a[1], load512(b, at + 64), k);
            }
        }
        let mut out = [(0, 0); 2];
        for ((a, b), o) in acc.iter().zip(bufs).zip(&mut out) {
            *o = finish(a, b, blocks * BLOCK);
        }
        out
    }

    /// Collapses one buffer's eight lanes, folds in its whole 16-byte
    /// blocks from `at` if they are few, and reduces to 32 bits: the CRC
    /// so far, and where the rest starts.
    #[target_feature(enable = "avx512f,vpclmulqdq,pclmulqdq,sse4.1")]
    fn finish(acc: &[__m512i; 2], buf: &[u8], mut at: usize) -> (u32, usize) {
        // The eight lanes collapse as a tree, three dependent folds deep
        // rather than seven: the first register's lanes carried 512 bits
        // on onto the second's, the lower two of those 256 bits on onto
        // the upper two, and the first of those 128 bits on onto the last.
        let k512 = _mm512_set_epi64(
            K512.1, K512.0, K512.1, K512.0, K512.1, K512.0, K512.1, K512.0,
        );
        let four = fold512(acc[0], acc[1], k512);
        let k256 = _mm256_set_epi64x(K256.1, K256.0, K256.1, K256.0);
        let two = fold256(
            _mm512_castsi512_si256(four),
            _mm512_extracti64x4_epi64::<1>(four),
            k256,
        );
        let k128 = _mm_set_epi64x(K128.1, K128.0);
        let mut x = fold128(
            _mm256_castsi256_si128(two),
            _mm256_extracti128_si256::<1>(two),
            k128,
        );
        // A short rest block by block, and its last few bytes in one more
        // fold; a long one (a fold's worth or more, in the longer buffer of
        // a pair) through `crc32fast`, whose own fold is faster there than
        // one lane's.
        if buf.len() - at < BLOCK {
            while buf.len() - at >= 16 {
                x = fold128(x, load128(buf, at), k128);
                at += 16;
            }
            if at < buf.len() {
                x = fold_tail(x, buf, buf.len() - at, k128);
                at = buf.len();
            }
        }
        // 128 bits to 64: the high half folded onto the low, then the low
        // 32 bits of that onto the rest.
        let low32 = _mm_setr_epi32(-1, 0, -1, 0);
        x = _mm_xor_si128(
            _mm_srli_si128::<8>(x),
            _mm_clmulepi64_si128::<0x10>(x, k128),
        );
        let k64 = _mm_set_epi64x(0, K64);
        x = _mm_xor_si128(
            _mm_srli_si128::<4>(x),
            _mm_clmulepi64_si128::<0x00>(_mm_and_si128(x, low32), k64),
        );
        // Barrett: 64 bits to 32.
        let pmu = _mm_set_epi64x(MU, P);
        let q = _mm_clmulepi64_si128::<0x10>(_mm_and_si128(x, low32), pmu);
        let qp = _mm_clmulepi64_si128::<0x00>(_mm_and_si128(q, low32), pmu);
        (!(_mm_extract_epi32::<1>(_mm_xor_si128(x, qp)) as u32), at)
    }

    /// Folds in the last `rest` bytes of `buf` (1 to 15; `buf` holds at
    /// least 16), `x` being the lane of the 16 bytes before them. The
    /// bytes are `x` then the rest; with zeros before them, which add
    /// nothing, they are two whole lanes: the zeros and `x`'s first
    /// `rest` bytes, folded 128 bits on onto `x`'s other bytes followed by
    /// the rest.
    #[target_feature(enable = "pclmulqdq,sse4.1")]
    fn fold_tail(x: __m128i, buf: &[u8], rest: usize, k128: __m128i) -> __m128i {
        // Byte shuffles, by offset into this: from `rest`, one that moves
        // a lane's bytes `16 - rest` up (zeros below); from `16 + rest`,
        // one that moves them `rest` down (zeros above). A shuffle index
        // with its top bit set gives a zero byte.
        const SHIFTS: [u8; 48] = {
            let mut t = [0x80; 48];
            let mut i = 0;
            while i < 16 {
                t[16 + i] = i as u8;
                i += 1;
            }
            t
        };
        let up = load128(&SHIFTS, rest);
        let down = load128(&SHIFTS, 16 + rest);
        let first = _mm_shuffle_epi8(x, up);
        // `x`'s last `16 - rest` bytes, then the buffer's last `rest`: the
        // top bit of `up` is set below `16 - rest`, where it takes `x`'s.
        let last = load128(buf, buf.len() - 16);
        let second = _mm_blendv_epi8(last, _mm_shuffle_epi8(x, down), up);
        fold128(first, second, k128)
    }

    /// Carries each 128-bit lane of `x` forward by `k` and adds `data`.
    #[target_feature(enable = "avx512f,vpclmulqdq")]
    fn fold512(x: __m512i, data: __m512i, k: __m512i) -> __m512i {
        let lo = _mm512_clmulepi64_epi128::<0x00>(x, k);
        let hi = _mm512_clmulepi64_epi128::<0x11>(x, k);
        // 0x96: the XOR of all three.
        _mm512_ternarylogic_epi64::<0x96>(lo, hi, data)
    }

    /// [`fold512`] for two 128-bit lanes.
    #[target_feature(enable = "avx2,vpclmulqdq")]
    fn fold256(x: __m256i, data: __m256i, k: __m256i) -> __m256i {
        let lo = _mm256_clmulepi64_epi128::<0x00>(x, k);
        let hi = _mm256_clmulepi64_epi128::<0x11>(x, k);
        _mm256_xor_si256(_mm256_xor_si256(lo, hi), data)
    }

    /// [`fold512`] for one 128-bit lane.
    #[target_feature(enable = "pclmulqdq,sse4.1")]
    fn fold128(x: __m128i, data: __m128i, k: __m128i) -> __m128i {
        let lo = _mm_clmulepi64_si128::<0x00>(x, k);
        let hi = _mm_clmulepi64_si128::<0x11>(x, k);
        _mm_xor_si128(_mm_xor_si128(lo, hi), data)
    }

    /// The 64 bytes of `buf` from `at`.
    #[target_feature(enable = "avx512f")]
    fn load512(buf: &[u8], at: usize) -> __m512i {
        let bytes: &[u8; 64] = buf[at..at + 64].try_into().expect("64 bytes");
        // SAFETY: `bytes` is 64 readable bytes; the load is unaligned.
        unsafe { _mm512_loadu_si512(bytes.as_ptr().cast()) }
    }

    /// The 16 bytes of `buf` from `at`.
    #[target_feature(enable = "sse4.1")]
    fn load128(buf: &[u8], at: usize) -> __m128i {
        let bytes: &[u8; 16] = buf[at..at + 16].try_into().expect("16 bytes");
        // SAFETY: `bytes` is 16 readable bytes; the load is unaligned.
        unsafe { _mm_loadu_si128(bytes.as_ptr().cast()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `x^n mod P` (P = 0x104C11DB7, not reflected).
    #[cfg(target_arch = "x86_64")]
    fn x_pow_mod(n: u32) -> u64 {
        let mut r: u64 = 1;
        for _ in 0..n {
            r <<= 1;
            if r & (1 << 32) != 0 {
                r ^= 0x1_04c1_1db7;
            }
        }
        r
    }

    /// A fold constant as the reflected fold uses it.
    #[cfg(target_arch = "x86_64")]
    fn k(n: u32) -> i64 {
        (((x_pow_mod(n) as u32).reverse_bits() as u64) << 1) as i64
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_constants_are_derived_from_the_polynomial() {
        assert_eq!(x86::K1024, (k(1024 + 32), k(1024 - 32)));
        assert_eq!(x86::K512, (k(512 + 32), k(512 - 32)));
        assert_eq!(x86::K256, (k(256 + 32), k(256 - 32)));
        assert_eq!(x86::K128, (k(128 + 32), k(128 - 32)));
        assert_eq!(x86::K64, k(64));
        // P reflected (33 bits, shifted as the constants are).
        assert_eq!(
            x86::P,
            ((0x04c1_1db7u32.reverse_bits() as u64) << 1 | 1) as i64
        );
        // floor(x^64 / P), by long division, reflected over 33 bits.
        let mut rem: u128 = 1 << 64;
        let mut q: u64 = 0;
        for bit in (0..=32).rev() {
            if rem & (1u128 << (bit + 32)) != 0 {
                rem ^= 0x1_04c1_1db7u128 << bit;
                q |= 1 << bit;
            }
        }
        assert_eq!(
            x86::MU,
            ((((q as u32).reverse_bits() as u64) << 1) | (q >> 32)) as i64
        );
    }

    /// Bytes that look like nothing in particular.
    fn bytes(n: usize, seed: u32) -> Vec<u8> {
        (0..n as u32)
            .map(|i| (i.wrapping_add(seed).wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect()
    }

    #[test]
    fn a_pair_hashes_as_crc32fast_does_for_every_length_and_alignment() {
        let data = bytes(7000, 7);
        for len in (0usize..300).chain([1024, 1040, 1056, 1064, 1080, 2088, 4136]) {
            for (off, other) in [
                (0, len),
                (1, len + 17),
                (13, len.saturating_sub(40)),
                (5, len + 2500),
            ] {
                let a = &data[off..off + len];
                let b = &data[off + 31..off + 31 + other];
                for init in [0, 0xdead_beef, doorbell_wire::icrc::LRH_SEED] {
                    assert_eq!(
                        crc32_pair(init, [a, b]),
                        [one(init, a), one(init, b)],
                        "lengths {len} and {other} from {off}, seed {init:#x}"
                    );
                }
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_fold_is_taken_where_the_cpu_has_it() {
        // On this machine the pair must not quietly fall back: a fold that
        // answered wrongly would then go unnoticed by the test above.
        if !x86::available() {
            eprintln!("no AVX-512 VPCLMULQDQ here: the fallback alone is tested");
            return;
        }
        let data = bytes(2048, 3);
        let (a, b) = (&data[..1064], &data[500..1580]);
        // SAFETY: `available` said the CPU has what the fold needs.
        let folded = unsafe { x86::fold_pair(0x1234, [a, b]) };
        let finished = [0, 1].map(|i| {
            let (crc, at) = folded[i];
            one(crc, &[a, b][i][at..])
        });
        assert_eq!(finished, [one(0x1234, a), one(0x1234, b)]);
        // Both lengths end 8 bytes past a whole 16-byte block: the fold
        // took those too.
        assert_eq!(
            folded.map(|(_, at)| at),
            [a.len(), b.len()],
            "the fold did all the work"
        );
    }
}
