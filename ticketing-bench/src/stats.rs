//! Latency samples in microseconds and their percentiles.

use std::time::Duration;

/// Collected samples (µs).
#[derive(Default, Debug, Clone)]
pub struct Samples(Vec<u64>);

impl Samples {
    /// Adds one sample.
    pub fn add(&mut self, d: Duration) {
        self.0.push(d.as_micros().min(u128::from(u64::MAX)) as u64);
    }

    /// Appends another set.
    pub fn merge(&mut self, other: Samples) {
        self.0.extend(other.0);
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The `q`-quantile (0..=1) in µs, nearest rank; 0 with no samples.
    pub fn quantile(&mut self, q: f64) -> u64 {
        if self.0.is_empty() {
            return 0;
        }
        self.0.sort_unstable();
        let rank = ((q * self.0.len() as f64).ceil() as usize).clamp(1, self.0.len());
        self.0[rank - 1]
    }
}

/// CPU time (user + system) this process has used so far: the load
/// generator's own, since the servers it starts are other processes.
pub fn own_cpu() -> Duration {
    use nix::sys::resource::{getrusage, UsageWho};
    match getrusage(UsageWho::RUSAGE_SELF) {
        Ok(u) => {
            let us = |t: nix::sys::time::TimeVal| t.tv_sec() as u64 * 1_000_000 + t.tv_usec() as u64;
            Duration::from_micros(us(u.user_time()) + us(u.system_time()))
        }
        Err(_) => Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_by_nearest_rank() {
        let mut s = Samples::default();
        assert_eq!(s.quantile(0.5), 0);
        for us in (1..=100).rev() {
            s.add(Duration::from_micros(us));
        }
        assert_eq!(s.len(), 100);
        assert_eq!(s.quantile(0.5), 50);
        assert_eq!(s.quantile(0.99), 99);
        assert_eq!(s.quantile(1.0), 100);
        assert_eq!(s.quantile(0.0), 1);
    }
}
