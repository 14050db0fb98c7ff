//! One workload client PROCESS (`ticketing-verify client …`, spawned by the
//! run): a loop of acquire → work → fenced write → release, every step
//! recorded with monotonic timestamps. What it acquires is its
//! [`Workload`]: exclusive keys, a semaphore, a read/write lock, multi-key
//! baskets, or a mix of them.
//!
//! Two things it records for the checker's FIFO and Indeterminate rules:
//!
//! - `sent`: right after calling an acquire it asks the client library
//!   whether a request can be routed now. The library hands every waiting
//!   acquire to a connection as soon as one is ready, and takes commands in
//!   order, so "ready" means the acquire had been handed to a connection by
//!   then (`sent` is the time the answer came back).
//! - After an acquire that ended Indeterminate, what the library's release
//!   lane found out (docs/client.md, "Release lane": it asks `Q` and releases
//!   the exact token on `H`). The library reports that only as a `debug`
//!   event of `ticketing_client::driver` ("indeterminate acquire resolved",
//!   with the key, the token `H` named and the outcome), and does not expose
//!   the acquire's owner, so this process cannot ask `Q` itself: a tracing
//!   subscriber ([`lane_watch`]) hears those events, and nothing else.

use std::future::Future;
use std::path::PathBuf;
use std::task::Poll;
use std::time::{Duration, Instant};

use ticketing_client::{Error, Ticket, TicketBroker};

use crate::clock::{mono_ns, ns, to_mono_ns};
use crate::db;
use crate::history::{Event, Recorder};
use crate::rng::Rng;

/// The semaphore's key: counted grants `S … SEM_N`.
pub const SEM_KEY: &str = "verify-sem";
/// The semaphore's permits. One `n` per key: holders asking different `n`
/// of one key are legal, but each holder's own `n` is what the checker holds
/// the key to.
pub const SEM_N: u16 = 2;
/// The read/write lock's key: readers `S … 65535`, writers `A`.
pub const RW_KEY: &str = "verify-rw";
/// A reader's `n` (docs/protocol.md: a read lock is `S … 65535`).
pub const READ_N: u16 = ticketing_proto::limits::MAX_PERMITS;
/// Of the read/write lock's requests, this many per mille are writers.
pub const WRITERS_PERMILLE: u64 = 250;

/// What a client process asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// `A` on one of the run's keys (the classic workload).
    Exclusive,
    /// `S … 2` on the semaphore key.
    Semaphore,
    /// Readers (`S … 65535`) and writers (`A`) on the read/write key.
    ReadWrite,
    /// `K` of 2–3 of the run's keys, in a random order each time (baskets
    /// overlap: a deadlock would show as a stall).
    Baskets,
    /// Each iteration one of the four, baskets drawn from every key
    /// (the run's keys, the semaphore's and the read/write lock's).
    Mixed,
}

impl Workload {
    /// Every workload.
    pub const ALL: [Workload; 5] =
        [Workload::Exclusive, Workload::Semaphore, Workload::ReadWrite, Workload::Baskets, Workload::Mixed];

    /// Its name (`--workload`, the client's command line).
    pub fn name(self) -> &'static str {
        match self {
            Workload::Exclusive => "exclusive",
            Workload::Semaphore => "semaphore",
            Workload::ReadWrite => "rw",
            Workload::Baskets => "baskets",
            Workload::Mixed => "mixed",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|w| w.name() == s)
    }
}

/// Every key a run's clients may touch (the counter table's rows): the
/// run's keys, then the semaphore's and the read/write lock's.
pub fn run_keys(keys: &[String]) -> Vec<String> {
    keys.iter().cloned().chain([SEM_KEY.to_owned(), RW_KEY.to_owned()]).collect()
}

/// One request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `A key`.
    Exclusive(String),
    /// `S key n`.
    Counted(String, u16),
    /// `K keys…`, in this order.
    All(Vec<String>),
}

