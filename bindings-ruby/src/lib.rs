//! Ruby binding of the Ticketing client: the native extension
//! `ticketing/ticketing`, loaded by `lib/ticketing.rb` (the idiomatic layer:
//! `TicketBroker.new` with keywords, `with_lock`, docs).
//!
//! Every method converts types, calls `ticketing_client` and maps its
//! errors; no rule of the client behaviour (docs/client.md) lives here.
//! Blocking calls release the GVL with an unblocking function
//! ([`gvl::block_on`]), so `Thread#raise`, `Timeout.timeout` and Ctrl-C
//! cancel them with the client's cancel semantics (the future is dropped).
//!
//! `unsafe` is confined to `gvl.rs` (the two C callbacks and the calls to
//! `rb_thread_call_without_gvl2` / `rb_thread_check_ints`, which magnus does
//! not wrap); every other module forbids it.
#![deny(unsafe_op_in_unsafe_fn)]

mod broker;
mod error;
mod gvl;
mod ticket;

use magnus::{function, method, prelude::*, Error, Ruby};

/// Defines `Ticketing::TicketBroker` and `Ticketing::Ticket` (native parts)
/// and `Ticketing::NATIVE_VERSION`. The exception classes are defined once,
/// in Ruby (`ticketing/errors`), which is required first.
#[magnus::init(name = "ticketing")]
fn init(ruby: &Ruby) -> Result<(), Error> {
    ruby.require("ticketing/errors")?;
    let module = ruby.define_module("Ticketing")?;
    module.const_set("NATIVE_VERSION", env!("CARGO_PKG_VERSION"))?;

    let broker = module.define_class("TicketBroker", ruby.class_object())?;
    broker.undef_default_alloc_func();
    broker.define_singleton_method("_build", function!(broker::Broker::build, 5))?;
    broker.define_singleton_method("_connect", function!(broker::Broker::connect, 1))?;
    broker.define_method("_addrs", method!(broker::Broker::addrs, 0))?;
    broker.define_method("_wait_ready", method!(broker::Broker::wait_ready, 1))?;
    broker.define_method("_acquire", method!(broker::Broker::acquire, 4))?;
    broker.define_method("_acquire_shared", method!(broker::Broker::acquire_shared, 5))?;
    broker.define_method("_acquire_all", method!(broker::Broker::acquire_all, 4))?;
    broker.define_method("_read_lock", method!(broker::Broker::read_lock, 4))?;
    broker.define_method("_write_lock", method!(broker::Broker::write_lock, 4))?;
    broker.define_method("_close", method!(broker::Broker::close, 0))?;

    let ticket = module.define_class("Ticket", ruby.class_object())?;
    ticket.undef_default_alloc_func();
    ticket.define_method("token", method!(ticket::Ticket::token, 0))?;
    ticket.define_method("key", method!(ticket::Ticket::key, 0))?;
    ticket.define_method("keys", method!(ticket::Ticket::keys, 0))?;
    ticket.define_method("slot", method!(ticket::Ticket::slot, 0))?;
    ticket.define_method("remaining", method!(ticket::Ticket::remaining, 0))?;
    ticket.define_method("expired?", method!(ticket::Ticket::is_expired, 0))?;
    ticket.define_method("release", method!(ticket::Ticket::release, 0))?;
    Ok(())
}
