//! Links the cdylib as rdma-core's `libibverbs.so.1`: SONAME, and every export
//! in the version node that `exports.txt` gives it, nodes chained as in v44
//! (doorbell-cdylib says how, and why GNU ld).

fn main() {
    doorbell_cdylib::link_versioned("libibverbs.so.1", "exports.txt", &["IBVERBS_", "DOORBELL_"]);
}