impl Op {
    /// The first key.
    fn key(&self) -> &str {
        match self {
            Op::Exclusive(k) | Op::Counted(k, _) => k,
            Op::All(ks) => &ks[0],
        }
    }

    /// Every key asked for.
    fn keys(&self) -> Vec<String> {
        match self {
            Op::Exclusive(k) | Op::Counted(k, _) => vec![k.clone()],
            Op::All(ks) => ks.clone(),
        }
    }
}

/// The next request of workload `w` over the run's `keys`.
pub fn pick(w: Workload, keys: &[String], rng: &mut Rng) -> Op {
    let basket = |pool: Vec<String>, rng: &mut Rng| {
        let mut pool = pool;
        rng.shuffle(&mut pool);
        let size = 2 + rng.index(pool.len().min(3) - 1);
        pool.truncate(size);
        Op::All(pool)
    };
    match w {
        Workload::Exclusive => Op::Exclusive(keys[rng.index(keys.len())].clone()),
        Workload::Semaphore => Op::Counted(SEM_KEY.to_owned(), SEM_N),
        Workload::ReadWrite if rng.chance(WRITERS_PERMILLE) => Op::Exclusive(RW_KEY.to_owned()),
        Workload::ReadWrite => Op::Counted(RW_KEY.to_owned(), READ_N),
        Workload::Baskets => {
            let mut pool = keys.to_vec();
            if pool.len() < 2 {
                pool = run_keys(keys);
            }
            basket(pool, rng)
        }
        Workload::Mixed => match rng.index(4) {
            0 => pick(Workload::Exclusive, keys, rng),
            1 => pick(Workload::Semaphore, keys, rng),
            2 => pick(Workload::ReadWrite, keys, rng),
            _ => basket(run_keys(keys), rng),
        },
    }
}

/// A normal holder writes only with at least this much of its conservative
/// deadline left once it holds the database's write lock; the rest is the
/// commit's own time. (The paused holder skips this check on purpose.)
pub const WRITE_MARGIN: Duration = Duration::from_millis(400);

/// After an acquire ended Indeterminate, how long the client waits to hear
/// the release lane's result for each key: the lane gives up 5 s after the
/// acquire failed, and reports that too.
pub const RESOLVE_WAIT: Duration = Duration::from_secs(7);

/// After a lane result was not heard within [`RESOLVE_WAIT`], how long a
/// result for that key is not trusted to be the current acquire's.
pub const MISSED_FOR: Duration = Duration::from_secs(60);

/// What one client process does.
#[derive(Debug, Clone)]
pub struct ClientArgs {
    /// Its number (names its history file).
    pub id: u32,
    /// Client addresses of every node.
    pub addrs: Vec<String>,
    /// The run's keys (exclusive and basket requests; the semaphore and
    /// the read/write lock have keys of their own).
    pub keys: Vec<String>,
    /// What it asks for.
    pub workload: Workload,
    /// The SQLite file.
    pub db: db::Target,
    /// The run directory (history, pause triggers).
    pub dir: PathBuf,
    /// Its seed.
    pub seed: u64,
    /// How long it runs.
    pub duration: Duration,
    /// Acquire parameters.
    pub wait: Duration,
    /// Lease.
    pub lease: Duration,
    /// Work budget.
    pub budget: Duration,
    /// Its client token (its principal, docs/security.md, "Several teams:
    /// principals"); `None` without client authentication.
    pub token: Option<String>,
}

/// The key prefix every principal of a run may use ([`PRINCIPALS`]); the
/// forbidden probe asks for a key outside it.
pub const RUN_PREFIX: &str = "verify-";

/// The principals of a run: (name, token). Clients alternate between them,
/// so holders of one key belong to different principals; both may use the
/// keys that start with [`RUN_PREFIX`] and nothing else.
pub const PRINCIPALS: [(&str, &str); 2] =
    [("team-a", "verify-team-a-client-token"), ("team-b", "verify-team-b-client-token")];

