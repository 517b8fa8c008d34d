//! The slow path of doorbell: what the kernel driver does for a user context.
//!
//! # Model
//! A [`Ucontext`] is what `alloc_ucontext` makes: static UARs allocated from
//! the device and "mapped" (their indices handed to the provider), the
//! bfreg allocator that decides which register each QP rings, the pinned
//! doorbell-record pages, and the objects the context created. Every device
//! change goes through [`DeviceLink::exec`], the command interface; host
//! memory is pinned for DMA through [`HostMemory::pin`] (the umem step) and the
//! resulting page lists are what the device is told.
//!
//! The provider (`doorbell-verbs`) calls these functions the way rdma-core
//! calls the kernel: it allocates buffers, then asks the driver to register
//! them and to create objects over them.
#![deny(missing_docs)]
#![warn(unreachable_pub)]

pub mod bfreg;
pub mod eq;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

pub use doorbell_hif::DeviceLink;
use doorbell_hif::{
    Access, CmdError, CmdOut, Command, CqParams, DeviceCaps, MkeyParams, ObjKind, QpAttrs,
    QpParams, QpState, QpType, SrqParams,
};
use doorbell_host::{HostMemory, MemError, PAGE_SIZE};
use doorbell_layout::uar;
use doorbell_types::{Cqn, HostAddr, Mkey, Pdn, Qpn, Srqn, UarIndex};

pub use bfreg::{BfregAllocator, BfregError, BfregInfo, gross_index};
pub use eq::EventQueues;

/// Errors of the slow path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DriverError {
    /// The device refused a command.
    #[error("device command failed: {0}")]
    Command(#[from] CmdError),
    /// Host memory could not be pinned or freed.
    #[error("host memory: {0}")]
    Memory(#[from] MemError),
    /// The bfreg request of alloc_ucontext is invalid.
    #[error("bfreg request: {0}")]
    Bfreg(#[from] BfregError),
    /// The device answered with something the command does not return.
    #[error("unexpected command output")]
    Protocol,
    /// A handle that this context does not own.
    #[error("no such object {0:#x} in this context")]
    NoSuchObject(u32),
    /// A dynamic UAR page outside the context's reservation (EINVAL).
    #[error("dynamic UAR page {page} outside the {pages} reserved")]
    DynUarOutOfRange {
        /// The page asked for.
        page: u32,
        /// Dynamic pages the context has.
        pages: u32,
    },
    /// A dynamic UAR page mapped a second time (EINVAL).
    #[error("dynamic UAR page {0} is already mapped")]
    DynUarMapped(u32),
    /// A QP named a dynamic bfreg whose page is out of range or not
    /// mapped (EINVAL, as the kernel's `bfregn_to_uar_index`).
    #[error("dynamic bfreg {0} is not on a mapped page")]
    DynBfregUnmapped(u32),
}

/// What the kernel answers for `bfreg_index` when user space chose the
/// register itself (MLX5_IB_INVALID_BFREG).
pub const INVALID_BFREG: u32 = 1 << 31;

/// alloc_ucontext request (`mlx5_ib_alloc_ucontext_req_v2`, the fields used).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocUcontextReq {
    /// Static bfregs asked for.
    pub total_num_bfregs: u32,
    /// Of which dedicated (low latency).
    pub num_low_latency_bfregs: u32,
}

/// alloc_ucontext response (`mlx5_ib_alloc_ucontext_resp`, the fields used).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocUcontextResp {
    /// 1 << log_max_qp.
    pub qp_tab_size: u32,
    /// Size of a bfreg (0: no BlueFlame).
    pub bf_reg_size: u32,
    /// Static bfregs granted.
    pub tot_bfregs: u32,
    /// Cache line size.
    pub cache_line_size: u32,
    /// Largest send WQE in bytes.
    pub max_sq_desc_sz: u32,
    /// Largest receive WQE in bytes.
    pub max_rq_desc_sz: u32,
    /// Largest send queue in WQEBBs.
    pub max_send_wqebb: u32,
    /// Largest receive queue in WQEs.
    pub max_recv_wr: u32,
    /// CQE version.
    pub cqe_version: u8,
    /// log2 of a UAR's size.
    pub log_uar_size: u32,
    /// UARs per system page.
    pub num_uars_per_page: u32,
    /// Dynamic bfregs reserved.
    pub num_dyn_bfregs: u32,
}

