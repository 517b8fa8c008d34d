//! The integration tests of doorbell-cm, in one binary (STYLE R15).

mod frames;
mod tshark;
