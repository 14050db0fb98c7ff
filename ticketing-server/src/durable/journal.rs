//! The write-ahead log of durable mode: the `raft-log` crate (the Raft log of
//! databend's openraft-based meta service). Every record carries a CRC32;
//! on open a record cut short at the end of the newest chunk file (a crash
//! mid-write: never acknowledged) is dropped, and any other damaged record is
//! an error. One `flush(sync)` is one `fdatasync` covering every record
//! appended before it.
//!
//! Every failed write or fsync is fail-stop ([`super::fail_stop`]): the
//! flush callbacks and [`Journal::stop`] never hand an I/O error back to a
//! caller that could go on.
//!
//! The journal keeps a watermark ([`Journal::durable`]): the id of the last
//! entry an fsync has covered. Why a cluster node needs it, and where it is
//! waited for, is said once, in `cluster::disk`.
//!
//! The journal reaches its log through [`LogStore`]: `raft-log` in every
//! build, or another store the data dir was given
//! ([`DataDir::on_log_store`]): a simulation's disk, which loses what was
//! not fsynced at a simulated power loss (docs/verification.md,
//! "Simulation").
//!
//! Log ids are `((term, leader NodeId), index)`, votes `((term, NodeId),
//! committed)`: tuples ordered as openraft orders them. A standalone server
//! writes term 1, leader 0.

use super::DataDir;
use openraft::storage::LogFlushed;
use raft_log::api::raft_log_writer::RaftLogWriter;
use raft_log::{Callback, RaftLog, Types};
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::watch;

/// The `raft-log` type parameters of the journal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JournalTypes;

/// `((term, leader NodeId), index)`.
pub type JLogId = ((u64, u64), u64);
/// `((term, NodeId), committed as 0/1)`.
pub type JVote = ((u64, u64), u64);

impl Types for JournalTypes {
    type LogId = JLogId;
    /// The entry's payload, serialized (postcard).
    type LogPayload = Vec<u8>;
    type Vote = JVote;
    type Callback = Flushed;
    type UserData = ();

    fn log_index(log_id: &JLogId) -> u64 {
        log_id.1
    }

    fn payload_size(payload: &Vec<u8>) -> u64 {
        payload.len() as u64
    }
}

/// What the journal's log is as of now: its last entry, the last purged,
/// the vote and the committed id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogView {
    /// The last entry's id.
    pub last: Option<JLogId>,
    /// The last purged entry's id.
    pub purged: Option<JLogId>,
    /// The vote.
    pub vote: Option<JVote>,
    /// The committed id.
    pub committed: Option<JLogId>,
}

impl LogView {
    /// The last entry's id.
    pub fn last(&self) -> Option<&JLogId> {
        self.last.as_ref()
    }
    /// The last purged entry's id.
    pub fn purged(&self) -> Option<&JLogId> {
        self.purged.as_ref()
    }
    /// The vote.
    pub fn vote(&self) -> Option<&JVote> {
        self.vote.as_ref()
    }
    /// The committed id.
    pub fn committed(&self) -> Option<&JLogId> {
        self.committed.as_ref()
    }
}

/// The storage under the journal: a write-ahead log of entries, a vote and
/// a committed id. Every write is queued in order; [`LogStore::flush`] with
/// `sync` makes everything queued before it durable and only then calls its
/// callback (with the error, if the write or fsync failed). Reads see every
/// queued write.
pub trait LogStore: Send {
    /// The state, every queued write included.
    fn log_state(&self) -> LogView;
    /// Appends entries (ids in increasing order, after the last).
    fn append_records(&mut self, records: Vec<(JLogId, Vec<u8>)>) -> io::Result<()>;
    /// Removes the entries from `index` on.
    fn truncate(&mut self, index: u64) -> io::Result<()>;
    /// Removes the entries up to `upto`, which becomes the last purged.
    fn purge(&mut self, upto: JLogId) -> io::Result<()>;
    /// Replaces the vote.
    fn save_vote(&mut self, vote: JVote) -> io::Result<()>;
    /// Replaces the committed id.
    fn commit(&mut self, id: JLogId) -> io::Result<()>;
    /// Writes out everything queued (and fsyncs it, with `sync`), then calls `callback`.
    fn flush(&mut self, sync: bool, callback: Option<Flushed>) -> io::Result<()>;
    /// The entries with index in `[from, to)`.
    fn read(&self, from: u64, to: u64) -> io::Result<Vec<(JLogId, Vec<u8>)>>;
}

