//! Shared receive queues (`ibv_srq`): creation, `post_srq_recv` and the
//! free list of WQEs (mlx5 reference §7, rdma-core's `srq.c`).
//!
//! The ring's WQEs are linked by the `next_wqe_index` of their first
//! segment. The provider posts at `head` and follows the link; the device
//! takes WQEs in the same order, from WQE 0. A completion names its WQE by
//! index, and `poll_cq` links it back in after `tail`, so WQEs taken by
//! different QPs may complete in any order. One WQE is always the list's
//! end (`head == tail` is full): `max_wr` is the ring's size less one.

use std::sync::{Arc, Mutex};

use doorbell_driver::CreateSrqReq;
use doorbell_host::{PAGE_SIZE, offset};
use doorbell_layout::dbr;
use doorbell_layout::wqe::{SrqNextSeg, field};
use doorbell_types::{HostAddr, Srqn};

use crate::error::VerbsError;
use crate::mr::{Pd, Sge};
use crate::wq::{SrqShared, SrqState, write_recv_segments};
use crate::wr::{PostError, RecvWr};

/// SRQ creation attributes (`ibv_srq_init_attr.attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqInitAttr {
    /// Receive WRs the SRQ must hold at once.
    pub max_wr: u32,
    /// SGEs per receive WR.
    pub max_sge: u32,
    /// Not used by creation, as `ibv_create_srq` ignores it: arm the limit
    /// with [`Srq::modify`].
    pub srq_limit: u32,
}

/// What an SRQ is (`ibv_srq_attr`, from `ibv_query_srq`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqAttr {
    /// Receive WRs it holds at once.
    pub max_wr: u32,
    /// SGEs per receive WR.
    pub max_sge: u32,
    /// The armed limit; 0 when disarmed, as after its event fired.
    pub srq_limit: u32,
}

struct SrqInner {
    pd: Pd,
    srqn: Srqn,
    shared: Arc<SrqShared>,
    dbr: HostAddr,
    max_wr: u32,
    max_sge: u32,
    /// The limit last armed, for [`Srq::query`] when the device cannot
    /// answer.
    limit: Mutex<u32>,
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        let ctx = self.pd.context();
        if ctx.driver().destroy_srq(self.srqn).is_ok() {
            let _ = ctx.mem().free(self.shared.buf);
        }
        ctx.free_dbrec(self.dbr);
    }
}

/// A shared receive queue (`ibv_srq`). Clones are handles to one SRQ; a
/// QP created with it holds one, so the SRQ lives as long as its QPs.
#[derive(Clone)]
pub struct Srq {
    inner: Arc<SrqInner>,
}

