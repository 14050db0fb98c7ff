//! Raft storage: the in-memory log (memory mode, docs/deployment.md "Identity
//! and the rolling restart"; durable mode's log is `disk`), and
//! the state machine that applies committed [`Command`]s to the one
//! [`LockState`], plus in-memory snapshots of it.

use super::types::{NodeId, NodeInfo, TypeConfig};
use crate::durable::journal::JLogId;
use crate::durable::{DataDir, DataDirError};
use crate::locks::LockState;
use openraft::storage::{LogFlushed, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    Entry, EntryPayload, LogId, LogState, RaftLogId, RaftLogReader, RaftSnapshotBuilder, SnapshotMeta, StorageError,
    StorageIOError, StoredMembership, Vote,
};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io::Cursor;
use std::ops::RangeBounds;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::watch;

type StorageResult<T> = Result<T, StorageError<NodeId>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means another task panicked while holding it; the
    // data is plain values that are always left consistent between statements.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// [`lock`] from an async task: when the lock is taken (a snapshot being
/// copied on a blocking-pool thread), waits with the runtime told, so its
/// other tasks (heartbeats, client answers) go on meanwhile, even on a
/// runtime of one worker thread (docs/configuration.md, "Threads").
fn lock_async<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.try_lock() {
        Ok(guard) => guard,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => {
            let multi = tokio::runtime::Handle::try_current()
                .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
            if multi {
                tokio::task::block_in_place(|| lock(m))
            } else {
                lock(m)
            }
        }
    }
}

#[derive(Debug, Default)]
struct LogInner {
    last_purged: Option<LogId<NodeId>>,
    log: BTreeMap<u64, Entry<TypeConfig>>,
    committed: Option<LogId<NodeId>>,
    vote: Option<Vote<NodeId>>,
}

