//! The bare single-producer single-consumer hand-off of 64-byte records
//! between two threads (rtrb's lock-free ring of 1024 slots), shared by the
//! live bench's baseline and the `handoff` example that `bench-tools.sh`
//! runs as a probe of where the machine has put its two CPUs.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Records taken per step.
pub(crate) const PER_STEP: u64 = 256;

/// Runs `measure` with a step that takes [`PER_STEP`] records, in order,
/// from a producer thread that fills the ring as fast as it can; the
/// producer stops when `measure` returns.
pub(crate) fn with_handoff<R>(measure: impl FnOnce(&mut dyn FnMut() -> u64) -> R) -> R {
    let (mut tx, mut rx) = rtrb::RingBuffer::<[u8; 64]>::new(1024);
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let producer = std::thread::spawn(move || {
        let mut rec = [0u8; 64];
        let mut n = 0u64;
        while !flag.load(Ordering::Relaxed) {
            rec[..8].copy_from_slice(&n.to_le_bytes());
            if tx.push(black_box(rec)).is_ok() {
                n += 1;
            } else {
                std::hint::spin_loop();
            }
        }
    });
    let mut expect = 0u64;
    let mut step = || {
        let mut got = 0u64;
        while got < PER_STEP {
            match rx.pop() {
                Ok(rec) => {
                    let n = u64::from_le_bytes(rec[..8].try_into().expect("8 bytes"));
                    assert_eq!(n, expect, "records in order");
                    expect += 1;
                    got += 1;
                }
                Err(_) => std::hint::spin_loop(),
            }
        }
        got
    };
    let r = measure(&mut step);
    stop.store(true, Ordering::Relaxed);
    producer.join().expect("the producer thread");
    r
}
