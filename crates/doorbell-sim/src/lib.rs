//! The virtual-time runtime of doorbell: the live code on modelled hardware.
//!
//! # Model
//! A [`Workload`] (perftest's vocabulary: QP type, operation, size, QPs,
//! threads, postlist, inline threshold, signalling, BlueFlame) runs on two
//! simulated hosts built from a [`Profile`]. Each host has the ordinary
//! `doorbell-verbs` provider and `doorbell-driver` slow path, and a
//! `doorbell-device` NIC; nothing of what a post does is written again
//! here (DESIGN invariant 3, `docs/decisions/0007`). What is modelled:
//! - the PCIe link of each NIC (`doorbell_pcie::model::LinkModel`): every
//!   DMA the device issues is timed and counted by the same `Bus` counters
//!   as in the live runtime, and a DMA write becomes visible to the host
//!   only when its last TLP has arrived;
//! - the CPU: MMIO stores leave at the posting core's virtual time, and each
//!   WQE segment, inline byte, barrier, lock and poll is charged from the
//!   profile;
//! - the NIC's processing units, DMA engine and atomic unit
//!   (`doorbell_device::NicTiming`), and the wire between the hosts.
//!
//! # Guarantees
//! - Deterministic: one event [`queue`] ordered by `(time, sequence)`, one
//!   seeded RNG, a single thread and no hash-map iteration that reaches
//!   output. The same workload, profile and seed give the same [`Report`]
//!   and the same event log ([`LogLine`]) bit for bit.
//! - The per-post crossings of a [`Report`] are those of DESIGN.md's table,
//!   as in the live runtime (`tests/it/table.rs`).
//! - Time never comes from the machine running the simulation: a result
//!   does not depend on how fast the simulator itself runs.
//!
//! # Driving it
//! Load a profile with [`Profile::load`] (a built-in name such as
//! `connectib-haswell`, or the path of a TOML file), then call
//! [`Workload::run`], which returns a [`Report`] or a [`SimError`]. The
//! `doorbell sim` command is a thin layer over this.
#![deny(missing_docs)]
#![warn(unreachable_pub)]

mod kernel;
mod options;
mod post_cost;
pub mod profile;
pub mod published;
pub mod queue;
mod timeline;
#[cfg(test)]
mod wire_faults;
pub mod workload;
mod world;

pub use doorbell_pcie::PerPost;
pub use doorbell_trace::Trace;
pub use options::{Outcome, Progress, RunOptions};
pub use profile::{Profile, WireFaults};
pub use workload::{Latency, Op, Report, SimError, Steps, Utilisation, Workload};
pub use world::LogLine;
