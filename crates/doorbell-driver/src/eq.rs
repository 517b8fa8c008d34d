//! The kernel's event queues and their interrupt handler (what mlx5_core
//! sets up at probe time: `mlx5_eq_table_create`, `mlx5_eq_async_int`,
//! `mlx5_eq_comp_int`, `eq_update_ci`).
//!
//! # Model
//! At start the kernel takes a UAR of its own, allocates two EQE rings in
//! host memory with every owner byte 1, and creates two EQs on the device:
//! the async EQ on MSI-X vector [`ASYNC_VECTOR`] for every event but
//! completions, and one completion EQ on [`COMP_VECTOR`] (doorbell reports
//! one completion vector). It then arms both through the EQ doorbell.
//!
//! When the device raises a vector, the runtime calls
//! [`EventQueues::handle_interrupt`], the interrupt handler: it takes the
//! EQEs whose owner bit says they are new, decodes each into the event it
//! reports, and writes the new consumer index to the EQ doorbell with
//! re-arm, so the next EQE raises the vector again. The events go on to
//! uverbs (the completion channels and async event queues).
//!
//! Host memory and MMIO come in as arguments rather than being held: the
//! live runtime calls from a thread of its own, the synchronous loopback
//! link and the simulator from inside the device's lock.

use doorbell_hif::{CmdError, CmdOut, Command, EqParams, NicEvent};
use doorbell_host::{HostMemory, PAGE_SIZE};
use doorbell_layout::eqe::{self, EQE_LEN, EqDoorbell, Eqe64, EventType};
use doorbell_layout::uar;
use doorbell_types::{Eqn, HostAddr, UarIndex};

use crate::DriverError;

/// MSI-X vector of the async EQ (mlx5_core's vector 0).
pub const ASYNC_VECTOR: u16 = 0;
/// MSI-X vector of the completion EQ.
pub const COMP_VECTOR: u16 = 1;
/// log2 of the async EQ's entries (MLX5_NUM_ASYNC_EQE, 4096).
const LOG_ASYNC_EQ_SIZE: u8 = 12;
/// log2 of the completion EQ's entries (MLX5_COMP_EQ_SIZE, 1024).
const LOG_COMP_EQ_SIZE: u8 = 10;

/// How a caller reaches the device: runs a command.
pub type Exec<'a> = dyn FnMut(Command) -> Result<CmdOut, CmdError> + 'a;
/// How a caller writes a UAR register: `(uar, offset, bytes)`.
pub type MmioWrite<'a> = dyn FnMut(UarIndex, u32, &[u8]) + 'a;

struct KernelEq {
    eqn: Eqn,
    vector: u16,
    buf: HostAddr,
    len: u64,
    log_size: u8,
    /// Free-running consumer index.
    ci: u32,
}

impl KernelEq {
    fn arm(&self, uar: UarIndex, mmio: &mut MmioWrite<'_>) {
        let db = EqDoorbell {
            eqn: self.eqn.get() as u8,
            ci: self.ci,
        };
        mmio(uar, uar::EQ_DOORBELL as u32, &db.emit());
    }
}

/// The kernel's EQs on one device. See the module docs.
pub struct EventQueues {
    uar: UarIndex,
    eqs: Vec<KernelEq>,
}

impl std::fmt::Debug for EventQueues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventQueues")
            .field("uar", &self.uar)
            .field("eqns", &self.eqs.iter().map(|e| e.eqn).collect::<Vec<_>>())
            .finish()
    }
}

/// Every event type but completions: what the async EQ takes.
fn async_mask() -> u64 {
    [
        EventType::CqError,
        EventType::WqCatasError,
        EventType::PortChange,
        EventType::SrqLastWqe,
        EventType::SrqRqLimit,
    ]
    .into_iter()
    .fold(0, |m, t| m | 1u64 << u8::from(t))
}

impl EventQueues {
    /// Creates and arms the async and completion EQs over `mem`.
    pub fn create(
        exec: &mut Exec<'_>,
        mem: &dyn HostMemory,
        mmio: &mut MmioWrite<'_>,
    ) -> Result<Self, DriverError> {
        let uar = match exec(Command::AllocUar)? {
            CmdOut::Uar(u) => u,
            _ => return Err(DriverError::Protocol),
        };
        let mut this = Self {
            uar,
            eqs: Vec::new(),
        };
        let plan = [
            (ASYNC_VECTOR, LOG_ASYNC_EQ_SIZE, async_mask()),
            (
                COMP_VECTOR,
                LOG_COMP_EQ_SIZE,
                1u64 << u8::from(EventType::Comp),
            ),
        ];
        for (vector, log_size, events) in plan {
            if let Err(e) = this.add(exec, mem, vector, log_size, events) {
                this.destroy(exec, mem);
                return Err(e);
            }
        }
        for eq in &this.eqs {
            eq.arm(uar, mmio);
        }
        Ok(this)
    }

