//! Running client futures from Python: blocking (sync API) or completing a
//! callback (asyncio API). Both spawn the future on the client's
//! process-wide runtime (`ticketing_client::runtime()`, recreated after a
//! fork), and both cancel by aborting the task, which drops the client
//! future: the cancel semantics of docs/client.md, Acquire step 7 live in the client.
//!
//! A cancel returns to Python only after the client future has been
//! dropped (bounded wait), so once `KeyboardInterrupt` / `CancelledError`
//! is seen, the client has already taken the cancel: a later call on the
//! same broker is ordered after it.

use std::future::Future;
use std::pin::Pin;
use std::sync::{mpsc, RwLock};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use tokio::task::AbortHandle;

use crate::error::task_lost;

/// How long the blocking wait sleeps (GIL released) between two checks for
/// pending signals (Ctrl-C).
const SIGNAL_SLICE: Duration = Duration::from_millis(50);

/// The most a cancel waits for the runtime to drop the aborted future.
const DROP_WAIT: Duration = Duration::from_secs(2);

/// Open until the interpreter starts to exit. Runtime threads call into
/// Python only while holding a read guard of an open gate; the `atexit`
/// hook closes it, waiting (GIL released) for every such call to finish.
/// Without it, a runtime thread that re-acquires the GIL while Python
/// finalizes is killed by CPython (`pthread_exit` on a tokio worker), which
/// aborts or crashes the process at exit.
static GATE: RwLock<bool> = RwLock::new(true);

/// Runs `f` attached to the interpreter from a runtime thread, unless the
/// interpreter is exiting (then `None`, and nothing touches Python).
fn attach_unless_exiting<R>(f: impl for<'py> FnOnce(Python<'py>) -> R) -> Option<R> {
    let open = GATE.read().unwrap_or_else(|poisoned| poisoned.into_inner());
    if !*open {
        return None;
    }
    Python::try_attach(f)
}

/// `atexit` hook (registered at module init): no runtime thread calls into
/// Python after this returns. Pending asyncio callbacks are dropped.
#[pyfunction]
pub(crate) fn _close_gate(py: Python<'_>) {
    py.detach(|| {
        *GATE.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = false;
    });
}

/// The spawned state: the client future and what to notify afterwards.
/// Fields drop in declaration order, so on abort the future is dropped
/// (the client sees the cancel) before `notify` goes.
struct Slot<F: Future, N> {
    fut: Pin<Box<F>>,
    notify: N,
}

/// Runs `fut` on the client runtime and blocks until it finishes, with the
/// GIL released. Every `SIGNAL_SLICE` it re-attaches and runs Python's
/// signal handlers: if one raises (`KeyboardInterrupt`), the task is aborted
/// (the future dropped = cancelled) and that exception propagates.
pub(crate) fn block_on<F>(py: Python<'_>, fut: F) -> PyResult<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let (tx, rx) = mpsc::sync_channel(1);
    let task = ticketing_client::runtime().spawn(async move {
        let mut slot = Slot { fut: Box::pin(fut), notify: tx };
        let out = slot.fut.as_mut().await;
        // A closed receiver (the caller was interrupted) drops the output
        // here, e.g. a late Ticket, whose Drop releases it best-effort.
        let _ = slot.notify.send(out);
    });
    let abort = task.abort_handle();
    drop(task);
    let mut rx = rx;
    loop {
        // The receiver is moved through the closure: it is Send, not Sync.
        let (back, got) = py.detach(move || {
            let got = rx.recv_timeout(SIGNAL_SLICE);
            (rx, got)
        });
        rx = back;
        match got {
            Ok(out) => return Ok(out),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Err(interrupt) = py.check_signals() {
                    abort.abort();
                    // The sender goes after the future: disconnected = dropped.
                    py.detach(move || {
                        let until = Instant::now() + DROP_WAIT;
                        while let Ok(late) = rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                            drop(late); // finished just before the abort: dropped (a Ticket releases)
                        }
                    });
                    return Err(interrupt);
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return Err(task_lost()),
        }
    }
}

/// A client operation running for an asyncio caller. `cancel()` aborts it
/// (drops the client future: cancel semantics); after completion it does
/// nothing.
#[pyclass(frozen, module = "ticketing._native")]
pub struct Pending {
    abort: AbortHandle,
}

#[pymethods]
impl Pending {
    /// Cancels the operation if it is still running: the client future is
    /// dropped (the cancel of docs/client.md, Acquire step 7 for an acquire), then the
    /// callback is called with ``(False, None)``. After completion: no-op.
    fn cancel(&self) {
        self.abort.abort();
    }

    /// True once the operation finished (its callback ran) or was cancelled.
    fn done(&self) -> bool {
        self.abort.is_finished()
    }
}

/// The asyncio callback, called exactly once: with the result, or with
/// `(False, None)` when the task is dropped without one (cancelled).
struct Done(Option<Py<PyAny>>);

impl Done {
    fn call(&mut self, py: Python<'_>, ok: bool, value: Py<PyAny>) {
        if let Some(cb) = self.0.take() {
            if let Err(err) = cb.call1(py, (ok, value)) {
                err.write_unraisable(py, None);
            }
        }
    }
}

impl Drop for Done {
    fn drop(&mut self) {
        if self.0.is_some() {
            // Dropped unfinished (aborted): runs after the future is gone.
            let _ = attach_unless_exiting(|py| self.call(py, false, py.None()));
        }
    }
}

/// Spawns `fut` on the client runtime and returns at once. When it
/// finishes, `done(ok, value)` is called on a runtime thread with the GIL
/// held: `ok=True` and the converted value, or `ok=False` and the exception
/// instance; when it is cancelled, `done(False, None)` after the client
/// future was dropped. The callback must be thread-safe (the asyncio layer
/// passes one that uses `loop.call_soon_threadsafe`); an exception it
/// raises is reported as unraisable. Once the interpreter has started to
/// exit (`atexit`), no callback is made.
pub(crate) fn start<F, T, C>(fut: F, done: Py<PyAny>, convert: C) -> Pending
where
    F: Future<Output = Result<T, ticketing_client::Error>> + Send + 'static,
    T: Send + 'static,
    C: for<'py> FnOnce(Python<'py>, T) -> PyResult<Py<PyAny>> + Send + 'static,
{
    let task = ticketing_client::runtime().spawn(async move {
        let mut slot = Slot { fut: Box::pin(fut), notify: Done(Some(done)) };
        let out = slot.fut.as_mut().await;
        let _ = attach_unless_exiting(move |py| {
            let (ok, value) = match out.map_err(crate::error::to_pyerr).and_then(|v| convert(py, v)) {
                Ok(value) => (true, value),
                Err(err) => (false, err.into_value(py).into_any()),
            };
            slot.notify.call(py, ok, value);
        });
    });
    Pending { abort: task.abort_handle() }
}
