//! Shared receive queues as the device keeps them: a ring of receive WQEs
//! in host memory that several QPs take from, linked by each WQE's
//! `next_wqe_index` (mlx5 reference §7), its doorbell record's count of
//! WQEs posted, and the armed limit. Data only; `fetch` takes WQEs.

use doorbell_host::PAGE_SIZE;
use doorbell_types::HostAddr;

use doorbell_hif::SrqParams;

use crate::dma::page_runs;

/// What the device knows of one SRQ.
pub(crate) struct Srq {
    pub(crate) p: SrqParams,
    /// Number of WQEs (a power of two).
    pub(crate) size: u32,
    /// Bytes per WQE.
    pub(crate) stride: u32,
    /// The WQE the device takes next: WQE 0 first, then wherever the
    /// `next_wqe_index` of the one taken points.
    pub(crate) head: u16,
    /// WQEs taken, free-running.
    pub(crate) ci: u16,
    /// The count of WQEs posted, as last read from the doorbell record.
    pub(crate) pi: u16,
    /// The armed limit (the PRM's `lwm`): 0 is disarmed.
    pub(crate) limit: u32,
    /// QPs that take WQEs from it.
    pub(crate) users: u32,
}

impl Srq {
    pub(crate) fn new(p: SrqParams) -> Self {
        Self {
            size: 1 << p.log_size,
            stride: 16 << p.log_stride,
            p,
            head: 0,
            ci: 0,
            pi: 0,
            limit: 0,
            users: 0,
        }
    }

    /// Bytes of the WQE ring.
    pub(crate) fn bytes(&self) -> u64 {
        u64::from(self.size) * u64::from(self.stride)
    }

    /// Pages the ring needs.
    pub(crate) fn pages(&self) -> u64 {
        self.bytes().div_ceil(PAGE_SIZE)
    }

    /// WQEs posted and not yet taken, as far as the device knows.
    pub(crate) fn posted(&self) -> u32 {
        u32::from(self.pi.wrapping_sub(self.ci))
    }

    /// Calls `f(host_addr, bytes, offset_into_range)` for each contiguous
    /// run of ring bytes `[off, off + len)`; false if outside the ring's
    /// pages.
    pub(crate) fn buf_runs(&self, off: u64, len: u64, f: impl FnMut(HostAddr, u64, u64)) -> bool {
        page_runs(&self.p.pas, off, len, f)
    }
}
