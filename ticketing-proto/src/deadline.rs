//! The conservative deadline of docs/client.md, Acquire step 4 and the budget check.
//!
//! `deadline = t_send + waited_ms + lease × (1 − 0.001)`. A grant becomes a
//! ticket only if `deadline − now ≥ budget` and `deadline − now > 0`;
//! otherwise the grant is handed to the release lane and the caller gets
//! `InsufficientTime`.
//!
//! One hardening on top of the formula: `t_send + waited_ms` is never taken
//! later than `now` (the moment the grant was read). The lease runs from the
//! commit, which happened before the answer arrived, so a `waited_ms` larger
//! than the time that really passed since the send (impossible from an honest
//! server) can never lengthen the deadline.

use std::time::{Duration, Instant};

/// The lease is shortened by this fraction to cover clock-rate differences.
pub const LEASE_SAFETY_PERMILLE: u32 = 1;

/// `t_send + waited_ms + lease × 0.999`, with `t_send + waited_ms` capped at `now`.
pub fn conservative_deadline(t_send: Instant, waited_ms: u32, lease_secs: u8, now: Instant) -> Instant {
    let start = t_send + Duration::from_millis(u64::from(waited_ms));
    let start = if start > now { now } else { start };
    // lease × (1 − 0.001) in whole milliseconds (lease ≤ 250 s: exact).
    let lease_ms = u64::from(lease_secs) * 1000;
    start + Duration::from_millis(lease_ms - lease_ms * u64::from(LEASE_SAFETY_PERMILLE) / 1000)
}

/// The outcome of the budget check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Enough time left: a ticket valid until `deadline`.
    Ticket {
        /// The conservative deadline.
        deadline: Instant,
    },
    /// Less than `budget` (or nothing) left: release the grant, report InsufficientTime.
    InsufficientTime,
}

/// docs/client.md, Acquire step 4: a ticket if `deadline − now ≥ budget` and `> 0`.
pub fn check(t_send: Instant, waited_ms: u32, lease_secs: u8, budget: Duration, now: Instant) -> Verdict {
    let deadline = conservative_deadline(t_send, waited_ms, lease_secs, now);
    match deadline.checked_duration_since(now) {
        Some(left) if !left.is_zero() && left >= budget => Verdict::Ticket { deadline },
        _ => Verdict::InsufficientTime,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn formula() {
        let t = Instant::now();
        // lease 10 s → 9.99 s after t_send + waited_ms
        assert_eq!(conservative_deadline(t, 0, 10, t), t + ms(9990));
        assert_eq!(conservative_deadline(t, 1500, 10, t + ms(2000)), t + ms(11490));
        assert_eq!(conservative_deadline(t, 0, 250, t), t + ms(249_750));
        // waited_ms beyond the elapsed time is capped at now
        assert_eq!(conservative_deadline(t, 5000, 10, t + ms(1000)), t + ms(10_990));
    }

    #[test]
    fn budget_check() {
        let t = Instant::now();
        // lease 3, budget 2: the grant arrives 0.5 s after the send with waited 0 → 2.497 left ≥ 2
        assert!(matches!(check(t, 0, 3, ms(2000), t + ms(500)), Verdict::Ticket { .. }));
        // arrives 1.5 s late with waited_ms 0 → 1.497 left < 2
        assert_eq!(check(t, 0, 3, ms(2000), t + ms(1500)), Verdict::InsufficientTime);
        // same late arrival, waited_ms covers it → 2.997 left
        assert_eq!(check(t, 1500, 3, ms(2000), t + ms(1500)), Verdict::Ticket { deadline: t + ms(4497) });
        // exactly the budget is enough
        assert!(matches!(check(t, 0, 3, ms(2997), t), Verdict::Ticket { .. }));
        assert_eq!(check(t, 0, 3, ms(2998), t), Verdict::InsufficientTime);
        // budget 0 still needs a positive remainder
        assert_eq!(check(t, 0, 1, Duration::ZERO, t + ms(999)), Verdict::InsufficientTime);
        assert!(matches!(check(t, 0, 1, Duration::ZERO, t + ms(998)), Verdict::Ticket { .. }));
    }
}
