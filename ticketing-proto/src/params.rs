//! Client-side parameter rules of docs/protocol.md §2: durations given with fractions
//! are rounded UP to whole seconds, then validated; values are never clamped.
//! Every binding calls these before anything is sent.

use crate::field::{Key, Owner};
use crate::limits::{MAX_KEY_LEN, MAX_LEASE, MAX_WAIT, MIN_LEASE};
use rand_core::RngCore;
use std::fmt;

/// A rejected argument: which parameter, and which rule it broke.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ParamError {
    /// NaN or infinite.
    NotFinite {
        /// `wait`, `lease` or `budget`.
        name: &'static str,
        /// The value given.
        value: f64,
    },
    /// Below zero.
    Negative {
        /// `wait`, `lease` or `budget`.
        name: &'static str,
        /// The value given.
        value: f64,
    },
    /// Outside `min..=max` once rounded up (never clamped).
    OutOfRange {
        /// `wait`, `lease` or `budget`.
        name: &'static str,
        /// The value given.
        value: f64,
        /// Smallest legal whole seconds.
        min: u8,
        /// Largest legal whole seconds (for `budget`: the normalized lease).
        max: u8,
    },
    /// Not 1–250 bytes of visible ASCII without space.
    Key {
        /// The key given.
        key: String,
    },
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamError::NotFinite { name, value } => {
                write!(f, "{name} must be a finite number of seconds, got {value}")
            }
            ParamError::Negative { name, value } => write!(f, "{name} must not be negative, got {value}"),
            ParamError::OutOfRange { name, value, min, max } => {
                write!(f, "{name} must be within {min}..={max} seconds (rounded up), got {value}")
            }
            ParamError::Key { key } => {
                write!(f, "key must be 1-{MAX_KEY_LEN} visible ASCII bytes (0x21-0x7E, no space), got {key:?}")
            }
        }
    }
}

impl std::error::Error for ParamError {}

/// Normalized acquire parameters, ready for the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcquireParams {
    /// The key.
    pub key: Key,
    /// Whole seconds, 0–255.
    pub wait: u8,
    /// Whole seconds, 1–250.
    pub lease: u8,
    /// Whole seconds, 0–lease.
    pub budget: u8,
}

fn round_up(name: &'static str, value: f64, min: u8, max: u8) -> Result<u8, ParamError> {
    if !value.is_finite() {
        return Err(ParamError::NotFinite { name, value });
    }
    if value < 0.0 {
        return Err(ParamError::Negative { name, value });
    }
    let up = value.ceil();
    if up < f64::from(min) || up > f64::from(max) {
        return Err(ParamError::OutOfRange { name, value, min, max });
    }
    Ok(up as u8)
}

/// `wait` in seconds → whole seconds 0–255.
pub fn wait(secs: f64) -> Result<u8, ParamError> {
    round_up("wait", secs, 0, MAX_WAIT)
}

/// `lease` in seconds → whole seconds 1–250.
pub fn lease(secs: f64) -> Result<u8, ParamError> {
    round_up("lease", secs, MIN_LEASE, MAX_LEASE)
}

/// `budget` in seconds → whole seconds 0–`lease` (the normalized lease).
pub fn budget(secs: f64, lease: u8) -> Result<u8, ParamError> {
    round_up("budget", secs, 0, lease)
}

/// Validates a key (1–250 bytes in 0x21–0x7E).
pub fn key(key: &str) -> Result<Key, ParamError> {
    Key::new(key.to_owned()).map_err(|_| ParamError::Key { key: key.to_owned() })
}

/// All of an acquire's arguments at once (key first, then wait, lease, budget).
///
/// ```
/// use ticketing_proto::params;
/// // Fractions round UP to whole seconds; nothing is clamped.
/// let p = params::acquire("seat-17", 0.5, 29.2, 2.0).unwrap();
/// assert_eq!((p.wait, p.lease, p.budget), (1, 30, 2));
/// assert!(params::acquire("seat-17", 5.0, 251.0, 0.0).is_err()); // lease over 250 s
/// assert!(params::acquire("seat 17", 5.0, 30.0, 0.0).is_err()); // a space in the key
/// assert!(params::acquire("seat-17", 5.0, 30.0, 31.0).is_err()); // budget over the lease
/// ```
pub fn acquire(key_text: &str, wait_s: f64, lease_s: f64, budget_s: f64) -> Result<AcquireParams, ParamError> {
    let key = key(key_text)?;
    let wait = wait(wait_s)?;
    let lease = lease(lease_s)?;
    let budget = budget(budget_s, lease)?;
    Ok(AcquireParams { key, wait, lease, budget })
}

/// A fresh random owner: 128 bits from `rng` as 32 lowercase hex characters.
pub fn owner<R: RngCore>(rng: &mut R) -> Owner {
    let mut raw = [0u8; 16];
    rng.fill_bytes(&mut raw);
    Owner::new(hex::encode(raw)).unwrap_or_else(|_| unreachable!("hex is visible ASCII"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_up_never_clamps() {
        assert_eq!(wait(0.0), Ok(0));
        assert_eq!(wait(0.001), Ok(1));
        assert_eq!(wait(254.5), Ok(255));
        assert!(wait(255.01).is_err());
        assert!(wait(-0.5).is_err());
        assert!(wait(f64::NAN).is_err());
        assert!(wait(f64::INFINITY).is_err());
        assert_eq!(lease(0.2), Ok(1));
        assert!(lease(0.0).is_err());
        assert_eq!(lease(250.0), Ok(250));
        assert!(lease(250.0001).is_err());
        assert_eq!(budget(2.1, 3), Ok(3));
        assert!(budget(3.1, 3).is_err());
    }

    #[test]
    fn acquire_validates_everything() {
        let p = acquire("k", 1.5, 2.5, 0.5).unwrap();
        assert_eq!((p.wait, p.lease, p.budget), (2, 3, 1));
        assert!(acquire("", 1.0, 1.0, 0.0).is_err());
        assert!(acquire("a b", 1.0, 1.0, 0.0).is_err());
        assert!(acquire(&"k".repeat(251), 1.0, 1.0, 0.0).is_err());
        assert!(acquire("ключ", 1.0, 1.0, 0.0).is_err());
        let e = acquire("k", 1.0, 2.0, 3.0).unwrap_err();
        assert_eq!(e, ParamError::OutOfRange { name: "budget", value: 3.0, min: 0, max: 2 });
        assert!(e.to_string().contains("budget"));
    }

    #[test]
    fn owners_are_fresh_hex() {
        let mut rng = rand_core::OsRng;
        let a = owner(&mut rng);
        assert_eq!(a.as_bytes().len(), 32);
        assert!(a.as_str().bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_ne!(a, owner(&mut rng));
    }
}
