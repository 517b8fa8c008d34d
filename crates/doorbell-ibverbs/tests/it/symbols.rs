//! The built library against `exports.txt`: every export defined with exactly
//! its version (as the default, `@@`, version) and kind; nothing else defined;
//! SONAME `libibverbs.so.1`; the version nodes chained as the list says.

use std::collections::BTreeMap;

use doorbell_cdylib::export_list::{self, Export, Kind};
use doorbell_cdylib::inspect;
use ibverbs::exports::{IMPLEMENTED, OBJECTS, STUBS};
use ibverbs::rdma_cm::{NOT_YET, WORKING};

use crate::library::built_library;

const LIST: &str = include_str!("../../exports.txt");

fn exports() -> Vec<Export> {
    export_list::parse(LIST, &["IBVERBS_", "DOORBELL_"])
        .unwrap_or_else(|e| panic!("exports.txt: {e}"))
}

#[test]
fn every_export_has_its_version_and_kind_and_nothing_else_is_exported() {
    let bad = inspect::export_problems(built_library(), &exports());
    assert!(
        bad.is_empty(),
        "{} problem(s):\n  {}",
        bad.len(),
        bad.join("\n  ")
    );
}

#[test]
fn soname_is_libibverbs_so_1() {
    assert_eq!(
        inspect::sonames(built_library()),
        ["libibverbs.so.1"],
        "want one SONAME libibverbs.so.1"
    );
}

#[test]
fn version_nodes_chain_as_the_list_says() {
    let mut defs = inspect::version_definitions(built_library());
    assert!(
        !defs.is_empty() && defs.remove(0).name == "libibverbs.so.1",
        "the BASE version definition must be the SONAME"
    );
    let want = export_list::nodes(&exports());
    assert_eq!(
        defs, want,
        "readelf -V's definitions (left) vs exports.txt (right)"
    );
    // The shape the issue asks for, spelled out.
    let names: Vec<&str> = want.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names.first(), Some(&"IBVERBS_1.0"));
    assert!(names.contains(&"IBVERBS_1.14") && names.contains(&"IBVERBS_PRIVATE_34"));
}

#[test]
fn the_crate_defines_exactly_the_list() {
    let exports = exports();
    let mut funcs: Vec<&str> = STUBS
        .iter()
        .chain(IMPLEMENTED)
        .chain(WORKING)
        .chain(NOT_YET)
        .copied()
        .collect();
    funcs.sort_unstable();
    let mut want: Vec<&str> = exports
        .iter()
        .filter(|e| e.kind == Kind::Func)
        .map(|e| e.symbol.as_str())
        .collect();
    want.sort_unstable();
    assert_eq!(
        funcs, want,
        "exports.rs functions (left) vs exports.txt (right)"
    );
    let objects: Vec<&str> = exports
        .iter()
        .filter(|e| e.kind == Kind::Object)
        .map(|e| e.symbol.as_str())
        .collect();
    assert_eq!(OBJECTS, &objects[..]);
}

#[test]
fn export_counts_per_node() {
    // Printed for the record (`cargo test -- --nocapture`); the list is the
    // authority, this only guards against an empty or truncated file.
    let exports = exports();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for e in &exports {
        *counts.entry(e.version.as_str()).or_default() += 1;
    }
    eprintln!("exports per node: {counts:?} ({} in all)", exports.len());
    assert!(counts.values().all(|&n| n > 0) && exports.len() >= 130);
}
