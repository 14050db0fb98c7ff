//! # ticketing-verify
//!
//! A Jepsen-style fault suite for Ticketing: a real cluster of the release
//! `ticketing-server` on loopback, every peer link through a fault-injecting
//! proxy, several workload client PROCESSES incrementing a fenced counter in
//! SQLite, a nemesis drawn from a seed, and a checker over the history.
//! See `docs/verification.md`.
//!
//! ```sh
//! cargo build --release -p ticketing-server -p ticketing-verify
//! target/release/ticketing-verify --profile ci --seed 7
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod checker;
pub mod clock;
pub mod cluster;
pub mod db;
pub mod history;
pub mod nemesis;
pub mod proxy;
pub mod rng;
pub mod run;
pub mod workload;
