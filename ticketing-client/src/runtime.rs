//! The one process-wide runtime all brokers' drivers run on (docs/client.md, Process life).

use std::sync::Mutex;
use tokio::runtime::{Handle, Runtime};

static RUNTIME: Mutex<Option<(u32, Runtime)>> = Mutex::new(None);

/// The process-wide tokio runtime every broker's driver runs on, as a
/// [`Handle`]: created lazily on first use, and created afresh in a child
/// process after `fork` (checked by pid). The parent's runtime is never
/// touched in the child: its threads do not exist there, so it is leaked,
/// never shut down.
///
/// Client futures do not need to run on this runtime (they talk to the
/// driver over channels); bindings use it to `block_on` or `spawn` them.
pub fn runtime() -> Handle {
    let pid = std::process::id();
    let mut guard = RUNTIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
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
        .worker_threads(2)
        .thread_name("ticketing-client")
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
    }
}
