//! The protocol's numbers, in one place: field ranges, the frame limit, the
//! handshake limit and the defaults both sides share. The server's flags
//! default to these; the client core uses them as they are (field ranges:
//! docs/protocol.md §2; limits: docs/configuration.md, "Limits").

use std::time::Duration;

/// A whole frame, LF included, is at most this many bytes.
pub const MAX_FRAME: usize = 512;
/// Longest key, bytes.
pub const MAX_KEY_LEN: usize = 250;
/// Longest owner, bytes.
pub const MAX_OWNER_LEN: usize = 64;
/// Fewest keys in one multi-key acquire (`K`).
pub const MIN_MULTI_KEYS: usize = 2;
/// Most keys in one multi-key acquire (`K`).
pub const MAX_MULTI_KEYS: usize = 16;
/// Largest permit count `n` of a counted acquire (`S`); the smallest is 1.
pub const MAX_PERMITS: u16 = u16::MAX;
/// Largest legal `wait` (seconds).
pub const MAX_WAIT: u8 = 255;
/// Largest legal `lease` (seconds).
pub const MAX_LEASE: u8 = 250;
/// Smallest legal `lease` (seconds).
pub const MIN_LEASE: u8 = 1;
/// Tokens are strictly below this bound (fits a signed 64-bit column).
pub const TOKEN_LIMIT: u64 = 1 << 63;
/// The largest legal token.
pub const TOKEN_MAX: u64 = TOKEN_LIMIT - 1;
/// Both sides give up a handshake that has not completed within this
/// (the server's `--handshake-timeout` default).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// In-flight requests per connection (the server's `--max-pending-per-conn`
/// default; the client never has more in flight on one connection).
pub const MAX_PENDING_PER_CONN: usize = 1024;
