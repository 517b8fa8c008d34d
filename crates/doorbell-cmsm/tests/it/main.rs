//! The integration tests of doorbell-cmsm, in one binary (STYLE R15): two
//! agents wired through `harness`, which moves MADs between them on a
//! virtual clock and drops, duplicates or delays the ones a test names.

mod fuzz;
mod harness;
mod reject;
mod setup;
mod sidr;
mod teardown;