impl Pd {
    /// Creates a shared receive queue (`ibv_create_srq`), sized as the mlx5
    /// provider sizes it: a power-of-two ring of at least `max_wr + 1`
    /// WQEs, each a next segment and `max_sge` data segments (at least 32
    /// bytes, a power of two). The sizes granted may be larger; see
    /// [`Srq::query`].
    pub fn create_srq(&self, attr: &SrqInitAttr) -> Result<Srq, VerbsError> {
        let ctx = self.context().clone();
        let resp = ctx.driver().resp().clone();
        if attr.max_wr == 0 || attr.max_wr >= resp.max_recv_wr {
            return Err(VerbsError::InvalidArgument("SRQ depth out of range"));
        }
        let wqe_cnt = (attr.max_wr + 1).next_power_of_two();
        let size = (field::SRQ_NEXT_LEN as u32 + attr.max_sge.max(1) * field::DATA_LEN as u32)
            .max(32)
            .next_power_of_two();
        if size > resp.max_rq_desc_sz {
            return Err(VerbsError::InvalidArgument(
                "SRQ WQE larger than max_rq_desc_sz",
            ));
        }
        let max_sge = (size - field::SRQ_NEXT_LEN as u32) / field::DATA_LEN as u32;
        let bytes = u64::from(wqe_cnt) * u64::from(size);
        let buf_len = bytes.div_ceil(PAGE_SIZE) * PAGE_SIZE;
        let mem = ctx.mem();
        let buf = mem.alloc(buf_len)?;
        // The free list: every WQE links to the next, the last to the first.
        let mut ring = vec![0u8; bytes as usize];
        let next: Vec<u16> = (0..wqe_cnt).map(|i| ((i + 1) % wqe_cnt) as u16).collect();
        for (i, n) in next.iter().enumerate() {
            let at = i * size as usize;
            SrqNextSeg::new_unchecked(&mut ring[at..at + field::SRQ_NEXT_LEN])
                .set_next_wqe_index(*n);
        }
        if let Err(e) = mem.write(buf, &ring) {
            let _ = mem.free(buf);
            return Err(e.into());
        }
        let dbr = match ctx.alloc_dbrec() {
            Ok(d) => d,
            Err(e) => {
                let _ = mem.free(buf);
                return Err(e);
            }
        };
        let req = CreateSrqReq {
            pd: self.pdn(),
            buf_addr: buf,
            buf_len,
            log_size: wqe_cnt.trailing_zeros() as u8,
            log_stride: (size.trailing_zeros() - 4) as u8,
            db_addr: dbr,
        };
        let srqn = match ctx.driver().create_srq(req) {
            Ok(s) => s,
            Err(e) => {
                let _ = mem.free(buf);
                ctx.free_dbrec(dbr);
                return Err(e.into());
            }
        };
        Ok(Srq {
            inner: Arc::new(SrqInner {
                pd: self.clone(),
                srqn,
                shared: Arc::new(SrqShared {
                    mem: Arc::clone(mem),
                    buf,
                    stride: size,
                    state: Mutex::new(SrqState {
                        head: 0,
                        tail: (wqe_cnt - 1) as u16,
                        counter: 0,
                        next,
                        wrid: vec![0; wqe_cnt as usize],
                        build: vec![0; size as usize - field::SRQ_NEXT_LEN],
                    }),
                }),
                dbr,
                max_wr: wqe_cnt - 1,
                max_sge,
                limit: Mutex::new(0),
            }),
        })
    }
}

impl Srq {
    /// The SRQ number.
    pub fn srqn(&self) -> Srqn {
        self.inner.srqn
    }

    /// True while anything besides this handle holds the SRQ: a QP that
    /// takes receives from it, a [`crate::QpInitAttr`] naming it, or
    /// another clone (so `ibv_destroy_srq` answers EBUSY).
    pub fn is_shared(&self) -> bool {
        Arc::strong_count(&self.inner) > 1
    }

    /// The PD.
    pub fn pd(&self) -> &Pd {
        &self.inner.pd
    }

    pub(crate) fn shared(&self) -> &Arc<SrqShared> {
        &self.inner.shared
    }

    /// Sizes and the armed limit (`ibv_query_srq`). The limit is the
    /// device's: 0 once its event has fired.
    pub fn query(&self) -> SrqAttr {
        let inner = &*self.inner;
        let cached = *inner.limit.lock().unwrap_or_else(|e| e.into_inner());
        let srq_limit = inner
            .pd
            .context()
            .driver()
            .query_srq(inner.srqn)
            .unwrap_or(cached);
        SrqAttr {
            max_wr: inner.max_wr,
            max_sge: inner.max_sge,
            srq_limit,
        }
    }

