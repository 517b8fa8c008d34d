//! The built library against `exports.txt`: every export with its version
//! (as the default version) and kind, nothing else; SONAME
//! `librdmacm.so.1`; RDMACM_1.0 to 1.3 chained; a DT_NEEDED on
//! `libibverbs.so.1`, whose `doorbell_rdma_*` functions it calls.

use doorbell_cdylib::export_list::{self, Export, Node};
use doorbell_cdylib::inspect;

use crate::built_library;

const LIST: &str = include_str!("../../exports.txt");

fn exports() -> Vec<Export> {
    export_list::parse(LIST, &["RDMACM_"]).unwrap_or_else(|e| panic!("exports.txt: {e}"))
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
fn the_list_is_the_real_librdmacm_v44_set() {
    // Every rdma_* and r* function Debian's librdmacm1 44 defines (70
    // symbols less its 4 version nodes' own ABS entries is 68 + ... the
    // counts are the list's; this guards against a truncated file).
    let e = exports();
    assert_eq!(e.len(), 68, "functions in exports.txt");
    let in_node = |v: &str| e.iter().filter(|x| x.version == v).count();
    assert_eq!(
        [
            in_node("RDMACM_1.0"),
            in_node("RDMACM_1.1"),
            in_node("RDMACM_1.2"),
            in_node("RDMACM_1.3")
        ],
        [62, 1, 2, 3]
    );
}

#[test]
fn soname_nodes_and_needed() {
    let lib = built_library();
    assert_eq!(inspect::sonames(lib), ["librdmacm.so.1"]);
    let mut defs = inspect::version_definitions(lib);
    assert!(
        !defs.is_empty() && defs.remove(0).name == "librdmacm.so.1",
        "the BASE version definition must be the SONAME"
    );
    let node = |n: &str, p: Option<&str>| Node {
        name: n.to_owned(),
        parent: p.map(str::to_owned),
    };
    assert_eq!(
        defs,
        [
            node("RDMACM_1.0", None),
            node("RDMACM_1.1", Some("RDMACM_1.0")),
            node("RDMACM_1.2", Some("RDMACM_1.1")),
            node("RDMACM_1.3", Some("RDMACM_1.2")),
        ]
    );
    assert!(
        inspect::needed(lib).iter().any(|n| n == "libibverbs.so.1"),
        "{:?}",
        inspect::needed(lib)
    );
}