/// The in-memory Raft log.
#[derive(Debug, Clone, Default)]
pub struct LogStore {
    inner: Arc<Mutex<LogInner>>,
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry<TypeConfig>>> {
        Ok(lock(&self.inner).log.range(range).map(|(_, e)| e.clone()).collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        let inner = lock(&self.inner);
        let last = inner.log.values().next_back().map(|e| *e.get_log_id()).or(inner.last_purged);
        Ok(LogState { last_purged_log_id: inner.last_purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> StorageResult<()> {
        lock(&self.inner).vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote<NodeId>>> {
        Ok(lock(&self.inner).vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> StorageResult<()> {
        lock(&self.inner).committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId<NodeId>>> {
        Ok(lock(&self.inner).committed)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
    {
        {
            let mut inner = lock(&self.inner);
            for e in entries {
                inner.log.insert(e.get_log_id().index, e);
            }
        }
        // Memory is the medium: the entries are "flushed" once inserted.
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        let mut inner = lock(&self.inner);
        let _ = inner.log.split_off(&log_id.index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        let mut inner = lock(&self.inner);
        if inner.last_purged.as_ref() < Some(&log_id) {
            inner.last_purged = Some(log_id);
        }
        let keep = inner.log.split_off(&(log_id.index + 1));
        inner.log = keep;
        Ok(())
    }
}

/// Snapshot cadence (docs/benchmarks.md, "Optimizations: memory"): a
/// snapshot is built once the lock commands applied since the last one
/// exceed `max(SNAPSHOT_MIN_ENTRIES, held keys / SNAPSHOT_HELD_DIVISOR)`.
/// Commands, not log entries: an entry is a batch of up to 128 commands
/// (docs/cluster-protocol.md, "Log entries"), and what the log costs in
/// memory and in replay grows with the commands. Building
/// costs O(held keys), so the interval grows with the state (amortized
/// O(SNAPSHOT_HELD_DIVISOR) holders written per entry); the in-memory log
/// between snapshots stays a fraction of the state.
pub const SNAPSHOT_MIN_ENTRIES: u64 = 5000;
/// See [`SNAPSHOT_MIN_ENTRIES`].
pub const SNAPSHOT_HELD_DIVISOR: u64 = 8;

/// Commands applied since the last snapshot after which the next is built.
pub fn snapshot_threshold(held: usize) -> u64 {
    SNAPSHOT_MIN_ENTRIES.max(held as u64 / SNAPSHOT_HELD_DIVISOR)
}

#[derive(Debug, Default)]
struct SmInner {
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, NodeInfo>,
    locks: LockState,
    /// Entries and lock commands applied since the last snapshot was built
    /// or installed (a blank or membership entry counts as one).
    since_snapshot: u64,
}

#[derive(Debug)]
struct StoredSnapshot {
    meta: SnapshotMeta<NodeId, NodeInfo>,
    data: Vec<u8>,
}

/// The state machine: applies committed commands with [`LockState::apply`].
/// In durable mode every snapshot it builds or installs is also written to
/// the data dir (atomically) before it is used, and [`StateMachine::recover`]
/// starts from it; openraft then re-applies the committed log after it.
#[derive(Debug, Clone, Default)]
pub struct StateMachine {
    inner: Arc<Mutex<SmInner>>,
    snapshot: Arc<Mutex<Option<StoredSnapshot>>>,
    snapshot_seq: Arc<std::sync::atomic::AtomicU64>,
    /// Set by `apply` once a snapshot is due, cleared when one is built or installed.
    due: Arc<std::sync::atomic::AtomicBool>,
    dir: Option<Arc<DataDir>>,
    /// Durable mode: the journal's watermark, which an entry must have
    /// reached before it is applied (`disk`, the leader's own entries).
    durable: Option<watch::Receiver<Option<JLogId>>>,
}

/// Writes a snapshot to the data dir off the async threads.
async fn persist(dir: &Arc<DataDir>, meta: &SnapshotMeta<NodeId, NodeInfo>, data: &[u8]) -> StorageResult<()> {
    let sig = meta.signature();
    let json = serde_json::to_value(meta).map_err(|e| StorageIOError::write_snapshot(Some(sig.clone()), &e))?;
    match dir.save_snapshot_blocking(json, data.to_vec()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => crate::durable::fail_stop(&dir.snapshot_path(), &e),
        Err(e) => Err(StorageIOError::write_snapshot(Some(sig), &e).into()),
    }
}

impl StateMachine {
    /// The state machine of a durable node: the data dir's snapshot, if any
    /// (a damaged one is refused with its path and the reason).
    /// It applies an entry only once `durable`, the watermark of the
    /// journal, has reached it.
    pub fn recover(dir: Arc<DataDir>, durable: watch::Receiver<Option<JLogId>>) -> Result<StateMachine, DataDirError> {
        let sm = StateMachine { dir: Some(dir.clone()), durable: Some(durable), ..StateMachine::default() };
        let Some((meta, data)) = dir.load_snapshot()? else { return Ok(sm) };
        let corrupt = |why: String| DataDirError::Corrupt { path: dir.path().join("snapshot"), why };
        let meta: SnapshotMeta<NodeId, NodeInfo> =
            serde_json::from_value(meta).map_err(|e| corrupt(format!("snapshot meta: {e}")))?;
        let locks = LockState::from_snapshot(&data).map_err(|e| corrupt(e.to_string()))?;
        {
            let mut inner = lock(&sm.inner);
            inner.last_applied = meta.last_log_id;
            inner.membership = meta.last_membership.clone();
            inner.locks = locks;
        }
        *lock(&sm.snapshot) = Some(StoredSnapshot { meta, data });
        Ok(sm)
    }

    /// A copy of the applied lock state with the index of the last entry
    /// it applied, read at one moment (a backup's consistent cut).
    pub fn applied_locks(&self) -> (u64, LockState) {
        let inner = lock_async(&self.inner);
        (inner.last_applied.map_or(0, |l| l.index), inner.locks.clone())
    }

    /// A copy of the applied lock state.
    pub fn locks(&self) -> LockState {
        lock_async(&self.inner).locks.clone()
    }

    /// Whether the commands applied since the last snapshot reached
    /// [`snapshot_threshold`] of the held keys. Read without the state's
    /// lock, so the cadence never waits behind a snapshot being written.
    pub fn snapshot_due(&self) -> bool {
        self.due.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Runs `f` on the applied lock state without copying it.
    pub fn with_locks<T>(&self, f: impl FnOnce(&LockState) -> T) -> T {
        f(&lock_async(&self.inner).locks)
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> StorageResult<Snapshot<TypeConfig>> {
        // Written straight from the applied state under its lock: no copy
        // of the state, one buffer of the exact size (docs/cluster-protocol.md, "Snapshots").
        // On a blocking-pool thread: at a million held keys this takes a few
        // hundred milliseconds, and on an async worker it stalled the node
        // (the apply waiting for the lock held the other worker), so the
        // three nodes, which reach the cadence together, stopped answering
        // heartbeats at the same moment. Now only applies wait.
        let inner = self.inner.clone();
        let due = self.due.clone();
        // The lock is held for a linear copy of the holders only; the sort
        // into key order runs after it is released.
        let built = tokio::task::spawn_blocking(move || {
            let (draft, last, membership) = {
                let mut inner = lock(&inner);
                inner.since_snapshot = 0;
                due.store(false, std::sync::atomic::Ordering::Relaxed);
                (inner.locks.snapshot_draft(), inner.last_applied, inner.membership.clone())
            };
            // The copy kept for `get_current_snapshot` is made here too: tens
            // of megabytes at a million holders, off the async workers.
            let data = draft.finish();
            (data.clone(), data, last, membership)
        })
        .await;
        let (data, kept, last, membership) = built.map_err(|e| StorageIOError::read_state_machine(&e))?;
        let seq = self.snapshot_seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let snapshot_id = match last {
            Some(l) => format!("{}-{}-{seq}", l.leader_id, l.index),
            None => format!("--{seq}"),
        };
        let meta = SnapshotMeta { last_log_id: last, last_membership: membership, snapshot_id };
        if let Some(dir) = &self.dir {
            persist(dir, &meta, &data).await?;
        }
        *lock(&self.snapshot) = Some(StoredSnapshot { meta: meta.clone(), data: kept });
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(data)) })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> StorageResult<(Option<LogId<NodeId>>, StoredMembership<NodeId, NodeInfo>)> {
        let inner = lock_async(&self.inner);
        Ok((inner.last_applied, inner.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> StorageResult<Vec<Vec<crate::locks::Applied>>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
    {
        let entries: Vec<_> = entries.into_iter().collect();
        let durable = self.durable.as_mut().filter(|_| !crate::mutation::on("apply-before-fsync"));
        if let (Some(durable), Some(last)) = (durable, entries.last().map(|e| e.log_id)) {
            let want = Some(super::disk::enc_id(&last));
            durable.wait_for(|d| *d >= want).await.map_err(|e| StorageIOError::apply(last, &e))?;
        }
        let mut inner = lock_async(&self.inner);
        let mut out = Vec::new();
        for entry in entries {
            inner.last_applied = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Blank => {
                    inner.since_snapshot += 1;
                    out.push(Vec::new());
                }
                EntryPayload::Normal(batch) => {
                    inner.since_snapshot += batch.0.len().max(1) as u64;
                    out.push(batch.apply(&mut inner.locks));
                }
                EntryPayload::Membership(m) => {
                    inner.since_snapshot += 1;
                    inner.membership = StoredMembership::new(Some(entry.log_id), m);
                    out.push(Vec::new());
                }
            }
        }
        if inner.since_snapshot >= snapshot_threshold(inner.locks.held_count()) {
            self.due.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> StorageResult<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, NodeInfo>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> StorageResult<()> {
        let data = snapshot.into_inner();
        // Validated completely before anything is replaced: garbage is an
        // error and the applied state stays as it was. Off the async workers
        // (a million holders take a while to read).
        let read = tokio::task::spawn_blocking(move || (LockState::from_snapshot(&data), data)).await;
        let (locks, data) = read.map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        let locks = locks.map_err(|e| {
            tracing::error!(error = %e, snapshot = %meta.snapshot_id, "snapshot refused");
            StorageIOError::read_snapshot(Some(meta.signature()), &e)
        })?;
        if let Some(dir) = &self.dir {
            persist(dir, meta, &data).await?;
        }
        {
            let mut inner = lock_async(&self.inner);
            inner.last_applied = meta.last_log_id;
            inner.membership = meta.last_membership.clone();
            inner.locks = locks;
            inner.since_snapshot = 0;
            self.due.store(false, std::sync::atomic::Ordering::Relaxed);
        }
        *lock(&self.snapshot) = Some(StoredSnapshot { meta: meta.clone(), data });
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<Snapshot<TypeConfig>>> {
        Ok(lock(&self.snapshot)
            .as_ref()
            .map(|s| Snapshot { meta: s.meta.clone(), snapshot: Box::new(Cursor::new(s.data.clone())) }))
    }
}

#[cfg(test)]
mod tests {
    use super::super::types::Batch;
    use super::*;
    use crate::locks::{Applied, Command, FreeReason};
    use openraft::{CommittedLeaderId, EntryPayload};
    use ticketing_proto::{Key, Owner, Token};

    fn entry(index: u64, payload: EntryPayload<TypeConfig>) -> Entry<TypeConfig> {
        Entry { log_id: LogId::new(CommittedLeaderId::new(1, NodeId(7)), index), payload }
    }

    /// A snapshot being copied holds the state's lock on a blocking-pool
    /// thread; an apply that waits for it must not hold the runtime's only
    /// worker (before, the whole node stopped answering meanwhile).
    #[test]
    fn an_apply_waiting_for_the_lock_leaves_a_one_thread_runtime_running() {
        use std::sync::mpsc::channel;
        use std::time::Duration;
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let sm = StateMachine::default();
        let (inner, (locked_tx, locked_rx), (release_tx, release_rx)) = (sm.inner.clone(), channel(), channel::<()>());
        let holder = std::thread::spawn(move || {
            let guard = lock(&inner);
            locked_tx.send(()).unwrap();
            let _ = release_rx.recv_timeout(Duration::from_secs(60));
            drop(guard);
        });
        locked_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        let (started_tx, started_rx) = channel();
        let mut applier = sm.clone();
        let apply = rt.spawn(async move {
            started_tx.send(()).unwrap();
            applier.apply(vec![entry(1, EntryPayload::Blank)]).await.unwrap().len()
        });
        started_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        // The apply is now waiting for the lock: another task still runs.
        let (ping_tx, ping_rx) = channel();
        rt.spawn(async move { ping_tx.send(()).unwrap() });
        let pinged = ping_rx.recv_timeout(Duration::from_secs(10));
        release_tx.send(()).unwrap();
        holder.join().unwrap();
        assert!(pinged.is_ok(), "no other task ran while the apply waited for the lock");
        assert_eq!(rt.block_on(apply).unwrap(), 1);
        assert_eq!(lock(&sm.inner).last_applied.map(|l| l.index), Some(1));
    }

    #[tokio::test]
    async fn applies_commands_and_round_trips_a_snapshot() {
        let mut sm = StateMachine::default();
        let grant = Command::Grant {
            key: Key::new("k").unwrap(),
            owner: Owner::new("o").unwrap(),
            lease_s: 5,
            micros: 100,
            dt: 0,
        };
        let one = |c: &Command| EntryPayload::Normal(Batch(vec![c.clone()]));
        let out = sm.apply(vec![entry(1, EntryPayload::Blank), entry(2, one(&grant))]).await.unwrap();
        assert_eq!(out, vec![vec![], vec![Applied::Granted(Token::new(100).unwrap())]]);
        let out = sm.apply(vec![entry(3, one(&grant))]).await.unwrap();
        assert_eq!(out, vec![vec![Applied::AlreadyHeld]]);

        let snap = sm.build_snapshot().await.unwrap();
        let mut other = StateMachine::default();
        other.install_snapshot(&snap.meta, snap.snapshot).await.unwrap();
        assert_eq!(other.locks(), sm.locks());
        assert_eq!(other.applied_state().await.unwrap().0.map(|l| l.index), Some(3));
        assert!(other.get_current_snapshot().await.unwrap().is_some());
    }

    #[tokio::test]
    async fn a_batch_entry_applies_its_commands_in_order() {
        use crate::test_fields::{k, o};
        let grant = |key: &str, owner: &str, micros| Command::Grant {
            key: k(key),
            owner: o(owner),
            lease_s: 5,
            micros,
            dt: micros,
        };
        let t = |n| Token::new(n).unwrap();
        let release = Command::Free {
            reason: FreeReason::Release,
            key: k("a"),
            owner: o("o1"),
            token: t(10),
            next: vec![],
            micros: 0,
            dt: 12,
        };
        let cmds = vec![
            grant("a", "o1", 10),
            grant("b", "o2", 5),
            Command::Tick { dt: 11 },
            grant("a", "o3", 50),
            release.clone(),
            release,
            grant("a", "o4", 0),
        ];
        let mut batched = StateMachine::default();
        let out = batched
            .apply(vec![entry(1, EntryPayload::Blank), entry(2, EntryPayload::Normal(Batch(cmds.clone())))])
            .await
            .unwrap();
        let expected = vec![
            Applied::Granted(t(10)),
            Applied::Granted(t(11)),
            Applied::Ticked,
            Applied::AlreadyHeld,
            Applied::Freed { reason: FreeReason::Release, handed_over: vec![] },
            Applied::NotHolder,
            Applied::Granted(t(12)),
        ];
        assert_eq!(out, vec![vec![], expected.clone()]);
        // The same as one entry per command.
        let mut single = StateMachine::default();
        let entries = cmds.iter().zip(1..).map(|(c, i)| entry(i, EntryPayload::Normal(Batch(vec![c.clone()]))));
        let out = single.apply(entries.collect::<Vec<_>>()).await.unwrap();
        assert_eq!(out.concat(), expected);
        assert_eq!(single.locks(), batched.locks());
        // The largest dt applied, also of a command that changed nothing.
        assert_eq!(batched.locks().domain_time(), 50);
    }

    #[test]
    fn a_batch_is_a_json_array_of_commands() {
        // The example of docs/cluster-protocol.md, "Log entries".
        use crate::test_fields::{k, o};
        let b = Batch(vec![
            Command::Grant { key: k("k1"), owner: o("o1"), lease_s: 5, micros: 1764547200000000, dt: 81234 },
            Command::Free {
                reason: FreeReason::Release,
                key: k("k2"),
                owner: o("o2"),
                token: Token::new(1764547199000001).unwrap(),
                next: vec![crate::locks::NextHolder::exclusive(o("o3"), 5)],
                micros: 1764547200000012,
                dt: 81234,
            },
            Command::Tick { dt: 81240 },
        ]);
        let json = serde_json::to_string(&b).unwrap();
        let doc = concat!(
            r#"[{"Grant":{"key":"k1","owner":"o1","lease_s":5,"micros":1764547200000000,"dt":81234}},"#,
            r#"{"Release":{"key":"k2","owner":"o2","token":1764547199000001,"next":{"owner":"o3","lease_s":5},"micros":1764547200000012,"dt":81234}},"#,
            r#"{"Tick":{"dt":81240}}]"#
        );
        assert_eq!(json, doc);
        assert_eq!(serde_json::from_str::<Batch>(&json).unwrap(), b);
        assert!(serde_json::from_str::<Batch>(r#"{"Tick":{"dt":1}}"#).is_err(), "a payload is an array");
    }

    #[tokio::test]
    async fn bad_snapshot_is_an_error_not_a_panic() {
        let mut sm = StateMachine::default();
        let grant = Command::Grant {
            key: Key::new("k").unwrap(),
            owner: Owner::new("o").unwrap(),
            lease_s: 5,
            micros: 1,
            dt: 0,
        };
        sm.apply(vec![entry(1, EntryPayload::Normal(Batch(vec![grant])))]).await.unwrap();
        let before = sm.locks();
        let meta = SnapshotMeta::default();
        let mut truncated = before.to_snapshot();
        truncated.pop();
        for bad in [b"garbage".to_vec(), b"{\"v\":1}".to_vec(), truncated] {
            let err = sm.install_snapshot(&meta, Box::new(Cursor::new(bad))).await.unwrap_err();
            assert!(err.to_string().to_lowercase().contains("snapshot"), "{err}");
            assert_eq!(sm.locks(), before, "a refused snapshot changed the state");
        }
    }

    #[tokio::test]
    async fn a_snapshot_is_due_after_the_threshold_and_not_after_it_is_built() {
        let mut sm = StateMachine::default();
        let tick = |dt| Command::Tick { dt };
        let batch: Vec<Command> = (0..SNAPSHOT_MIN_ENTRIES - 1).map(tick).collect();
        sm.apply(vec![entry(1, EntryPayload::Normal(Batch(batch)))]).await.unwrap();
        assert!(!sm.snapshot_due(), "due one command early");
        sm.apply(vec![entry(2, EntryPayload::Normal(Batch(vec![tick(SNAPSHOT_MIN_ENTRIES)])))]).await.unwrap();
        assert!(sm.snapshot_due());
        let built = sm.build_snapshot().await.unwrap();
        assert_eq!(built.meta.last_log_id.map(|l| l.index), Some(2));
        assert!(!sm.snapshot_due(), "still due after a snapshot was built");
        sm.apply(vec![entry(3, EntryPayload::Normal(Batch(vec![tick(SNAPSHOT_MIN_ENTRIES + 1)])))]).await.unwrap();
        assert!(!sm.snapshot_due());
    }

    #[test]
    fn snapshot_cadence_grows_with_the_state() {
        assert_eq!(snapshot_threshold(0), SNAPSHOT_MIN_ENTRIES);
        assert_eq!(snapshot_threshold(40_000), SNAPSHOT_MIN_ENTRIES);
        assert_eq!(snapshot_threshold(1_000_000), 125_000);
    }
}
