//! What one post cost on the bus: the per-post report that the main job
//! (live runtime) and the simulator both print, built the same way from
//! [`Counters`].

use crate::{Counters, DmaPurpose};

/// Bus crossings per post, averaged over a run: the rows of DESIGN.md's
/// table. Operations (a DMA read of a WQE) and TLPs are counted apart.
///
/// With the `serde` feature it serialises under these field names, the
/// JSON keys of `doorbell` and `doorbell sim --json`; the link-byte fields
/// appear only where a link model measured them.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct PerPost {
    /// MMIO writes (host → device MWr TLPs).
    pub mmio_writes: f64,
    /// Bytes those carried.
    pub mmio_bytes: f64,
    /// DMA reads of send WQEs (operations).
    pub wqe_dma_reads: f64,
    /// DMA reads of payload (operations).
    pub payload_dma_reads: f64,
    /// Bytes read by DMA, all purposes.
    pub dma_read_bytes: f64,
    /// DMA writes of CQEs (operations).
    pub cqe_dma_writes: f64,
    /// Bytes written by DMA, all purposes.
    pub dma_write_bytes: f64,
    /// DMA writes of EQEs (completion and async events).
    pub eqe_dma_writes: f64,
    /// MSI-X interrupts (each a posted write, counted in `mwr_tlps`).
    pub interrupts: f64,
    /// MWr TLPs, both directions.
    pub mwr_tlps: f64,
    /// MRd TLPs.
    pub mrd_tlps: f64,
    /// CplD TLPs.
    pub cpld_tlps: f64,
    /// Bytes host → device on the link, TLP and link overheads included
    /// (only where a link model timed the run).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub host_to_device_bytes: Option<f64>,
    /// Bytes device → host on the link, likewise.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub device_to_host_bytes: Option<f64>,
}

impl PerPost {
    /// The counts `c` of a run of `posts` posts, per post. Zero posts count
    /// as one, so the report of an empty run is all zero, not NaN.
    pub fn from_counters(c: &Counters, posts: u64) -> Self {
        let n = posts.max(1) as f64;
        let per = |v: u64| v as f64 / n;
        Self {
            mmio_writes: per(c.mmio_writes),
            mmio_bytes: per(c.mmio_bytes),
            wqe_dma_reads: per(c.reads(DmaPurpose::SendWqe)),
            payload_dma_reads: per(c.reads(DmaPurpose::Payload)),
            dma_read_bytes: per(c.total_read_bytes()),
            cqe_dma_writes: per(c.writes(DmaPurpose::Cqe)),
            dma_write_bytes: per(c.total_write_bytes()),
            eqe_dma_writes: per(c.writes(DmaPurpose::Eqe)),
            interrupts: per(c.writes(DmaPurpose::Msix)),
            mwr_tlps: per(c.mwr_tlps()),
            mrd_tlps: per(c.mrd_tlps),
            cpld_tlps: per(c.cpld_tlps),
            host_to_device_bytes: None,
            device_to_host_bytes: None,
        }
    }

    /// Adds the link bytes a link model measured over the same `posts`.
    pub fn with_link_bytes(self, to_device: u64, to_host: u64, posts: u64) -> Self {
        let n = posts.max(1) as f64;
        Self {
            host_to_device_bytes: Some(to_device as f64 / n),
            device_to_host_bytes: Some(to_host as f64 / n),
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_divided_by_the_posts() {
        let mut c = Counters {
            mmio_writes: 16,
            mmio_bytes: 128,
            mrd_tlps: 32,
            cpld_tlps: 48,
            dma_mwr_tlps: 16,
            ..Counters::default()
        };
        c.dma_reads[DmaPurpose::SendWqe.index()] = 1;
        c.dma_reads[DmaPurpose::Payload.index()] = 16;
        c.dma_read_bytes[DmaPurpose::Payload.index()] = 128;
        c.dma_writes[DmaPurpose::Cqe.index()] = 16;
        let p = PerPost::from_counters(&c, 16);
        assert_eq!(
            (
                p.mmio_writes,
                p.mmio_bytes,
                p.wqe_dma_reads,
                p.payload_dma_reads
            ),
            (1.0, 8.0, 1.0 / 16.0, 1.0)
        );
        assert_eq!(
            (p.dma_read_bytes, p.cqe_dma_writes, p.mwr_tlps),
            (8.0, 1.0, 2.0)
        );
        assert_eq!((p.mrd_tlps, p.cpld_tlps), (2.0, 3.0));
        assert_eq!(p.host_to_device_bytes, None);
        let q = p.with_link_bytes(320, 640, 16);
        assert_eq!(
            (q.host_to_device_bytes, q.device_to_host_bytes),
            (Some(20.0), Some(40.0))
        );
        assert_eq!(
            PerPost::from_counters(&Counters::default(), 0).mmio_writes,
            0.0
        );
    }
}
