//! The kernel of each simulated host, as far as events go: the EQs that
//! mlx5_core creates on its NIC and their interrupt handler
//! ([`doorbell_driver::EventQueues`]), run on a host core when the NIC's
//! MSI-X write arrives. The world charges the handler's CPU time and wakes
//! the threads waiting for the events it decodes.

use std::sync::Arc;

use doorbell_driver::EventQueues;
use doorbell_hif::NicEvent;
use doorbell_host::{HostMemory, Mmio};

/// Each host's EQs and memory.
pub(crate) struct Kernel {
    hosts: Vec<(Option<EventQueues>, Arc<dyn HostMemory>)>,
    decoded: Vec<NicEvent>,
}

impl Kernel {
    pub(crate) fn new() -> Self {
        Self {
            hosts: Vec::new(),
            decoded: Vec::new(),
        }
    }

    /// Adds the next host, with its EQs (`None` if they could not be made).
    pub(crate) fn add_host(&mut self, eqs: Option<EventQueues>, mem: Arc<dyn HostMemory>) {
        self.hosts.push((eqs, mem));
    }

    /// Runs host `host`'s handler of `vector`; its EQ doorbell goes out
    /// through `mmio` (the current core's MMIO path). Returns the events
    /// and how many EQEs it consumed.
    pub(crate) fn interrupt(
        &mut self,
        host: usize,
        vector: u16,
        mmio: &dyn Mmio,
    ) -> (Vec<NicEvent>, usize) {
        let Some((Some(eqs), mem)) = self.hosts.get_mut(host) else {
            return (Vec::new(), 0);
        };
        let mut ring = |u, o, d: &[u8]| mmio.mmio_write(u, o, d);
        let n = eqs.handle_interrupt(vector, &**mem, &mut ring, &mut self.decoded);
        (std::mem::take(&mut self.decoded), n)
    }
}
