//! doorbell's drop-in `libibverbs.so.1`: rdma-core v44's C ABI, so that
//! unmodified C programs (rdma-core's tools, perftest, rdmacm-utils, UCX,
//! pyverbs) run on doorbell through `LD_LIBRARY_PATH`. FFI glue only: the
//! logic stays in the provider, driver and device (STYLE R16).
//!
//! # What is built
//!
//! `cargo build -p doorbell-ibverbs` writes `target/<profile>/libibverbs.so`
//! (the rlib beside it is for tests and Rust dependants). Its SONAME is
//! `libibverbs.so.1`, and every symbol of `exports.txt` carries its version
//! node (`IBVERBS_1.0` … `IBVERBS_1.14` chained, `IBVERBS_PRIVATE_34`), so
//! binaries linked against Debian's library, and Debian's libmlx5, libefa and
//! librdmacm that they pull in, load beside it under BIND_NOW. How the
//! versions are made is in `build.rs` and `DESIGN.md`. A loader looks for the
//! file name `libibverbs.so.1`: put a symlink of that name to the built
//! `libibverbs.so` in a directory of its own and point `LD_LIBRARY_PATH` at it
//! (the tests do this under `target/<profile>/doorbell-ibverbs/`).
//!
//! # Boundary rule
//!
//! Every exported function goes through one helper (`boundary::guard`):
//! it catches panics, and turns a Rust error or a panic into the function's C
//! error value by its convention: errno and NULL (constructors), a returned
//! errno (`ibv_destroy_*`, `ibv_modify_*`, `ibv_cmd_*`), errno and -1
//! (`ibv_query_gid`, `ibv_get_cq_event`, …), minus errno
//! (`_ibv_query_gid_table`), or abort with a message where there is no error
//! channel (`void` functions, string tables). A panic reports `EIO`.
//! Pointers, lengths and enum values from C are checked before any Rust
//! reference is made from them; `unsafe` is allowed only in the FFI modules
//! (`exports`, `boundary`), each block with its `// SAFETY:` reason.
//!
//! # Ownership, per handle
//!
//! | handle | allocated by | freed by | a second free |
//! |---|---|---|---|
//! | device list (`struct ibv_device **`) | `ibv_get_device_list` (a boxed slice of pointers, NULL-terminated) | `ibv_free_device_list` | undefined, as in rdma-core |
//!
//! Rows are added as the handles arrive (contexts, PDs, MRs, CQs, QPs, …).
//! Objects that C reads directly will live inside a Rust object that owns
//! them, found again from the C pointer in one audited place.
//!
//! # What works and what is stubbed
//!
//! Working: `ibv_get_device_list` (an empty list, `*num = 0`),
//! `ibv_free_device_list`, `ibv_fork_init` (0), `ibv_is_fork_initialized`
//! (`IBV_FORK_UNNEEDED`), `ibv_dontfork_range`/`ibv_dofork_range` (0),
//! `ibv_get_sysfs_path` (`"/sys"`), `verbs_register_driver_34` (accepted and
//! ignored), the strings of `ibv_wc_status_str`, `ibv_event_type_str`,
//! `ibv_node_type_str`, `ibv_port_state_str`, the rate conversions
//! (`ibv_rate_to_mult`, `mult_to_ibv_rate`, `ibv_rate_to_mbps`,
//! `mbps_to_ibv_rate`), and the data object
//! `verbs_allow_disassociate_destroy` (false). See
//! [`exports::IMPLEMENTED`].
//!
//! Stubbed, each failing with `EOPNOTSUPP` by its convention (see
//! [`exports::STUBS`]): everything else, i.e. all of device opening and
//! querying, PD/MR/CQ/QP/SRQ/AH/completion-channel creation and destruction,
//! events, multicast, import/export, ECE, GID queries, `ibv_qp_to_qp_ex`,
//! and every private `ibv_cmd_*`/`verbs_*` call that only providers make
//! (and they never get one of our devices). `void` stubs do nothing.
//!
//! # Layouts
//!
//! [`abi`] holds the structs C reads directly, checked at compile time and
//! by `tests/it/layout.rs` against the installed `<infiniband/verbs.h>`.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]

pub mod abi;
mod boundary;
pub mod exports;
mod tables;