    /// `ibv_modify_srq`. `max_wr` (IBV_SRQ_MAX_WR) is refused, as mlx5
    /// refuses to resize an SRQ; `srq_limit` (IBV_SRQ_LIMIT) arms the
    /// limit: once fewer WQEs than it stay posted, the context gets one
    /// [`doorbell_hif::NicEvent::SrqLimit`] and the SRQ is disarmed. 0
    /// disarms; a limit above `max_wr` is refused (EINVAL).
    pub fn modify(&self, max_wr: Option<u32>, srq_limit: Option<u32>) -> Result<(), VerbsError> {
        if max_wr.is_some() {
            return Err(VerbsError::InvalidArgument(
                "an SRQ cannot be resized (IBV_SRQ_MAX_WR)",
            ));
        }
        let Some(limit) = srq_limit else {
            return Ok(());
        };
        let inner = &*self.inner;
        if limit > inner.max_wr {
            return Err(VerbsError::InvalidArgument("srq_limit larger than max_wr"));
        }
        let mut cached = inner.limit.lock().unwrap_or_else(|e| e.into_inner());
        inner.pd.context().driver().modify_srq(inner.srqn, limit)?;
        *cached = limit;
        Ok(())
    }

    /// Posts receive WRs to the SRQ (`ibv_post_srq_recv`): writes each WQE
    /// at the head of the free list, then the doorbell record's count. No
    /// MMIO.
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<(), VerbsError> {
        self.post_recv_list(wrs).map_err(|e| e.error)
    }

    /// [`Srq::post_recv`], saying which WR failed (`bad_wr`): the WRs
    /// before it are posted, it and those after are not.
    pub fn post_recv_list(&self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        self.post_recv_iter(wrs.iter().map(|w| (w.wr_id, w.sg_list.iter().copied())))
    }

    /// Posts the receive WRs `wrs` yields, each a `wr_id` and its SGEs, as
    /// [`Srq::post_recv_list`] posts a list; builds each WQE as it comes,
    /// so nothing is collected or allocated.
    pub fn post_recv_iter<I, S>(&self, wrs: I) -> Result<(), PostError>
    where
        I: IntoIterator<Item = (u64, S)>,
        S: IntoIterator<Item = Sge>,
        S::IntoIter: ExactSizeIterator,
    {
        let at = |index: usize| move |error| PostError { index, error };
        let inner = &*self.inner;
        let shared = &*inner.shared;
        let mem = inner.pd.context().mem();
        let mut guard = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        let st = &mut *guard;
        let wqe = &mut st.build;
        let mut failed = None;
        let mut n = 0u32;
        for (i, (wr_id, sges)) in wrs.into_iter().enumerate() {
            let sges = sges.into_iter();
            if st.head == st.tail {
                let posted = inner.max_wr;
                failed = Some(at(i)(VerbsError::QueueFull {
                    posted,
                    max: inner.max_wr,
                }));
                break;
            }
            if sges.len() as u32 > inner.max_sge {
                failed = Some(at(i)(VerbsError::InvalidArgument("more SGEs than max_sge")));
                break;
            }
            let bytes = write_recv_segments(wqe, sges.map(Sge::segment), inner.max_sge as usize);
            let head = st.head;
            let written = offset(
                shared.buf,
                u64::from(head) * u64::from(shared.stride) + field::SRQ_NEXT_LEN as u64,
            )
            .and_then(|a| mem.write(a, &wqe[..bytes]));
            if let Err(e) = written {
                failed = Some(at(i)(e.into()));
                break;
            }
            st.wrid[usize::from(head)] = wr_id;
            st.head = st.next[usize::from(head)];
            n += 1;
        }
        if n > 0 {
            // The WQEs are in memory before the count (a compiler barrier
            // on x86, udma_to_device_barrier in rdma-core).
            st.counter = st.counter.wrapping_add(n);
            let mut rec = [0u8; dbr::DBR_LEN];
            let word = dbr::field::WORD0;
            rec[word.clone()].copy_from_slice(&st.counter.to_be_bytes());
            let wrote = offset(inner.dbr, word.start as u64).and_then(|a| mem.write(a, &rec[word]));
            if let Err(e) = wrote {
                return Err(at(0)(e.into()));
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl std::fmt::Debug for Srq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Srq")
            .field("srqn", &self.inner.srqn)
            .field("max_wr", &self.inner.max_wr)
            .finish()
    }
}
