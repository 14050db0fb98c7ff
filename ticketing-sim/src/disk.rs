//! A simulated disk under a node's journal, with the power-loss semantics
//! of docs/deployment.md ("What each mode survives"): a write is durable
//! only once an fsync that covers it has ended; at a crash, every write after the last
//! such fsync may be lost. Which of them survive is drawn from the seed: a
//! prefix of them in the order they were written (the log is one file
//! written at its end; a record cut short in the middle, the torn tail, is
//! dropped at start as if it had not been written).
//!
//! The disk outlives the node: the harness keeps one per node and hands it
//! to each start of that node's process ([`SimDisk::open`]); a crash calls
//! [`SimDisk::power_loss`] before the node starts again.
//!
//! An fsync takes simulated time: each disk is fast (0.2–2 ms, two disks in
//! five), slow (2–20 ms, two in five) or failing slowly (20–250 ms), and
//! one fsync in 20 stalls for 50–400 ms, as a shared or loaded disk's do. Fsyncs end in the order they were asked for, as
//! `raft-log`'s flush worker ends them.

use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use std::collections::BTreeMap;

use ticketing_server::durable::journal::{Flushed, JLogId, JVote, LogStore, LogView};
use ticketing_verify::rng::Rng;
use tokio::sync::mpsc;

/// A log kept in memory, as a [`LogStore`] keeps it: entries by index, the
/// last purged id, the vote and the committed id. A simulated disk keeps
/// its durable and its queued state as two of these.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogImage {
    /// Entries by index.
    pub entries: BTreeMap<u64, (JLogId, Vec<u8>)>,
    /// The last purged entry's id.
    pub purged: Option<JLogId>,
    /// The vote.
    pub vote: Option<JVote>,
    /// The committed id.
    pub committed: Option<JLogId>,
}

/// One write to a [`LogStore`], as a simulated disk queues it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogWrite {
    /// Entries appended.
    Append(Vec<(JLogId, Vec<u8>)>),
    /// Entries from this index on removed.
    Truncate(u64),
    /// Entries up to this id removed.
    Purge(JLogId),
    /// The vote.
    Vote(JVote),
    /// The committed id.
    Commit(JLogId),
}

impl LogImage {
    /// The image with `write` done (as `raft-log` replays its records).
    pub fn apply(&mut self, write: &LogWrite) {
        match write {
            LogWrite::Append(records) => {
                for (id, payload) in records {
                    self.entries.insert(id.1, (*id, payload.clone()));
                }
            }
            LogWrite::Truncate(index) => {
                self.entries.split_off(index);
            }
            LogWrite::Purge(upto) => {
                self.entries = self.entries.split_off(&(upto.1 + 1));
                self.purged = Some(*upto);
            }
            LogWrite::Vote(v) => self.vote = Some(*v),
            LogWrite::Commit(id) => self.committed = Some(*id),
        }
    }

    /// The state a [`LogStore`] reports.
    pub fn view(&self) -> LogView {
        LogView {
            last: self.entries.values().next_back().map(|(id, _)| *id).or(self.purged),
            purged: self.purged,
            vote: self.vote,
            committed: self.committed,
        }
    }

    /// The entries with index in `[from, to)`.
    pub fn read(&self, from: u64, to: u64) -> Vec<(JLogId, Vec<u8>)> {
        if from >= to {
            return Vec::new();
        }
        self.entries.range(from..to).map(|(_, e)| e.clone()).collect()
    }
}

/// What is on the disk, and what is written but not yet fsynced.
#[derive(Debug, Default)]
struct State {
    /// What survives any crash: every write an fsync has covered.
    durable: LogImage,
    /// Writes after the last fsync that ended, in order, each with its number.
    pending: Vec<(u64, LogWrite)>,
    /// What the node reads: `durable` with `pending` done.
    current: LogImage,
    /// Writes so far (the number of the next one).
    written: u64,
    /// The node's start (a new one after each crash): an fsync asked by
    /// an earlier start never ends.
    start: u64,
    /// Draws the fsync times and what a crash keeps.
    rng: Option<Rng>,
    /// Writes lost at crashes so far.
    lost: u64,
    /// The usual fsync time's range, µs.
    fsync_us: (u64, u64),
}

impl State {
    fn write(&mut self, w: LogWrite) {
        self.current.apply(&w);
        self.written += 1;
        self.pending.push((self.written, w));
    }

    /// Every write up to number `upto` is durable.
    fn synced(&mut self, upto: u64) {
        let keep = self.pending.iter().take_while(|(n, _)| *n <= upto).count();
        for (_, w) in self.pending.drain(..keep) {
            self.durable.apply(&w);
        }
    }
}

/// One node's disk; clones share it.
#[derive(Clone, Debug)]
pub struct SimDisk {
    state: Arc<Mutex<State>>,
}

