//! What recording a frame costs beside the I/O it needs: `Capture::record`
//! of a small RoCEv2 frame against writing the same number of bytes to a
//! buffered file, in the same run.
//!
//! `cargo bench -p doorbell-pcap --bench record`

use std::io::{BufWriter, Write as _};
use std::time::Instant;

use doorbell_pcap::{Capture, Direction};

const FRAMES: usize = 400_000;

fn main() {
    let dir = std::env::temp_dir();
    let (a, b) = (
        dir.join(format!("record-bench-{}.pcapng", std::process::id())),
        dir.join(format!("record-bench-{}.raw", std::process::id())),
    );
    // An IPv4 RoCEv2 SEND of 64 bytes (what pingpong -s 64 sends): 108 B.
    let mut frame = vec![0u8; 108];
    frame[0] = 0x45;
    frame[12..16].copy_from_slice(&[127, 0, 0, 2]);
    frame[16..20].copy_from_slice(&[127, 0, 0, 3]);
    let mut best = (f64::MAX, f64::MAX);
    for _ in 0..5 {
        let c = Capture::create(&a, "bench").unwrap();
        let t = Instant::now();
        for _ in 0..FRAMES {
            c.record(Direction::Out, &frame, None);
        }
        drop(c);
        let rec = t.elapsed().as_secs_f64() * 1e9 / FRAMES as f64;
        let bytes = std::fs::metadata(&a).unwrap().len() as usize;
        let per = bytes / FRAMES;
        let block = vec![0u8; per];
        let mut f = BufWriter::with_capacity(1 << 20, std::fs::File::create(&b).unwrap());
        let t = Instant::now();
        for _ in 0..FRAMES {
            f.write_all(&block).unwrap();
        }
        f.flush().unwrap();
        drop(f);
        let raw = t.elapsed().as_secs_f64() * 1e9 / FRAMES as f64;
        best = (best.0.min(rec), best.1.min(raw));
    }
    let _ = (std::fs::remove_file(&a), std::fs::remove_file(&b));
    println!(
        "Capture::record: {:.0} ns per frame; writing its bytes to a buffered file: {:.0} ns; record / write = {:.1}",
        best.0,
        best.1,
        best.0 / best.1
    );
}
