//! # ticketing-server
//!
//! The Ticketing server: a FIFO lock service with fencing tokens
//! (docs/architecture.md walks one request through it). The binary
//! (`main.rs`) parses the configuration ([`config`]) and runs
//! [`server::Builder`], which assembles:
//!
//! - the client port: [`listener`] accepts, [`conn`] reads frames and
//!   writes answers, [`preauth`] bounds the connections not yet
//!   authenticated, [`principal`] decides who may use which keys;
//! - the lock manager: [`manager`] drives the pure [`leader`] state machine,
//!   which proposes [`locks::Command`]s and answers once they are applied;
//! - replication behind the [`replication::Replicator`] seam: a standalone
//!   server (memory or [`durable`]), or a Raft [`cluster`] on openraft;
//! - the metrics registry ([`metrics`]), fed by the parts' own counters;
//! - the admin port ([`admin`]: health, status, metrics, backups with
//!   [`backup`]), TLS ([`tls`], [`gencerts`]) and reloads ([`reload`]);
//! - the seams a simulation replaces: [`net`], [`clock`], and the wall
//!   clock of [`leader::system_wall`]; [`mutation`] holds the deliberate
//!   bugs only a test build contains.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod admin;
pub mod backup;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod conn;
pub mod domain_time;
pub mod durable;
pub mod gencerts;
pub mod leader;
pub mod listener;
pub mod locks;
pub mod manager;
pub mod metrics;
pub mod mutation;
pub mod net;
pub mod preauth;
pub mod principal;
pub mod reload;
pub mod replication;
pub mod server;
pub mod tls;

/// Fixtures shared by the unit tests.
#[cfg(test)]
pub(crate) mod test_fields {
    use ticketing_proto::{Key, Owner};

    /// A key from a literal known to be valid.
    pub fn k(s: &str) -> Key {
        Key::new(s.to_owned()).unwrap()
    }

    /// An owner from a literal known to be valid.
    pub fn o(s: &str) -> Owner {
        Owner::new(s.to_owned()).unwrap()
    }

    /// The start of a simulated clock (the leader's tests read no clock
    /// but this one origin; every later time is `t0() + d`).
    pub fn t0() -> std::time::Instant {
        std::time::Instant::now()
    }
}