impl dyn LogStore {
    /// Appends entries (ids in increasing order, after the last).
    pub fn append(&mut self, records: impl IntoIterator<Item = (JLogId, Vec<u8>)>) -> io::Result<()> {
        self.append_records(records.into_iter().collect())
    }
}

impl LogStore for RaftLog<JournalTypes> {
    fn log_state(&self) -> LogView {
        let st = RaftLog::log_state(self);
        LogView {
            last: st.last().copied(),
            purged: st.purged().copied(),
            vote: st.vote().copied(),
            committed: st.committed().copied(),
        }
    }
    fn append_records(&mut self, records: Vec<(JLogId, Vec<u8>)>) -> io::Result<()> {
        RaftLogWriter::append(self, records).map(drop)
    }
    fn truncate(&mut self, index: u64) -> io::Result<()> {
        RaftLogWriter::truncate(self, index).map(drop)
    }
    fn purge(&mut self, upto: JLogId) -> io::Result<()> {
        RaftLogWriter::purge(self, upto).map(drop)
    }
    fn save_vote(&mut self, vote: JVote) -> io::Result<()> {
        RaftLogWriter::save_vote(self, vote).map(drop)
    }
    fn commit(&mut self, id: JLogId) -> io::Result<()> {
        RaftLogWriter::commit(self, id).map(drop)
    }
    fn flush(&mut self, sync: bool, callback: Option<Flushed>) -> io::Result<()> {
        RaftLogWriter::flush(self, sync, callback)
    }
    fn read(&self, from: u64, to: u64) -> io::Result<Vec<(JLogId, Vec<u8>)>> {
        RaftLog::read(self, from, to).collect()
    }
}

/// The last entry of an append, to be recorded as on disk once its fsync ends.
pub struct Mark {
    last: JLogId,
    durable: Arc<watch::Sender<Option<JLogId>>>,
    path: Arc<PathBuf>,
}

impl Mark {
    fn reached(&self) {
        let last = Some(self.last);
        self.durable.send_if_modified(|d| {
            let newer = *d < last;
            if newer {
                *d = last;
            }
            newer
        });
    }
}

/// Who is told when a flush reached the disk. A failed flush is fail-stop,
/// whoever waits for it.
pub enum Flushed {
    /// openraft's append callback (called only after the fsync).
    Raft(LogFlushed<crate::cluster::types::TypeConfig>, Mark),
    /// A leader's own entries, already reported written to openraft: the
    /// fsync only moves the watermark.
    Ahead(Mark),
    /// A waiting task ([`Journal::notify`]).
    Notify(tokio::sync::oneshot::Sender<()>, Arc<PathBuf>),
}

impl fmt::Debug for Flushed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Flushed::Raft(..) => "Flushed::Raft",
            Flushed::Ahead(_) => "Flushed::Ahead",
            Flushed::Notify(..) => "Flushed::Notify",
        })
    }
}

impl Flushed {
    /// The flush ended with `res` (what a [`LogStore`] calls; an error is fail-stop).
    pub fn completed(self, res: Result<(), io::Error>) {
        Callback::send(self, res)
    }
}

impl Callback for Flushed {
    fn send(self, res: Result<(), io::Error>) {
        if let Err(e) = res {
            // Nobody is told: openraft would count a leader's entries it may
            // already have counted, a standalone batch would be answered `E`
            // while its record might yet reach the disk.
            let path = match &self {
                Flushed::Raft(_, mark) | Flushed::Ahead(mark) => mark.path.clone(),
                Flushed::Notify(_, path) => path.clone(),
            };
            super::fail_stop(&path, &e);
        }
        match self {
            Flushed::Raft(cb, mark) => {
                mark.reached();
                cb.log_io_completed(Ok(()))
            }
            Flushed::Ahead(mark) => mark.reached(),
            Flushed::Notify(tx, _) => {
                let _ = tx.send(());
            }
        }
    }
}

/// An open journal, shared by the tasks that append to and read it.
#[derive(Clone)]
pub struct Journal {
    log: Arc<Mutex<Box<dyn LogStore>>>,
    /// The log's directory (named by a fail-stop).
    path: Arc<PathBuf>,
    /// The id of the last entry an fsync has covered.
    durable: Arc<watch::Sender<Option<JLogId>>>,
}

impl fmt::Debug for Journal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Journal")
    }
}

/// Chunk files are closed (and can be removed once purged) at this many records.
const CHUNK_MAX_RECORDS: usize = 20_000;
/// … or at this size.
const CHUNK_MAX_SIZE: usize = 64 << 20;

