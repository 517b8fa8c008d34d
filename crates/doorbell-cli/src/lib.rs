//! The jobs behind the `doorbell` command, as functions that tests call.
//!
//! - [`seed`]: the seed's comparison: per-post PCIe crossings of one small
//!   RDMA WRITE under each configuration of DESIGN.md's table, measured on
//!   the live runtime's bus counters.
//! - [`layout`]: which bfreg, UAR page and register offset each QP of one
//!   context gets, and whether it may BlueFlame and must lock.
//! - [`pcie`]: the PCIe link model alone: usable bandwidth and the figures
//!   of MWr and MRd streams of one size.
//! - [`pingpong`]: ibv_rc_pingpong between processes or hosts, over a NIC
//!   whose port is a UDP socket.
//! - [`run`]: `doorbell run` / `doorbell env`: unmodified C programs on
//!   the drop-in `libibverbs.so.1`, found by [`libdir`].
#![deny(missing_docs)]
#![warn(unreachable_pub)]

pub mod layout;
pub mod libdir;
pub mod pcie;
pub mod pingpong;
pub mod progress;
pub mod run;
pub mod seed;
pub mod sim;

/// Writes `text` to standard output; a reader that went away (`| head`)
/// is not an error.
pub fn print_out(text: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| {
        if text.ends_with('\n') {
            Ok(())
        } else {
            out.write_all(b"\n")
        }
    });
}
