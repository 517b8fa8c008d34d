//! Thread domains (`ibv_td`): a doorbell register of one's own.
//!
//! # Model
//! A static bfreg of the medium class is shared by several QPs, so every
//! doorbell through it takes its lock (the register's two BlueFlame buffers
//! alternate, and two threads must not pick the same one). An application
//! that promises to post to a set of QPs from one thread at a time says so
//! with a thread domain; QPs created in a parent domain
//! ([`crate::Pd::parent_domain`]) that holds it ring the thread domain's
//! register, with no lock.
//!
//! The registers come from the context's dynamic bfregs, as libmlx5 takes
//! them when the kernel runs the legacy dynamic-UAR mode: the first thread
//! domain maps dynamic page 0 ([`doorbell_driver::Ucontext::map_dyn_uar`]),
//! which gives `num_uars_per_page` UARs of two registers each; each thread
//! domain takes a free one, and the next page is mapped only when none is
//! free. A dropped thread domain gives its register back to the end of the
//! free list (`mlx5_detach_dedicated_uar`); the pages stay mapped until the
//! context goes.

use std::sync::{Arc, Mutex};

use doorbell_layout::uar;
use doorbell_types::UarIndex;

use crate::context::{Bfreg, Context};
use crate::error::VerbsError;

struct TdInner {
    ctx: Context,
    bf: Arc<Bfreg>,
}

impl Drop for TdInner {
    fn drop(&mut self) {
        self.ctx.dyn_regs().free.push_back(Arc::clone(&self.bf));
    }
}

/// A thread domain (`ibv_td`): one dynamic doorbell register, held for the
/// QPs of the parent domains made with it. Clones share it; the register
/// goes back to the context when the last clone and parent domain are gone.
#[derive(Clone)]
pub struct ThreadDomain {
    inner: Arc<TdInner>,
}

impl ThreadDomain {
    /// The context it belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// True while anything besides this handle holds it: a parent domain,
    /// or another clone (so `ibv_dealloc_td` answers EBUSY).
    pub fn is_shared(&self) -> bool {
        Arc::strong_count(&self.inner) > 1
    }

    /// The dynamic bfreg index of its register (`bfreg_dyn_index`): page ×
    /// registers per page + the register's place in the page.
    pub fn dyn_bfreg_index(&self) -> u32 {
        self.inner.bf.dyn_index.unwrap_or_default()
    }

    /// The UAR its register lies in.
    pub fn uar(&self) -> UarIndex {
        self.inner.bf.uar
    }

    pub(crate) fn bfreg(&self) -> &Arc<Bfreg> {
        &self.inner.bf
    }
}

impl std::fmt::Debug for ThreadDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadDomain")
            .field("dyn_bfreg_index", &self.dyn_bfreg_index())
            .field("uar", &self.uar())
            .finish()
    }
}

impl Context {
    /// Allocates a thread domain (`ibv_alloc_td`): a free dynamic register,
    /// or the first of a newly mapped dynamic page. Fails with
    /// [`VerbsError::NoSpace`] (ENOSPC) when every dynamic page is mapped
    /// and every register held, and with [`VerbsError::NotSupported`] on a
    /// device without BlueFlame registers (`bf_reg_size` 0), where libmlx5
    /// would need a non-cached UAR that the legacy mode does not give.
    pub fn alloc_td(&self) -> Result<ThreadDomain, VerbsError> {
        let resp = self.driver().resp().clone();
        if resp.bf_reg_size == 0 {
            return Err(VerbsError::NotSupported(
                "thread domains need BlueFlame registers",
            ));
        }
        let mut regs = self.dyn_regs();
        if regs.free.is_empty() {
            let per_page = resp.num_uars_per_page * uar::NON_FP_BFREGS_PER_UAR;
            if regs.next_page >= resp.num_dyn_bfregs / per_page {
                return Err(VerbsError::NoSpace("every dynamic UAR page is in use"));
            }
            let page = regs.next_page;
            let base = self.driver().map_dyn_uar(page)?;
            regs.next_page += 1;
            for j in 0..per_page {
                regs.free.push_back(Arc::new(Bfreg {
                    uar: UarIndex::new(base.get() + j / uar::NON_FP_BFREGS_PER_UAR),
                    reg: uar::bfreg_offset(
                        j % uar::NON_FP_BFREGS_PER_UAR,
                        resp.bf_reg_size as usize,
                    ) as u32,
                    buf_size: resp.bf_reg_size / 2,
                    // One thread at a time posts through it: the
                    // application's promise a thread domain stands for.
                    need_lock: false,
                    dyn_index: Some(page * per_page + j),
                    offset: std::sync::atomic::AtomicU32::new(0),
                    lock: Mutex::new(()),
                }));
            }
        }
        let bf = regs
            .free
            .pop_front()
            .ok_or(VerbsError::NoSpace("no dynamic register"))?;
        drop(regs);
        Ok(ThreadDomain {
            inner: Arc::new(TdInner {
                ctx: self.clone(),
                bf,
            }),
        })
    }

    /// Dynamic registers mapped but held by no thread domain.
    pub fn free_dyn_bfregs(&self) -> usize {
        self.dyn_regs().free.len()
    }
}
