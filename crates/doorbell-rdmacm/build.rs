//! Links the cdylib as rdma-core's `librdmacm.so.1`: SONAME, every export in
//! its RDMACM_1.x node (`exports.txt`), and a DT_NEEDED on `libibverbs.so.1`,
//! whose `doorbell_rdma_*` functions it calls.
//!
//! The DT_NEEDED comes from linking against a stub that has only that SONAME
//! (built here with the C compiler), so the build needs neither Debian's
//! libibverbs nor doorbell's; the loader finds doorbell's at run time
//! (`doorbell run` puts both libraries first on the search path).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    doorbell_cdylib::link_versioned("librdmacm.so.1", "exports.txt", &["RDMACM_"]);
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let stub_dir = out.join("needed");
    std::fs::create_dir_all(&stub_dir).expect("create OUT_DIR/needed");
    let src = stub_dir.join("empty.c");
    std::fs::write(&src, "/* only a SONAME */\n").expect("write empty.c");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let status = Command::new(cc.split_whitespace().next().unwrap_or("cc"))
        .args(["-shared", "-fPIC", "-Wl,-soname,libibverbs.so.1", "-o"])
        .arg(stub_dir.join("libibverbs.so"))
        .arg(&src)
        .status()
        .expect("run the C compiler (scripts/setup.sh installs gcc)");
    assert!(
        status.success(),
        "building the libibverbs SONAME stub failed"
    );
    println!("cargo:rustc-cdylib-link-arg=-L{}", stub_dir.display());
    println!("cargo:rustc-cdylib-link-arg=-Wl,--no-as-needed");
    println!("cargo:rustc-cdylib-link-arg=-libverbs");
}
