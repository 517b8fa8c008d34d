//! Protection domains and memory regions.

use std::sync::Arc;

use doorbell_hif::Access;
use doorbell_host::PAGE_SIZE;
use doorbell_types::{HostAddr, Lkey, Mkey, Pdn, Rkey};

use crate::context::Context;
use crate::error::VerbsError;
use crate::queue_buf::{BufferAllocator, BufferKind, QueueBuf};
use crate::td::ThreadDomain;

pub(crate) struct PdInner {
    pub(crate) ctx: Context,
    pub(crate) pdn: Pdn,
    /// For a parent domain, the PD whose number it shares; `None` for a PD
    /// of its own.
    base: Option<Pd>,
    /// For a parent domain, its thread domain.
    td: Option<ThreadDomain>,
    /// For a parent domain, the application's allocator of QP buffers.
    allocator: Option<Arc<dyn BufferAllocator>>,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        // A parent domain has no PD number of its own to give back.
        if self.base.is_none() {
            let _ = self.ctx.driver().dealloc_pd(self.pdn);
        }
    }
}

/// A protection domain (`ibv_pd`), or a parent domain over one
/// ([`Pd::parent_domain`]): anything made in a parent domain is in its
/// base PD as far as the device knows (same PD number), and its QPs ring
/// the parent domain's thread domain's register.
#[derive(Clone)]
pub struct Pd {
    pub(crate) inner: Arc<PdInner>,
}

impl Pd {
    pub(crate) fn new(ctx: Context) -> Result<Self, VerbsError> {
        let pdn = ctx.driver().alloc_pd()?;
        Ok(Self {
            inner: Arc::new(PdInner {
                ctx,
                pdn,
                base: None,
                td: None,
                allocator: None,
            }),
        })
    }

    /// True while anything besides this handle holds the PD: a region, a
    /// QP, or another clone (so `ibv_dealloc_pd` answers EBUSY).
    pub fn is_shared(&self) -> bool {
        Arc::strong_count(&self.inner) > 1
    }

    /// A parent domain over this PD (`ibv_alloc_parent_domain`), with
    /// thread domain `td` or none. It shares the PD number and holds both
    /// this PD and `td`, so neither can go while it exists
    /// ([`Pd::is_shared`], [`ThreadDomain::is_shared`]); dropping it
    /// deallocates nothing on the device. Refused (EINVAL) for a `td` of
    /// another context, or over a PD that is itself a parent domain.
    pub fn parent_domain(&self, td: Option<&ThreadDomain>) -> Result<Pd, VerbsError> {
        self.parent_domain_with(td, None)
    }

    /// As [`Pd::parent_domain`], with the application's `allocator` of the
    /// buffers of QPs made in it (`IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS`).
    pub fn parent_domain_with(
        &self,
        td: Option<&ThreadDomain>,
        allocator: Option<Arc<dyn BufferAllocator>>,
    ) -> Result<Pd, VerbsError> {
        if self.inner.base.is_some() {
            return Err(VerbsError::InvalidArgument(
                "a parent domain over a parent domain",
            ));
        }
        if td.is_some_and(|t| !t.context().same_as(&self.inner.ctx)) {
            return Err(VerbsError::InvalidArgument(
                "a thread domain of another context",
            ));
        }
        Ok(Self {
            inner: Arc::new(PdInner {
                ctx: self.inner.ctx.clone(),
                pdn: self.inner.pdn,
                base: Some(self.clone()),
                td: td.cloned(),
                allocator,
            }),
        })
    }

    /// A page-aligned QP buffer of `len` bytes: from the parent domain's
    /// allocator if it has one that does not defer to the provider, else
    /// from host memory.
    pub(crate) fn alloc_queue_buf(&self, len: u64) -> Result<QueueBuf, VerbsError> {
        let mem = self.inner.ctx.mem();
        let from = self.inner.allocator.as_ref();
        QueueBuf::alloc(&**mem, from, len, PAGE_SIZE, BufferKind::Qp)
    }

    /// For a parent domain, the PD it was made over.
    pub fn base(&self) -> Option<&Pd> {
        self.inner.base.as_ref()
    }

    /// For a parent domain, its thread domain.
    pub fn thread_domain(&self) -> Option<&ThreadDomain> {
        self.inner.td.as_ref()
    }

    /// The PD number.
    pub fn pdn(&self) -> Pdn {
        self.inner.pdn
    }

    /// The context.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// Allocates `len` zeroed bytes of host memory and registers them with
    /// `access` rights (`ibv_reg_mr` over a fresh buffer).
    pub fn reg_mr(&self, len: usize, access: Access) -> Result<Mr, VerbsError> {
        if len == 0 {
            return Err(VerbsError::InvalidArgument(
                "a memory region needs at least one byte",
            ));
        }
        let mem = self.inner.ctx.mem();
        let addr = mem.alloc(len as u64)?;
        self.register(addr, len, access, Backing::Allocated)
            .inspect_err(|_| {
                let _ = mem.free(addr);
            })
    }