/// create_qp request: the buffers the provider made and the sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreateQpReq {
    /// RC or UD.
    pub qp_type: QpType,
    /// Protection domain.
    pub pd: Pdn,
    /// Send CQ.
    pub send_cq: Cqn,
    /// Receive CQ.
    pub recv_cq: Cqn,
    /// Start of the QP buffer (RQ, then SQ).
    pub buf_addr: HostAddr,
    /// Its length.
    pub buf_len: u64,
    /// log2 of SQ WQEBBs.
    pub log_sq_size: u8,
    /// log2 of RQ WQEs.
    pub log_rq_size: u8,
    /// log2(RQ stride) − 4.
    pub log_rq_stride: u8,
    /// The doorbell record's address.
    pub db_addr: HostAddr,
    /// The SRQ the QP receives from; the buffer then holds only the send
    /// queue and the RQ sizes are ignored.
    pub srq: Option<Srqn>,
    /// The dynamic bfreg the provider chose (MLX5_QP_FLAG_BFREG_INDEX with
    /// `bfreg_index`), on a page it mapped with [`Ucontext::map_dyn_uar`];
    /// `None` lets the kernel's policy choose a static one.
    pub dyn_bfreg: Option<u32>,
    /// The port's GSI QP (UD, numbered 1 by the device): what the kernel
    /// makes for its CM and MAD layer, never a user context.
    pub gsi: bool,
    /// The provider's user index for the QP (`uidx`), which its CQEs carry.
    pub user_index: u32,
}

/// create_srq request: the WQE ring and doorbell record the provider made
/// (`mlx5_ib_create_srq`'s `buf_addr` and `db_addr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreateSrqReq {
    /// Protection domain.
    pub pd: Pdn,
    /// Start of the WQE ring.
    pub buf_addr: HostAddr,
    /// Its length.
    pub buf_len: u64,
    /// log2 of the number of WQEs.
    pub log_size: u8,
    /// log2(WQE stride) − 4.
    pub log_stride: u8,
    /// The doorbell record's address.
    pub db_addr: HostAddr,
}

/// create_qp response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreateQpResp {
    /// The QP number.
    pub qpn: Qpn,
    /// The gross bfreg index the provider rings through, or
    /// [`INVALID_BFREG`] when it chose a dynamic one.
    pub bfreg_index: u32,
}

struct DbPage {
    refs: u32,
}

struct QpRecord {
    /// The static bfreg it counts against; `None` for a dynamic one.
    bfregn: Option<u32>,
    /// The UAR its doorbells go to.
    uar: UarIndex,
    buf: HostAddr,
    buf_len: u64,
    db: HostAddr,
}

struct State {
    bfregs: BfregAllocator,
    db_pages: BTreeMap<HostAddr, DbPage>,
    qps: BTreeMap<Qpn, QpRecord>,
    /// Each CQ's buffer, its length, its doorbell record and its CQE size.
    cqs: BTreeMap<Cqn, (HostAddr, u64, HostAddr, u16)>,
    /// Each MR's pinned range.
    mrs: BTreeMap<Mkey, (HostAddr, u64)>,
    /// Each SRQ's ring, its length, and its doorbell record.
    srqs: BTreeMap<Srqn, (HostAddr, u64, HostAddr)>,
    /// The dynamic system pages (`sys_pages[num_static_sys_pages..]`):
    /// `None` until mapped with MLX5_IB_MMAP_ALLOC_WC.
    dyn_pages: Vec<Option<UarIndex>>,
}

/// A user context: its UARs, bfregs, pinned pages and objects.
pub struct Ucontext {
    link: Arc<dyn DeviceLink>,
    caps: DeviceCaps,
    resp: AllocUcontextResp,
    uars: Vec<UarIndex>,
    state: Mutex<State>,
}

