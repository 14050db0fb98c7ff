//! [`TicketBroker`]'s counted and multi-key acquires, and the read/write locks built on them
//! (docs/protocol.md, "Counted and multi-key grants").

use crate::driver::AcquireReq;
use crate::{Result, Ticket, TicketBroker};
use std::time::Duration;
use ticketing_proto::params;

impl TicketBroker {
    /// A counted acquire of `key`
    /// (docs/protocol.md, "Counted and multi-key grants"): granted while
    /// fewer than `n` (1–65535) counted holders hold `key` and no exclusive
    /// holder does; a semaphore of `n` permits. The ticket's [`Ticket::slot`] is a number below `n` that no
    /// other current holder of `key` has. Everything else as
    /// [`TicketBroker::acquire`]; `n` 0 is [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    pub async fn acquire_shared(
        &self,
        key: &str,
        n: u16,
        wait: Duration,
        lease: Duration,
        budget: Duration,
    ) -> Result<Option<Ticket>> {
        self.acquire_shared_secs(key, i64::from(n), wait.as_secs_f64(), lease.as_secs_f64(), budget.as_secs_f64()).await
    }

    /// [`TicketBroker::acquire_shared`] with durations as `f64` seconds and
    /// `n` as any integer (for the bindings): `n` outside 1–65535 and bad
    /// durations are [`Error::InvalidArgument`](crate::Error::InvalidArgument), nothing sent.
    pub async fn acquire_shared_secs(
        &self,
        key: &str,
        n: i64,
        wait: f64,
        lease: f64,
        budget: f64,
    ) -> Result<Option<Ticket>> {
        let params = params::acquire_shared(key, n, wait, lease, budget)?;
        self.start(AcquireReq::Shared(params)).await
    }

    /// Acquires every key of `keys` at once, exclusively, with ONE token
    /// (docs/protocol.md, "Counted and multi-key grants"): 2–16 distinct
    /// keys, in any order (no deadlock whatever the order). One [`Ticket`]; [`Ticket::release`]
    /// frees every key. Too few or too many keys, a key twice, a bad key, or
    /// keys too long together for one 512-byte request are
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument), nothing sent. An Indeterminate end: the
    /// client asks about and releases every key in the background, within
    /// 5 s (a key it cannot confirm in that time stays held until its lease
    /// ends). Everything else as
    /// [`TicketBroker::acquire`].
    pub async fn acquire_all(
        &self,
        keys: &[&str],
        wait: Duration,
        lease: Duration,
        budget: Duration,
    ) -> Result<Option<Ticket>> {
        self.acquire_all_secs(keys, wait.as_secs_f64(), lease.as_secs_f64(), budget.as_secs_f64()).await
    }

    /// [`TicketBroker::acquire_all`] with durations as `f64` seconds (for the bindings).
    pub async fn acquire_all_secs<S: AsRef<str>>(
        &self,
        keys: &[S],
        wait: f64,
        lease: f64,
        budget: f64,
    ) -> Result<Option<Ticket>> {
        let params = params::acquire_all(keys, wait, lease, budget)?;
        self.start(AcquireReq::All(params)).await
    }

    /// The shared (read) side of a read/write lock on `key`:
    /// [`TicketBroker::acquire_shared`] with `n` = 65535. Readers hold it
    /// together; a writer ([`TicketBroker::write_lock`]) waits for them, and
    /// readers that come after a waiting writer wait for it (no overtaking).
    pub async fn read_lock(
        &self,
        key: &str,
        wait: Duration,
        lease: Duration,
        budget: Duration,
    ) -> Result<Option<Ticket>> {
        self.acquire_shared(key, ticketing_proto::limits::MAX_PERMITS, wait, lease, budget).await
    }

    /// [`TicketBroker::read_lock`] with durations as `f64` seconds (for the bindings).
    pub async fn read_lock_secs(&self, key: &str, wait: f64, lease: f64, budget: f64) -> Result<Option<Ticket>> {
        self.acquire_shared_secs(key, i64::from(ticketing_proto::limits::MAX_PERMITS), wait, lease, budget).await
    }

    /// The exclusive (write) side of a read/write lock on `key`: exactly
    /// [`TicketBroker::acquire`].
    pub async fn write_lock(
        &self,
        key: &str,
        wait: Duration,
        lease: Duration,
        budget: Duration,
    ) -> Result<Option<Ticket>> {
        self.acquire(key, wait, lease, budget).await
    }

    /// [`TicketBroker::write_lock`] with durations as `f64` seconds (for the bindings).
    pub async fn write_lock_secs(&self, key: &str, wait: f64, lease: f64, budget: f64) -> Result<Option<Ticket>> {
        self.acquire_secs(key, wait, lease, budget).await
    }
}
