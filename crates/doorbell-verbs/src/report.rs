//! What the provider did for one `post_send`, reported to whoever watches:
//! the simulator's CPU model charges its costs from this, so the cost of a
//! post follows what the provider really wrote, not a second description of
//! a post.

use doorbell_types::Qpn;

/// How a post rang the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ring {
    /// The 8-byte doorbell: the control segment's first 8 bytes.
    Doorbell,
    /// The whole WQE copied into a BlueFlame buffer, in this many 64-byte
    /// write-combined chunks.
    BlueFlame {
        /// 64-byte chunks written.
        chunks: u32,
    },
}

/// What one `post_send` call wrote and how it rang.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostReport {
    /// The QP.
    pub qpn: Qpn,
    /// WQEs written (the WRs posted by this call).
    pub wqes: u32,
    /// Segments written after the control segments, in 16-byte units (a
    /// remote-address or data segment is one, a datagram segment three),
    /// an inline segment counting one whatever its length.
    pub segments: u32,
    /// Inline payload bytes copied into the WQEs.
    pub inline_bytes: u32,
    /// Those bytes in 64-byte pieces, each WQE's rounded up.
    pub inline_chunks: u32,
    /// How the device was rung.
    pub ring: Ring,
    /// Gross index of the bfreg rung.
    pub bfreg: u32,
    /// Whether the bfreg's lock was taken (a shared register).
    pub locked: bool,
}

/// Watches posts as the provider makes them. Both calls come from the
/// posting thread, inside `post_send`, in this order for each call that
/// posted at least one WR: [`before_ring`](Self::before_ring) once the
/// WQEs and the doorbell record are written, then the MMIO stores, then
/// [`after_ring`](Self::after_ring).
pub trait PostObserver: Send + Sync {
    /// The WQEs and the doorbell record are in memory; the MMIO comes next.
    fn before_ring(&self, report: &PostReport);
    /// The MMIO stores are done (the bfreg's lock is about to be released).
    fn after_ring(&self, report: &PostReport) {
        let _ = report;
    }
}