    /// Registers `buf`, which the region owns until [`Mr::into_buffer`]
    /// gives it back with whatever was written into it. Over the process's
    /// own memory the bytes stay where they are (no copy). On failure the
    /// buffer comes back untouched with the error.
    pub fn reg_mr_buffer(&self, buf: Vec<u8>, access: Access) -> Result<Mr, (VerbsError, Vec<u8>)> {
        let len = buf.len();
        if len == 0 {
            return Err((
                VerbsError::InvalidArgument("a memory region needs at least one byte"),
                buf,
            ));
        }
        let mem = self.inner.ctx.mem();
        let addr = mem.adopt(buf).map_err(|(e, b)| (e.into(), b))?;
        self.register(addr, len, access, Backing::Adopted)
            .map_err(|e| (e, mem.release(addr).unwrap_or_default()))
    }

    /// Registers `len` bytes of host memory at `addr` that the caller owns
    /// (`ibv_reg_mr` on an application's buffer). Host memory decides what
    /// may be registered: the process's own memory accepts only ranges
    /// handed to it by `ProcessMemory::grant`, and a private address space
    /// only its own allocations; anything else is refused as unmapped
    /// (EFAULT), as the kernel refuses to pin it.
    pub fn reg_mr_at(&self, addr: u64, len: usize, access: Access) -> Result<Mr, VerbsError> {
        if len == 0 {
            return Err(VerbsError::InvalidArgument(
                "a memory region needs at least one byte",
            ));
        }
        self.register(HostAddr::new(addr), len, access, Backing::Borrowed)
    }

    fn register(
        &self,
        addr: HostAddr,
        len: usize,
        access: Access,
        backing: Backing,
    ) -> Result<Mr, VerbsError> {
        check_access(access)?;
        let key = self
            .inner
            .ctx
            .driver()
            .reg_mr(self.inner.pdn, addr, len as u64, access)?;
        Ok(Mr {
            inner: Arc::new(MrInner {
                pd: self.clone(),
                addr,
                len,
                key,
                access,
                backing,
            }),
        })
    }
}

/// As the kernel's `ib_check_mr_access`: a peer may write only memory the
/// device may write locally.
fn check_access(access: Access) -> Result<(), VerbsError> {
    if (access.allows(Access::REMOTE_WRITE) || access.allows(Access::REMOTE_ATOMIC))
        && !access.allows(Access::LOCAL_WRITE)
    {
        return Err(VerbsError::InvalidArgument(
            "remote write or atomic access needs local write",
        ));
    }
    Ok(())
}

/// What [`Mr::rereg`] changes (`ibv_rereg_mr`'s flags): each `Some`
/// replaces the region's own.
#[derive(Debug, Clone, Default)]
pub struct MrChange {
    /// A new protection domain, of the same context.
    pub pd: Option<Pd>,
    /// A new start address and length.
    pub range: Option<(u64, usize)>,
    /// New access rights.
    pub access: Option<Access>,
}

/// Where a region's bytes come from, and what deregistration does to them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backing {
    /// Allocated by [`Pd::reg_mr`]; freed.
    Allocated,
    /// A caller's buffer the region owns; given back by [`Mr::into_buffer`],
    /// dropped otherwise.
    Adopted,
    /// The caller's memory; left as it is.
    Borrowed,
}

struct MrInner {
    pd: Pd,
    addr: HostAddr,
    len: usize,
    key: Mkey,
    access: Access,
    backing: Backing,
}

impl MrInner {
    /// Deregisters, and hands back an adopted buffer.
    fn dereg(&mut self) -> Option<Vec<u8>> {
        let ctx = &self.pd.inner.ctx;
        ctx.driver().dereg_mr(self.key).ok()?;
        match std::mem::replace(&mut self.backing, Backing::Borrowed) {
            Backing::Allocated => {
                let _ = ctx.mem().free(self.addr);
                None
            }
            Backing::Adopted => ctx.mem().release(self.addr).ok(),
            Backing::Borrowed => None,
        }
    }
}

impl Drop for MrInner {
    fn drop(&mut self) {
        self.dereg();
    }
}

/// A registered memory region that owns its buffer (`ibv_mr`).
///
/// Clones share the registration; it is deregistered when the last clone
/// is dropped.
#[derive(Clone)]
pub struct Mr {
    inner: Arc<MrInner>,
}

/// A scatter/gather element (`ibv_sge`): bytes of a registered region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the region.
    pub lkey: Lkey,
}

impl Sge {
    /// As a WQE's data segment holds it: `(length, lkey, address)`.
    pub(crate) fn segment(self) -> (u32, u32, u64) {
        (self.length, self.lkey.raw(), self.addr)
    }
}

