//! Tests of the PCIe link model: the published figures it must reproduce
//! (calibration) and the behaviour of its timing model.
#![allow(missing_docs)]

mod calibration;
mod timing;
