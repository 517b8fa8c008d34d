//! The ICRC's CRC, one packet at a time against two side by side: what
//! [`doorbell_rt::crc::crc32_pair`] saves a port (decision record 0054).
//!
//! For packets of the lengths a 64 KiB stream's MIDDLE packets hash over
//! IPv4 at each RoCE MTU (1 064, 2 088 and 4 136 bytes), and for the
//! 1 036 bytes of such a packet's datagram that a UDP port hashes on from
//! its headers' CRC at MTU 1 024 (decision record 0073), cut from one
//! buffer as a window's frames lie, the time a packet of:
//!
//! - `crc32fast`, one packet after the other (the single-packet path);
//! - `crc32_pair`, two packets at a time.
//!
//! Each figure is the median of seven slices. `cargo bench` passes
//! `--bench`; without it every slice is cut short, to check that the
//! benchmark works, and the figures mean nothing.
//!
//! `cargo bench -p doorbell-rt --bench crc`

use std::hint::black_box;
use std::time::Instant;

use doorbell_rt::crc::crc32_pair;
use doorbell_wire::icrc::LRH_SEED;

/// Frames in the buffer the packets are cut from: a window's worth.
const FRAMES: usize = 64;

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let packets = if full { 4_000_000 } else { 1_000 };
    println!("packet bytes | crc32fast, one at a time | crc32_pair, two at a time | ratio");
    println!("---|---|---|---");
    for len in [1036usize, 1064, 2088, 4136] {
        let buf: Vec<u8> = (0..len * FRAMES).map(|i| (i * 7 + 3) as u8).collect();
        let frame = |k: usize| &buf[(k % FRAMES) * len..][..len];
        // Per slice, the ns a packet; packets / len keeps slices alike in
        // bytes.
        let n = packets * 1064 / len;
        let one = median(|| {
            let t = Instant::now();
            let mut acc = 0u32;
            for k in 0..n {
                let mut h = crc32fast::Hasher::new_with_initial(LRH_SEED);
                h.update(black_box(frame(k)));
                acc ^= h.finalize();
            }
            black_box(acc);
            t.elapsed().as_secs_f64() * 1e9 / n as f64
        });
        let pair = median(|| {
            let t = Instant::now();
            let mut acc = 0u32;
            for k in (0..n).step_by(2) {
                let [a, b] = crc32_pair(LRH_SEED, black_box([frame(k), frame(k + 1)]));
                acc ^= a ^ b;
            }
            black_box(acc);
            t.elapsed().as_secs_f64() * 1e9 / n as f64
        });
        println!("{len} | {one:.1} ns | {pair:.1} ns | {:.2}x", pair / one);
    }
}

/// The median of seven runs of `slice`.
fn median(mut slice: impl FnMut() -> f64) -> f64 {
    let mut v: Vec<f64> = (0..7).map(|_| slice()).collect();
    v.sort_by(f64::total_cmp);
    v[3]
}
