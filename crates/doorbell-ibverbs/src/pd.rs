//! Protection domains and memory regions: `ibv_reg_mr` grants the caller's
//! buffer to the process's memory and registers it in place.

#![allow(unsafe_code)]
// The exports are reached from C by their symbols, not from Rust.
#![allow(unreachable_pub)]

use core::ffi::{c_int, c_uint, c_void};
use std::sync::{Arc, OnceLock};

use doorbell_hif::Access;
use doorbell_rt::ProcessMemory;
use doorbell_types::HostAddr;
use doorbell_verbs::{BufferAllocator, BufferKind, Mr, MrChange, Pd, ThreadDomain, VerbsError};
use libc::{EINVAL, EOPNOTSUPP, size_t};

use crate::abi::consts::*;
use crate::abi::*;
use crate::boundary::{Conv, guard, set_errno};
use crate::ctx::context;
use crate::handle;
use crate::handles;

/// A PD or a parent domain: the verbs `Pd` says which.
#[repr(C)]
pub(crate) struct CPd {
    pub(crate) pd: ibv_pd,
    pub(crate) inner: Pd,
    /// A parent domain's `pd_context` (IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT),
    /// kept for the caller; this library never dereferences it.
    pd_context: *mut c_void,
}
handle!(CPd, ibv_pd, pd, Pd);

#[repr(C)]
struct CTd {
    td: ibv_td,
    inner: ThreadDomain,
}
handle!(CTd, ibv_td, td, Td);

/// `ibv_alloc_pd`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_alloc_pd(context_: *mut ibv_context) -> *mut ibv_pd {
    guard("ibv_alloc_pd", Conv::Null, || {
        if let Some(r) = crate::hosted::verbs::alloc_pd(context_) {
            return r;
        }
        let c = context(context_)?;
        let inner = c.ctx.alloc_pd().map_err(|e| e.errno())?;
        let pd = ibv_pd {
            context: context_,
            handle: inner.pdn().get(),
        };
        Ok(handles::register(Box::new(CPd {
            pd,
            inner,
            pd_context: core::ptr::null_mut(),
        })))
    })
}

/// `verbs_context.alloc_td` (what the inline `ibv_alloc_td` calls): a
/// thread domain with a dynamic doorbell register of its own. No
/// `comp_mask` bit is known (EINVAL); ENOSPC when the dynamic pages run out.
pub(crate) unsafe extern "C" fn alloc_td(
    context_: *mut ibv_context,
    attr: *mut ibv_td_init_attr,
) -> *mut ibv_td {
    guard("ibv_alloc_td", Conv::Null, || {
        // SAFETY: the caller's attributes; NULL is refused.
        let a = unsafe { attr.as_ref() }.copied().ok_or(EINVAL)?;
        if a.comp_mask != 0 {
            return Err(EINVAL);
        }
        let c = context(context_)?;
        let inner = c.ctx.alloc_td().map_err(|e| e.errno())?;
        let td = ibv_td { context: context_ };
        Ok(handles::register(Box::new(CTd { td, inner })))
    })
}

/// `verbs_context.dealloc_td`: EBUSY while a parent domain holds it.
pub(crate) unsafe extern "C" fn dealloc_td(td: *mut ibv_td) -> c_int {
    guard("ibv_dealloc_td", Conv::Errno, || {
        let obj = handles::take::<CTd>(td)?;
        if obj.inner.is_shared() {
            handles::restore(obj);
            return Err(libc::EBUSY);
        }
        drop(obj);
        Ok(0)
    })
}

/// The application's allocator of a parent domain, called as libmlx5 calls
/// it for a QP's buffer: with the parent domain, its `pd_context`, the
/// size, the page alignment and `MLX5DV_RES_TYPE_QP`.
struct CAllocator {
    /// The parent domain's handle, known once it is registered.
    pd: OnceLock<usize>,
    pd_context: *mut c_void,
    alloc: AllocFn,
    free: FreeFn,
    mem: Arc<ProcessMemory>,
}

type AllocFn = unsafe extern "C" fn(*mut ibv_pd, *mut c_void, size_t, size_t, u64) -> *mut c_void;
type FreeFn = unsafe extern "C" fn(*mut ibv_pd, *mut c_void, *mut c_void, u64);

// SAFETY: the pointers are only handed back to the application's own
// callbacks, which libibverbs lets any thread call.
unsafe impl Send for CAllocator {}
// SAFETY: as above; nothing here is written after construction but the
// OnceLock.
unsafe impl Sync for CAllocator {}

