//! The one clock the server's tasks read: tokio's, so a runtime with paused
//! time (tests, a simulation) moves every timer, deadline and lease of the
//! node at once. The pure parts (the leader, the domain clock) read no
//! clock: they take `now` as an input from their drivers, which read it here.

use std::time::Instant;

/// Now, on tokio's clock (the real monotonic clock unless the runtime's
/// time is paused).
pub fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}
