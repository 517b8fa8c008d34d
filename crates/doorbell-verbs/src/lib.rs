//! The user-space verbs provider of doorbell, with a safe Rust API.
//!
//! # Model
//! This is what rdma-core's mlx5 provider does, in safe Rust. The slow path
//! (opening a context, creating PDs, MRs, CQs and QPs) calls the driver
//! (`doorbell-driver`). The fast path touches only host memory and the
//! context's UAR pages:
//! - [`Qp::post_send`] writes WQEs into the send queue in 64-byte WQEBBs,
//!   updates the doorbell record's send counter, then rings: an 8-byte MMIO
//!   write of the control segment's first 8 bytes, or for a single small WQE
//!   a BlueFlame copy of the whole WQE, in 64-byte chunks, alternating the
//!   bfreg's two buffers;
//! - [`Qp::post_recv`] writes receive WQEs and the doorbell record, no MMIO;
//!   [`Srq::post_recv`] does the same for a shared receive queue, whose
//!   WQEs any of its QPs may take;
//! - [`Cq::poll`] finds new CQEs by their owner bit and publishes the
//!   consumer index in the CQ's doorbell record.
//!
//! Which register a QP rings is the kernel's choice among the static bfregs
//! (see [`Context::placement`]), unless its PD is a parent domain with a
//! [`ThreadDomain`]: then it rings that thread domain's register, taken
//! from the context's dynamic bfregs, with no lock.
//!
//! # Ownership
//! Every object holds its parents: an [`Mr`] holds its [`Pd`], a [`Qp`] its
//! PD and CQs, all of them the [`Context`]. A parent is destroyed only when
//! its last holder is gone, so a PD or CQ in use can never be destroyed. A
//! memory region owns its buffer; a work request names it by key, as on real
//! hardware, so a WR that outlives its MR completes with a protection error
//! rather than touching freed memory.
#![deny(missing_docs)]
#![warn(unreachable_pub)]

mod ah;
mod batch;
mod config;
mod connect;
mod context;
mod cq;
mod error;
mod mr;
mod placement;
mod qp;
mod queue_buf;
mod report;
mod srq;
mod td;
mod wq;
mod wr;

pub use ah::{GRH_LEN, ReturnPath, roce_mac};
pub use batch::SendBatch;
pub use config::ProviderConfig;
pub use connect::{RcEndpoint, RcOptions};
pub use context::{Context, DeviceAttr, GID_TABLE_LEN, PortAttr};
pub use cq::{Cq, Wc, WcOpcode, WcStatus};
pub use doorbell_hif::{Access, AddressVector, DeviceCaps, NicEvent, QpAttrs, QpState, QpType};
pub use error::VerbsError;
pub use mr::{Mr, MrChange, Pd, Sge};
pub use placement::BfregPlacement;
pub use qp::{
    Ah, PostWr, Qp, QpCaps, QpInitAttr, RemoteAddr, SendData, SendFlags, SendWr, UdTarget, WrOpcode,
};
pub use queue_buf::{BufferAllocator, BufferKind};
pub use report::{PostObserver, PostReport, Ring};
pub use srq::{Srq, SrqAttr, SrqInitAttr};
pub use td::ThreadDomain;
pub use wr::{PostError, RecvWr};