/// Asks once for a key outside the principal's prefixes: it must be refused
/// with `Forbidden` naming that key, nothing granted (an error otherwise:
/// the client exits and the run fails).
fn forbidden_probe(broker: &TicketBroker, id: u32) -> anyhow::Result<()> {
    let key = format!("not-{RUN_PREFIX}{id}");
    let rt = ticketing_client::runtime();
    let got = rt.block_on(broker.acquire(&key, Duration::from_secs(10), Duration::from_secs(5), Duration::ZERO));
    match got {
        Err(Error::Forbidden { key: k }) if k == key => Ok(()),
        // The cluster may be between leaders at start: no answer at all.
        Err(Error::Unavailable) | Err(Error::Indeterminate) => Ok(()),
        other => anyhow::bail!("client {id}: {key} outside the principal's prefixes answered {other:?}, not Forbidden"),
    }
}

/// The trigger file that asks client `id` to stop itself while holding.
pub fn pause_trigger(dir: &std::path::Path, id: u32) -> PathBuf {
    dir.join(format!("pause-{id}"))
}

/// Runs the loop until `duration` has passed. Never returns early on a
/// server error: every outcome is recorded and the loop goes on.
pub fn run(a: ClientArgs) -> anyhow::Result<()> {
    let mut rec = Recorder::open(&a.dir.join(format!("client-{}.jsonl", a.id)))?;
    if !lane_watch::install() {
        eprintln!("client {}: another tracing subscriber is set: Indeterminate acquires stay unresolved", a.id);
    }
    let mut conn = db::open(&a.db)?;
    let mut rng = Rng::new(a.seed);
    let end = Instant::now() + a.duration;
    let rt = ticketing_client::runtime();
    let mut builder = TicketBroker::builder(a.addrs.iter().map(String::as_str));
    if let Some(token) = &a.token {
        builder = builder.token(token.as_str());
    }
    let broker = rt.block_on(builder.connect())?;
    rt.block_on(broker.wait_ready(Duration::from_secs(10)));
    if a.token.is_some() {
        forbidden_probe(&broker, a.id)?;
    }
    let stop = a.dir.join("stop");
    // Keys whose lane result was not heard in time, and when: see `record_resolution`.
    let mut missed: Vec<(String, Instant)> = Vec::new();
    while Instant::now() < end && !stop.exists() {
        let op = pick(a.workload, &a.keys, &mut rng);
        // A result heard now belongs to no acquire of this process any more.
        lane_watch::forget();
        let call = mono_ns();
        let (r, sent) = rt.block_on(async {
            let acquire = async {
                match &op {
                    Op::Exclusive(k) => broker.acquire(k, a.wait, a.lease, a.budget).await,
                    Op::Counted(k, n) => broker.acquire_shared(k, *n, a.wait, a.lease, a.budget).await,
                    Op::All(ks) => {
                        let ks: Vec<&str> = ks.iter().map(String::as_str).collect();
                        broker.acquire_all(&ks, a.wait, a.lease, a.budget).await
                    }
                }
            };
            let mut acquire = std::pin::pin!(acquire);
            // Polled once, the acquire's command is in the library's queue
            // (nothing before it waits); the status query goes behind it.
            if let Poll::Ready(r) = std::future::poll_fn(|cx| Poll::Ready(acquire.as_mut().poll(cx))).await {
                return (r, None);
            }
            let sent = match broker.status().await {
                Some(s) if s.ready => Some(mono_ns()),
                _ => None,
            };
            (acquire.await, sent)
        });
        let ans = mono_ns();
        let (want, n) = match &op {
            Op::Exclusive(_) => (vec![], None),
            Op::Counted(_, n) => (vec![], Some(*n)),
            Op::All(ks) => (ks.clone(), None),
        };
        let (wait_ms, lease_ms) = (Some(a.wait.as_millis() as u64), Some(a.lease.as_millis() as u64));
        let ticket = match r {
            Ok(Some(t)) => t,
            other => {
                let result = match &other {
                    Ok(_) => "timeout".to_owned(),
                    Err(e) => e.code().to_owned(),
                };
                let key = op.key().to_owned();
                rec.record(&Event::Acquire {
                    client: a.id,
                    key,
                    call,
                    ans,
                    result,
                    keys: want.clone(),
                    n,
                    sent,
                    wait_ms,
                    lease_ms,
                })?;
                if matches!(other, Err(Error::Indeterminate)) {
                    record_resolution(a.id, &mut rec, &mut missed, &op.keys(), &want, n, call, ans)?;
                }
                if matches!(other, Err(Error::Unavailable | Error::Busy | Error::Closed)) {
                    std::thread::sleep(Duration::from_millis(rng.range(50, 150)));
                }
                continue;
            }
        };
        let token = ticket.token();
        let dl = to_mono_ns(ticket.deadline());
        let key = ticket.key().to_owned();
        let slot = ticket.slot();
        // A multi-key ticket records every key it holds, beside what was asked.
        let keys = if want.is_empty() { vec![] } else { ticket.keys().to_vec() };
        rec.record(&Event::Grant {
            client: a.id,
            key: key.clone(),
            token,
            call,
            ans,
            dl,
            keys: keys.clone(),
            want,
            n,
            slot,
            sent,
            wait_ms,
            lease_ms,
        })?;
        hold(&a, &mut rng, &mut rec, &mut conn, &ticket, n, &keys)?;
        let start = mono_ns();
        let r = rt.block_on(ticket.release());
        let end_t = mono_ns();
        let result = match r {
            Ok(true) => "released".to_owned(),
            Ok(false) => "not_held".to_owned(),
            Err(e) => e.code().to_owned(),
        };
        rec.record(&Event::Release { client: a.id, key, token, start, end: end_t, result })?;
    }
    rt.block_on(broker.close());
    Ok(())
}

