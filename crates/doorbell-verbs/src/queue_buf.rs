//! Where a QP's buffer comes from: the provider's own host memory, or the
//! application's allocator given to a parent domain
//! (`IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS`), as libmlx5 asks it for the
//! buffer of every QP made in that parent domain.

use std::sync::Arc;

use doorbell_host::HostMemory;
use doorbell_types::HostAddr;

use crate::error::VerbsError;

/// What a buffer is for (libmlx5's `MLX5DV_RES_TYPE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BufferKind {
    /// A QP's send and receive queues.
    Qp,
}

/// An application's allocator of queue buffers, for a parent domain.
pub trait BufferAllocator: Send + Sync {
    /// `len` bytes aligned to `align` for a buffer of `kind`, which host
    /// memory must then let the device reach; `Ok(None)` asks the provider
    /// to use its own memory (`IBV_ALLOCATOR_USE_DEFAULT`). The provider
    /// zeroes what it gets once the driver has pinned it.
    fn alloc(&self, len: u64, align: u64, kind: BufferKind)
    -> Result<Option<HostAddr>, VerbsError>;

    /// Takes back a buffer [`BufferAllocator::alloc`] gave, once the device
    /// is done with it.
    fn free(&self, addr: HostAddr, len: u64, kind: BufferKind);
}

/// A queue buffer and who takes it back.
pub(crate) struct QueueBuf {
    pub(crate) addr: HostAddr,
    len: u64,
    kind: BufferKind,
    from: Option<Arc<dyn BufferAllocator>>,
}

impl QueueBuf {
    /// A buffer of `len` bytes from `from`, or from host memory when it
    /// has none or answers "use the default".
    pub(crate) fn alloc(
        mem: &dyn HostMemory,
        from: Option<&Arc<dyn BufferAllocator>>,
        len: u64,
        align: u64,
        kind: BufferKind,
    ) -> Result<Self, VerbsError> {
        if let Some(a) = from
            && let Some(addr) = a.alloc(len, align, kind)?
        {
            return Ok(Self {
                addr,
                len,
                kind,
                from: Some(Arc::clone(a)),
            });
        }
        Ok(Self {
            addr: mem.alloc(len)?,
            len,
            kind,
            from: None,
        })
    }

    /// Zeroes a buffer the application gave (host memory's own come
    /// zeroed), as libmlx5 clears every QP buffer.
    pub(crate) fn clear(&self, mem: &dyn HostMemory) -> Result<(), VerbsError> {
        if self.from.is_some() {
            mem.write(self.addr, &vec![0u8; self.len as usize])?;
        }
        Ok(())
    }

    /// Gives the buffer back to whoever it came from.
    pub(crate) fn free(&self, mem: &dyn HostMemory) {
        match &self.from {
            Some(a) => a.free(self.addr, self.len, self.kind),
            None => {
                let _ = mem.free(self.addr);
            }
        }
    }
}
