//! doorbell-ibverbs' integration tests (one binary, STYLE R15).
//!
//! They need the clients and tools of `scripts/setup.sh` (objdump, readelf,
//! ibv_devices, perftest, python3-pyverbs, the C compiler and verbs.h) and
//! fail, never skip, when one is missing.
//!
//! The library under test is the `libibverbs.so` that cargo built for this
//! test binary: the cdylib of this package, in the `deps` directory beside the
//! test executable (see [`library`]).

mod bad_input;
#[allow(dead_code)]
mod c_probe;
mod clients;
mod conformance;
mod consts;
mod exhaust;
mod hosted;
mod layout;
mod library;
mod loader;
mod perftest;
mod pyverbs;
mod soak;
mod symbols;
