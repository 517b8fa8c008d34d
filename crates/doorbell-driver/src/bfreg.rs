//! The kernel's bfreg arithmetic and allocation policy (mlx5 reference §2.2,
//! §2.5, §2.6; Linux `hw/mlx5/main.c` calc_total_bfregs, `hw/mlx5/qp.c`
//! alloc_bfreg).
//!
//! "Net" bfreg indices count the two user registers of each UAR (what the
//! kernel allocates); "gross" indices count all four (what user space
//! receives and indexes its register array with).

use doorbell_layout::uar::{BFREGS_PER_UAR, NON_FP_BFREGS_PER_UAR};

/// Largest total of static bfregs a context may ask for (MLX5_MAX_BFREGS).
pub const MAX_BFREGS: u32 = 512;
/// Dynamic bfregs the kernel reserves per context with 4 KiB UARs.
pub const DEFAULT_DYN_BFREGS: u32 = 1024;
/// Registers that never use BlueFlame (bfreg 0).
const NUM_NON_BLUE_FLAME_BFREGS: u32 = 1;

/// Why a context's bfreg request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BfregError {
    /// `total_num_bfregs` is zero (EINVAL).
    #[error("total_num_bfregs must be at least 1")]
    ZeroTotal,
    /// `total_num_bfregs` exceeds 512 (ENOMEM).
    #[error("total_num_bfregs {0} exceeds {MAX_BFREGS}")]
    TooMany(u32),
    /// More low-latency bfregs than `total − 1` (EINVAL).
    #[error("{low_lat} low-latency bfregs need more than {total} bfregs in all")]
    TooManyLowLatency {
        /// Requested low-latency count.
        low_lat: u32,
        /// Total static bfregs.
        total: u32,
    },
}

/// The static bfreg layout of one context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BfregInfo {
    /// Static bfregs (net), after rounding.
    pub total_static: u32,
    /// Low-latency (dedicated) bfregs.
    pub low_latency: u32,
    /// UARs per system page (1 with 4 KiB pages).
    pub uars_per_sys_page: u32,
    /// Static system pages (each allocated with ALLOC_UAR).
    pub num_static_sys_pages: u32,
    /// Dynamic bfregs reserved.
    pub num_dyn_bfregs: u32,
    /// Static plus dynamic bfregs.
    pub total_num_bfregs: u32,
    /// Static plus dynamic system pages.
    pub num_sys_pages: u32,
    /// Context version: 2 allocates high and medium classes, 0 only bfreg 0.
    pub ver: u32,
}

impl BfregInfo {
    /// The kernel's `calc_total_bfregs` for a request of `total` bfregs,
    /// `low_latency` of them dedicated, with `uars_per_sys_page` UARs per page.
    pub fn calc(total: u32, low_latency: u32, uars_per_sys_page: u32) -> Result<Self, BfregError> {
        // The request is first rounded to whole UARs' worth of user bfregs.
        let total = total.div_ceil(NON_FP_BFREGS_PER_UAR) * NON_FP_BFREGS_PER_UAR;
        if total == 0 {
            return Err(BfregError::ZeroTotal);
        }
        if total > MAX_BFREGS {
            return Err(BfregError::TooMany(total));
        }
        let per_page = uars_per_sys_page * NON_FP_BFREGS_PER_UAR;
        let total = total.div_ceil(per_page) * per_page;
        if low_latency > total - 1 {
            return Err(BfregError::TooManyLowLatency {
                low_lat: low_latency,
                total,
            });
        }
        let num_dyn_bfregs = DEFAULT_DYN_BFREGS.div_ceil(per_page) * per_page;
        let total_num_bfregs = total + num_dyn_bfregs;
        Ok(Self {
            total_static: total,
            low_latency,
            uars_per_sys_page,
            num_static_sys_pages: total / per_page,
            num_dyn_bfregs,
            total_num_bfregs,
            num_sys_pages: total_num_bfregs / per_page,
            ver: 2,
        })
    }

    /// `max_bfregs`: the static net indices a QP can be given.
    pub fn max_bfregs(&self) -> u32 {
        self.uars_per_sys_page * self.num_static_sys_pages * NON_FP_BFREGS_PER_UAR
    }