/// Records what the release lane found out about an acquire of `keys` that
/// ended Indeterminate: one event per key, when its result is heard (at most
/// [`RESOLVE_WAIT`] after the acquire failed). `want`: the keys of a
/// multi-key request (empty otherwise), `n` a counted request's.
///
/// A result that was not heard in time may still come, and would then be
/// taken for a later acquire's: for [`MISSED_FOR`] after such a miss, a
/// result for that key is recorded as `unknown` (`missed`).
#[allow(clippy::too_many_arguments)]
fn record_resolution(
    client: u32,
    rec: &mut Recorder,
    missed: &mut Vec<(String, Instant)>,
    keys: &[String],
    want: &[String],
    n: Option<u16>,
    call: u64,
    ans: u64,
) -> anyhow::Result<()> {
    let heard = lane_watch::wait_for(keys, Instant::now() + RESOLVE_WAIT);
    let gave_up = mono_ns();
    missed.retain(|(_, t)| t.elapsed() < MISSED_FOR);
    let was_missed: Vec<bool> = keys.iter().map(|k| missed.iter().any(|(m, _)| m == k)).collect();
    // Not heard, or heard while a late result may still come: this acquire's may come later.
    for (k, _) in keys.iter().zip(&was_missed).filter(|(k, m)| **m || !heard.iter().any(|r| &r.key == *k)) {
        missed.push((k.clone(), Instant::now()));
    }
    for (key, ambiguous) in keys.iter().zip(was_missed) {
        let (key, keys) = (key.clone(), want.to_vec());
        let e = match heard.iter().find(|r| r.key == key).filter(|_| !ambiguous) {
            Some(r) => match r.token {
                Some(token) => Event::IndeterminateHeld {
                    client,
                    key,
                    token,
                    call,
                    ans,
                    at: r.at,
                    released: r.outcome == "Released",
                    keys,
                    n,
                },
                None => {
                    let result = if r.outcome == "NotHolder" { "not_held" } else { "unconfirmed" };
                    Event::IndeterminateNotHeld { client, key, call, ans, at: r.at, result: result.into(), keys, n }
                }
            },
            None => {
                Event::IndeterminateNotHeld { client, key, call, ans, at: gave_up, result: "unknown".into(), keys, n }
            }
        };
        rec.record(&e)?;
    }
    Ok(())
}

