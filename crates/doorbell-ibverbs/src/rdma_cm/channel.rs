//! Event channels: a C `rdma_event_channel` whose descriptor is an eventfd,
//! readable while events wait, over a queue of the rdma_cm model's events.
//! A channel is the [`EventSink`] of the ids that report to it.

#![allow(unsafe_code)]
// The exports are reached from C by their symbols, not from Rust.
#![allow(unreachable_pub)]

use std::sync::Arc;

use doorbell_cma::{CmEvent, EventSink};

use crate::abi::*;
use crate::boundary::{Conv, guard};
use crate::events::Queue;
use crate::handle;
use crate::handles;

/// A channel: the C struct first, then its queue.
#[repr(C)]
pub(crate) struct CEventChannel {
    ch: rdma_event_channel,
    pub(crate) events: Arc<Queue<CmEvent>>,
}
handle!(CEventChannel, rdma_event_channel, ch, CmChannel);

/// A channel's queue as the ids' sink.
pub(crate) struct Sink(pub(crate) Arc<Queue<CmEvent>>);

impl EventSink for Sink {
    fn deliver(&self, event: CmEvent) {
        self.0.push(event);
    }
}

/// Makes a channel; its handle.
pub(crate) fn create() -> Result<*mut rdma_event_channel, core::ffi::c_int> {
    let events = Arc::new(Queue::new()?);
    let ch = rdma_event_channel {
        fd: events.fd.raw(),
    };
    let c = handles::register(Box::new(CEventChannel { ch, events }));
    crate::events::lock(&DESTROYED).remove(&(c as usize));
    Ok(c)
}

/// `rdma_create_event_channel`.
#[unsafe(no_mangle)]
pub extern "C" fn doorbell_rdma_create_event_channel() -> *mut rdma_event_channel {
    guard("rdma_create_event_channel", Conv::Null, create)
}

/// `rdma_destroy_event_channel`: closes the descriptor. Events still queued
/// are dropped with it.
#[unsafe(no_mangle)]
pub extern "C" fn doorbell_rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
    guard("rdma_destroy_event_channel", Conv::Abort, || {
        // A NULL or unknown channel is ignored, as the real one cannot tell.
        if let Ok(ch) = handles::take::<CEventChannel>(channel) {
            crate::events::lock(&DESTROYED).insert(channel as usize);
            drop(ch);
        }
        Ok(())
    })
}

/// Channels destroyed, by address, until the address is handed out again.
/// A leaf lock (decision record 0068).
static DESTROYED: std::sync::Mutex<std::collections::BTreeSet<usize>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// The lock of the destroyed channels, held (for `forks`).
pub(super) fn hold_for_fork() -> std::sync::MutexGuard<'static, std::collections::BTreeSet<usize>> {
    crate::events::lock(&DESTROYED)
}

/// Whether `channel` is a channel this library made and then destroyed
/// (and has not made again at that address).
pub(crate) fn was_destroyed(channel: *mut rdma_event_channel) -> bool {
    crate::events::lock(&DESTROYED).contains(&(channel as usize))
}
