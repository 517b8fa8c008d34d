//! The InfiniBand Communication Manager's connection state machine, sans-IO
//! (IBA Vol 1 chapter 12; the kernel's `drivers/infiniband/core/cm.c` as
//! `rdma_cm` drives it).
//!
//! # Model
//! A [`CmAgent`] is the CM agent of one port: the GSI's consumer of CM
//! MADs. It keeps one state machine per connection ([`CmState`]: REQ_SENT,
//! REQ_RCVD, REP_SENT, ESTABLISHED, DREQ_SENT, TIMEWAIT, ...), per
//! listener and per SIDR exchange, each named by a [`ConnId`] that is also
//! its local communication ID on the wire. It turns the upper layer's
//! requests (listen, connect, accept, reject, MRA, RTU, disconnect, SIDR)
//! into MADs, turns MADs received into [`CmEvent`]s, and runs the timers of
//! the exchange: REQ, REP, DREQ and SIDR_REQ are sent again after the CM
//! response timeout (4.096 µs · 2^t, [`cm_timeout`]) up to the peer's or
//! the caller's max CM retries; then the agent gives up as the kernel does.
//! An MRA stretches the wait; time-wait ends in [`CmEvent::TimewaitExit`].
//!
//! The formats are `doorbell-cm`'s; this crate only decides what to send
//! and when.
//!
//! # Guarantees
//! * Sans-IO and deterministic: no clock (time comes in as `now`), no
//!   threads, no OS randomness (IDs are a counter mixed with the seed in
//!   [`AgentConfig`]), collections ordered by key.
//! * No input makes it panic; bad MADs are counted ([`CmStats`]) and
//!   dropped; only a REQ or SIDR_REQ to a service listened on creates a
//!   handle.
//!
//! # Driving it
//! ```
//! use doorbell_cmsm::{AgentConfig, CmAgent, CmEvent, Peer};
//! use doorbell_types::Instant;
//! use doorbell_wire::Gid;
//!
//! let mut server = CmAgent::new(AgentConfig::new(0x2, 7));
//! let listen = server.listen(0x0106_0000_1234).unwrap();
//! // A REQ arrives from a host nobody knows: garbage is dropped.
//! let client = Peer::new(Gid::from_ipv4([10, 0, 0, 1]));
//! server.handle_mad(Instant::ZERO, client, &[0u8; 256]);
//! assert_eq!(server.stats().bad_mads, 1);
//! assert!(server.poll_event().is_none() && server.poll_transmit().is_none());
//! # let _ = listen;
//! ```
#![no_std]
#![deny(missing_docs)]
#![warn(unreachable_pub)]

extern crate alloc;

mod agent;
mod conn;
mod error;
mod event;
mod params;
mod peer;
mod rx;

pub use agent::{AgentConfig, CmAgent, CmStats, DEFAULT_PACKET_LIFE_TIME};
pub use conn::{CmState, ConnId};
pub use error::CmError;
pub use event::{CmEvent, RepReceived, ReqReceived, TimedOut};
pub use params::{QpType, RepParams, ReqParams, SidrReqParams, cm_timeout};
pub use peer::Peer;
