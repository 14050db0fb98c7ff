//! Client-side parameter rules of docs/protocol.md §2: durations given with fractions
//! are rounded UP to whole seconds, then validated; values are never clamped.
//! Every binding calls these before anything is sent.

use crate::field::{Key, KeySet, KeySetError, Owner, RequestId};
use crate::frame::ClientFrame;
use crate::limits::{
    MAX_FRAME, MAX_KEY_LEN, MAX_LEASE, MAX_MULTI_KEYS, MAX_PERMITS, MAX_WAIT, MIN_LEASE, MIN_MULTI_KEYS,
};
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
    /// A counted acquire's `n` outside 1–65535.
    Permits {
        /// The value given.
        value: i64,
    },
    /// A timeout too long to represent (beyond about 584 billion years).
    TooLong {
        /// `timeout`.
        name: &'static str,
        /// The value given.
        value: f64,
    },
    /// The keys of a multi-key acquire: fewer than 2 or more than 16, a key
    /// given twice, a bad key, or a request longer than the 512-byte frame.
    Keys {
        /// Which rule, in words (names the offending key where there is one).
        why: String,
    },
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamError::NotFinite { name, value } => {
                write!(f, "{name} must be a finite number of seconds, got {value}")
            }
            ParamError::Negative { name, value } => {
                write!(f, "{name} must not be a negative number of seconds, got {value}")
            }
            ParamError::OutOfRange { name, value, min, max } => {
                write!(f, "{name} must be within {min}..={max} seconds (rounded up), got {value}")
            }
            ParamError::Key { key } => {
                write!(f, "key must be 1-{MAX_KEY_LEN} visible ASCII bytes (0x21-0x7E, no space), got {key:?}")
            }
            ParamError::Permits { value } => write!(f, "n must be within 1..={MAX_PERMITS}, got {value}"),
            ParamError::TooLong { name, value } => write!(f, "{name} is too long to represent, got {value}"),
            ParamError::Keys { why } => write!(f, "keys: {why}"),
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

/// Normalized counted-acquire parameters (`S`), ready for the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedParams {
    /// The key.
    pub key: Key,
    /// Holders the request accepts at once, 1–65535.
    pub n: u16,
    /// Whole seconds, 0–255.
    pub wait: u8,
    /// Whole seconds, 1–250.
    pub lease: u8,
    /// Whole seconds, 0–lease.
    pub budget: u8,
}

/// Normalized multi-key acquire parameters (`K`), ready for the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllParams {
    /// 2–16 distinct keys, in the order given (the first is the one answers echo).
    pub keys: KeySet,
    /// Whole seconds, 0–255.
    pub wait: u8,
    /// Whole seconds, 1–250.
    pub lease: u8,
    /// Whole seconds, 0–lease.
    pub budget: u8,
}

/// `value` seconds is a finite number, not below zero.
fn seconds(name: &'static str, value: f64) -> Result<(), ParamError> {
    if !value.is_finite() {
        return Err(ParamError::NotFinite { name, value });
    }
    if value < 0.0 {
        return Err(ParamError::Negative { name, value });
    }
    Ok(())
}

fn round_up(name: &'static str, value: f64, min: u8, max: u8) -> Result<u8, ParamError> {
    seconds(name, value)?;
    let up = value.ceil();
    if up < f64::from(min) || up > f64::from(max) {
        return Err(ParamError::OutOfRange { name, value, min, max });
    }
    Ok(up as u8)
}

