//! The simulator against the design's table, the published figures, and
//! itself (determinism).
#![allow(missing_docs)]

mod smoke;
