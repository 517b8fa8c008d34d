//! The fuzz harnesses of doorbell: one function per cargo-fuzz target.
//!
//! # Model
//! Each target is a `pub fn(&[u8])` here, in the workspace, so that stable
//! builds compile it and the stable tests run it. The `fuzz/` crate (outside
//! the workspace, built by `cargo +nightly fuzz`) holds one two-line
//! `fuzz_targets/<name>.rs` per target that hands libFuzzer's bytes to the
//! function of that name. [`TARGETS`] lists them all; `tests/it` replays every
//! file of `fuzz/corpus/<name>/` and `fuzz/regressions/<name>/` through
//! them, and [`seeds`] makes the seed corpora (`cargo run -p
//! doorbell-fuzzing --example write_seeds`).
//!
//! Structured targets read their choices with [`input::Input`], a format of
//! big-endian integers and length-prefixed strings in which every input is
//! valid; [`input::Seed`] writes it, so that seeds are real frames, WQEs and
//! commands.
//!
//! # Guarantees
//! A harness panics only on a bug: a panic in the code under test, or a
//! broken invariant the harness checks (a round trip that does not come
//! back, a poll that returns more than it was asked for, memory without
//! remote write that a peer changed). It never reads a clock, a file or
//! the environment beyond what the code under test does, so one input
//! always runs the same way; only `ibverbs_calls` has threads, those of the
//! process's NIC.
//!
//! # Targets
//! | target | what it feeds | where |
//! |---|---|---|
//! | `roce_frame` | any bytes as a frame, with and without the ICRC check | [`wire::roce_frame`] |
//! | `ext_header` | any bytes as a BTH or an extension header | [`wire::ext_header`] |
//! | `sq_wqe` | any bytes in a send queue, and a doorbell | [`wqe::sq_wqe`] |
//! | `rq_wqe` | any bytes in a receive queue, and the peer's messages | [`wqe::rq_wqe`] |
//! | `cqe_record` | CQEs, EQEs, doorbell records and values, UAR offsets | [`layout::cqe_record`] |
//! | `poll_cq` | any bytes in a CQ ring, polled by the provider | [`verbs::poll_cq`] |
//! | `uar_mmio` | MMIO of any UAR, offset, length and data; record doorbells | [`mmio::uar_mmio`] |
//! | `command` | device commands in byte form, run by a NIC | [`command::command`] |
//! | `command_result` | command results in byte form | [`command::command_result`] |
//! | `peer_frames` | a peer's frames to connected QPs, posts and timers | [`peer::peer_frames`] |
//! | `ibverbs_calls` | the C library's entry points with fuzzed arguments | [`ibverbs_calls`] |
#![deny(missing_docs)]
#![warn(unreachable_pub)]

pub mod command;
pub mod frames;
pub mod input;
pub mod layout;
pub mod mmio;
pub mod peer;
pub mod rig;
pub mod seeds;
pub mod targets;
pub mod verbs;
pub mod wire;
pub mod wqe;

pub use ibverbs::fuzzing::ibverbs_calls;
pub use targets::{TARGETS, Target, target};