    /// Number of medium-class (shared) bfregs.
    pub fn num_med(&self) -> u32 {
        self.max_bfregs()
            .saturating_sub(self.low_latency + NUM_NON_BLUE_FLAME_BFREGS)
    }

    /// First high-class (dedicated) index.
    pub fn first_hi(&self) -> u32 {
        self.num_med() + 1
    }

    /// The system page (index into the context's UAR pages) of net index `n`.
    pub fn sys_page(&self, n: u32) -> u32 {
        n / (self.uars_per_sys_page * NON_FP_BFREGS_PER_UAR)
    }

    /// The UAR within its system page of net index `n`.
    pub fn uar_in_page(&self, n: u32) -> u32 {
        (n % (self.uars_per_sys_page * NON_FP_BFREGS_PER_UAR)) / NON_FP_BFREGS_PER_UAR
    }
}

/// Net → gross index: UAR number × 4 plus slot 0 or 1.
pub const fn gross_index(net: u32) -> u32 {
    (net / NON_FP_BFREGS_PER_UAR) * BFREGS_PER_UAR + net % NON_FP_BFREGS_PER_UAR
}

/// The per-context allocator: a use count per static bfreg.
#[derive(Debug, Clone)]
pub struct BfregAllocator {
    info: BfregInfo,
    count: Vec<u32>,
}

impl BfregAllocator {
    /// An allocator for `info` with every count zero.
    pub fn new(info: BfregInfo) -> Self {
        Self {
            count: vec![0; info.total_num_bfregs as usize],
            info,
        }
    }

    /// The layout.
    pub fn info(&self) -> &BfregInfo {
        &self.info
    }

    /// Use count of net index `n`.
    pub fn count(&self, n: u32) -> u32 {
        self.count.get(n as usize).copied().unwrap_or(0)
    }

    /// Chooses a bfreg for a new QP: a free dedicated one, else the least
    /// used shared one, else bfreg 0.
    pub fn alloc(&mut self) -> u32 {
        let n = if self.info.ver >= 2 {
            self.alloc_high().or_else(|| self.alloc_med())
        } else {
            None
        };
        let n = n.unwrap_or(0);
        self.count[n as usize] += 1;
        n
    }

    fn alloc_high(&self) -> Option<u32> {
        (self.info.first_hi()..self.info.max_bfregs()).find(|&i| self.count[i as usize] == 0)
    }

    fn alloc_med(&self) -> Option<u32> {
        if self.info.num_med() == 0 {
            return None;
        }
        let mut min = 1;
        for i in 1..self.info.first_hi() {
            if self.count[i as usize] < self.count[min as usize] {
                min = i;
            }
            if self.count[min as usize] == 0 {
                break;
            }
        }
        Some(min)
    }

    /// Releases one use of net index `n`.
    pub fn free(&mut self, n: u32) {
        if let Some(c) = self.count.get_mut(n as usize) {
            *c = c.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_take_eight_uars_and_1024_dynamic() {
        let i = BfregInfo::calc(16, 4, 1).unwrap();
        assert_eq!(
            (i.total_static, i.num_static_sys_pages, i.num_dyn_bfregs),
            (16, 8, 1024)
        );
        assert_eq!((i.num_med(), i.first_hi(), i.max_bfregs()), (11, 12, 16));
        assert_eq!(i.num_sys_pages, 520);
    }

    #[test]
    fn requests_are_checked() {
        assert_eq!(BfregInfo::calc(0, 0, 1), Err(BfregError::ZeroTotal));
        assert_eq!(BfregInfo::calc(513, 4, 1), Err(BfregError::TooMany(514)));
        assert!(matches!(
            BfregInfo::calc(4, 4, 1),
            Err(BfregError::TooManyLowLatency { .. })
        ));
        assert_eq!(BfregInfo::calc(3, 1, 1).unwrap().total_static, 4);
    }

    #[test]
    fn gross_indices_skip_fast_path_slots() {
        let g: Vec<u32> = (0..6).map(gross_index).collect();
        assert_eq!(g, vec![0, 1, 4, 5, 8, 9]);
    }
}
