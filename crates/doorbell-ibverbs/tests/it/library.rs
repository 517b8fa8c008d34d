//! Where the built library is, and a directory in which it is called
//! `libibverbs.so.1`.
//!
//! `cargo test` builds the package's cdylib, `libibverbs.so`, into
//! `target/<profile>/deps/`, the directory of this test executable (and
//! copies it to `target/<profile>/`). A loader looks for the SONAME,
//! `libibverbs.so.1`, so [`lib_dir`] makes `target/<profile>/doorbell-ibverbs/`
//! with a symlink of that name to the built file: `LD_LIBRARY_PATH=<that dir>`
//! then puts it before Debian's. No root needed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

#[path = "../../../doorbell-cli/src/libdir.rs"]
#[allow(dead_code, unreachable_pub)]
mod libdir;

/// The `libibverbs.so` built for this test run.
pub(crate) fn built_library() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let exe = std::env::current_exe().expect("path of the test executable");
        let deps = exe.parent().expect("test executable has a directory");
        let lib = deps.join(libdir::BUILT_NAME);
        assert!(
            lib.is_file(),
            "{} missing: cargo builds it with the tests (crate-type cdylib); \
             run `cargo test -p doorbell-ibverbs`",
            lib.display()
        );
        lib
    })
}

/// A directory holding only `libibverbs.so.1` → [`built_library`]: made
/// by the same code as `doorbell run`'s (doorbell-cli's `libdir`).
pub(crate) fn lib_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let lib = built_library();
        let profile_dir = lib
            .parent()
            .and_then(Path::parent)
            .expect("deps has a parent");
        libdir::link_dir(lib, profile_dir).unwrap_or_else(|e| panic!("cannot make the link: {e}"))
    })
}

/// Runs a tool of `scripts/setup.sh`, failing with a pointer there if it is
/// missing.
pub(crate) fn run(cmd: &mut Command) -> Output {
    let prog = cmd.get_program().to_string_lossy().into_owned();
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run `{prog}` ({e}); scripts/setup.sh installs it"))
}