/// Hears the client library's reports of resolved Indeterminate acquires
/// (a `debug` event of `ticketing_client::driver`), with the time each was
/// heard on the shared clock. The process's global tracing subscriber: it
/// takes no other event and no span.
pub mod lane_watch {
    use std::collections::VecDeque;
    use std::fmt;
    use std::sync::{Condvar, Mutex, MutexGuard};
    use std::time::Instant;

    use tracing::field::{Field, Visit};
    use tracing::level_filters::LevelFilter;
    use tracing::span;
    use tracing::subscriber::Interest;
    use tracing::{Metadata, Subscriber};

    use crate::clock::mono_ns;

    /// The target of the library's event.
    pub const TARGET: &str = "ticketing_client::driver";
    /// Its message.
    pub const MESSAGE: &str = "indeterminate acquire resolved";

    /// One resolved Indeterminate acquire of one key.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Resolution {
        /// The key.
        pub key: String,
        /// The token `H` named: the acquire was granted; `None`: `Q`
        /// answered `N`, or no answer came.
        pub token: Option<u64>,
        /// The lane's outcome: `Released`, `NotHolder` or `Unconfirmed`.
        pub outcome: String,
        /// When it was heard (after the lane's last answer).
        pub at: u64,
    }

    static HEARD: Mutex<VecDeque<Resolution>> = Mutex::new(VecDeque::new());
    static NEWS: Condvar = Condvar::new();

    fn heard() -> MutexGuard<'static, VecDeque<Resolution>> {
        HEARD.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The subscriber.
    pub struct LaneWatch;

    impl LaneWatch {
        fn wanted(m: &Metadata<'_>) -> bool {
            m.is_event() && m.target() == TARGET
        }
    }

    #[derive(Default)]
    struct Fields {
        message: String,
        key: Option<String>,
        token: Option<u64>,
        outcome: Option<String>,
    }

    impl Visit for Fields {
        fn record_u64(&mut self, f: &Field, v: u64) {
            if f.name() == "token" {
                self.token = Some(v);
            }
        }

        fn record_debug(&mut self, f: &Field, v: &dyn fmt::Debug) {
            match f.name() {
                "message" => self.message = format!("{v:?}"),
                "key" => self.key = Some(format!("{v:?}")),
                "outcome" => self.outcome = Some(format!("{v:?}")),
                _ => {}
            }
        }
    }

    impl Subscriber for LaneWatch {
        fn register_callsite(&self, m: &'static Metadata<'static>) -> Interest {
            if Self::wanted(m) {
                Interest::always()
            } else {
                Interest::never()
            }
        }

        fn enabled(&self, m: &Metadata<'_>) -> bool {
            Self::wanted(m)
        }

        fn max_level_hint(&self) -> Option<LevelFilter> {
            Some(LevelFilter::DEBUG)
        }

        fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
            span::Id::from_u64(1)
        }

        fn record(&self, _: &span::Id, _: &span::Record<'_>) {}

        fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}

        fn event(&self, e: &tracing::Event<'_>) {
            let at = mono_ns();
            let mut f = Fields::default();
            e.record(&mut f);
            if f.message != MESSAGE {
                return;
            }
            let (Some(key), Some(outcome)) = (f.key, f.outcome) else { return };
            heard().push_back(Resolution { key, token: f.token, outcome, at });
            NEWS.notify_all();
        }

        fn enter(&self, _: &span::Id) {}

        fn exit(&self, _: &span::Id) {}
    }

    /// Makes [`LaneWatch`] the process's subscriber; false if one was set already.
    pub fn install() -> bool {
        tracing::subscriber::set_global_default(LaneWatch).is_ok()
    }

    /// Drops everything heard so far.
    pub fn forget() {
        heard().clear();
    }

    /// Waits until a result for every one of `keys` was heard, or `until`;
    /// returns (and takes) the first heard for each.
    pub fn wait_for(keys: &[String], until: Instant) -> Vec<Resolution> {
        let mut q = heard();
        loop {
            if keys.iter().all(|k| q.iter().any(|r| &r.key == k)) {
                break;
            }
            let now = Instant::now();
            if now >= until {
                break;
            }
            q = NEWS.wait_timeout(q, until - now).unwrap_or_else(|p| p.into_inner()).0;
        }
        let mut out = Vec::new();
        for k in keys {
            if let Some(i) = q.iter().position(|r| &r.key == k) {
                out.extend(q.remove(i));
            }
        }
        out
    }
}