impl Mr {
    /// Start address (the IOVA peers use with the rkey).
    pub fn addr(&self) -> u64 {
        self.inner.addr.get()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// True if the region is empty (never: regions have at least one byte).
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// Local key.
    pub fn lkey(&self) -> Lkey {
        self.inner.key
    }

    /// Remote key.
    pub fn rkey(&self) -> Rkey {
        self.inner.key
    }

    /// Access rights.
    pub fn access(&self) -> Access {
        self.inner.access
    }

    /// Re-registers the region with what `change` names (`ibv_rereg_mr`):
    /// the keys stay, so peers that hold the rkey keep it. A new range is
    /// for regions over the caller's memory ([`Pd::reg_mr_at`]); a region
    /// that owns its buffer can change only PD and access. Refused with
    /// the region unchanged if the arguments are bad (EINVAL), the new
    /// range cannot be pinned (EFAULT), or other clones of the region exist
    /// (EBUSY).
    pub fn rereg(&mut self, change: MrChange) -> Result<(), VerbsError> {
        let inner = Arc::get_mut(&mut self.inner)
            .ok_or(VerbsError::Busy("other clones of the region exist"))?;
        let pd = change.pd.unwrap_or_else(|| inner.pd.clone());
        if !pd.context().same_as(inner.pd.context()) {
            return Err(VerbsError::InvalidArgument(
                "the new PD belongs to another context",
            ));
        }
        let (addr, len) = match change.range {
            Some(_) if inner.backing != Backing::Borrowed => {
                return Err(VerbsError::InvalidArgument(
                    "a region that owns its buffer cannot move",
                ));
            }
            Some((_, 0)) => {
                return Err(VerbsError::InvalidArgument(
                    "a memory region needs at least one byte",
                ));
            }
            Some((addr, len)) => (HostAddr::new(addr), len),
            None => (inner.addr, inner.len),
        };
        let access = change.access.unwrap_or(inner.access);
        check_access(access)?;
        pd.context()
            .driver()
            .rereg_mr(inner.key, pd.pdn(), addr, len as u64, access)?;
        inner.pd = pd;
        inner.addr = addr;
        inner.len = len;
        inner.access = access;
        Ok(())
    }

    /// The protection domain.
    pub fn pd(&self) -> &Pd {
        &self.inner.pd
    }

    fn check(&self, offset: u64, len: u64) -> Result<HostAddr, VerbsError> {
        let size = self.inner.len as u64;
        match offset.checked_add(len) {
            Some(end) if end <= size => Ok(doorbell_host::offset(self.inner.addr, offset)?),
            _ => Err(VerbsError::OutOfRange { offset, len, size }),
        }
    }

    /// An SGE for `len` bytes at `offset`, checked against the region.
    pub fn sge(&self, offset: u64, len: u32) -> Result<Sge, VerbsError> {
        let a = self.check(offset, len.into())?;
        Ok(Sge {
            addr: a.get(),
            length: len,
            lkey: self.inner.key,
        })
    }

    /// Copies `data` into the region at `offset` (a CPU store).
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), VerbsError> {
        let a = self.check(offset, data.len() as u64)?;
        Ok(self.inner.pd.inner.ctx.mem().write(a, data)?)
    }

    /// Copies bytes of the region at `offset` into `buf` (a CPU load).
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), VerbsError> {
        let a = self.check(offset, buf.len() as u64)?;
        Ok(self.inner.pd.inner.ctx.mem().read(a, buf)?)
    }

    /// Deregisters the region and gives back the buffer it owned
    /// ([`Pd::reg_mr_buffer`]), with what the NIC and the CPU wrote into it.
    /// `None` for a region over allocated or borrowed memory. Fails, giving
    /// the region back, while other clones of it exist.
    pub fn into_buffer(self) -> Result<Option<Vec<u8>>, Mr> {
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => Ok(inner.dereg()),
            Err(inner) => Err(Mr { inner }),
        }
    }

    /// The whole region as a vector.
    pub fn to_vec(&self) -> Result<Vec<u8>, VerbsError> {
        let mut v = vec![0u8; self.inner.len];
        self.read(0, &mut v)?;
        Ok(v)
    }
}

impl std::fmt::Debug for Mr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mr")
            .field("addr", &self.inner.addr)
            .field("len", &self.inner.len)
            .field("key", &self.inner.key)
            .finish()
    }
}

impl std::fmt::Debug for Pd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pd")
            .field("pdn", &self.inner.pdn)
            .field("parent_domain", &self.inner.base.is_some())
            .field("td", &self.inner.td)
            .finish()
    }
}

impl Context {
    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<Pd, VerbsError> {
        Pd::new(self.clone())
    }
}
