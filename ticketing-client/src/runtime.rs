//! The one process-wide runtime all brokers' drivers run on (docs/client.md, Process life).

use std::sync::Mutex;
use tokio::runtime::{Handle, Runtime};

static RUNTIME: Mutex<Option<(u32, Runtime)>> = Mutex::new(None);
static IO_RUNTIME: Mutex<Option<(u32, Runtime)>> = Mutex::new(None);

/// The process-wide tokio runtime the bindings run client futures on, as a
/// [`Handle`]: created lazily on first use, and created afresh in a child
/// process after `fork` (checked by pid). The parent's runtime is never
/// touched in the child: its threads do not exist there, so it is leaked,
/// never shut down.
///
/// Client futures do not need to run on this runtime (they talk to the
/// driver over channels); bindings use it to `block_on` or `spawn` them.
pub fn runtime() -> Handle {
    this_process(&RUNTIME, 2, "ticketing-client")
}

/// The runtime every broker's driver and its connection tasks run on: ONE
/// thread, so a request's hand-overs between the driver and a connection
/// task stay on it instead of waking a second thread each time (the cost
/// that dominated the client, docs/benchmarks.md "Optimizations"). Separate
/// from [`runtime`], so a binding's task that blocks its thread for a
/// moment (Python's asyncio callback waits for the GIL) never stalls the
/// sockets. Created afresh after `fork`, like [`runtime`].
pub(crate) fn io_runtime() -> Handle {
    this_process(&IO_RUNTIME, 1, "ticketing-io")
}

fn this_process(slot: &Mutex<Option<(u32, Runtime)>>, workers: usize, name: &str) -> Handle {
    let pid = std::process::id();
    let mut guard = slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((owner, rt)) = guard.as_ref() {
        if *owner == pid {
            return rt.handle().clone();
        }
    }
    if let Some(parents) = guard.take() {
        // Inherited through fork: dropping it would join threads that do not exist here.
        std::mem::forget(parents);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name(name)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("ticketing-client: cannot start its tokio runtime: {e}"));
    let handle = rt.handle().clone();
    *guard = Some((pid, rt));
    handle
}

#[cfg(test)]
mod tests {
    #[test]
    fn same_runtime_within_a_process() {
        let a = super::runtime();
        let b = super::runtime();
        assert_eq!(a.id(), b.id());
        assert_eq!(a.block_on(async { 1 + 1 }), 2);
        let io = super::io_runtime();
        assert_eq!(io.id(), super::io_runtime().id());
        assert_ne!(io.id(), a.id(), "the drivers run apart from the bindings' tasks");
        assert_eq!(a.block_on(io.spawn(async { 2 + 2 })).unwrap(), 4);
    }
}
