//! A send engine that builds a window a burst at a time
//! (`NicConfig::tx_burst`) sends the frames it would have sent at once.

use super::*;

/// Posts two WRITEs, of 8 KiB and 5 000 bytes (13 packets at the rig's
/// MTU of 1024), rings once, and collects the frames, taking them out
/// after the doorbell and after each `resume_transmit`: the frames of each
/// call, in order.
fn two_writes(cfg: NicConfig) -> Vec<Vec<Frame>> {
    two_writes_in(cfg, &mut None)
}

/// [`two_writes`], keeping the rig's memory in `mem`.
fn two_writes_in(cfg: NicConfig, mem: &mut Option<Arc<HostRam>>) -> Vec<Vec<Frame>> {
    let mut rig = Rig::with_config(cfg);
    let data: Vec<u8> = (0..MR_LEN).map(|i| (i % 251) as u8).collect();
    rig.mem.write(rig.mr_buf, &data).unwrap();
    let first = rdma_wqe(&rig, 0, WqeOpcode::RdmaWrite, MR_LEN as u32);
    let second = rdma_wqe(&rig, 1, WqeOpcode::RdmaWrite, 5000);
    rig.write_sq(0, &first);
    rig.write_sq(1, &second);
    // Two WQEs of one WQEBB each: the doorbell for the second covers both.
    rig.ring(1, u8::from(WqeOpcode::RdmaWrite), 3);
    let now = rig.now;
    let mut calls = vec![rig.transmitted()];
    while rig.nic.resume_transmit(now, &mut rig.bus) {
        calls.push(rig.transmitted());
        assert!(calls.len() < 100, "resume_transmit keeps answering true");
    }
    *mem = Some(rig.mem.clone());
    calls
}

#[test]
fn a_burst_changes_when_frames_are_built_not_which() {
    let whole = two_writes(NicConfig::new(LOCAL));
    assert_eq!(whole.len(), 1, "without a burst, all at once");
    assert_eq!(whole[0].len(), 13);
    for burst in [1, 3, 5, 13, 64] {
        let mut cfg = NicConfig::new(LOCAL);
        cfg.tx_burst = Some(burst);
        let calls = two_writes(cfg);
        let sizes: Vec<usize> = calls.iter().map(Vec::len).collect();
        assert!(
            sizes.iter().all(|&n| n <= burst as usize),
            "burst {burst}: {sizes:?}"
        );
        // The last call built nothing: the engine had stopped at a burst
        // and found the window done.
        let made: usize = sizes.iter().sum();
        assert_eq!(made, 13, "burst {burst}: {sizes:?}");
        let bytes = |fs: &[Vec<Frame>]| -> Vec<(Vec<u8>, [u8; 4])> {
            fs.iter()
                .flatten()
                .map(|f| (f.bytes.clone(), f.dst))
                .collect()
        };
        assert!(
            bytes(&calls) == bytes(&whole),
            "burst {burst}: the same frames, ACK requests included"
        );
    }
}

#[test]
fn a_burst_counts_the_packets_of_runs() {
    use super::left_payload::{joining, split};
    let whole: Vec<Vec<u8>> = two_writes(NicConfig::new(LOCAL))
        .concat()
        .into_iter()
        .map(|f| f.bytes)
        .collect();
    for burst in [2, 5, 64] {
        let mut cfg = joining(64);
        cfg.tx_burst = Some(burst);
        let mut rig_mem = None;
        let calls = two_writes_in(cfg, &mut rig_mem);
        let packets: Vec<u32> = calls
            .iter()
            .map(|c| c.iter().map(Frame::packets).sum())
            .collect();
        assert!(
            packets.iter().all(|&n| n <= burst),
            "burst {burst}: {packets:?}"
        );
        assert_eq!(packets.iter().sum::<u32>(), 13, "burst {burst}");
        let mem = rig_mem.expect("the rig's memory");
        assert!(
            split(&calls.concat(), &mem) == whole,
            "burst {burst}: the same packets"
        );
    }
}
