//! How host software reaches a device, whichever runtime drives it.

use std::sync::Arc;

use doorbell_host::{HostMemory, Mmio};
use doorbell_types::Duration;

use crate::cmd::{CmdOut, Command};
use crate::error::CmdError;
use crate::event::NicEvent;

/// A device as the host's driver sees it: a command interface, the host
/// memory the device DMAs into, the CPU's MMIO path to its UAR pages, and its
/// event queue. The live and simulated runtimes each implement it, and
/// `doorbell-driver` consumes `Arc<dyn DeviceLink>` without knowing which.
pub trait DeviceLink: Send + Sync {
    /// The device's name (`ibv_get_device_name`).
    fn name(&self) -> &str;
    /// Runs a command on the device and waits for its completion.
    fn exec(&self, cmd: Command) -> Result<CmdOut, CmdError>;
    /// The host's memory: where queue buffers are allocated and what
    /// registrations pin.
    fn memory(&self) -> &Arc<dyn HostMemory>;
    /// The CPU's MMIO path into the device's UAR pages.
    fn mmio(&self) -> &Arc<dyn Mmio>;
    /// GID 0 of the port.
    fn gid(&self) -> [u8; 16];
    /// Waits up to `timeout` for the next asynchronous event of the device.
    /// A runtime without a wall clock (the simulator) answers at once.
    fn next_event(&self, timeout: Duration) -> Option<NicEvent>;
    /// As [`Self::next_event`], but [`Self::wake_event_waiter`] ends the
    /// wait early (returning `None`, as at the timeout): for a thread that
    /// waits for events and must be stopped without waking now and then
    /// to ask. A wake is taken by one such waiter, or kept for the next;
    /// [`Self::next_event`] never sees it.
    fn next_event_or_wake(&self, timeout: Duration) -> Option<NicEvent> {
        self.next_event(timeout)
    }
    /// Ends one wait in [`Self::next_event_or_wake`] (the next, if none is
    /// waiting). A runtime whose waits return at once has nothing to do.
    fn wake_event_waiter(&self) {}
    /// The wall-clock time, in ns since the Unix epoch, at which the
    /// device's clock (its CQE timestamps, ticks of
    /// [`crate::CORE_CLOCK_KHZ`]) read zero; `None` for a device with no
    /// wall clock (the simulator's, a test's virtual clock).
    fn clock_epoch_unix_ns(&self) -> Option<u64> {
        None
    }
    /// Lets the device make progress in the caller's thread: host software
    /// that found nothing to do (an empty CQ poll) calls it, and a runtime
    /// whose device is fed by polling (shared-memory rings) takes what is
    /// waiting. Tells whether anything was. The default does nothing.
    fn progress(&self) -> bool {
        false
    }
}
