//! `NativeBroker` (wrapping `ticketing_client::TicketBroker`) and
//! `Canceller` (the native end of an acquire's `AbortSignal`).

use std::future::Future;

use napi::bindgen_prelude::Object;
use napi::Env;
use napi_derive::napi;
use ticketing_client::{Ticket, TicketBroker, Tls};
use tokio::sync::watch;

use crate::bridge;
use crate::error::{client, invalid, Code, Failure};
use crate::ticket::NativeTicket;

/// The native end of an `AbortSignal`: `cancel()` drops the client future
/// of the acquire it was passed to (the client's cancel semantics), after
/// which that acquire rejects with code `ABORTED`. Cancelling after the
/// acquire settled does nothing.
#[napi]
pub struct Canceller {
    tx: watch::Sender<bool>,
}

impl Default for Canceller {
    fn default() -> Self {
        Self::new()
    }
}

#[napi]
impl Canceller {
    /// A canceller not yet cancelled.
    #[napi(constructor)]
    pub fn new() -> Self {
        Canceller { tx: watch::channel(false).0 }
    }

    /// Cancels the acquire this canceller was passed to.
    #[napi]
    pub fn cancel(&self) {
        self.tx.send_replace(true);
    }
}

/// Resolves once `rx` reads true; never if its sender is gone.
async fn cancelled(mut rx: watch::Receiver<bool>) {
    if rx.wait_for(|c| *c).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// A connection pool and router (wrapped by `TicketBroker` in index.js).
#[napi]
pub struct NativeBroker {
    inner: TicketBroker,
}

#[napi]
impl NativeBroker {
    /// A broker for `addrs` (`host:port`), an optional token, a TLS mode
    /// (`off`, `system-roots`, a CA file path, `insecure-skip-verify`) and an
    /// optional client certificate and key (PEM file paths).
    /// Starts connecting in the background; never blocks.
    #[napi(constructor)]
    pub fn new(
        addrs: Vec<String>,
        token: Option<String>,
        tls: Option<String>,
        tls_client_cert: Option<String>,
        tls_client_key: Option<String>,
    ) -> napi::Result<Self, Code> {
        let tls: Tls = tls.as_deref().unwrap_or("off").parse().map_err(client)?;
        let builder = TicketBroker::builder(addrs).tls(tls).with_optional(token, tls_client_cert, tls_client_key);
        Ok(NativeBroker { inner: builder.build().map_err(client)? })
    }

    /// A broker for `addrs` (each may hold several, comma-separated);
    /// resolves once the first connection attempts have settled (ready or
    /// failed, at most 5 s).
    #[napi(ts_return_type = "Promise<NativeBroker>")]
    pub fn connect(env: &Env, addrs: Vec<String>) -> napi::Result<Object<'_>, Code> {
        bridge::promise(env, async move { Ok(TicketBroker::builder(addrs).connect().await?) }, |inner| NativeBroker {
            inner,
        })
    }

    /// Resolves to true once a request can be routed, false after
    /// `seconds` (or when closed).
    #[napi(ts_return_type = "Promise<boolean>")]
    pub fn wait_ready<'e>(&self, env: &'e Env, seconds: f64) -> napi::Result<Object<'e>, Code> {
        let inner = self.inner.clone();
        bridge::promise(env, async move { Ok(inner.wait_ready_secs(seconds).await?) }, |ready| ready)
    }

    /// Acquires `key` (seconds as numbers; the client normalizes and
    /// validates them): a ticket, or null when not granted within `wait`.
    /// With a `canceller`, `cancel()` drops the client future and the
    /// promise rejects with code `ABORTED` (a result that came first wins).
    #[napi(ts_return_type = "Promise<NativeTicket | null>")]
    pub fn acquire<'e>(
        &self,
        env: &'e Env,
        key: String,
        wait: f64,
        lease: f64,
        budget: f64,
        canceller: Option<&Canceller>,
    ) -> napi::Result<Object<'e>, Code> {
        let inner = self.inner.clone();
        granting(env, canceller, async move { inner.acquire_secs(&key, wait, lease, budget).await })
    }

    /// A counted grant of `key` with limit `n` (an integer; the client
    /// checks 1–65535): a ticket with a `slot`, or null when not granted
    /// within `wait`. Cancelled like `acquire`.
    #[napi(ts_return_type = "Promise<NativeTicket | null>")]
    #[allow(clippy::too_many_arguments)]
    pub fn acquire_shared<'e>(
        &self,
        env: &'e Env,
        key: String,
        n: f64,
        wait: f64,
        lease: f64,
        budget: f64,
        canceller: Option<&Canceller>,
    ) -> napi::Result<Object<'e>, Code> {
        let n = integer("n", n)?;
        let inner = self.inner.clone();
        granting(env, canceller, async move { inner.acquire_shared_secs(&key, n, wait, lease, budget).await })
    }

    /// All of `keys` exclusively and atomically (the client checks 2–16
    /// distinct keys): one ticket with one token, or null when not granted
    /// within `wait`. Cancelled like `acquire`.
    #[napi(ts_return_type = "Promise<NativeTicket | null>")]
    pub fn acquire_all<'e>(
        &self,
        env: &'e Env,
        keys: Vec<String>,
        wait: f64,
        lease: f64,
        budget: f64,
        canceller: Option<&Canceller>,
    ) -> napi::Result<Object<'e>, Code> {
        let inner = self.inner.clone();
        granting(env, canceller, async move { inner.acquire_all_secs(&keys, wait, lease, budget).await })
    }

    /// The shared (read) side of a read/write lock on `key` (the client's
    /// `read_lock`). Cancelled like `acquire`.
    #[napi(ts_return_type = "Promise<NativeTicket | null>")]
    pub fn read_lock<'e>(
        &self,
        env: &'e Env,
        key: String,
        wait: f64,
        lease: f64,
        budget: f64,
        canceller: Option<&Canceller>,
    ) -> napi::Result<Object<'e>, Code> {
        let inner = self.inner.clone();
        granting(env, canceller, async move { inner.read_lock_secs(&key, wait, lease, budget).await })
    }

    /// The exclusive (write) side of a read/write lock on `key` (the
    /// client's `write_lock`). Cancelled like `acquire`.
    #[napi(ts_return_type = "Promise<NativeTicket | null>")]
    pub fn write_lock<'e>(
        &self,
        env: &'e Env,
        key: String,
        wait: f64,
        lease: f64,
        budget: f64,
        canceller: Option<&Canceller>,
    ) -> napi::Result<Object<'e>, Code> {
        let inner = self.inner.clone();
        granting(env, canceller, async move { inner.write_lock_secs(&key, wait, lease, budget).await })
    }

    /// Closes the broker: live tickets are released best-effort, pending
    /// acquires fail with code `CLOSED`, the connections close. Idempotent.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn close<'e>(&self, env: &'e Env) -> napi::Result<Object<'e>, Code> {
        let inner = self.inner.clone();
        bridge::promise(
            env,
            async move {
                inner.close().await;
                Ok(())
            },
            |()| (),
        )
    }
}