impl Journal {
    /// Opens the journal of `dir` (replaying it: a damaged record is an error
    /// naming the file), on the store `dir` was given if any.
    pub fn open(dir: &DataDir) -> Result<Journal, super::DataDirError> {
        let log: Box<dyn LogStore> = match dir.log_store() {
            Some(open) => open().map_err(|e| dir.log_error(e))?,
            None => Box::new(Self::open_raft_log(dir)?),
        };
        // Everything found on open is on disk.
        let durable = Arc::new(watch::Sender::new(log.log_state().last));
        Ok(Journal { log: Arc::new(Mutex::new(log)), path: Arc::new(dir.log_dir()), durable })
    }

    /// `raft-log` in `dir`'s `log/`, its torn tail dropped.
    fn open_raft_log(dir: &DataDir) -> Result<RaftLog<JournalTypes>, super::DataDirError> {
        let mut config = raft_log::Config::new(dir.log_dir().display().to_string());
        config.wal.chunk_max_records = Some(CHUNK_MAX_RECORDS);
        config.wal.chunk_max_size = Some(CHUNK_MAX_SIZE);
        // No wait for more flush requests before the fdatasync: the lock
        // manager has one batch in flight, so nothing else would come, and
        // any wait is added to every answer. Measured with `ticketing-bench
        // --durable` (3 nodes, one run): 200 µs of wait gave 0.40x the W1
        // throughput of no wait at one client and 0.53x at 64; two or four
        // batches in flight instead of one gave 0.77x and 0.80x at 64.
        config.wal.flush_batch_wait = Some(std::time::Duration::ZERO);
        // Payloads are read back only at start and by lagging followers.
        config.log_cache_capacity = Some(64 << 20);
        let config = Arc::new(config);
        let log = match RaftLog::open(config.clone()) {
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                // A torn tail raft-log does not drop by itself (super::torn).
                match super::torn::cut_torn_tail(&dir.log_dir()) {
                    Ok(Some((chunk, at, cut))) => {
                        tracing::warn!(
                            chunk = %chunk.display(),
                            offset = at,
                            bytes = cut,
                            "dropped a torn tail of the log (a write a crash cut short; never acknowledged)"
                        );
                        RaftLog::open(config).map_err(|e| dir.log_error(e))?
                    }
                    Ok(None) => return Err(dir.log_error(e)),
                    Err(io) => return Err(dir.log_error(io)),
                }
            }
            other => other.map_err(|e| dir.log_error(e))?,
        };
        Ok(log)
    }

    /// The watermark: the id of the last entry an fsync has covered.
    pub fn durable(&self) -> watch::Receiver<Option<JLogId>> {
        self.durable.subscribe()
    }

    /// A [`Mark`] of `last`, for a flush's callback.
    pub fn mark(&self, last: JLogId) -> Mark {
        Mark { last, durable: self.durable.clone(), path: self.path.clone() }
    }

    /// A flush callback that wakes `tx` once the flush is on disk.
    pub fn notify(&self, tx: tokio::sync::oneshot::Sender<()>) -> Flushed {
        Flushed::Notify(tx, self.path.clone())
    }

    /// Fail-stop on a failed write to the log ([`super::fail_stop`]).
    pub fn stop(&self, error: &io::Error) -> ! {
        super::fail_stop(&self.path, error)
    }

    /// Sets the watermark to the log's last entry, all of it on disk: after a
    /// truncation and its fsync (the entries that replace the cut ones may
    /// have lower ids than those).
    pub fn reset_durable(&self) {
        let last = self.lock().log_state().last;
        self.durable.send_replace(last);
    }

    /// The log, locked (held briefly: appends only fill a buffer).
    pub fn lock(&self) -> MutexGuard<'_, Box<dyn LogStore>> {
        // A poisoned lock means a panic mid-call; the log's state is its own.
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues an fsync of everything appended so far; resolves once it is on
    /// disk. A failure, or a flush worker that stopped, is fail-stop.
    pub async fn sync(&self) {
        let rx = self.sync_queued();
        if rx.await.is_err() {
            self.stop(&io::Error::other("the journal's flush worker stopped"));
        }
    }

    /// Queues an fsync of everything appended so far: the receiver is woken
    /// once it is on disk (fail-stop on a failure).
    pub fn sync_queued(&self) -> tokio::sync::oneshot::Receiver<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let flushed = self.notify(tx);
        if let Err(e) = self.lock().flush(true, Some(flushed)) {
            self.stop(&e);
        }
        rx
    }

    /// The payloads of the entries with index in `[from, to)`, with their log ids.
    pub fn read(&self, from: u64, to: u64) -> io::Result<Vec<(JLogId, Vec<u8>)>> {
        self.lock().read(from, to)
    }
}
