//! Where the built drop-in `libibverbs.so` is, and a directory in which it
//! is called `libibverbs.so.1` (and its companion `librdmacm.so`,
//! `librdmacm.so.1`).
//!
//! Cargo builds the cdylib as `libibverbs.so`: into `target/<profile>/` for
//! `cargo build -p doorbell-ibverbs`, and into `target/<profile>/deps/`
//! whenever a package depending on it is built (`doorbell`'s, or the
//! crate's own tests). doorbell-rdmacm's `librdmacm.so` lands beside it the
//! same way. A loader looks for the SONAMEs, so [`link_dir`] makes a
//! directory holding only symlinks of those names; `LD_LIBRARY_PATH=<that
//! dir>` then puts them before the system's.
//!
//! This file uses `std` alone: doorbell-ibverbs' integration tests include
//! it by path, so both make the link the same way.

use std::io;
use std::path::{Path, PathBuf};

/// The variable naming the library to use, overriding the search.
pub const LIB_VAR: &str = "DOORBELL_LIBIBVERBS";
/// The file name cargo gives the built library.
pub const BUILT_NAME: &str = "libibverbs.so";
/// The name the loader looks for.
pub const SONAME: &str = "libibverbs.so.1";
/// The directory [`link_dir`] makes.
pub const LINK_DIR_NAME: &str = "doorbell-ibverbs";
/// The file name cargo gives the built librdmacm.
pub const RDMACM_BUILT_NAME: &str = "librdmacm.so";
/// The name the loader looks for.
pub const RDMACM_SONAME: &str = "librdmacm.so.1";

/// Where a build puts the library for executables in `exe_dir`
/// (`target/<profile>/`): beside them, and in `deps/`. Where both exist the
/// newer is the one built last.
pub fn candidates(exe_dir: &Path) -> [PathBuf; 2] {
    [
        exe_dir.join(BUILT_NAME),
        exe_dir.join("deps").join(BUILT_NAME),
    ]
}

/// Makes `<under>/doorbell-ibverbs/` (if missing) with `libibverbs.so.1`
/// a symlink to `lib`, and `librdmacm.so.1` one to the `librdmacm.so`
/// beside `lib` if there is one (else none), and returns that directory.
/// Each link is replaced atomically (a temporary symlink renamed over it),
/// so another process using the directory meanwhile never finds a name
/// missing.
pub fn link_dir(lib: &Path, under: &Path) -> io::Result<PathBuf> {
    let dir = under.join(LINK_DIR_NAME);
    std::fs::create_dir_all(&dir).map_err(|e| with_path(e, &dir))?;
    link(lib, &dir, SONAME)?;
    let rdmacm = lib.with_file_name(RDMACM_BUILT_NAME);
    if rdmacm.is_file() {
        link(&rdmacm, &dir, RDMACM_SONAME)?;
    } else {
        let _ = std::fs::remove_file(dir.join(RDMACM_SONAME));
    }
    Ok(dir)
}

fn link(target: &Path, dir: &Path, name: &str) -> io::Result<()> {
    let tmp = dir.join(format!(".{name}.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp).map_err(|e| with_path(e, &tmp))?;
    std::fs::rename(&tmp, dir.join(name)).map_err(|e| with_path(e, &tmp))
}

fn with_path(e: io::Error, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}
