//! # ticketing-sim
//!
//! A deterministic simulation of a Ticketing cluster (docs/verification.md,
//! "Simulation"): the real server code (the client port, the lock manager,
//! openraft, the peer protocol) of every node and the real client library
//! run as hosts of one [turmoil] simulation, on its simulated TCP and clock,
//! with faults drawn from a seed; the fault suite's checker reads the
//! history.
#![deny(missing_docs)]

pub mod disk;
pub mod net;
pub mod run;