    fn add(
        &mut self,
        exec: &mut Exec<'_>,
        mem: &dyn HostMemory,
        vector: u16,
        log_size: u8,
        events: u64,
    ) -> Result<(), DriverError> {
        let len = ((EQE_LEN as u64) << log_size).max(PAGE_SIZE);
        let buf = mem.alloc(len)?;
        // Every entry starts owned by the device (owner 1, init_eq_buf).
        let init = [eqe::OWNER_INIT];
        let filled = (0..1u64 << log_size).try_for_each(|i| {
            let at = doorbell_host::offset(buf, i * EQE_LEN as u64 + eqe::field::OWNER as u64)?;
            mem.write(at, &init)
        });
        let pas = filled.and_then(|()| mem.pin(buf, len));
        let pas = match pas {
            Ok(p) => p,
            Err(e) => {
                let _ = mem.free(buf);
                return Err(e.into());
            }
        };
        let params = EqParams {
            log_size,
            uar: self.uar,
            vector,
            events,
            pas,
        };
        match exec(Command::CreateEq(params)) {
            Ok(CmdOut::Eq(eqn)) => {
                self.eqs.push(KernelEq {
                    eqn,
                    vector,
                    buf,
                    len,
                    log_size,
                    ci: 0,
                });
                Ok(())
            }
            other => {
                let _ = mem.unpin(buf, len);
                let _ = mem.free(buf);
                Err(other
                    .err()
                    .map(DriverError::from)
                    .unwrap_or(DriverError::Protocol))
            }
        }
    }

    /// The interrupt handler of `vector`: appends the events of every new
    /// EQE of its EQ to `out`, then moves the consumer index on and re-arms
    /// the EQ. Returns how many EQEs it consumed (an EQE of a type doorbell
    /// does not know is consumed and dropped).
    pub fn handle_interrupt(
        &mut self,
        vector: u16,
        mem: &dyn HostMemory,
        mmio: &mut MmioWrite<'_>,
        out: &mut Vec<NicEvent>,
    ) -> usize {
        let uar = self.uar;
        let Some(eq) = self.eqs.iter_mut().find(|e| e.vector == vector) else {
            return 0;
        };
        let nent = 1u32 << eq.log_size;
        let mut n = 0;
        loop {
            let slot = u64::from(eq.ci & (nent - 1)) * EQE_LEN as u64;
            let mut b = [0u8; EQE_LEN];
            let read = doorbell_host::offset(eq.buf, slot).and_then(|a| mem.read(a, &mut b));
            let e = Eqe64::new_unchecked(&b[..]);
            // New while its owner bit matches the consumer's pass
            // (next_eqe_sw).
            if read.is_err() || e.owner() != ((eq.ci >> eq.log_size) & 1 != 0) {
                break;
            }
            out.extend(NicEvent::from_eqe(&e));
            eq.ci = eq.ci.wrapping_add(1);
            n += 1;
            if n == nent as usize {
                // Never more than one ring's worth per interrupt.
                break;
            }
        }
        eq.arm(uar, mmio);
        n
    }

    /// Every MSI-X vector the EQs use.
    pub fn vectors(&self) -> Vec<u16> {
        self.eqs.iter().map(|e| e.vector).collect()
    }

    /// Frees the rings of a device that is gone (no command can reach it).
    pub fn release(self, mem: &dyn HostMemory) {
        for eq in &self.eqs {
            let _ = mem.unpin(eq.buf, eq.len);
            let _ = mem.free(eq.buf);
        }
    }

    /// Destroys the EQs and frees their rings and the UAR.
    pub fn destroy(&mut self, exec: &mut Exec<'_>, mem: &dyn HostMemory) {
        for eq in self.eqs.drain(..) {
            if exec(Command::DestroyEq(eq.eqn)).is_ok() {
                let _ = mem.unpin(eq.buf, eq.len);
                let _ = mem.free(eq.buf);
            }
        }
        let _ = exec(Command::DeallocUar(self.uar));
    }
}
