//! Captures of a live NIC's frames ([`doorbell_pcap`]): recorded as they
//! leave for the port (after the fault relay, so a duplicate shows twice
//! and a corrupted frame corrupted), as the device takes them in (the
//! engine), and, if fault injection drops one, where it drops it.

pub use doorbell_pcap::{Capture, Direction};

/// A port sink that records each frame as it leaves.
pub(crate) struct CaptureSink {
    pub(crate) inner: Box<dyn crate::fault::Sink>,
    pub(crate) capture: Capture,
}

impl crate::fault::Sink for CaptureSink {
    fn send(
        &mut self,
        frames: &mut Vec<doorbell_device::Frame>,
        now: std::time::Instant,
        spent: &mut Vec<Vec<u8>>,
    ) {
        for f in frames.iter() {
            self.capture.record(Direction::Out, &f.bytes, None);
        }
        self.inner.send(frames, now, spent);
    }
}

/// A fault policy that records the frames it drops, which never reach the
/// port.
pub(crate) struct CapturingPolicy {
    pub(crate) inner: Box<dyn crate::fault::FaultPolicy>,
    pub(crate) capture: Capture,
}

impl crate::fault::FaultPolicy for CapturingPolicy {
    fn fate(&mut self, frame: &[u8]) -> crate::fault::Fate {
        let fate = self.inner.fate(frame);
        if fate == crate::fault::Fate::Drop {
            self.capture.record(
                Direction::Out,
                frame,
                Some("lost on the link (fault injection)"),
            );
        }
        fate
    }
}
