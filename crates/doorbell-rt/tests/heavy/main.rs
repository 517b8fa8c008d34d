//! Tests that load the whole machine: thousands of QPs on one NIC, threads
//! that post as fast as they can on shared bfregs, objects up to every cap.
//! They are a test binary of their own because cargo runs one test binary
//! at a time: beside them, the `it` tests that count packets exactly or
//! wait on ACK timeouts would starve on a 2-core machine and fail for it.
#![allow(unreachable_pub, missing_docs, dead_code)]

#[path = "../it/common.rs"]
mod common;
mod exhaust;
#[path = "../it/net.rs"]
mod net;
