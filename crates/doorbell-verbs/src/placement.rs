//! Where a QP's doorbells go, for `doorbell layout` and tests.

use doorbell_layout::uar::{BFREGS_PER_UAR, NON_FP_BFREGS_PER_UAR};

use crate::context::Context;
use crate::qp::Qp;

/// Where a QP's doorbells go: for `doorbell layout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BfregPlacement {
    /// Gross bfreg index (four per UAR) the kernel answered;
    /// `doorbell_driver::INVALID_BFREG` for a dynamic register.
    pub bfreg_index: u32,
    /// For a register of a thread domain, its dynamic bfreg index (two per
    /// UAR, on dynamic page `dyn_bfreg / (2 × num_uars_per_page)`).
    pub dyn_bfreg: Option<u32>,
    /// Index of the UAR in the context, from 0: the static UARs first, then
    /// the dynamic ones in the order of their pages.
    pub uar_page: u32,
    /// Byte offset of the register in the UAR.
    pub uar_offset: u32,
    /// Whether doorbells may use BlueFlame.
    pub blueflame: bool,
    /// Whether doorbells take the register's lock.
    pub lock: bool,
}

impl Context {
    /// Where the doorbells of QP `qp` of this context go.
    pub fn placement(&self, qp: &Qp) -> BfregPlacement {
        let idx = qp.bfreg_index();
        let bf = qp.bf();
        let uar_page = match bf.dyn_index {
            Some(d) => self.uar_pages().len() as u32 + d / NON_FP_BFREGS_PER_UAR,
            None => idx / BFREGS_PER_UAR,
        };
        BfregPlacement {
            bfreg_index: idx,
            dyn_bfreg: bf.dyn_index,
            uar_page,
            uar_offset: bf.reg,
            blueflame: bf.buf_size > 0 && !self.config().shut_up_bf,
            lock: bf.need_lock,
        }
    }
}
