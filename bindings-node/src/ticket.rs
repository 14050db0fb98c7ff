//! `NativeTicket`: a granted lock, wrapping `ticketing_client::Ticket`.

use std::sync::Arc;

use napi::bindgen_prelude::{BigInt, Object};
use napi::Env;
use napi_derive::napi;

use crate::bridge;

/// A granted lock (wrapped by `Ticket` in index.js). Garbage-collecting it
/// unreleased drops the client ticket, whose `Drop` releases it best-effort.
#[napi]
pub struct NativeTicket {
    inner: Arc<ticketing_client::Ticket>,
}

impl NativeTicket {
    pub(crate) fn new(inner: ticketing_client::Ticket) -> Self {
        NativeTicket { inner: Arc::new(inner) }
    }
}

#[napi]
impl NativeTicket {
    /// The fencing token (1 ≤ token < 2^63) as a bigint.
    #[napi(getter)]
    pub fn token(&self) -> BigInt {
        BigInt::from(self.inner.token())
    }

    /// The key this ticket holds (the first of `keys`).
    #[napi(getter)]
    pub fn key(&self) -> String {
        self.inner.key().to_string()
    }

    /// Every key this ticket holds: one, or all keys of an `acquireAll`
    /// in the order given.
    #[napi(getter)]
    pub fn keys(&self) -> Vec<String> {
        self.inner.keys().to_vec()
    }

    /// The slot of a counted grant (0 ≤ slot < n), null for an exclusive one.
    #[napi(getter)]
    pub fn slot(&self) -> Option<u32> {
        self.inner.slot().map(u32::from)
    }

    /// Seconds left until the conservative deadline (never negative).
    #[napi]
    pub fn remaining(&self) -> f64 {
        self.inner.remaining().as_secs_f64()
    }

    /// Releases exactly this grant, every key of it: true when released,
    /// false when it no longer held the lock (any key); rejects with code
    /// `RELEASE_UNCONFIRMED` without a final answer within 5 s.
    #[napi(ts_return_type = "Promise<boolean>")]
    pub fn release<'e>(&self, env: &'e Env) -> napi::Result<Object<'e>, crate::error::Code> {
        let inner = Arc::clone(&self.inner);
        bridge::promise(env, async move { Ok(inner.release().await?) }, |released| released)
    }
}
