//! The table of targets: the names cargo-fuzz knows them by, and their
//! functions.

use crate::{command, layout, mmio, peer, verbs, wire, wqe};

/// A fuzz target: its name (that of `fuzz/fuzz_targets/<name>.rs` and of its
/// corpus directory) and its harness.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// The target's name.
    pub name: &'static str,
    /// The harness: panics only on a bug.
    pub run: fn(&[u8]),
}

/// Every target.
pub const TARGETS: &[Target] = &[
    Target {
        name: "roce_frame",
        run: wire::roce_frame,
    },
    Target {
        name: "ext_header",
        run: wire::ext_header,
    },
    Target {
        name: "sq_wqe",
        run: wqe::sq_wqe,
    },
    Target {
        name: "rq_wqe",
        run: wqe::rq_wqe,
    },
    Target {
        name: "cqe_record",
        run: layout::cqe_record,
    },
    Target {
        name: "poll_cq",
        run: verbs::poll_cq,
    },
    Target {
        name: "uar_mmio",
        run: mmio::uar_mmio,
    },
    Target {
        name: "command",
        run: command::command,
    },
    Target {
        name: "command_result",
        run: command::command_result,
    },
    Target {
        name: "peer_frames",
        run: peer::peer_frames,
    },
    Target {
        name: "ibverbs_calls",
        run: ibverbs::fuzzing::ibverbs_calls,
    },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}
