//! One clock for every process of a run: the system-wide `CLOCK_MONOTONIC`
//! (the clock behind `std::time::Instant` on Linux), read as nanoseconds so
//! that timestamps written by different processes compare directly. No wall
//! clock is ever compared.

use std::time::{Duration, Instant};

/// Nanoseconds of `CLOCK_MONOTONIC`.
pub fn mono_ns() -> u64 {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC");
    (ts.tv_sec() as u64) * 1_000_000_000 + ts.tv_nsec() as u64
}

/// `instant` on the shared clock, never later than the real value: the
/// clock is read first, the distance to `instant` second.
pub fn to_mono_ns(instant: Instant) -> u64 {
    let m = mono_ns();
    let now = Instant::now();
    if instant >= now {
        m + instant.duration_since(now).as_nanos() as u64
    } else {
        m.saturating_sub(now.duration_since(instant).as_nanos() as u64)
    }
}

/// Milliseconds between two timestamps (0 if `b < a`).
pub fn ms_between(a: u64, b: u64) -> u64 {
    b.saturating_sub(a) / 1_000_000
}

/// `d` in nanoseconds.
pub fn ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}
