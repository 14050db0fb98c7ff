//! One workload client PROCESS (`ticketing-verify client …`, spawned by the
//! run): a loop of acquire → work → fenced write → release on a few keys,
//! every step recorded with monotonic timestamps.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ticketing_client::{Error, TicketBroker};

use crate::clock::{mono_ns, ns, to_mono_ns};
use crate::db;
use crate::history::{Event, Recorder};
use crate::rng::Rng;

/// A normal holder writes only with at least this much of its conservative
/// deadline left once it holds the database's write lock; the rest is the
/// commit's own time. (The paused holder skips this check on purpose.)
pub const WRITE_MARGIN: Duration = Duration::from_millis(400);

/// What one client process does.
#[derive(Debug, Clone)]
pub struct ClientArgs {
    /// Its number (names its history file).
    pub id: u32,
    /// Client addresses of every node.
    pub addrs: Vec<String>,
    /// The keys it works on.
    pub keys: Vec<String>,
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
}

/// The trigger file that asks client `id` to stop itself while holding.
pub fn pause_trigger(dir: &std::path::Path, id: u32) -> PathBuf {
    dir.join(format!("pause-{id}"))
}

/// Runs the loop until `duration` has passed. Never returns early on a
/// server error: every outcome is recorded and the loop goes on.
pub fn run(a: ClientArgs) -> anyhow::Result<()> {
    let mut rec = Recorder::open(&a.dir.join(format!("client-{}.jsonl", a.id)))?;
    let mut conn = db::open(&a.db)?;
    let mut rng = Rng::new(a.seed);
    let end = Instant::now() + a.duration;
    let rt = ticketing_client::runtime();
    let broker = rt.block_on(TicketBroker::builder(a.addrs.iter().map(String::as_str)).connect())?;
    rt.block_on(broker.wait_ready(Duration::from_secs(10)));
    let stop = a.dir.join("stop");
    while Instant::now() < end && !stop.exists() {
        let key = a.keys[rng.index(a.keys.len())].clone();
        let call = mono_ns();
        let r = rt.block_on(broker.acquire(&key, a.wait, a.lease, a.budget));
        let ans = mono_ns();
        let ticket = match r {
            Ok(Some(t)) => t,
            other => {
                let result = match &other {
                    Ok(_) => "timeout".to_owned(),
                    Err(e) => e.code().to_owned(),
                };
                rec.record(&Event::Acquire { client: a.id, key, call, ans, result, keys: vec![], n: None })?;
                if matches!(other, Err(Error::Unavailable | Error::Busy | Error::Closed)) {
                    std::thread::sleep(Duration::from_millis(rng.range(50, 150)));
                }
                continue;
            }
        };
        let token = ticket.token();
        let dl = to_mono_ns(ticket.deadline());
        rec.record(&Event::Grant {
            client: a.id,
            key: key.clone(),
            token,
            call,
            ans,
            dl,
            keys: vec![],
            want: vec![],
            n: None,
            slot: None,
        })?;
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
            rec.record(&Event::Pause { client: a.id, key: key.clone(), token, dl, keys: vec![], slot: None })?;
            nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP)?;
        }
        let fence = db::Fence::Keys(std::slice::from_ref(&key));
        let outcome = conn.fenced_write(fence, token, a.id, |issued| paused || issued + ns(WRITE_MARGIN) <= dl);
        let done = mono_ns();
        let (issued, result) = match outcome {
            Ok((issued, r)) => (issued, r.name().to_owned()),
            Err(e) => {
                eprintln!("client {}: write {key} {token}: {e}", a.id);
                (done, "error".to_owned())
            }
        };
        rec.record(&Event::Write {
            client: a.id,
            key: key.clone(),
            token,
            issued,
            done,
            result,
            keys: vec![],
            slot: None,
        })?;
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