/// `MLX5DV_RES_TYPE_QP`: RDMA_DRIVER_MLX5 (1) in the upper word, 1.
const MLX5DV_RES_TYPE_QP: u64 = 1 << 32 | 1;
/// `IBV_ALLOCATOR_USE_DEFAULT`: `(void *)-1`.
const IBV_ALLOCATOR_USE_DEFAULT: usize = usize::MAX;

fn res_type(kind: BufferKind) -> u64 {
    match kind {
        BufferKind::Qp => MLX5DV_RES_TYPE_QP,
        _ => 0,
    }
}

impl BufferAllocator for CAllocator {
    fn alloc(
        &self,
        len: u64,
        align: u64,
        kind: BufferKind,
    ) -> Result<Option<HostAddr>, VerbsError> {
        let pd = self.pd.get().copied().unwrap_or(0) as *mut ibv_pd;
        // SAFETY: the application's callback, called with what libmlx5
        // passes it; it returns memory of its own or one of two markers.
        let p = unsafe {
            (self.alloc)(
                pd,
                self.pd_context,
                len as size_t,
                align as size_t,
                res_type(kind),
            )
        };
        if p as usize == IBV_ALLOCATOR_USE_DEFAULT {
            return Ok(None);
        }
        if p.is_null() {
            return Err(VerbsError::NoMemory("the parent domain's allocator"));
        }
        let at = HostAddr::new(p as u64);
        // SAFETY: the application hands this buffer to the library until
        // the library gives it back through the free callback (below); no
        // Rust reference is made into it, and the device reaches it only
        // through process memory's checked accesses.
        unsafe { self.mem.grant(at, len) };
        Ok(Some(at))
    }

    fn free(&self, addr: HostAddr, len: u64, kind: BufferKind) {
        let _ = self.mem.revoke(addr, len);
        let pd = self.pd.get().copied().unwrap_or(0) as *mut ibv_pd;
        // SAFETY: gives back what the allocator gave, as libmlx5 does once
        // the QP is destroyed.
        unsafe {
            (self.free)(
                pd,
                self.pd_context,
                addr.get() as *mut c_void,
                res_type(kind),
            )
        };
    }
}

/// `verbs_context.alloc_parent_domain`: an `ibv_pd` over `attr.pd` (of this
/// context) and `attr.td` (of this context, or NULL), usable wherever a PD
/// is and freed by `ibv_dealloc_pd`. `pd_context` is kept; with
/// `IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS` (both callbacks needed) the
/// buffer of each QP made in it comes from `alloc` and goes back to `free`
/// (`IBV_ALLOCATOR_USE_DEFAULT` meaning the library's own memory); CQ,
/// SRQ and doorbell-record memory stays the library's.
pub(crate) unsafe extern "C" fn alloc_parent_domain(
    context_: *mut ibv_context,
    attr: *mut ibv_parent_domain_init_attr,
) -> *mut ibv_pd {
    guard("ibv_alloc_parent_domain", Conv::Null, || {
        // SAFETY: the caller's attributes; NULL is refused.
        let a = unsafe { attr.as_ref() }.copied().ok_or(EINVAL)?;
        if a.comp_mask
            & !(IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT)
            != 0
        {
            return Err(EINVAL);
        }
        let base = pd_of(a.pd)?;
        if base.pd.context != context_ {
            return Err(EINVAL);
        }
        let td = if a.td.is_null() {
            None
        } else {
            let t = handles::get::<CTd>(a.td)?;
            if t.td.context != context_ {
                return Err(EINVAL);
            }
            Some(&t.inner)
        };
        let c = context(context_)?;
        let allocator = if a.comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS != 0 {
            let (Some(alloc), Some(free)) = (a.alloc, a.free) else {
                return Err(EINVAL);
            };
            Some(Arc::new(CAllocator {
                pd: OnceLock::new(),
                pd_context: a.pd_context,
                alloc,
                free,
                mem: Arc::clone(c.nic.memory()),
            }))
        } else {
            None
        };
        let inner = base
            .inner
            .parent_domain_with(td, allocator.clone().map(|a| a as Arc<dyn BufferAllocator>))
            .map_err(|e| e.errno())?;
        let pd = ibv_pd {
            context: context_,
            handle: base.pd.handle,
        };
        let pd_context = if a.comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT != 0 {
            a.pd_context
        } else {
            core::ptr::null_mut()
        };
        let h = handles::register(Box::new(CPd {
            pd,
            inner,
            pd_context,
        }));
        if let Some(a) = allocator {
            let _ = a.pd.set(h as usize);
        }
        Ok(h)
    })
}

