//! [`Ticket`]: a granted lock, its token, keys and deadline, and its release.

use crate::driver::Cmd;
use crate::{runtime, send_from_drop, Error, Result, Shared};
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use ticketing_proto::broker::Grant;
use ticketing_proto::lane::Purpose;
use tokio::sync::oneshot;

/// A granted lock. Release it with [`Ticket::release`]; dropping an
/// unreleased ticket releases it best-effort (result only logged).
pub struct Ticket {
    shared: Arc<Shared>,
    grant: Grant,
    keys: Vec<String>,
    pid: u32,
    /// The first definite result of `release`: `R`/`N`, or `F`.
    outcome: tokio::sync::Mutex<Option<Result<bool>>>,
    settled: AtomicBool,
}

impl fmt::Debug for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ticket")
            .field("key", &self.key())
            .field("keys", &self.keys)
            .field("token", &self.token())
            .field("slot", &self.slot())
            .field("remaining", &self.remaining())
            .finish()
    }
}

impl Ticket {
    pub(crate) fn new(shared: Arc<Shared>, grant: Grant) -> Ticket {
        let keys = grant.keys.iter().map(|k| k.as_str().to_owned()).collect();
        Ticket {
            shared,
            grant,
            keys,
            pid: std::process::id(),
            outcome: tokio::sync::Mutex::new(None),
            settled: AtomicBool::new(false),
        }
    }

    /// The fencing token: strictly increasing over all grants of the domain.
    /// Fence every protected write with it, in the same transaction.
    pub fn token(&self) -> u64 {
        self.grant.token.get()
    }

    /// The key (the first key of a multi-key ticket).
    pub fn key(&self) -> &str {
        self.grant.key.as_str()
    }

    /// Every key the ticket holds, in the order given: one for
    /// [`TicketBroker::acquire`](crate::TicketBroker::acquire) and
    /// [`TicketBroker::acquire_shared`](crate::TicketBroker::acquire_shared), 2–16
    /// for [`TicketBroker::acquire_all`](crate::TicketBroker::acquire_all)
    /// (all with the one [`Ticket::token`]).
    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    /// The slot of a counted grant ([`TicketBroker::acquire_shared`](crate::TicketBroker::acquire_shared)): a
    /// number below its `n` that no other current holder of the key has, so a
    /// database can fence per (key, slot). `None` for an exclusive ticket.
    pub fn slot(&self) -> Option<u16> {
        self.grant.slot
    }

    /// Conservative time left (docs/client.md, Acquire step 4), 0 once expired.
    pub fn remaining(&self) -> Duration {
        self.grant.deadline.saturating_duration_since(crate::driver::now())
    }

    /// The conservative deadline: `t_send + waited_ms + lease × 0.999`.
    pub fn deadline(&self) -> Instant {
        self.grant.deadline
    }

    /// True once the conservative deadline has passed: work still running is
    /// no longer protected by the lock, only by the database fence.
    pub fn is_expired(&self) -> bool {
        self.remaining().is_zero()
    }

    /// A future that completes at the conservative deadline. It runs on any
    /// executor (the timer lives on the client's runtime).
    pub fn expired(&self) -> impl Future<Output = ()> + Send + 'static {
        let deadline = self.grant.deadline;
        let (tx, rx) = oneshot::channel::<()>();
        let mut tx = tx;
        runtime().spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline.into()) => { let _ = tx.send(()); }
                _ = tx.closed() => {}
            }
        });
        async move {
            let _ = rx.await;
        }
    }

    /// Releases exactly this grant (docs/client.md, Release lane): `Ok(true)` on `R`,
    /// `Ok(false)` on `N` (expired, or released by an earlier attempt),
    /// [`Error::ReleaseUnconfirmed`] without a final answer within 5 s (or a
    /// full lane). Once a definite answer came, later calls return it again.
    /// A multi-key ticket sends one `R` per key: `Ok(true)` iff every key
    /// answered `R`, `Ok(false)` if any answered `N`, else the error.
    /// [`Error::Forbidden`] when the server answered `F` (this client's
    /// principal may no longer use the key): final, never retried; the lock
    /// returns at lease end.
    /// In a forked child the ticket belongs to the parent: [`Error::Closed`].
    pub async fn release(&self) -> Result<bool> {
        let mut outcome = self.outcome.lock().await;
        if let Some(done) = &*outcome {
            return done.clone();
        }
        if self.pid != std::process::id() {
            return Err(Error::Closed);
        }
        let (reply, rx) = oneshot::channel();
        self.shared.send(Cmd::Release { grant: self.grant.clone(), reply }).await?;
        match rx.await {
            Ok(Ok(released)) => {
                *outcome = Some(Ok(released));
                self.settled.store(true, Ordering::SeqCst);
                Ok(released)
            }
            Ok(Err(f)) => {
                let e = Error::from(f);
                if matches!(e, Error::Forbidden { .. }) {
                    // Definite: a drop or a second call must not send it again.
                    *outcome = Some(Err(e.clone()));
                    self.settled.store(true, Ordering::SeqCst);
                }
                Err(e)
            }
            Err(_) => Err(Error::Closed),
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.settled.load(Ordering::SeqCst) || self.pid != std::process::id() {
            return;
        }
        if let Some(tx) = self.shared.sender_here() {
            send_from_drop(tx, Cmd::Abandon { grant: self.grant.clone(), purpose: Purpose::BestEffort });
        }
    }
}