impl SimDisk {
    /// An empty disk whose fsync times and crash losses come from `seed`.
    pub fn new(seed: u64) -> SimDisk {
        let mut rng = Rng::new(seed);
        let fsync_us = match rng.index(5) {
            0 | 1 => (200, 2_000),
            2 | 3 => (2_000, 20_000),
            _ => (20_000, 250_000),
        };
        let state = State { rng: Some(rng), fsync_us, ..State::default() };
        SimDisk { state: Arc::new(Mutex::new(state)) }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The journal's store for a start of the node: its fsyncs run on the
    /// calling runtime (the node's host).
    pub fn open(&self) -> io::Result<Box<dyn LogStore>> {
        let start = {
            let mut s = self.lock();
            s.start += 1;
            s.start
        };
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(flusher(self.clone(), start, rx));
        Ok(Box::new(SimLog { disk: self.clone(), flushes: tx }))
    }

    /// A power loss: the writes not fsynced are lost, but for a prefix of
    /// them drawn from the seed (none, some or all). Returns how many were lost.
    pub fn power_loss(&self) -> u64 {
        let mut s = self.lock();
        let n = s.pending.len() as u64;
        let kept = match s.rng.as_mut() {
            Some(rng) if n > 0 => match rng.index(4) {
                0 => 0,
                1 => n,
                _ => rng.range(0, n),
            },
            _ => 0,
        };
        let upto = s.pending.get(kept as usize).map_or(s.written, |(num, _)| num - 1);
        s.synced(upto);
        s.pending.clear();
        s.current = s.durable.clone();
        s.start += 1;
        s.lost += n - kept;
        n - kept
    }

    /// Writes not yet fsynced.
    pub fn unsynced(&self) -> usize {
        self.lock().pending.len()
    }

    /// Writes lost at power losses so far.
    pub fn lost(&self) -> u64 {
        self.lock().lost
    }
}

/// An fsync asked for: everything written up to `upto`; `sync` false only writes.
struct Flush {
    upto: u64,
    sync: bool,
    callback: Option<Flushed>,
}

/// Ends the fsyncs of one start of the node, one after the other.
async fn flusher(disk: SimDisk, start: u64, mut rx: mpsc::UnboundedReceiver<Flush>) {
    while let Some(f) = rx.recv().await {
        let took = {
            let mut s = disk.lock();
            let (lo, hi) = s.fsync_us;
            let rng = s.rng.as_mut().expect("a disk has its rng");
            if rng.chance(50) {
                Duration::from_micros(rng.range(50_000, 400_000))
            } else {
                Duration::from_micros(rng.range(lo, hi))
            }
        };
        tokio::time::sleep(took).await;
        {
            let mut s = disk.lock();
            if s.start != start {
                // The node crashed meanwhile: this start's fsyncs never end.
                return;
            }
            if f.sync {
                s.synced(f.upto);
            }
        }
        if let Some(cb) = f.callback {
            cb.completed(Ok(()));
        }
    }
}

/// The journal's view of the disk.
struct SimLog {
    disk: SimDisk,
    flushes: mpsc::UnboundedSender<Flush>,
}

impl SimLog {
    fn write(&mut self, w: LogWrite) -> io::Result<()> {
        self.disk.lock().write(w);
        Ok(())
    }
}

impl LogStore for SimLog {
    fn log_state(&self) -> LogView {
        self.disk.lock().current.view()
    }
    fn append_records(&mut self, records: Vec<(JLogId, Vec<u8>)>) -> io::Result<()> {
        self.write(LogWrite::Append(records))
    }
    fn truncate(&mut self, index: u64) -> io::Result<()> {
        self.write(LogWrite::Truncate(index))
    }
    fn purge(&mut self, upto: JLogId) -> io::Result<()> {
        self.write(LogWrite::Purge(upto))
    }
    fn save_vote(&mut self, vote: JVote) -> io::Result<()> {
        self.write(LogWrite::Vote(vote))
    }
    fn commit(&mut self, id: JLogId) -> io::Result<()> {
        self.write(LogWrite::Commit(id))
    }
    fn flush(&mut self, sync: bool, callback: Option<Flushed>) -> io::Result<()> {
        let upto = self.disk.lock().written;
        self.flushes
            .send(Flush { upto, sync, callback })
            .map_err(|_| io::Error::other("the simulated disk's flusher stopped"))
    }
    fn read(&self, from: u64, to: u64) -> io::Result<Vec<(JLogId, Vec<u8>)>> {
        Ok(self.disk.lock().current.read(from, to))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(i: u64) -> JLogId {
        ((1, 1), i)
    }

    /// What an fsync covered survives a power loss; what it did not may not.
    #[tokio::test(start_paused = true)]
    async fn a_power_loss_keeps_what_was_fsynced() {
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..40 {
            let disk = SimDisk::new(seed);
            let mut log = disk.open().unwrap();
            log.append((1..=3).map(|i| (id(i), vec![i as u8]))).unwrap();
            let (tx, rx) = tokio::sync::oneshot::channel();
            let cb = Flushed::Notify(tx, Arc::new(std::path::PathBuf::from("sim")));
            log.flush(true, Some(cb)).unwrap();
            rx.await.unwrap();
            // Three writes of one entry each, none fsynced.
            for i in 4..=6 {
                log.append([(id(i), vec![i as u8])]).unwrap();
            }
            assert_eq!(log.log_state().last, Some(id(6)));
            let lost = disk.power_loss();
            let log = disk.open().unwrap();
            let last = log.log_state().last.unwrap().1;
            assert!((3..=6).contains(&last), "seed {seed}: last {last}");
            assert_eq!(lost, 6 - last, "seed {seed}");
            assert_eq!(log.read(1, 10).unwrap().len() as u64, last);
            seen.insert(last);
        }
        // Seeds lose none, some and all of the unsynced writes.
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![3, 4, 5, 6]);
    }

    /// An fsync asked before a crash never reports done after it.
    #[tokio::test(start_paused = true)]
    async fn an_fsync_of_a_crashed_start_never_ends() {
        let disk = SimDisk::new(7);
        let mut log = disk.open().unwrap();
        log.append([(id(1), vec![1])]).unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel();
        log.flush(true, Some(Flushed::Notify(tx, Arc::new("sim".into())))).unwrap();
        disk.power_loss();
        assert!(rx.await.is_err(), "the callback is dropped, never called");
    }
}
