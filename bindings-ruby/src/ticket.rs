//! `Ticketing::Ticket`: a granted lock, wrapping `ticketing_client::Ticket`.
#![forbid(unsafe_code)]

use std::sync::Arc;

use magnus::{prelude::*, Error, RArray, Ruby};

use crate::error::to_rb;
use crate::gvl;

/// A granted lock. Freed by the GC without `release`, the client's `Drop`
/// enqueues a best-effort release (no Ruby call happens while freeing, so
/// it is freed immediately).
#[magnus::wrap(class = "Ticketing::Ticket", free_immediately, size)]
pub(crate) struct Ticket {
    inner: Arc<ticketing_client::Ticket>,
}

impl Ticket {
    pub(crate) fn new(inner: ticketing_client::Ticket) -> Self {
        Ticket { inner: Arc::new(inner) }
    }

    /// The fencing token (1 ≤ token < 2**63).
    pub(crate) fn token(&self) -> u64 {
        self.inner.token()
    }

    /// The key.
    pub(crate) fn key(&self) -> String {
        self.inner.key().to_owned()
    }

    /// Every key this ticket holds, in the order asked for (one, or all of
    /// a multi-key grant): a frozen Array of frozen Strings.
    pub(crate) fn keys(ruby: &Ruby, rb_self: &Self) -> RArray {
        let list = ruby.ary_from_iter(rb_self.inner.keys().iter().map(|k| {
            let s = ruby.str_new(k);
            s.freeze();
            s
        }));
        list.freeze();
        list
    }

    /// The permit index of a counted grant, nil for an exclusive one.
    pub(crate) fn slot(&self) -> Option<u16> {
        self.inner.slot()
    }

    /// Seconds left until the conservative deadline, never negative.
    pub(crate) fn remaining(&self) -> f64 {
        self.inner.remaining().as_secs_f64()
    }

    /// True once the conservative deadline has passed.
    pub(crate) fn is_expired(&self) -> bool {
        self.inner.is_expired()
    }

    /// Releases exactly this grant: true (released) or false (not the
    /// holder any more); `ReleaseUnconfirmedError` without a final answer
    /// within 5 s. Blocks with the GVL released.
    pub(crate) fn release(ruby: &Ruby, rb_self: &Self) -> Result<bool, Error> {
        let inner = Arc::clone(&rb_self.inner);
        gvl::block_on(ruby, async move { inner.release().await })?.map_err(|e| to_rb(ruby, e))
    }
}
