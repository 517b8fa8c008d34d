//! Completion queues: CQE write-back, overrun detection and arming.
//!
//! A CQE never overwrites one the consumer has not polled (as the doorbell
//! record's consumer index says): a CQ that would overrun goes to the
//! error state for good instead, and drops that CQE and every later one.

use doorbell_host::PAGE_SIZE;
use doorbell_layout::cqe::{CQE_LEN, Cqe64, CqeOpcode, owner_for};
use doorbell_layout::dbr;
use doorbell_pcie::{Dma, DmaPurpose, DmaTag};
use doorbell_types::{HostAddr, Instant, Qpn, UarIndex};

use doorbell_hif::CqParams;

use crate::dma::{dma_read, dma_write};

/// What the device knows of one CQ.
pub(crate) struct Cq {
    pub(crate) p: CqParams,
    /// Number of CQEs (a power of two).
    ncqe: u32,
    /// Free-running producer counter.
    pi: u32,
    /// Consumer index last read from the doorbell record.
    ci: u32,
    /// Pending arm: solicited-only flag.
    armed: Option<bool>,
    /// Number of QPs using this CQ.
    pub(crate) users: u32,
    /// The CQ overran (or its buffer was unreachable): it is in the error
    /// state for good, and takes no more CQEs.
    error: bool,
}

/// Result of writing one CQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CqeWrite {
    /// Written; `event` says whether a completion event is due.
    Written { event: bool },
    /// The CQ is full: the CQE was dropped and the CQ is now in error;
    /// or it already was, and the CQE was dropped without a DMA.
    Overrun,
    /// The DMA failed.
    DmaFault,
}

impl Cq {
    pub(crate) fn new(p: CqParams) -> Self {
        Self {
            ncqe: 1 << p.log_size,
            p,
            pi: 0,
            ci: 0,
            armed: None,
            users: 0,
            error: false,
        }
    }

    pub(crate) fn uar(&self) -> UarIndex {
        self.p.uar
    }

    /// Whether the CQ is in the error state (it overran).
    pub(crate) fn is_error(&self) -> bool {
        self.error
    }

    /// Bytes each CQE takes in the buffer (64 or 128).
    pub(crate) fn cqe_bytes(&self) -> u16 {
        self.p.cqe_bytes
    }

    /// Where CQE `index` goes: its entry, and in a 128-byte entry the
    /// second half, where mlx5 puts the 64-byte CQE (the first half is
    /// for data scattered to the CQE, which this device does not do).
    fn slot_addr(&self, index: u32) -> Option<HostAddr> {
        let stride = u64::from(self.p.cqe_bytes);
        let off = u64::from(index & (self.ncqe - 1)) * stride + (stride - CQE_LEN as u64);
        let page = self.p.pas.get((off / PAGE_SIZE) as usize)?;
        page.checked_add(off % PAGE_SIZE)
    }

    /// Writes a CQE built by `fill` (which sees a zeroed CQE with `op_own`
    /// unset) at the producer index, owner bit last.
    pub(crate) fn write(
        &mut self,
        dma: &mut impl Dma,
        t: &mut Instant,
        qpn: Qpn,
        opcode: CqeOpcode,
        solicited: bool,
        fill: impl FnOnce(&mut Cqe64<&mut [u8]>),
    ) -> CqeWrite {
        let tag = DmaTag::new(qpn, DmaPurpose::Cqe);
        if self.error {
            return CqeWrite::Overrun;
        }
        if self.pi.wrapping_sub(self.ci) >= self.ncqe {
            // Looks full: refresh the consumer index from the doorbell record.
            // Only the consumer-index word is read, into its place in a
            // record.
            let mut rec = [0u8; dbr::DBR_LEN];
            let word = dbr::field::WORD0;
            let ci_addr = self.p.dbr_addr.checked_add(word.start as u64);
            let tag_dbr = DmaTag::new(qpn, DmaPurpose::DoorbellRecord);
            match ci_addr.map(|a| dma_read(dma, t, tag_dbr, a, &mut rec[word])) {
                Some(true) => {
                    let ci24 = dbr::CqDoorbellRecord::new_unchecked(&rec[..]).consumer_index();
                    // Extend the 24-bit index to the producer's epoch.
                    let back = self.pi.wrapping_sub(ci24) & 0x00ff_ffff;
                    self.ci = self.pi.wrapping_sub(back);
                }
                _ => {
                    self.error = true;
                    return CqeWrite::DmaFault;
                }
            }
            if self.pi.wrapping_sub(self.ci) >= self.ncqe {
                // Never over a CQE the consumer has not polled: the CQ
                // goes to error instead (the PRM's CQ overrun).
                self.error = true;
                return CqeWrite::Overrun;
            }
        }
        let mut buf = [0u8; CQE_LEN];
        let mut cqe = Cqe64::new_unchecked(&mut buf[..]);
        fill(&mut cqe);
        cqe.set_op_own(opcode, solicited, owner_for(self.pi, self.ncqe));
        // One DMA write whose last byte is op_own: the consumer never sees
        // the owner bit before the body.
        let written = self
            .slot_addr(self.pi)
            .is_some_and(|addr| dma_write(dma, t, tag, addr, &buf));
        if !written {
            self.error = true;
            return CqeWrite::DmaFault;
        }
        self.pi = self.pi.wrapping_add(1);
        let is_err = matches!(opcode, CqeOpcode::ReqErr | CqeOpcode::RespErr);
        let event = match self.armed {
            Some(sol_only) if !sol_only || solicited || is_err => {
                self.armed = None;
                true
            }
            _ => false,
        };
        CqeWrite::Written { event }
    }