/// `ibv_dealloc_pd`: EBUSY while an MR, QP or AH of it exists, or (for a
/// PD) while a parent domain is made over it.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    guard("ibv_dealloc_pd", Conv::Errno, || {
        if let Some(r) = crate::hosted::verbs::dealloc_pd(pd) {
            return r;
        }
        let obj = handles::take::<CPd>(pd)?;
        // The verbs Pd is shared by every object made in it: only the last
        // holder frees the device's PD.
        if obj.inner.is_shared() {
            handles::restore(obj);
            return Err(libc::EBUSY);
        }
        drop(obj);
        Ok(0)
    })
}

pub(crate) fn pd_of<'a>(pd: *mut ibv_pd) -> Result<&'a CPd, c_int> {
    handles::get::<CPd>(pd)
}

#[repr(C)]
struct CMr {
    mr: ibv_mr,
    inner: Option<Mr>,
    /// The range handed to process memory, revoked at deregistration.
    granted: (HostAddr, u64),
    ctx: *mut ibv_context,
}
handle!(CMr, ibv_mr, mr, Mr);

impl Drop for CMr {
    fn drop(&mut self) {
        // Deregister (unpin) before the grant is withdrawn.
        self.inner.take();
        if let Ok(c) = context(self.ctx) {
            let _ = c.nic.memory().revoke(self.granted.0, self.granted.1);
        }
    }
}

/// The access bits the kernel knows; anything else is EINVAL.
const KNOWN_ACCESS: c_uint = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC
    | IBV_ACCESS_MW_BIND
    | IBV_ACCESS_ZERO_BASED
    | IBV_ACCESS_ON_DEMAND
    | IBV_ACCESS_HUGETLB
    | IBV_ACCESS_OPTIONAL_RANGE;

/// The device's rights for C access flags: unknown bits are EINVAL; memory
/// windows, zero-based MRs and on-demand paging are not doorbell's
/// (EOPNOTSUPP); the optional-range bits are hints it ignores.
pub(crate) fn access_of(access: c_uint) -> Result<Access, c_int> {
    if access & !KNOWN_ACCESS != 0 {
        return Err(EINVAL);
    }
    if access & (IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED | IBV_ACCESS_ON_DEMAND) != 0 {
        return Err(EOPNOTSUPP);
    }
    Ok(Access(access & 0xf))
}

fn reg_mr(
    pd_: *mut ibv_pd,
    addr: *mut c_void,
    length: size_t,
    iova: u64,
    access: c_uint,
) -> Result<*mut ibv_mr, c_int> {
    let pd = pd_of(pd_)?;
    let access = access_of(access)?;
    if iova != addr as u64 {
        return Err(EOPNOTSUPP);
    }
    let c = context(pd.pd.context)?;
    let at = HostAddr::new(addr as u64);
    let len = length as u64;
    let mem = c.nic.memory();
    // SAFETY: the C program registers its own buffer: from here until
    // ibv_dereg_mr no Rust reference points into it (this library makes
    // none; Rust callers in the same process use the Rust API, not this
    // one), and memory it unmaps meanwhile makes accesses fail, not crash.
    unsafe { mem.grant(at, len) };
    let mr = match pd.inner.reg_mr_at(addr as u64, length, access) {
        Ok(mr) => mr,
        Err(e) => {
            let _ = mem.revoke(at, len);
            return Err(e.errno());
        }
    };
    let m = ibv_mr {
        context: pd.pd.context,
        pd: pd_,
        addr,
        length,
        handle: mr.lkey().raw(),
        lkey: mr.lkey().raw(),
        rkey: mr.rkey().raw(),
    };
    Ok(handles::register(Box::new(CMr {
        mr: m,
        inner: Some(mr),
        granted: (at, len),
        ctx: pd.pd.context,
    })))
}

/// `ibv_reg_mr@IBVERBS_1.1`: registers the caller's buffer in place.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: size_t,
    access: c_int,
) -> *mut ibv_mr {
    guard("ibv_reg_mr", Conv::Null, || {
        if let Some(r) = crate::hosted::verbs::reg_mr(pd, addr, length, addr as u64, access) {
            return r;
        }
        reg_mr(pd, addr, length, addr as u64, access as c_uint)
    })
}

