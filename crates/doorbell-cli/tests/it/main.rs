//! Tests of the `doorbell` jobs: the seed's comparison against DESIGN.md's
//! table, the bfreg layout against the kernel policy in the reference, and
//! the command line itself.
#![allow(missing_docs)]

mod cli;
mod layout;
mod netns;
mod pcie;
mod pingpong;
mod procs;
mod run;
mod seed;
mod sim;
