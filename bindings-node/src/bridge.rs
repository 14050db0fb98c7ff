//! Running client futures for JS: each call spawns the future on the
//! client's process-wide runtime (`ticketing_client::runtime()`, recreated
//! after a fork) and settles a promise through a napi deferred (a
//! thread-safe function that runs the conversion on the JS thread).
//!
//! Why not napi's own `async fn` support: it needs napi's `tokio_rt`
//! runtime, a second runtime beside the client's. With one runtime the
//! binding has no runtime of its own to start, stop or recreate.
//!
//! Event loop: a pending promise holds a referenced thread-safe function,
//! which keeps Node alive only while the operation runs (as a pending
//! `fetch` does). Nothing else of this package is visible to the event
//! loop, so once `close()` resolved and no call is pending, the process
//! can exit. Every deferred is settled exactly once, also when the task is
//! dropped without a result (`Settle`), so none can hold the loop forever.

use std::future::Future;

use napi::bindgen_prelude::{Object, ToNapiValue};
use napi::{Env, JsDeferred};

use crate::error::{napi_failed, Failure, JsResult};

type Resolver<V> = Box<dyn FnOnce(Env) -> napi::Result<V> + Send>;

/// The deferred of one call; rejects with `Failure::Lost` if dropped
/// unsettled (the runtime dropped the task).
struct Settle<V: ToNapiValue>(Option<JsDeferred<V, Resolver<V>>>);

impl<V: ToNapiValue> Drop for Settle<V> {
    fn drop(&mut self) {
        if let Some(d) = self.0.take() {
            reject(d, Failure::Lost);
        }
    }
}

/// Rejects with the JS error of `f`, built on the JS thread (so that it
/// carries its `code` property).
fn reject<V: ToNapiValue>(d: JsDeferred<V, Resolver<V>>, f: Failure) {
    d.resolve(Box::new(move |env| Err(f.into_rejection(env))));
}

/// Spawns `fut` on the client runtime and returns a promise for it: on
/// success it resolves to `convert(value)` (called on the JS thread), on
/// failure it rejects with the mapped error.
pub(crate) fn promise<'e, T, V, F, C>(env: &'e Env, fut: F, convert: C) -> JsResult<Object<'e>>
where
    F: Future<Output = Result<T, Failure>> + Send + 'static,
    T: Send + 'static,
    V: ToNapiValue + 'static,
    C: FnOnce(T) -> V + Send + 'static,
{
    let (deferred, promise) = env.create_deferred::<V, Resolver<V>>().map_err(napi_failed)?;
    let mut settle = Settle(Some(deferred));
    ticketing_client::runtime().spawn(async move {
        let out = fut.await;
        if let Some(d) = settle.0.take() {
            match out {
                Ok(value) => d.resolve(Box::new(move |_env| Ok(convert(value)))),
                Err(f) => reject(d, f),
            }
        }
    });
    Ok(promise)
}