/// `ibv_reg_mr_iova`: the IOVA must be the address (no zero-based MRs).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: size_t,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    guard("ibv_reg_mr_iova", Conv::Null, || {
        if let Some(r) = crate::hosted::verbs::reg_mr(pd, addr, length, iova, access) {
            return r;
        }
        reg_mr(pd, addr, length, iova, access as c_uint)
    })
}

/// `ibv_reg_mr_iova2`: what the inline `ibv_reg_mr` calls for access flags
/// that are not compile-time constants.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: size_t,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    guard("ibv_reg_mr_iova2", Conv::Null, || {
        if let Some(r) = crate::hosted::verbs::reg_mr(pd, addr, length, iova, access as c_int) {
            return r;
        }
        reg_mr(pd, addr, length, iova, access)
    })
}

/// What `ibv_rereg_mr` asks for, checked the way libibverbs checks it
/// before it reaches a provider.
struct Rereg {
    flags: c_uint,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: size_t,
    access: c_uint,
}

impl Rereg {
    fn check(&self) -> Result<(), c_int> {
        let translation = self.flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0;
        if self.flags & !IBV_REREG_MR_FLAGS_SUPPORTED != 0
            || (translation && (self.length == 0 || self.addr.is_null()))
            || (self.access != 0 && self.flags & IBV_REREG_MR_CHANGE_ACCESS == 0)
        {
            return Err(EINVAL);
        }
        Ok(())
    }
}

/// Applies `req` to `obj` in place: the keys stay, a new range is granted
/// to process memory before the old one is withdrawn, and a refusal leaves
/// the MR as it was.
fn rereg(obj: &mut CMr, req: &Rereg) -> Result<(), c_int> {
    let mut change = MrChange::default();
    if req.flags & IBV_REREG_MR_CHANGE_PD != 0 {
        let pd = pd_of(req.pd)?;
        if pd.pd.context != obj.ctx {
            return Err(EINVAL);
        }
        change.pd = Some(pd.inner.clone());
    }
    if req.flags & IBV_REREG_MR_CHANGE_ACCESS != 0 {
        change.access = Some(access_of(req.access)?);
    }
    let c = context(obj.ctx)?;
    let mem = c.nic.memory();
    let granted = if req.flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0 {
        let at = HostAddr::new(req.addr as u64);
        let len = req.length as u64;
        // SAFETY: as for ibv_reg_mr: the caller hands this range to the NIC
        // until it deregisters or re-registers the MR elsewhere.
        unsafe { mem.grant(at, len) };
        change.range = Some((req.addr as u64, req.length));
        Some((at, len))
    } else {
        None
    };
    let mr = obj.inner.as_mut().ok_or(EINVAL)?;
    if let Err(e) = mr.rereg(change) {
        if let Some((at, len)) = granted {
            let _ = mem.revoke(at, len);
        }
        return Err(e.errno());
    }
    if req.flags & IBV_REREG_MR_CHANGE_PD != 0 {
        obj.mr.pd = req.pd;
    }
    if let Some(new) = granted {
        obj.mr.addr = req.addr;
        obj.mr.length = req.length;
        let (at, len) = core::mem::replace(&mut obj.granted, new);
        let _ = mem.revoke(at, len);
    }
    Ok(())
}

/// `ibv_rereg_mr`: the MR takes the changed PD, range or access in place
/// and keeps its keys, as mlx5 rewrites an mkey with a UMR. Bad arguments return `IBV_REREG_MR_ERR_INPUT`, a refusal
/// `IBV_REREG_MR_ERR_CMD`, both with `errno` set and the MR unchanged (a
/// kernel leaves it unusable after a refused command; keeping it is kinder).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: size_t,
    access: c_int,
) -> c_int {
    let req = Rereg {
        flags: flags as c_uint,
        pd,
        addr,
        length,
        access: access as c_uint,
    };
    // Conv::MinusOne is IBV_REREG_MR_ERR_INPUT with errno set.
    guard("ibv_rereg_mr", Conv::MinusOne, || {
        handles::get::<CMr>(mr)?;
        req.check()?;
        let mut obj = handles::take::<CMr>(mr)?;
        let done = rereg(&mut obj, &req);
        handles::restore(obj);
        Ok(match done {
            Ok(()) => 0,
            Err(e) => {
                set_errno(e);
                IBV_REREG_MR_ERR_CMD
            }
        })
    })
}

/// `ibv_dereg_mr`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    guard("ibv_dereg_mr", Conv::Errno, || {
        if let Some(r) = crate::hosted::verbs::dereg_mr(mr) {
            return r;
        }
        drop(handles::take::<CMr>(mr)?);
        Ok(0)
    })
}
