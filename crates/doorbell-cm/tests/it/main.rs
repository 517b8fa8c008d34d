//! The integration tests of doorbell-cm, in one binary (STYLE R15):
//! `kernel_fields` restates the kernel's table of CM field locations and
//! compares it with ours; `tshark` has Wireshark decode the MADs that
//! `frames` builds.

mod frames;
mod kernel_fields;
mod tshark;
