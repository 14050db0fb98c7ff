//! Running a client future from a Ruby thread: the GVL is released while it
//! waits, with an unblocking function, so other Ruby threads run and
//! `Thread#raise`, `Timeout.timeout`, `Thread#kill` and Ctrl-C interrupt the
//! wait. An interrupt aborts the task on the client's process-wide runtime
//! (`ticketing_client::runtime()`, recreated after a fork), which drops the
//! client future: the cancel semantics (docs/client.md) live in the client.
//!
//! The loop, in the way the `pg` gem waits on libpq:
//! 1. `rb_thread_call_without_gvl2(wait, ubf)`: `wait` blocks on a condvar
//!    until the task has a result, or `ubf` (called by Ruby when it wants
//!    to interrupt this thread) flags an interrupt. The `2` variant never
//!    raises by itself, so no Ruby exception unwinds through Rust frames.
//! 2. A result: return it (an interrupt that came at the same time is
//!    raised by Ruby at its next check).
//! 3. Otherwise run Ruby's pending interrupts (`rb_thread_check_ints`)
//!    inside `protect`: trap handlers and `Thread#wakeup` just run and the
//!    loop waits again; an exception (or kill) aborts the task, waits for
//!    the runtime to drop the future (bounded), and is then re-raised. So
//!    once a Ruby `rescue`/`ensure` sees the interrupt, the client has
//!    already taken the cancel, and a later call is ordered after it.
//!
//! This is the only module with `unsafe`: the two C callbacks handed to
//! Ruby and the two raw calls.

use std::ffi::c_void;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use magnus::rb_sys::AsRawValue;
use magnus::{Error, Ruby};

use crate::error::task_lost;

/// The most a cancel waits for the runtime to drop the aborted future
/// (normally well under a millisecond).
const DROP_WAIT: Duration = Duration::from_secs(2);

struct State<T> {
    /// The future's output, once it finished.
    out: Option<T>,
    /// The future has been dropped (finished or aborted).
    done: bool,
    /// Ruby called the unblocking function since the last check.
    interrupted: bool,
}

/// Shared by the waiting Ruby thread, the runtime task and the unblocking
/// function.
struct Shared<T> {
    state: Mutex<State<T>>,
    cv: Condvar,
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Marks the future as dropped; it is the second field of `Slot`, so it
/// drops after the future, also when the task is aborted.
struct DoneGuard<T>(Arc<Shared<T>>);

impl<T> Drop for DoneGuard<T> {
    fn drop(&mut self) {
        self.0.lock().done = true;
        self.0.cv.notify_all();
    }
}

/// The spawned state. Fields drop in declaration order: the client future
/// first (the client sees the cancel), then the guard that says so.
struct Slot<F: Future> {
    fut: Pin<Box<F>>,
    done: DoneGuard<F::Output>,
}

/// The function Ruby runs without the GVL: waits until the task has a
/// result, the future is gone, or an interrupt was flagged.
unsafe extern "C" fn wait_fn<T>(data: *mut c_void) -> *mut c_void {
    // SAFETY: `data` is the `Shared<T>` that `block_on` keeps alive (it holds
    // an `Arc`) for the whole `rb_thread_call_without_gvl2` call.
    let shared = unsafe { &*(data as *const Shared<T>) };
    let mut st = shared.lock();
    while st.out.is_none() && !st.done && !st.interrupted {
        st = shared.cv.wait(st).unwrap_or_else(|poisoned| poisoned.into_inner());
    }
    std::ptr::null_mut()
}

/// The unblocking function: Ruby calls it (from another thread, possibly
/// before `wait_fn` starts or while it runs, never after
/// `rb_thread_call_without_gvl2` returned) to interrupt the wait.
unsafe extern "C" fn ubf<T>(data: *mut c_void) {
    // SAFETY: as in `wait_fn`: the pointee outlives the blocking region.
    let shared = unsafe { &*(data as *const Shared<T>) };
    shared.lock().interrupted = true;
    shared.cv.notify_all();
}

/// Runs `fut` on the client runtime and blocks the calling Ruby thread
/// until it finishes, with the GVL released. A Ruby interrupt (exception,
/// kill, Ctrl-C) cancels it: the future is dropped, then the interrupt
/// propagates. A result that raced the cancel is dropped too (a `Ticket`
/// dropped that way is released best-effort by the client).
pub(crate) fn block_on<F>(ruby: &Ruby, fut: F) -> Result<F::Output, Error>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let shared = Arc::new(Shared {
        state: Mutex::new(State { out: None, done: false, interrupted: false }),
        cv: Condvar::new(),
    });
    let slot = Slot { fut: Box::pin(fut), done: DoneGuard(Arc::clone(&shared)) };
    let task = ticketing_client::runtime().spawn(async move {
        let mut slot = slot;
        let out = slot.fut.as_mut().await;
        slot.done.0.lock().out = Some(out);
        // `slot` drops here: the future, then the guard (done = true).
    });
    let data = Arc::as_ptr(&shared) as *mut c_void;
    loop {
        // SAFETY: `wait_fn`/`ubf` only read `Shared<T>` through `data`,
        // which stays alive (`shared`) until after this call returns; they
        // touch no Ruby object. The `2` variant does not raise.
        unsafe {
            rb_sys::rb_thread_call_without_gvl2(Some(wait_fn::<F::Output>), data, Some(ubf::<F::Output>), data);
        }
        {
            let mut st = shared.lock();
            if let Some(out) = st.out.take() {
                return Ok(out);
            }
            if st.done {
                return Err(task_lost(ruby));
            }
            st.interrupted = false;
        }
        // Let Ruby run what interrupted us. SAFETY: called with the GVL held
        // on a Ruby thread; `protect` catches any non-local exit, so nothing
        // unwinds through Rust frames.
        let interrupt = magnus::rb_sys::protect(|| {
            unsafe { rb_sys::rb_thread_check_ints() };
            ruby.qnil().as_raw()
        });
        if let Err(raised) = interrupt {
            task.abort();
            let until = Instant::now() + DROP_WAIT;
            let mut st = shared.lock();
            while !st.done {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                st = shared.cv.wait_timeout(st, left).unwrap_or_else(|poisoned| poisoned.into_inner()).0;
            }
            let late = st.out.take();
            drop(st);
            drop(late); // finished just before the abort: a Ticket releases best-effort
            return Err(raised);
        }
    }
}
