//! The simulator against the design's table, the published figures, and
//! itself (determinism).
#![allow(missing_docs)]
mod calibration;
mod determinism;
mod events;
mod faults;
mod lat;
mod steps;
mod table;
mod td;
mod trace;

use doorbell_sim::Profile;

pub fn cib() -> Profile {
    Profile::builtin("connectib-haswell").unwrap().unwrap()
}
