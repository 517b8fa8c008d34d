//! The host interface of the doorbell NIC: what the device and host software
//! agree on, as mlx5's PRM and `mlx5_ifc.h` are for real hardware.
//!
//! # Model
//! Host software (the driver's slow path and the provider) and the device
//! meet at the bus. Besides the formats of `doorbell-layout` (WQEs, CQEs,
//! doorbell records, UAR offsets) they share:
//!
//! - the command interface ([`Command`], [`CmdOut`], [`CmdError`]) and its
//!   byte form ([`codec`]), so a command can cross a process boundary;
//! - QP states, service types, access rights, the address vector, and the
//!   attributes of MODIFY_QP with the rules of which transition takes which
//!   ([`check_modify`]);
//! - shared receive queues ([`SrqParams`]): CREATE_SRQ, ARM_RQ with a
//!   limit, QUERY_SRQ, DESTROY_SRQ;
//! - the device's capabilities ([`DeviceCaps`]) and asynchronous events
//!   ([`NicEvent`]);
//! - the device link ([`DeviceLink`]): how the driver reaches a device
//!   whichever runtime drives it, with host memory behind the
//!   [`doorbell_host::HostMemory`] trait.
//!
//! The device crate implements the far side of this interface; the driver
//! and provider depend on this crate and never on the device. Only the
//! runtimes and the CLI know both.
//!
//! # Guarantees
//! Pure data and pure functions: no clock, no I/O. Decoding bytes never
//! panics; `decode(encode(x)) == x`.
#![deny(missing_docs)]
#![warn(unreachable_pub)]

pub mod cmd;
pub mod codec;
pub mod error;
pub mod event;
pub mod link;
pub mod modify;
pub mod qp;

pub use cmd::{
    CORE_CLOCK_KHZ, CmdOut, Command, CqParams, DeviceCaps, EqParams, MAX_RD_ATOMIC, MkeyParams,
    QpParams, SrqParams,
};
pub use codec::DecodeError;
pub use error::{CmdError, ObjKind, Param};
pub use event::NicEvent;
pub use link::DeviceLink;
pub use modify::check_modify;
pub use qp::{Access, AddressVector, QpAttr, QpAttrs, QpState, QpType, Transition};