impl std::fmt::Debug for Ucontext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ucontext")
            .field("uars", &self.uars)
            .field("resp", &self.resp)
            .finish()
    }
}

fn caps_of(link: &dyn DeviceLink) -> Result<DeviceCaps, DriverError> {
    match link.exec(Command::QueryCaps)? {
        CmdOut::Caps(c) => Ok(c),
        _ => Err(DriverError::Protocol),
    }
}

impl Ucontext {
    /// alloc_ucontext: computes the bfreg layout, allocates one UAR per
    /// static system page, and reports the device's limits.
    pub fn alloc(link: Arc<dyn DeviceLink>, req: AllocUcontextReq) -> Result<Self, DriverError> {
        let caps = caps_of(&*link)?;
        let info = BfregInfo::calc(
            req.total_num_bfregs,
            req.num_low_latency_bfregs,
            caps.num_uars_per_page,
        )?;
        let mut uars = Vec::with_capacity(info.num_static_sys_pages as usize);
        for _ in 0..info.num_static_sys_pages {
            match link.exec(Command::AllocUar) {
                Ok(CmdOut::Uar(u)) => uars.push(u),
                other => {
                    for u in uars {
                        let _ = link.exec(Command::DeallocUar(u));
                    }
                    return Err(other
                        .err()
                        .map(DriverError::from)
                        .unwrap_or(DriverError::Protocol));
                }
            }
        }
        let resp = AllocUcontextResp {
            qp_tab_size: 1 << caps.log_max_qp,
            bf_reg_size: caps.bf_reg_size,
            tot_bfregs: info.total_static,
            cache_line_size: caps.cache_line_size,
            max_sq_desc_sz: caps.max_sq_desc_sz,
            max_rq_desc_sz: caps.max_rq_desc_sz,
            max_send_wqebb: caps.max_send_wqebb,
            max_recv_wr: caps.max_recv_wr,
            cqe_version: 1,
            log_uar_size: uar::LOG_UAR_SIZE,
            num_uars_per_page: caps.num_uars_per_page,
            num_dyn_bfregs: info.num_dyn_bfregs,
        };
        let dyn_pages = vec![None; (info.num_sys_pages - info.num_static_sys_pages) as usize];
        Ok(Self {
            link,
            caps,
            resp,
            uars,
            state: Mutex::new(State {
                dyn_pages,
                bfregs: BfregAllocator::new(info),
                db_pages: BTreeMap::new(),
                qps: BTreeMap::new(),
                cqs: BTreeMap::new(),
                mrs: BTreeMap::new(),
                srqs: BTreeMap::new(),
            }),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The response the provider got.
    pub fn resp(&self) -> &AllocUcontextResp {
        &self.resp
    }

    /// The device's capabilities.
    pub fn caps(&self) -> &DeviceCaps {
        &self.caps
    }

    /// The device link.
    pub fn link(&self) -> &Arc<dyn DeviceLink> {
        &self.link
    }

    /// The static UAR pages mapped into this context, in order.
    pub fn uar_pages(&self) -> &[UarIndex] {
        &self.uars
    }

    /// The mmap of dynamic UAR page `page` (command MLX5_IB_MMAP_ALLOC_WC):
    /// allocates a UAR from the device for the page's slot and returns its
    /// index, which the provider's doorbells then go to. A page outside the
    /// reservation (`num_dyn_bfregs / bfregs_per_sys_page` pages) or one
    /// already mapped is refused; the UAR lives until the context goes.
    pub fn map_dyn_uar(&self, page: u32) -> Result<UarIndex, DriverError> {
        let mut st = self.state();
        let pages = st.dyn_pages.len() as u32;
        match st.dyn_pages.get(page as usize) {
            None => return Err(DriverError::DynUarOutOfRange { page, pages }),
            Some(Some(_)) => return Err(DriverError::DynUarMapped(page)),
            Some(None) => {}
        }
        let uar = match self.link.exec(Command::AllocUar)? {
            CmdOut::Uar(u) => u,
            _ => return Err(DriverError::Protocol),
        };
        st.dyn_pages[page as usize] = Some(uar);
        Ok(uar)
    }

    /// The UAR of dynamic page `page`, if it is mapped.
    pub fn dyn_uar(&self, page: u32) -> Option<UarIndex> {
        self.state().dyn_pages.get(page as usize).copied().flatten()
    }

    /// The port's link: with `Some`, sets its administrative state first
    /// (ACCESS_REG PAOS, as `ip link set ... up/down` has the kernel do);
    /// returns whether it is up.
    pub fn port_admin(&self, set: Option<bool>) -> Result<bool, DriverError> {
        match self.link.exec(Command::AccessPaos(set))? {
            CmdOut::PortUp(up) => Ok(up),
            _ => Err(DriverError::Protocol),
        }
    }

    /// Use count of net bfreg `n` (for inspection).
    pub fn bfreg_count(&self, n: u32) -> u32 {
        self.state().bfregs.count(n)
    }

    /// alloc_pd.
    pub fn alloc_pd(&self) -> Result<Pdn, DriverError> {
        match self.link.exec(Command::AllocPd)? {
            CmdOut::Pd(p) => Ok(p),
            _ => Err(DriverError::Protocol),
        }
    }

    /// dealloc_pd.
    pub fn dealloc_pd(&self, pd: Pdn) -> Result<(), DriverError> {
        self.link.exec(Command::DeallocPd(pd))?;
        Ok(())
    }

    /// reg_mr: pins `[addr, addr + len)` and creates an mkey over its pages.
    pub fn reg_mr(
        &self,
        pd: Pdn,
        addr: HostAddr,
        len: u64,
        access: Access,
    ) -> Result<Mkey, DriverError> {
        let mem = self.link.memory();
        let mtt = mem.pin(addr, len)?;
        let params = MkeyParams {
            pd,
            access,
            start: addr.get(),
            len,
            mtt,
        };
        match self.link.exec(Command::CreateMkey(params)) {
            Ok(CmdOut::Mkey(k)) => {
                self.state().mrs.insert(k, (addr, len));
                Ok(k)
            }
            other => {
                let _ = mem.unpin(addr, len);
                Err(other
                    .err()
                    .map(DriverError::from)
                    .unwrap_or(DriverError::Protocol))
            }
        }
    }

    /// rereg_mr: gives mkey `key` a new PD, range or access in place; the
    /// key stays. The new range is pinned before the old is unpinned, so a
    /// refusal leaves the registration as it was.
    pub fn rereg_mr(
        &self,
        key: Mkey,
        pd: Pdn,
        addr: HostAddr,
        len: u64,
        access: Access,
    ) -> Result<(), DriverError> {
        let (old_addr, old_len) = self
            .state()
            .mrs
            .get(&key)
            .copied()
            .ok_or(DriverError::NoSuchObject(key.raw()))?;
        let mem = self.link.memory();
        let mtt = mem.pin(addr, len)?;
        let params = MkeyParams {
            pd,
            access,
            start: addr.get(),
            len,
            mtt,
        };
        if let Err(e) = self.link.exec(Command::ModifyMkey(key, params)) {
            let _ = mem.unpin(addr, len);
            return Err(e.into());
        }
        self.state().mrs.insert(key, (addr, len));
        mem.unpin(old_addr, old_len)?;
        Ok(())
    }

    /// dereg_mr.
    pub fn dereg_mr(&self, key: Mkey) -> Result<(), DriverError> {
        let (addr, len) = self
            .state()
            .mrs
            .get(&key)
            .copied()
            .ok_or(DriverError::NoSuchObject(key.raw()))?;
        self.link.exec(Command::DestroyMkey(key))?;
        self.state().mrs.remove(&key);
        self.link.memory().unpin(addr, len)?;
        Ok(())
    }

    /// `mlx5_ib_db_map_user`: pins the page holding a doorbell record (once
    /// per page, reference-counted) and returns its bus address.
    fn db_map(&self, st: &mut State, db: HostAddr) -> Result<HostAddr, DriverError> {
        let page = db.align_down(PAGE_SIZE);
        match st.db_pages.get_mut(&page) {
            Some(p) => p.refs += 1,
            None => {
                self.link.memory().pin(page, PAGE_SIZE)?;
                st.db_pages.insert(page, DbPage { refs: 1 });
            }
        }
        Ok(db)
    }

    fn db_unmap(&self, st: &mut State, db: HostAddr) {
        let page = db.align_down(PAGE_SIZE);
        if let Some(p) = st.db_pages.get_mut(&page) {
            p.refs -= 1;
            if p.refs == 0 {
                st.db_pages.remove(&page);
                let _ = self.link.memory().unpin(page, PAGE_SIZE);
            }
        }
    }

    /// Pages whose doorbell records are mapped, with their reference counts.
    pub fn db_pages(&self) -> Vec<(HostAddr, u32)> {
        self.state()
            .db_pages
            .iter()
            .map(|(&a, p)| (a, p.refs))
            .collect()
    }

    /// create_cq over a CQE buffer of 64-byte CQEs and a doorbell record
    /// the provider made.
    pub fn create_cq(&self, log_size: u8, buf: HostAddr, db: HostAddr) -> Result<Cqn, DriverError> {
        self.create_cq_sized(log_size, 64, buf, db)
    }

    /// create_cq with `cqe_bytes` (64 or 128) per CQE in the buffer, as
    /// mlx5_ib takes `cqe_size` from the provider's request.
    pub fn create_cq_sized(
        &self,
        log_size: u8,
        cqe_bytes: u16,
        buf: HostAddr,
        db: HostAddr,
    ) -> Result<Cqn, DriverError> {
        let mem = self.link.memory();
        let len = u64::from(cqe_bytes) << log_size;
        let pas = mem.pin(buf, len)?;
        let mut st = self.state();
        let dbr_addr = match self.db_map(&mut st, db) {
            Ok(a) => a,
            Err(e) => {
                let _ = mem.unpin(buf, len);
                return Err(e);
            }
        };
        // User CQs are armed through the first static UAR.
        let uar = self.uars.first().copied().unwrap_or_default();
        match self.link.exec(Command::CreateCq(CqParams {
            log_size,
            uar,
            dbr_addr,
            cqe_bytes,
            pas,
        })) {
            Ok(CmdOut::Cq(c)) => {
                st.cqs.insert(c, (buf, len, db, cqe_bytes));
                Ok(c)
            }
            other => {
                self.db_unmap(&mut st, db);
                let _ = mem.unpin(buf, len);
                Err(other
                    .err()
                    .map(DriverError::from)
                    .unwrap_or(DriverError::Protocol))
            }
        }
    }

    /// resize_cq: pins the new CQE buffer and moves the CQ to it; the old
    /// buffer is unpinned once the device has let it go, the new one if it
    /// refuses (its CQEs still there would not fit).
    pub fn resize_cq(&self, cqn: Cqn, log_size: u8, buf: HostAddr) -> Result<(), DriverError> {
        let (old, old_len, db, cqe_bytes) = self
            .state()
            .cqs
            .get(&cqn)
            .copied()
            .ok_or(DriverError::NoSuchObject(cqn.get()))?;
        let mem = self.link.memory();
        let len = u64::from(cqe_bytes) << log_size;
        let pas = mem.pin(buf, len)?;
        if let Err(e) = self.link.exec(Command::ResizeCq { cqn, log_size, pas }) {
            let _ = mem.unpin(buf, len);
            return Err(e.into());
        }
        self.state().cqs.insert(cqn, (buf, len, db, cqe_bytes));
        mem.unpin(old, old_len)?;
        Ok(())
    }

    /// The UAR CQ arm doorbells go through.
    pub fn cq_uar(&self) -> UarIndex {
        self.uars.first().copied().unwrap_or_default()
    }

    /// destroy_cq.
    pub fn destroy_cq(&self, cqn: Cqn) -> Result<(), DriverError> {
        let (buf, len, db, _) = self
            .state()
            .cqs
            .get(&cqn)
            .copied()
            .ok_or(DriverError::NoSuchObject(cqn.get()))?;
        self.link.exec(Command::DestroyCq(cqn))?;
        let mut st = self.state();
        st.cqs.remove(&cqn);
        self.db_unmap(&mut st, db);
        self.link.memory().unpin(buf, len)?;
        Ok(())
    }

    /// create_qp: chooses the bfreg by the kernel's policy, pins the buffer
    /// and the doorbell record, and creates the QP on the bfreg's UAR.
    pub fn create_qp(&self, req: CreateQpReq) -> Result<CreateQpResp, DriverError> {
        let mem = self.link.memory();
        let pas = mem.pin(req.buf_addr, req.buf_len)?;
        let mut st = self.state();
        let dbr_addr = match self.db_map(&mut st, req.db_addr) {
            Ok(a) => a,
            Err(e) => {
                let _ = mem.unpin(req.buf_addr, req.buf_len);
                return Err(e);
            }
        };
        let (bfregn, uar) = match req.dyn_bfreg {
            Some(n) => match Self::dyn_bfreg_uar(&st, n) {
                Some(uar) => (None, Ok(uar)),
                None => {
                    self.db_unmap(&mut st, req.db_addr);
                    let _ = mem.unpin(req.buf_addr, req.buf_len);
                    return Err(DriverError::DynBfregUnmapped(n));
                }
            },
            None => {
                let n = st.bfregs.alloc();
                let info = st.bfregs.info();
                let page = info.sys_page(n) as usize;
                let uar = self
                    .uars
                    .get(page)
                    .map(|u| UarIndex::new(u.get() + info.uar_in_page(n)))
                    .ok_or(page as u32);
                (Some(n), uar)
            }
        };
        let params = uar.map(|uar| QpParams {
            qp_type: req.qp_type,
            pd: req.pd,
            send_cq: req.send_cq,
            recv_cq: req.recv_cq,
            uar,
            log_sq_size: req.log_sq_size,
            log_rq_size: req.log_rq_size,
            log_rq_stride: req.log_rq_stride,
            dbr_addr,
            pas,
            srq: req.srq,
            gsi: req.gsi,
            user_index: req.user_index,
        });
        let params_uar = params.as_ref().map(|p| p.uar).unwrap_or_default();
        let out = match params {
            Ok(p) => self.link.exec(Command::CreateQp(p)),
            Err(page) => Err(CmdError::NoSuchObject {
                kind: ObjKind::Uar,
                id: page,
            }),
        };
        match out {
            Ok(CmdOut::Qp(qpn)) => {
                st.qps.insert(
                    qpn,
                    QpRecord {
                        bfregn,
                        uar: params_uar,
                        buf: req.buf_addr,
                        buf_len: req.buf_len,
                        db: req.db_addr,
                    },
                );
                Ok(CreateQpResp {
                    qpn,
                    bfreg_index: bfregn.map_or(INVALID_BFREG, gross_index),
                })
            }
            other => {
                if let Some(n) = bfregn {
                    st.bfregs.free(n);
                }
                self.db_unmap(&mut st, req.db_addr);
                let _ = mem.unpin(req.buf_addr, req.buf_len);
                Err(other
                    .err()
                    .map(DriverError::from)
                    .unwrap_or(DriverError::Protocol))
            }
        }
    }

    /// The kernel's `bfregn_to_uar_index` for a dynamic bfreg: its page
    /// counts after the static ones and must be mapped.
    fn dyn_bfreg_uar(st: &State, n: u32) -> Option<UarIndex> {
        let info = st.bfregs.info();
        if n >= info.num_dyn_bfregs {
            return None;
        }
        let base = st
            .dyn_pages
            .get(info.sys_page(n) as usize)
            .copied()
            .flatten()?;
        Some(UarIndex::new(base.get() + info.uar_in_page(n)))
    }

    /// The UAR QP `qpn`'s doorbells go to.
    pub fn qp_uar(&self, qpn: Qpn) -> Option<UarIndex> {
        self.state().qps.get(&qpn).map(|r| r.uar)
    }

    /// modify_qp.
    pub fn modify_qp(&self, qpn: Qpn, state: QpState, attrs: QpAttrs) -> Result<(), DriverError> {
        self.link.exec(Command::ModifyQp { qpn, state, attrs })?;
        Ok(())
    }

    /// query_qp.
    pub fn query_qp(&self, qpn: Qpn) -> Result<(QpState, QpAttrs), DriverError> {
        match self.link.exec(Command::QueryQp(qpn))? {
            CmdOut::QpInfo { state, attrs } => Ok((state, attrs)),
            _ => Err(DriverError::Protocol),
        }
    }

    /// destroy_qp: releases the QP, its bfreg use, and its pins.
    pub fn destroy_qp(&self, qpn: Qpn) -> Result<(), DriverError> {
        if !self.state().qps.contains_key(&qpn) {
            return Err(DriverError::NoSuchObject(qpn.get()));
        }
        self.link.exec(Command::DestroyQp(qpn))?;
        let mut st = self.state();
        if let Some(r) = st.qps.remove(&qpn) {
            if let Some(n) = r.bfregn {
                st.bfregs.free(n);
            }
            self.db_unmap(&mut st, r.db);
            self.link.memory().unpin(r.buf, r.buf_len)?;
        }
        Ok(())
    }

    /// create_srq: pins the WQE ring and the doorbell record and creates
    /// the SRQ over them.
    pub fn create_srq(&self, req: CreateSrqReq) -> Result<Srqn, DriverError> {
        let mem = self.link.memory();
        let pas = mem.pin(req.buf_addr, req.buf_len)?;
        let mut st = self.state();
        let dbr_addr = match self.db_map(&mut st, req.db_addr) {
            Ok(a) => a,
            Err(e) => {
                let _ = mem.unpin(req.buf_addr, req.buf_len);
                return Err(e);
            }
        };
        match self.link.exec(Command::CreateSrq(SrqParams {
            pd: req.pd,
            log_size: req.log_size,
            log_stride: req.log_stride,
            dbr_addr,
            pas,
        })) {
            Ok(CmdOut::Srq(s)) => {
                st.srqs.insert(s, (req.buf_addr, req.buf_len, req.db_addr));
                Ok(s)
            }
            other => {
                self.db_unmap(&mut st, req.db_addr);
                let _ = mem.unpin(req.buf_addr, req.buf_len);
                Err(other
                    .err()
                    .map(DriverError::from)
                    .unwrap_or(DriverError::Protocol))
            }
        }
    }

    /// modify_srq with IBV_SRQ_LIMIT: arms the SRQ's limit event (ARM_RQ).
    pub fn modify_srq(&self, srqn: Srqn, limit: u32) -> Result<(), DriverError> {
        self.link.exec(Command::ModifySrq { srqn, limit })?;
        Ok(())
    }

    /// query_srq: the armed limit (0 once its event has fired).
    pub fn query_srq(&self, srqn: Srqn) -> Result<u32, DriverError> {
        match self.link.exec(Command::QuerySrq(srqn))? {
            CmdOut::SrqInfo { limit } => Ok(limit),
            _ => Err(DriverError::Protocol),
        }
    }

    /// destroy_srq: refused (EBUSY) while a QP uses it.
    pub fn destroy_srq(&self, srqn: Srqn) -> Result<(), DriverError> {
        let (buf, len, db) = self
            .state()
            .srqs
            .get(&srqn)
            .copied()
            .ok_or(DriverError::NoSuchObject(srqn.get()))?;
        self.link.exec(Command::DestroySrq(srqn))?;
        let mut st = self.state();
        st.srqs.remove(&srqn);
        self.db_unmap(&mut st, db);
        self.link.memory().unpin(buf, len)?;
        Ok(())
    }

    /// Writes a big-endian word of host memory (helper for the provider).
    pub fn host(&self) -> &dyn HostMemory {
        &**self.link.memory()
    }
}

impl Drop for Ucontext {
    fn drop(&mut self) {
        let dynamic: Vec<UarIndex> = self.state().dyn_pages.iter().flatten().copied().collect();
        for u in self.uars.iter().chain(&dynamic) {
            let _ = self.link.exec(Command::DeallocUar(*u));
        }
    }
}
