//! How host software reaches a device, whichever runtime drives it.

use std::sync::Arc;

use doorbell_host::{HostRam, Mmio};

use crate::{CmdError, CmdOut, Command, NicEvent};

/// A device as the host's driver sees it: a command interface, the host
/// memory the device DMAs into, the CPU's MMIO path to its UAR pages, and its
/// event queue. The live and simulated runtimes each implement it.
pub trait DeviceLink: Send + Sync {
    /// The device's name (`ibv_get_device_name`).
    fn name(&self) -> &str;
    /// Runs a command on the device and waits for its completion.
    fn exec(&self, cmd: Command) -> Result<CmdOut, CmdError>;
    /// The host's memory.
    fn memory(&self) -> &Arc<HostRam>;
    /// The CPU's MMIO path into the device's UAR pages.
    fn mmio(&self) -> &Arc<dyn Mmio>;
    /// GID 0 of the port.
    fn gid(&self) -> [u8; 16];
    /// Waits up to `timeout` for the next asynchronous event of the device.
    fn next_event(&self, timeout: std::time::Duration) -> Option<NicEvent>;
}
