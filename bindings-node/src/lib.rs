//! Node binding of the Ticketing client: the private native module under
//! the npm package `ticketing` (napi-rs 3). The hand-written `index.js`
//! wraps it with the public API (`TicketBroker`, `Ticket`, the error
//! classes, `AbortSignal`, `withLock`, `Symbol.asyncDispose`).
//!
//! Every method converts its arguments, calls `ticketing_client` and maps
//! the error; no rule of docs/client.md lives here. Client futures run on
//! the client's process-wide runtime (`ticketing_client::runtime()`), and
//! settle a JS promise through a napi deferred (see `bridge`).
#![deny(missing_docs)]

mod bridge;
mod broker;
mod error;
mod ticket;

use napi_derive::napi;

/// The version of the native module (the crate version).
#[napi]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}
