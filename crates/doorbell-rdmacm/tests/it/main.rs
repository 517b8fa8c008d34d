//! doorbell-rdmacm's integration tests (one binary, STYLE R15): the built
//! `librdmacm.so` against `exports.txt` (binutils), and Debian's rdma_cm
//! clients loading it, with doorbell's `libibverbs.so.1`, under immediate
//! binding. They need `scripts/setup.sh`'s tools and clients and fail,
//! never skip, when one is missing.

mod clients;
mod faults;
mod loading;
mod symbols;
mod wire;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

#[path = "../../../doorbell-cli/src/libdir.rs"]
#[allow(dead_code, unreachable_pub)]
mod libdir;

/// The test executable's directory (`target/<profile>/deps/`), where cargo
/// builds both libraries for it.
fn deps() -> PathBuf {
    let exe = std::env::current_exe().expect("path of the test executable");
    exe.parent()
        .expect("test executable has a directory")
        .to_path_buf()
}

/// The `librdmacm.so` built for this test run.
pub(crate) fn built_library() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let lib = deps().join(libdir::RDMACM_BUILT_NAME);
        assert!(
            lib.is_file(),
            "{} missing: cargo builds it with the tests; run `cargo test -p doorbell-rdmacm`",
            lib.display()
        );
        lib
    })
}

/// A directory with `libibverbs.so.1` and `librdmacm.so.1`, as `doorbell
/// run` makes it (doorbell-cli's `libdir`).
pub(crate) fn lib_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        built_library();
        let ibverbs = deps().join(libdir::BUILT_NAME);
        assert!(ibverbs.is_file(), "{} missing", ibverbs.display());
        let profile_dir = deps().parent().expect("deps has a parent").to_path_buf();
        libdir::link_dir(&ibverbs, &profile_dir)
            .unwrap_or_else(|e| panic!("cannot make the links: {e}"))
    })
}