/// A timeout in seconds (`wait_ready`'s): finite, not negative, and
/// representable as a [`std::time::Duration`] (never rounded to whole seconds).
pub fn timeout(name: &'static str, secs: f64) -> Result<std::time::Duration, ParamError> {
    seconds(name, secs)?;
    std::time::Duration::try_from_secs_f64(secs).map_err(|_| ParamError::TooLong { name, value: secs })
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

/// A counted acquire's `n`: 1–65535 (never clamped).
pub fn permits(n: i64) -> Result<u16, ParamError> {
    match u16::try_from(n) {
        Ok(v) if v >= 1 => Ok(v),
        _ => Err(ParamError::Permits { value: n }),
    }
}

/// The keys of a multi-key acquire: 2–16 of them, each a valid key, none twice.
/// The frame length is checked by [`acquire_all`], which knows `wait` and `lease`.
pub fn key_set<S: AsRef<str>>(keys: &[S]) -> Result<KeySet, ParamError> {
    let why = |e: KeySetError| ParamError::Keys {
        why: match e {
            KeySetError::Count(n) => {
                format!("a multi-key acquire takes {MIN_MULTI_KEYS}-{MAX_MULTI_KEYS} keys, got {n}")
            }
            KeySetError::Repeated(k) => format!("key {:?} is given twice", k.as_str()),
        },
    };
    // The count first, before any key is looked at.
    KeySet::check_count(keys.len()).map_err(why)?;
    let mut out: Vec<Key> = Vec::with_capacity(keys.len());
    for text in keys {
        let text = text.as_ref();
        let Ok(k) = Key::new(text.to_owned()) else {
            return Err(ParamError::Keys {
                why: format!(
                    "each key must be 1-{MAX_KEY_LEN} visible ASCII bytes (0x21-0x7E, no space), got {text:?}"
                ),
            });
        };
        out.push(k);
    }
    KeySet::check(out).map_err(why)
}

/// The longest `K` frame these keys can make: the id counted at its longest
/// (20 digits) and a fresh 32-character owner.
fn worst_case_len(keys: &KeySet, wait: u8, lease: u8) -> usize {
    let owner = Owner::new("f".repeat(32)).unwrap_or_else(|_| unreachable!("hex is a valid owner"));
    ClientFrame::AcquireAll { id: RequestId(u64::MAX), owner, wait, lease, keys: keys.clone() }.encoded_len()
}

/// All of a counted acquire's arguments at once (key, n, then wait, lease, budget).
///
/// ```
/// use ticketing_proto::params;
/// let p = params::acquire_shared("pool", 5, 1.0, 30.0, 0.0).unwrap();
/// assert_eq!((p.n, p.wait, p.lease), (5, 1, 30));
/// assert!(params::acquire_shared("pool", 0, 1.0, 30.0, 0.0).is_err()); // n below 1
/// assert!(params::acquire_shared("pool", 65536, 1.0, 30.0, 0.0).is_err()); // n above 65535
/// ```
pub fn acquire_shared(
    key_text: &str,
    n: i64,
    wait_s: f64,
    lease_s: f64,
    budget_s: f64,
) -> Result<SharedParams, ParamError> {
    let key = key(key_text)?;
    let n = permits(n)?;
    let wait = wait(wait_s)?;
    let lease = lease(lease_s)?;
    let budget = budget(budget_s, lease)?;
    Ok(SharedParams { key, n, wait, lease, budget })
}

/// All of a multi-key acquire's arguments at once (keys, then wait, lease,
/// budget), and the check that the `K` frame fits the 512-byte line.
///
/// ```
/// use ticketing_proto::params;
/// let p = params::acquire_all(&["a", "b"], 1.0, 30.0, 0.0).unwrap();
/// assert_eq!(p.keys.len(), 2);
/// assert!(params::acquire_all(&["a"], 1.0, 30.0, 0.0).is_err()); // one key
/// assert!(params::acquire_all(&["a", "a"], 1.0, 30.0, 0.0).is_err()); // a key twice
/// ```
pub fn acquire_all<S: AsRef<str>>(
    keys: &[S],
    wait_s: f64,
    lease_s: f64,
    budget_s: f64,
) -> Result<AllParams, ParamError> {
    let keys = key_set(keys)?;
    let wait = wait(wait_s)?;
    let lease = lease(lease_s)?;
    let budget = budget(budget_s, lease)?;
    let len = worst_case_len(&keys, wait, lease);
    if len > MAX_FRAME {
        return Err(ParamError::Keys {
            why: format!(
                "the request would be {len} bytes, over the {MAX_FRAME}-byte frame limit (use fewer or shorter keys)"
            ),
        });
    }
    Ok(AllParams { keys, wait, lease, budget })
}

/// A fresh random owner: 128 bits from `rng` as 32 lowercase hex characters.
pub fn owner<R: RngCore>(rng: &mut R) -> Owner {
    let mut raw = [0u8; 16];
    rng.fill_bytes(&mut raw);
    Owner::new(hex::encode(raw)).unwrap_or_else(|_| unreachable!("hex is visible ASCII"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_timeout_is_finite_not_negative_and_representable() {
        assert_eq!(timeout("timeout", 1.5), Ok(std::time::Duration::from_millis(1500)));
        assert_eq!(timeout("timeout", 0.0), Ok(std::time::Duration::ZERO));
        assert!(matches!(timeout("timeout", f64::NAN), Err(ParamError::NotFinite { .. })));
        assert!(matches!(timeout("timeout", -1.0), Err(ParamError::Negative { .. })));
        assert!(matches!(timeout("timeout", 1e30), Err(ParamError::TooLong { .. })));
        assert_eq!(
            timeout("timeout", 1e30).unwrap_err().to_string(),
            "timeout is too long to represent, got 1000000000000000000000000000000"
        );
    }

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
    fn permits_are_one_to_65535_never_clamped() {
        assert_eq!(permits(1), Ok(1));
        assert_eq!(permits(65535), Ok(65535));
        assert_eq!(permits(0), Err(ParamError::Permits { value: 0 }));
        assert_eq!(permits(-1), Err(ParamError::Permits { value: -1 }));
        assert_eq!(permits(65536), Err(ParamError::Permits { value: 65536 }));
        assert_eq!(permits(i64::MIN), Err(ParamError::Permits { value: i64::MIN }));
        let e = acquire_shared("k", 70000, 1.0, 2.0, 0.0).unwrap_err();
        assert_eq!(e.to_string(), "n must be within 1..=65535, got 70000");
        let p = acquire_shared("k", 65535, 0.5, 2.5, 1.5).unwrap();
        assert_eq!((p.key.as_str(), p.n, p.wait, p.lease, p.budget), ("k", 65535, 1, 3, 2));
        // The key is checked first, then n, then the durations.
        assert_eq!(acquire_shared("a b", 0, 1.0, 1.0, 0.0).unwrap_err(), ParamError::Key { key: "a b".into() });
        assert!(matches!(acquire_shared("k", 0, f64::NAN, 1.0, 0.0), Err(ParamError::Permits { .. })));
        assert!(matches!(acquire_shared("k", 2, f64::NAN, 1.0, 0.0), Err(ParamError::NotFinite { .. })));
    }

    fn keys_why(r: Result<AllParams, ParamError>) -> String {
        match r {
            Err(ParamError::Keys { why }) => why,
            other => panic!("expected a Keys error, got {other:?}"),
        }
    }

    #[test]
    fn key_lists_two_to_sixteen_distinct_valid() {
        let p = acquire_all(&["b", "a", "c"], 1.0, 5.0, 0.0).unwrap();
        let got: Vec<&str> = p.keys.as_slice().iter().map(|k| k.as_str()).collect();
        assert_eq!(got, ["b", "a", "c"], "the order given is kept");
        assert_eq!((p.wait, p.lease, p.budget), (1, 5, 0));
        let sixteen: Vec<String> = (0..16).map(|i| format!("k{i}")).collect();
        assert_eq!(acquire_all(&sixteen, 1.0, 5.0, 0.0).unwrap().keys.len(), 16);
        let seventeen: Vec<String> = (0..17).map(|i| format!("k{i}")).collect();
        assert!(keys_why(acquire_all(&seventeen, 1.0, 5.0, 0.0)).contains("got 17"));
        assert!(keys_why(acquire_all(&["a"], 1.0, 5.0, 0.0)).contains("2-16 keys, got 1"));
        assert!(keys_why(acquire_all::<&str>(&[], 1.0, 5.0, 0.0)).contains("got 0"));
        assert!(keys_why(acquire_all(&["a", "b", "a"], 1.0, 5.0, 0.0)).contains("\"a\" is given twice"));
        assert!(keys_why(acquire_all(&["a", "b c"], 1.0, 5.0, 0.0)).contains("\"b c\""));
        assert!(keys_why(acquire_all(&["a", ""], 1.0, 5.0, 0.0)).contains("visible ASCII"));
        let e = acquire_all(&["a", "a"], 1.0, 5.0, 0.0).unwrap_err();
        assert!(e.to_string().starts_with("keys: "), "{e}");
        // The keys come first, then the durations.
        assert!(matches!(acquire_all(&["a", "b"], -1.0, 5.0, 0.0), Err(ParamError::Negative { .. })));
        assert!(matches!(acquire_all(&["a", "b"], 1.0, 5.0, 6.0), Err(ParamError::OutOfRange { .. })));
    }

    #[test]
    fn the_k_frame_must_fit_512_bytes_with_the_longest_id() {
        // "K " + 20-digit id + " " + 32-char owner + " 255 250" = 63 bytes, then " key" per key and LF.
        let head = 2 + 20 + 1 + 32 + 4 + 4;
        let fits = |lens: &[usize]| head + lens.iter().map(|l| l + 1).sum::<usize>() + 1;
        // Two keys of 250 bytes: 63 + 2 × 251 + 1 = 566 > 512.
        let long = ["x".repeat(250), "y".repeat(250)];
        assert!(fits(&[250, 250]) > MAX_FRAME);
        assert!(keys_why(acquire_all(&long, 255.0, 250.0, 0.0)).contains("512-byte"));
        // Exactly 512 with the worst-case id passes; one byte more does not.
        let second = MAX_FRAME - fits(&[250, 0]);
        assert_eq!(fits(&[250, second]), MAX_FRAME);
        let ok = ["x".repeat(250), "y".repeat(second)];
        assert!(acquire_all(&ok, 255.0, 250.0, 0.0).is_ok());
        let over = ["x".repeat(250), "y".repeat(second + 1)];
        assert!(keys_why(acquire_all(&over, 255.0, 250.0, 0.0)).contains("513 bytes"));
        // Shorter wait and lease leave room for longer keys (the frame as sent counts).
        assert!(acquire_all(&over, 9.0, 9.0, 0.0).is_ok());
        let p = acquire_all(&ok, 255.0, 250.0, 0.0).unwrap();
        let owner = Owner::new("0".repeat(32)).unwrap();
        let frame = ClientFrame::AcquireAll { id: RequestId(u64::MAX), owner, wait: 255, lease: 250, keys: p.keys };
        assert_eq!(frame.encoded_len(), MAX_FRAME);
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
