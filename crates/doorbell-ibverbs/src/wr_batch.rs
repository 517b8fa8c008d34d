//! Work requests on their way from C: the state of an `ibv_wr_*` batch
//! (the WRs built between `ibv_wr_start` and `ibv_wr_complete`), and C's
//! SGE lists as the provider's. Below `qp` (which keeps a batch per QP),
//! `qp_ex` (which builds and posts it) and `srq`.

#![allow(unsafe_code)]

use core::ffi::c_int;

use doorbell_types::Mkey;
use libc::EINVAL;

use crate::abi::ibv_sge;

use doorbell_verbs::{SendFlags, Sge, UdTarget, WrOpcode};

/// One WR being built.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    pub(crate) wr_id: u64,
    pub(crate) flags: SendFlags,
    pub(crate) op: WrOpcode,
    pub(crate) sges: Vec<Sge>,
    /// Inline data set by `ibv_wr_set_inline_data*`, already staged.
    pub(crate) inline: Option<Sge>,
    pub(crate) ud: Option<UdTarget>,
}

/// The batch between `ibv_wr_start` and `ibv_wr_complete`.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    pub(crate) open: bool,
    pub(crate) wrs: Vec<Pending>,
    /// The first misuse, reported by `ibv_wr_complete`.
    pub(crate) error: Option<c_int>,
}

/// C's list of `n` SGEs at `list`, as the provider takes them; EINVAL for
/// a negative count or a NULL list with SGEs in it.
pub(crate) fn sges(list: *mut ibv_sge, n: c_int) -> Result<Vec<Sge>, c_int> {
    if n < 0 || (n > 0 && list.is_null()) {
        return Err(EINVAL);
    }
    let c: &[ibv_sge] = if n == 0 {
        &[]
    } else {
        // SAFETY: the caller's array holds `n` SGEs (checked non-NULL).
        unsafe { core::slice::from_raw_parts(list, n as usize) }
    };
    Ok(c.iter()
        .map(|s| Sge {
            addr: s.addr,
            length: s.length,
            lkey: Mkey::from_raw(s.lkey),
        })
        .collect())
}
