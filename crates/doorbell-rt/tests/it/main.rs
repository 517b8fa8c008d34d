//! End-to-end tests of the whole stack on the live runtime: verbs, driver
//! and device across the bus, two NICs across the in-process fabric.
#![allow(unreachable_pub, missing_docs)]

mod capture;
mod common;
mod counters;
mod data;
mod errors;
mod events;
mod hostile;
mod isolation;
mod net;
mod one_way;
mod pcap;
mod process;
mod provider;
mod resize;
mod shm;
mod soak;
mod srq;
mod td;
mod trace;
mod uc;
mod udp;
mod virtual_time;
mod worker;
mod wrap;
