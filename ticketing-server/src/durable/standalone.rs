//! The durable standalone server (docs/deployment.md, "Durability"): each
//! proposed batch is applied to the one [`LockState`] and appended to the
//! journal as one record; its answers wait for the fsync that covers it
//! (requests that arrive while one batch's fsync runs go out together as the
//! next batch: group commit).
//! At start the state is the latest snapshot plus the journal replayed.
//! Every [`snapshot_threshold`] commands a snapshot is written (atomically)
//! and the journal before it purged.

use super::journal::Journal;
use super::{DataDir, DataDirError};
use crate::cluster::store::snapshot_threshold;
use crate::locks::{Command, LockState};
use crate::replication::{Leadership, Proposal, ProposeError, Replicator};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use ticketing_proto::Addr;
use tokio::sync::watch;
use tracing::info;

/// A standalone journal's log ids: term 1, leader 0.
const LEADER: (u64, u64) = (1, 0);

struct Inner {
    locks: LockState,
    /// The index of the next journal record.
    next: u64,
    /// Commands since the last snapshot.
    since_snapshot: u64,
}

/// The durable standalone [`Replicator`].
pub struct DurableStandalone {
    inner: Arc<Mutex<Inner>>,
    journal: Journal,
    dir: Arc<DataDir>,
    leadership: Arc<watch::Sender<Leadership>>,
    snapshotting: Arc<AtomicBool>,
}

fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Decodes one journal record's commands.
pub fn decode_batch(bytes: &[u8]) -> Result<Vec<Command>, postcard::Error> {
    postcard::from_bytes(bytes)
}

impl DurableStandalone {
    /// Recovers the state of `dir` (snapshot + journal) and serves as `advertise`.
    pub fn open(advertise: Addr, dir: Arc<DataDir>) -> Result<DurableStandalone, DataDirError> {
        let journal = Journal::open(&dir)?;
        let (mut locks, from) = match dir.load_snapshot()? {
            Some((meta, data)) => {
                let corrupt = |why: String| DataDirError::Corrupt { path: dir.path().join("snapshot"), why };
                let index = meta.get("index").and_then(|i| i.as_u64()).ok_or_else(|| corrupt("no index".into()))?;
                (LockState::from_snapshot(&data).map_err(|e| corrupt(e.to_string()))?, index + 1)
            }
            None => (LockState::new(), 1),
        };
        let (purged, last) = {
            let log = journal.lock();
            let st = log.log_state();
            (st.purged().map_or(0, |l| l.1), st.last().map_or(0, |l| l.1))
        };
        if purged + 1 > from {
            return Err(DataDirError::Corrupt {
                path: dir.log_dir(),
                why: format!("the journal starts after index {purged}, the snapshot covers only up to {}", from - 1),
            });
        }
        let corrupt = |why: String| DataDirError::Corrupt { path: dir.log_dir(), why };
        let entries = journal.read(from, last + 1).map_err(|e| corrupt(e.to_string()))?;
        let replayed = entries.len();
        for (id, bytes) in entries {
            let cmds = decode_batch(&bytes).map_err(|e| corrupt(format!("record {}: {e}", id.1)))?;
            locks.apply_all(&cmds);
        }
        info!(
            data_dir = %dir.path().display(),
            held = locks.held_count(),
            last_token = locks.last_token(),
            domain_time_ms = locks.domain_time(),
            replayed,
            "durable standalone: state recovered"
        );
        let (tx, _) = watch::channel(Leadership { serving: true, active: true, leader: Some(advertise), epoch: 1 });
        Ok(DurableStandalone {
            inner: Arc::new(Mutex::new(Inner { locks, next: last.max(from - 1) + 1, since_snapshot: replayed as u64 })),
            journal,
            dir,
            leadership: Arc::new(tx),
            snapshotting: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Writes a snapshot at `index` in the background, then purges the journal up to it.
    fn snapshot(&self, index: u64, data: Vec<u8>) {
        if self.snapshotting.swap(true, Ordering::AcqRel) {
            return;
        }
        let (dir, journal, busy) = (self.dir.clone(), self.journal.clone(), self.snapshotting.clone());
        tokio::task::spawn_blocking(move || {
            // The records the snapshot covers are on disk first: a restart
            // never finds a snapshot ahead of the journal.
            if journal.sync_queued().blocking_recv().is_err() {
                journal.stop(&std::io::Error::other("the journal's flush worker stopped"));
            }
            if let Err(e) = dir.save_snapshot(&serde_json::json!({ "index": index }), &data) {
                super::fail_stop(&dir.snapshot_path(), &e);
            }
            let mut log = journal.lock();
            if let Err(e) = log.purge((LEADER, index)).and_then(|_| log.flush(true, None)) {
                journal.stop(&e);
            }
            drop(log);
            busy.store(false, Ordering::Release);
        });
    }
}

impl Replicator for DurableStandalone {
    fn propose(&self, cmds: Vec<Command>) -> Proposal {
        let bytes = match postcard::to_stdvec(&cmds) {
            Ok(b) => b,
            Err(_) => return Proposal::Ready(Err(ProposeError::Unknown)),
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (outcome, snapshot) = {
            let mut inner = lock(&self.inner);
            let index = inner.next;
            let flushed = self.journal.notify(tx);
            let written = {
                let mut log = self.journal.lock();
                log.append([((LEADER, index), bytes)]).and_then(|_| log.flush(true, Some(flushed)))
            };
            if let Err(e) = written {
                self.journal.stop(&e);
            }
            inner.next += 1;
            let outcome = inner.locks.apply_all(&cmds);
            inner.since_snapshot += cmds.len().max(1) as u64;
            let due = inner.since_snapshot >= snapshot_threshold(inner.locks.held_count())
                && !self.snapshotting.load(Ordering::Acquire);
            let snapshot = due.then(|| {
                inner.since_snapshot = 0;
                (index, inner.locks.to_snapshot())
            });
            (outcome, snapshot)
        };
        if let Some((index, data)) = snapshot {
            self.snapshot(index, data);
        }
        let journal = self.journal.clone();
        Proposal::Pending(Box::pin(async move {
            // Woken only once the record is on disk (a failed fsync is fail-stop).
            if rx.await.is_err() {
                journal.stop(&std::io::Error::other("the journal's flush worker stopped"));
            }
            Ok(outcome)
        }))
    }

    fn with_applied(&self, f: &mut dyn FnMut(&LockState)) {
        f(&lock(&self.inner).locks)
    }

    fn leadership(&self) -> watch::Receiver<Leadership> {
        self.leadership.subscribe()
    }
}
