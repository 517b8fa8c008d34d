//! The live NIC's interrupt handler: a thread playing the kernel's MSI-X
//! handlers for the EQs of one [`crate::LiveNic`].
//!
//! The device thread forwards each MSI-X vector the NIC raises; this thread
//! runs [`EventQueues::handle_interrupt`] for it, which reads the new EQEs
//! from host memory and re-arms the EQ through its doorbell (an MMIO write
//! that reaches the device thread through its FIFO like any other), and
//! hands the decoded events on to [`doorbell_hif::DeviceLink::next_event`].

use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use doorbell_driver::EventQueues;
use doorbell_hif::NicEvent;
use doorbell_host::{HostMemory, Mmio};

/// Starts the handler over `eqs`. It stops when the device thread drops the
/// other end of `vectors`, and gives the EQs back for their memory to be
/// freed.
pub(crate) fn start(
    name: &str,
    mut eqs: EventQueues,
    mem: Arc<dyn HostMemory>,
    mmio: Arc<dyn Mmio>,
    vectors: Receiver<u16>,
    events: Sender<NicEvent>,
) -> std::io::Result<JoinHandle<EventQueues>> {
    std::thread::Builder::new()
        .name(format!("{name}-irq"))
        .spawn(move || {
            let mut decoded = Vec::new();
            let mut ring = |u, o, d: &[u8]| mmio.mmio_write(u, o, d);
            for v in vectors {
                eqs.handle_interrupt(v, &*mem, &mut ring, &mut decoded);
                for e in decoded.drain(..) {
                    let _ = events.send(e);
                }
            }
            eqs
        })
}