/// The holder's part: work, maybe the client-pause nemesis, the fenced
/// write (an exclusive holder fences its key or every key of its basket, a
/// counted holder its `(key, slot)`), all recorded.
fn hold(
    a: &ClientArgs,
    rng: &mut Rng,
    rec: &mut Recorder,
    conn: &mut db::Conn,
    ticket: &Ticket,
    n: Option<u16>,
    keys: &[String],
) -> anyhow::Result<()> {
    let token = ticket.token();
    let dl = to_mono_ns(ticket.deadline());
    let key = ticket.key().to_owned();
    let slot = ticket.slot();
    // The work: a short pause while holding.
    std::thread::sleep(Duration::from_millis(rng.range(10, 120)));
    let trigger = pause_trigger(&a.dir, a.id);
    let paused = trigger.exists();
    if paused {
        // The client-pause nemesis: this holder has checked its lease
        // (it is alive) and now stops like a process in a long GC pause,
        // until the nemesis sends SIGCONT; then it writes WITHOUT
        // checking again. The fence must refuse that write.
        let _ = std::fs::remove_file(&trigger);
        rec.record(&Event::Pause { client: a.id, key: key.clone(), token, dl, keys: keys.to_vec(), slot })?;
        nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP)?;
    }
    let fence = match (n, slot) {
        (Some(_), Some(s)) => db::Fence::Slot(&key, s),
        (Some(_), None) => anyhow::bail!("a counted grant of {key} (token {token}) came without a slot"),
        (None, _) => db::Fence::Keys(ticket.keys()),
    };
    let outcome = conn.fenced_write(fence, token, a.id, |issued| paused || issued + ns(WRITE_MARGIN) <= dl);
    let done = mono_ns();
    let (issued, result) = match outcome {
        Ok((issued, r)) => (issued, r.name().to_owned()),
        Err(e) => {
            eprintln!("client {}: write {key} {token}: {e}", a.id);
            (done, "error".to_owned())
        }
    };
    rec.record(&Event::Write { client: a.id, key, token, issued, done, result, keys: keys.to_vec(), slot })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for w in Workload::ALL {
            assert_eq!(Workload::parse(w.name()), Some(w));
        }
        assert_eq!(Workload::parse("combined"), None);
        assert_eq!(Workload::parse(""), None);
    }

    #[test]
    fn each_workload_asks_for_what_it_says() {
        let keys: Vec<String> = (0..3).map(|k| format!("verify-key-{k}")).collect();
        let all = run_keys(&keys);
        let mut rng = Rng::new(7);
        let (mut writers, mut readers, mut sizes, mut firsts) = (0, 0, BTreeSet::new(), BTreeSet::new());
        for _ in 0..2000 {
            match pick(Workload::Exclusive, &keys, &mut rng) {
                Op::Exclusive(k) => assert!(keys.contains(&k)),
                op => panic!("exclusive asked {op:?}"),
            }
            assert_eq!(pick(Workload::Semaphore, &keys, &mut rng), Op::Counted(SEM_KEY.into(), SEM_N));
            match pick(Workload::ReadWrite, &keys, &mut rng) {
                Op::Exclusive(k) if k == RW_KEY => writers += 1,
                Op::Counted(k, n) if k == RW_KEY && n == 65535 => readers += 1,
                op => panic!("rw asked {op:?}"),
            }
            match pick(Workload::Baskets, &keys, &mut rng) {
                Op::All(ks) => {
                    let distinct: BTreeSet<&String> = ks.iter().collect();
                    assert_eq!(distinct.len(), ks.len(), "{ks:?}");
                    assert!(ks.iter().all(|k| keys.contains(k)), "{ks:?}");
                    sizes.insert(ks.len());
                    firsts.insert(ks[0].clone());
                }
                op => panic!("baskets asked {op:?}"),
            }
            if let Op::All(ks) = pick(Workload::Mixed, &keys, &mut rng) {
                assert!(ks.len() >= 2 && ks.iter().all(|k| all.contains(k)), "{ks:?}");
            }
        }
        // About one writer in four; baskets of 2 and 3 keys in every order.
        assert!((400..600).contains(&writers), "{writers} writers, {readers} readers");
        assert_eq!(sizes, BTreeSet::from([2, 3]));
        assert_eq!(firsts.len(), 3);
    }

    #[test]
    fn the_lane_watch_hears_the_librarys_resolved_event_and_nothing_else() {
        use lane_watch::{LaneWatch, Resolution, MESSAGE, TARGET};
        // The event as ticketing-client's driver writes it.
        #[derive(Debug)]
        enum Outcome {
            Released,
            NotHolder,
        }
        tracing::subscriber::with_default(LaneWatch, || {
            lane_watch::forget();
            let key = "verify-key-1";
            let token: Option<u64> = Some(17);
            tracing::debug!(target: "ticketing_client::driver", key = %key, token = token, outcome = ?Outcome::Released, "indeterminate acquire resolved");
            let none: Option<u64> = None;
            tracing::debug!(target: "ticketing_client::driver", key = %"verify-sem", token = none, outcome = ?Outcome::NotHolder, "indeterminate acquire resolved");
            // Other events of the driver and of other targets are not taken.
            tracing::debug!(target: "ticketing_client::driver", key = %key, token = 18u64, outcome = ?Outcome::Released, "release lane entry done");
            tracing::warn!(key = %key, token = 19u64, outcome = ?Outcome::Released, "indeterminate acquire resolved");
        });
        let keys = vec!["verify-key-1".to_owned(), "verify-sem".to_owned(), "verify-rw".to_owned()];
        let t0 = Instant::now();
        let got = lane_watch::wait_for(&keys, Instant::now() + Duration::from_millis(200));
        assert!(t0.elapsed() >= Duration::from_millis(200), "waits for the missing key");
        let got: Vec<(String, Option<u64>, String)> =
            got.into_iter().map(|Resolution { key, token, outcome, .. }| (key, token, outcome)).collect();
        assert_eq!(
            got,
            vec![
                ("verify-key-1".to_owned(), Some(17), "Released".to_owned()),
                ("verify-sem".to_owned(), None, "NotHolder".to_owned()),
            ]
        );
        assert!(lane_watch::wait_for(&keys, Instant::now()).is_empty(), "taken once");
        // The library still writes that event with those fields.
        let driver = include_str!("../../ticketing-client/src/driver.rs");
        assert!(driver.contains(MESSAGE) && driver.contains("key = %key, token = token.map(|t| t.get()), ?outcome"));
        assert!(TARGET.ends_with("::driver"));
    }
}