    /// Resizes to `2^log_size` CQEs in the buffer `pas` (MODIFY_CQ
    /// resize): the producer count goes on, so CQE `n` goes to slot `n`
    /// of the new ring, where the provider also copies the ones it has
    /// not polled. Refused (false) when the new ring cannot hold those,
    /// as the consumer index in the doorbell record says.
    pub(crate) fn resize(
        &mut self,
        dma: &mut impl Dma,
        t: &mut Instant,
        log_size: u8,
        pas: Vec<HostAddr>,
    ) -> bool {
        let mut rec = [0u8; dbr::DBR_LEN];
        let word = dbr::field::WORD0;
        let tag = DmaTag::new(Qpn::new(0), DmaPurpose::DoorbellRecord);
        let read = self
            .p
            .dbr_addr
            .checked_add(word.start as u64)
            .is_some_and(|a| dma_read(dma, t, tag, a, &mut rec[word]));
        if read {
            let ci24 = dbr::CqDoorbellRecord::new_unchecked(&rec[..]).consumer_index();
            let back = self.pi.wrapping_sub(ci24) & 0x00ff_ffff;
            self.ci = self.pi.wrapping_sub(back);
        }
        let ncqe = 1u32 << log_size;
        if !read || self.pi.wrapping_sub(self.ci) > ncqe {
            return false;
        }
        self.ncqe = ncqe;
        self.p.log_size = log_size;
        self.p.pas = pas;
        true
    }

    /// Reads the arm word of the CQ's doorbell record (MLX5_CQ_ARM_DB),
    /// which the provider writes before its arm doorbell.
    pub(crate) fn read_arm_word(&self, dma: &mut impl Dma, t: &mut Instant) -> Option<u32> {
        let mut rec = [0u8; dbr::DBR_LEN];
        let word = dbr::field::WORD1;
        let addr = self.p.dbr_addr.checked_add(word.start as u64)?;
        let tag = DmaTag::new(Qpn::new(0), DmaPurpose::DoorbellRecord);
        dma_read(dma, t, tag, addr, &mut rec[word])
            .then(|| u32::from_be_bytes([rec[4], rec[5], rec[6], rec[7]]))
    }

    /// Handles an arm doorbell; returns true if an event is due at once
    /// because CQEs beyond `ci` are already there.
    pub(crate) fn arm(&mut self, solicited_only: bool, ci: u32) -> bool {
        let pending = self.pi.wrapping_sub(ci) & 0x00ff_ffff;
        if pending != 0 && !solicited_only {
            self.armed = None;
            return true;
        }
        self.armed = Some(solicited_only);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cq(cqe_bytes: u16) -> Cq {
        Cq::new(CqParams {
            log_size: 6,
            uar: UarIndex::new(1),
            dbr_addr: HostAddr::new(0x9000),
            cqe_bytes,
            pas: vec![HostAddr::new(0x10000), HostAddr::new(0x40000)],
        })
    }

    #[test]
    fn a_cqe_sits_in_its_entry_and_in_the_second_half_of_a_128_byte_one() {
        let at = |c: &Cq, i| c.slot_addr(i).map(HostAddr::get);
        let small = cq(64);
        assert_eq!(at(&small, 0), Some(0x10000));
        assert_eq!(at(&small, 63), Some(0x10000 + 63 * 64));
        // The index wraps at the ring's size.
        assert_eq!(at(&small, 64), Some(0x10000));
        let big = cq(128);
        assert_eq!(at(&big, 0), Some(0x10000 + 64));
        assert_eq!(at(&big, 1), Some(0x10000 + 128 + 64));
        // Entry 32 starts the second page.
        assert_eq!(at(&big, 32), Some(0x40000 + 64));
        assert_eq!(at(&big, 63), Some(0x40000 + 31 * 128 + 64));
    }
}