/// The promise of one acquire-like client future: a `NativeTicket` or null.
/// With a `canceller`, its `cancel()` drops `acquire` (the client's cancel)
/// and the promise rejects with code `ABORTED`; a result that came first wins.
fn granting<'e, F>(env: &'e Env, canceller: Option<&Canceller>, acquire: F) -> napi::Result<Object<'e>, Code>
where
    F: Future<Output = ticketing_client::Result<Option<Ticket>>> + Send + 'static,
{
    let rx = canceller.map(|c| c.tx.subscribe());
    let fut = async move {
        match rx {
            None => acquire.await.map_err(Failure::from),
            Some(rx) => tokio::select! {
                biased;
                got = acquire => got.map_err(Failure::from),
                () = cancelled(rx) => Err(Failure::Aborted),
            },
        }
    };
    bridge::promise(env, fut, |got| got.map(NativeTicket::new))
}

/// A JS number that must be an integer (a count): a fraction, NaN, an
/// infinity or a number beyond 2^53 (not exactly representable) is a
/// RangeError. Its range is the client's to check.
fn integer(name: &str, value: f64) -> napi::Result<i64, Code> {
    const SAFE: f64 = 9_007_199_254_740_991.0; // Number.MAX_SAFE_INTEGER
    if value.fract() != 0.0 || !value.is_finite() || value.abs() > SAFE {
        return Err(invalid(format!("{name} must be an integer, got {value:?}")));
    }
    // Exact: an integer of magnitude ≤ 2^53 converts to i64 without loss.
    Ok(value as i64)
}
