//! The PCIe link as a cost model: bandwidth figures of TLP streams, and a
//! sans-IO timing model of one link for the simulator.
//!
//! # Model
//! The link is the one of Neugebauer et al., "Understanding PCIe
//! performance for end host networking" (SIGCOMM 2018) and their pcie-model
//! code, with Kalia et al.'s "Design Guidelines for High Performance RDMA
//! Systems" (USENIX ATC 2016) as an alternative set of constants
//! ([`Convention`]). The figures it is calibrated to are in
//! `shared/reference/hardware-figures.md`.
//!
//! - **Physical layer.** Each lane carries 2.5 / 5 / 8 / 16 / 32 GT/s for
//!   Gen1–5 ([`Generation`]), encoded 8b/10b (Gen1–2) or 128b/130b (Gen3–5).
//!   Raw bandwidth = rate × encoding × lanes ([`LinkParams::raw_gbps`]).
//! - **Data-link layer** (pcie-model convention only). The receiver sends an
//!   ACK DLLP every `AckLimit` bytes and a flow-control update every
//!   `FcGuide` bytes, 8 B each on the wire; SKIP ordered sets take 4 B every
//!   1538 B. Usable TLP bandwidth = raw × (1 − 8/AckLimit − 8/FcGuide −
//!   4/1538) ([`LinkParams::usable_gbps`], [`latency_limit`]).
//! - **Transaction layer.** Each TLP costs its payload plus a fixed overhead
//!   ([`LinkParams::tlp_overhead_bytes`]). Writes of `n` bytes are MWr TLPs
//!   of at most MPS bytes; reads are MRd requests of at most MRRS bytes, each
//!   answered by CplD TLPs of at most MPS bytes (or of the read completion
//!   boundary, or of a root complex's completion-combining size,
//!   [`CompletionSplit`]).
//!
//! [`LinkParams`] turns this into steady-state figures for a stream of equal
//! transactions ([`Stream`]): effective bandwidth and transactions per
//! second of DMA writes, DMA reads, 8-byte doorbells and write-combined MMIO.
//! A read stream needs both directions (requests towards the host,
//! completions towards the device) and runs at the rate of whichever runs out
//! first.
//!
//! [`LinkModel`] adds time: each direction of the link is a serial resource,
//! TLPs take flow-control credits that the receiver returns after an update
//! latency, reads hold one of a bounded number of tags until their last
//! completion arrives, and the host answers a read after a latency that
//! depends on its size ([`ReadLatencyCurve`]).
//!
//! # Guarantees
//! - Pure and sans-IO: nothing here reads a clock; time comes in as `now`.
//! - Deterministic: [`LinkModel`] converts its configuration to integers once
//!   (time in 2⁻³² ps steps); from then on the same calls give the same
//!   answers, bit for bit, on every platform.
//! - No panics for any input: zero lengths, odd addresses and times out of
//!   order or below the watermark are all answered (see each method).
//! - Bounded memory: [`LinkModel`] keeps what ends after the watermark its
//!   caller moves ([`LinkModel::retire`]): wire reservations, posted-write
//!   order, credits and tags held. Its lists start with room for the usual
//!   working set (tags plus 256 reservations per direction, two steps per
//!   credit and tag) and grow, amortised, only to the most ever pending at
//!   once; the hot path then does not allocate.
//!
//! # Driving the timing model
//! ```
//! use doorbell_pcie::model::{Direction, LinkModel, LinkModelConfig};
//! use doorbell_types::Instant;
//!
//! let mut link = LinkModel::new(LinkModelConfig::neugebauer18()).unwrap();
//! let now = Instant::ZERO;
//! // The CPU rings a doorbell: an 8-byte MMIO write towards the device.
//! let rung = link.write(now, 0x8000_0800, 8, Direction::ToDevice);
//! // The device reads a 64-byte WQE from host memory.
//! let wqe = link.read(rung, 0x1_0000, 64);
//! // ... and writes a 64-byte CQE back.
//! let cqe = link.write(wqe.last_data, 0x2_0000, 64, Direction::ToHost);
//! assert!(rung < wqe.first_data && wqe.last_data < cqe);
//! // Another unit of the device, whose input came first, writes at 10 ns:
//! // not behind the CQE, as the link was idle then.
//! let early = link.write(Instant::from_ps(10_000), 0x3_0000, 64, Direction::ToHost);
//! assert!(early < wqe.first_data);
//! // The simulator's clock moved on: nothing will be issued before it.
//! link.retire(rung);
//! ```
//! Each call reserves the link for its TLPs, possibly in the future, at
//! the time each TLP is ready; calls need not come in time order, and later
//! calls fit around earlier reservations. A discrete-event loop calls
//! [`LinkModel::retire`] with its clock, which only moves forward, so that
//! the model forgets what is over. [`LinkModel`] says what is exact and
//! what is approximated when calls come out of time order.

mod curve;
mod params;
mod timing;

pub use curve::ReadLatencyCurve;
pub use params::{
    CACHE_LINE_BYTES, CompletionSplit, Convention, DLLP_BYTES, Direction, FC_UNIT_BYTES,
    Generation, KALIA_COMPLETION_BYTES, KALIA_COMPLETION_OVERHEAD_BYTES,
    KALIA_REQUEST_OVERHEAD_BYTES, Lanes, LinkParams, ModelError, SKIP_BYTES, SKIP_INTERVAL_BYTES,
    Stream, TlpKind, WC_CHUNK_BYTES, latency_limit,
};
pub use timing::{
    Credits, DirectionStats, FlowControl, LinkModel, LinkModelConfig, ReadTiming, TlpTiming,
};
