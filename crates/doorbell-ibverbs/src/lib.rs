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
//! (`exports`, `boundary`, `handles`, `ctx`, `device`, `events`, `pd`, `cq`,
//! `qp`, `qp_ex`, `stats`, and `fuzzing`, the fuzz harness of the `fuzzing`
//! feature) and in `forks` (the `pthread_atfork` handlers that hold the
//! library's locks across `fork()`), each block with
//! its `// SAFETY:` reason.
//!
//! # Ownership, per handle
//!
//! Every handle but the device list is a C struct at a fixed offset inside a
//! boxed Rust object that owns the verbs object it stands for; the handle
//! is registered with its kind when it is made, and each call finds the
//! object again through `handles`, the one audited place, which refuses a
//! pointer that is not a live handle of that kind (EINVAL), so a use after
//! destroy that C makes is caught, not followed.
//!
//! | handle | allocated by | freed by | a second free |
//! |---|---|---|---|
//! | device list (`struct ibv_device **`) | `ibv_get_device_list` (a boxed slice of pointers, NULL-terminated) | `ibv_free_device_list` | undefined, as in rdma-core |
//! | `ibv_device` | the first `ibv_get_device_list` | never (C may keep it after freeing the list) | — |
//! | `ibv_context` (after its `verbs_context`) | `ibv_open_device` | `ibv_close_device` | EINVAL |
//! | `ibv_pd` | `ibv_alloc_pd` | `ibv_dealloc_pd` (EBUSY while an MR, QP or AH uses it, or a parent domain is made over it) | EINVAL |
//! | `ibv_pd` of a parent domain | `ibv_alloc_parent_domain` (the context op) | `ibv_dealloc_pd` (EBUSY while an MR, QP or AH uses it) | EINVAL |
//! | `ibv_td` | `ibv_alloc_td` (the context op) | `ibv_dealloc_td` (EBUSY while a parent domain holds it) | undefined: the inline function reads the freed `td->context` |
//! | `ibv_mr` | `ibv_reg_mr*` (the caller's buffer, granted and pinned in place) | `ibv_dereg_mr` | EINVAL |
//! | `ibv_comp_channel` | `ibv_create_comp_channel` (an eventfd) | `ibv_destroy_comp_channel` (EBUSY while a CQ uses it) | EINVAL |
//! | `ibv_cq` | `ibv_create_cq` | `ibv_destroy_cq` (EBUSY while a QP uses it) | EINVAL |
//! | `ibv_qp` (inside an `ibv_qp_ex`) | `ibv_create_qp` | `ibv_destroy_qp` | EINVAL |
//! | `ibv_ah` | `ibv_create_ah` | `ibv_destroy_ah` | EINVAL |
//!
//! A closed context's objects keep what they need of it alive on the Rust
//! side until they are destroyed.

//! # What works and what is stubbed
//!
//! Working ([`exports::IMPLEMENTED`]): the device list (one device,
//! `doorbell0` or `DOORBELL_NAME`), opening and closing a context (the first
//! open starts the process's NIC, `doorbell_rt::ProcessNic`), the queries of
//! device, port (both the exported compat `ibv_query_port` and the
//! extended one the inline function calls), GID (index 0 the IPv4-mapped
//! address, RoCE v2; `ibv_query_gid_type`, `_ibv_query_gid_ex`,
//! `_ibv_query_gid_table`) and P_Key; PDs; MRs over the caller's own buffer
//! (`ibv_reg_mr`, `_iova`, `_iova2`); completion channels (eventfds), CQs,
//! `ibv_get_cq_event` and `ibv_ack_cq_events`; RC and UD QPs
//! (create, modify, query, destroy) and AHs; thread domains and parent
//! domains (their QPs ring a dynamic register of their own, lockless, and
//! take their buffers from the parent domain's allocator if it has one);
//! and the fast path through the
//! context's ops: `poll_cq`, `req_notify_cq`, `post_send`, `post_recv`.
//! Also `ibv_fork_init` (0), `ibv_is_fork_initialized`
//! (`IBV_FORK_UNNEEDED`), `ibv_dontfork_range`/`ibv_dofork_range` (0),
//! `ibv_get_sysfs_path` (`"/sys"`), `verbs_register_driver_34` (accepted and
//! ignored), the `*_str` tables, the rate conversions and the data object
//! `verbs_allow_disassociate_destroy` (false).
//!
//! Stubbed, each failing with `EOPNOTSUPP` by its convention (see
//! [`exports::STUBS`]): SRQs, UC, memory windows, the extended verbs
//! (`ibv_qp_to_qp_ex`, `create_cq_ex` …), async events, multicast,
//! import/export, ECE, and every private `ibv_cmd_*`/`verbs_*` call that only
//! providers make (and they never get one of our devices). `void` stubs do
//! nothing.

//! # Layouts
//!
//! [`abi`] holds the structs C reads directly, checked at compile time and
//! by `tests/it/layout.rs` against the installed `<infiniband/verbs.h>`.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]

pub mod abi;
mod attrs;
mod boundary;
mod channel;
mod cq;
mod cq_ex;
mod ctx;
mod device;
mod events;
pub mod exports;
mod forks;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod handles;
mod hosted;
mod pd;
mod qp;
mod qp_ex;
pub mod rdma_cm;
mod route;
mod srq;
mod stats;
mod tables;
mod wr_batch;
