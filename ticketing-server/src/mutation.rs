//! Deliberate bugs for showing that the simulation catches them
//! (docs/verification.md, "Simulation", "Teeth"). Compiled in only with the
//! `mutations` feature, which nothing but `scripts/simulate --mutation`
//! enables; without it [`on`] is `false` and every mutation is gone from
//! the build. With it, `TICKETING_MUTATION=<name>` turns one on:
//!
//! - `lease-early`: a lease ends after half of its time;
//! - `token-from-clock`: a token is the proposer's wall clock alone, not
//!   above the last one;
//! - `domain-time-jump`: a new leader starts its domain clock 250 s ahead,
//!   so the leases it inherits end at once;
//! - `apply-before-fsync` (durable mode): a node applies an entry (and the
//!   leader answers it) before its own fsync covers it;
//! - `ack-before-fsync` (durable mode): a follower reports entries written
//!   to the leader before its fsync, as the leader does its own.

/// Whether the mutation `name` is on.
#[cfg(feature = "mutations")]
pub fn on(name: &str) -> bool {
    static ON: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    ON.get_or_init(|| std::env::var("TICKETING_MUTATION").ok()).as_deref() == Some(name)
}

/// Whether the mutation `name` is on: never, in this build.
#[cfg(not(feature = "mutations"))]
#[inline(always)]
pub fn on(_name: &str) -> bool {
    false
}
