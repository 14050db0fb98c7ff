//! The durable Raft log (`--data-dir`, docs/deployment.md "Durability"):
//! openraft's [`RaftLogStorage`] over the data dir's journal
//! ([`crate::durable::journal`]). A vote is fsynced before `save_vote`
//! returns (so before it is granted); appended entries are reported flushed
//! to openraft only from the fsync's callback (so before they are
//! acknowledged to the leader); truncation and purge are fsynced too.
//!
//! The one exception is the leader's own entries: it reports them written as
//! soon as they are queued, so openraft sends them to the followers while the
//! leader's fsync runs, not after it (a commit then waits for one fsync
//! round, not two). openraft may count the leader's copy before it is on
//! disk, so what a commit makes visible waits for the journal's watermark
//! ([`Journal::durable`]): the state machine applies an entry only once the
//! fsync on this node covers it, and the followers are told an index is
//! committed only up to the leader's watermark ([`clamp_commit`]). An entry
//! is thus on the disks of a majority, the leader's included, before any
//! node applies it or any client hears of it.
//!
//! A failed write or fsync is fail-stop ([`Journal::stop`]): the process
//! exits before openraft could count, apply or answer anything more.

use super::types::{NodeId, TypeConfig};
use crate::durable::journal::{Flushed, JLogId, JVote, Journal};
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{
    CommittedLeaderId, Entry, EntryPayload, LogId, LogState, RaftLogReader, StorageError, StorageIOError, Vote,
};
use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};

type StorageResult<T> = Result<T, StorageError<NodeId>>;

pub(crate) fn enc_id(id: &LogId<NodeId>) -> JLogId {
    ((id.leader_id.term, id.leader_id.node_id.0), id.index)
}

pub(crate) fn dec_id(id: &JLogId) -> LogId<NodeId> {
    LogId::new(CommittedLeaderId::new(id.0 .0, NodeId(id.0 .1)), id.1)
}

fn enc_vote(v: &Vote<NodeId>) -> JVote {
    ((v.leader_id.term, v.leader_id.node_id.0), u64::from(v.committed))
}

fn dec_vote(v: &JVote) -> Vote<NodeId> {
    let vote = Vote::new(v.0 .0, NodeId(v.0 .1));
    if v.1 == 1 {
        Vote::new_committed(v.0 .0, NodeId(v.0 .1))
    } else {
        vote
    }
}

fn read_err(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::read_logs(&e).into()
}

/// The durable Raft log of node `me`.
#[derive(Debug, Clone)]
pub struct DiskLog {
    journal: Journal,
    me: NodeId,
}

impl DiskLog {
    /// The Raft log of node `me`, kept in `journal`.
    pub fn new(journal: Journal, me: NodeId) -> DiskLog {
        DiskLog { journal, me }
    }
}

/// Whether `entries` are this node's own, proposed as the leader of the vote
/// it holds: the vote on disk is committed and this node's, and every entry
/// was written under it. Entries of an earlier term this node once led come
/// from another leader, and wait for their fsync as every follower's do.
fn leads(vote: Option<&JVote>, me: NodeId, entries: &[(JLogId, Vec<u8>)]) -> bool {
    match vote {
        Some(&(leader, 1)) if leader.1 == me.0 => entries.iter().all(|(id, _)| id.0 == leader),
        _ => false,
    }
}

/// The vote a node restarts with. openraft 0.9 restarts a node whose vote
/// on disk is its own committed vote as the leader of that term at once,
/// without an election (`Engine::startup`). That breaks two promises here:
/// the leader reports its own entries written before its fsync ends, so a
/// power loss can take from its disk entries the followers keep, and a
/// leader back in the same term would then write different entries under
/// the same log ids (the replicas disagree: a double grant after the next
/// failover); and even after `kill -9` it would serve at once from a state
/// machine that has applied only up to the committed index it last wrote,
/// not every entry it had answered (an answered grant reads `N`, an
/// answered release comes back held). So a restarted leader starts as a
/// candidate that has voted for itself in its old term: it campaigns in a
/// later one like every other node, the election picks the longest log,
/// and the winner serves only once its own term's first entry is applied
/// (docs/deployment.md, "Durability").
fn restart_vote(vote: Vote<NodeId>, me: NodeId) -> Vote<NodeId> {
    if vote.is_committed() && vote.leader_id().voted_for() == Some(me) {
        Vote::new(vote.leader_id().term, me)
    } else {
        vote
    }
}

/// The commit index to send a follower: at most what the leader's own fsync
/// has covered (`durable`, its watermark), so that a follower never applies
/// an entry a crash of the leader could still take back.
pub fn clamp_commit(committed: Option<LogId<NodeId>>, durable: Option<JLogId>) -> Option<LogId<NodeId>> {
    committed.min(durable.as_ref().map(dec_id))
}

impl RaftLogReader<TypeConfig> for DiskLog {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry<TypeConfig>>> {
        let from = match range.start_bound() {
            Bound::Included(n) => *n,
            Bound::Excluded(n) => n.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let to = match range.end_bound() {
            Bound::Included(n) => n.saturating_add(1),
            Bound::Excluded(n) => *n,
            Bound::Unbounded => u64::MAX,
        };
        if from >= to {
            return Ok(Vec::new());
        }
        let records = self.journal.read(from, to).map_err(read_err)?;
        let mut out = Vec::with_capacity(records.len());
        for (id, bytes) in records {
            let payload: EntryPayload<TypeConfig> = postcard::from_bytes(&bytes).map_err(read_err)?;
            out.push(Entry { log_id: dec_id(&id), payload });
        }
        Ok(out)
    }
}

impl RaftLogStorage<TypeConfig> for DiskLog {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        let log = self.journal.lock();
        let st = log.log_state();
        let last_purged_log_id = st.purged().map(dec_id);
        let last_log_id = st.last().map(dec_id).or(last_purged_log_id);
        Ok(LogState { last_purged_log_id, last_log_id })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> StorageResult<()> {
        if let Err(e) = self.journal.lock().save_vote(enc_vote(vote)) {
            self.journal.stop(&e);
        }
        self.journal.sync().await;
        Ok(())
    }

    /// The vote on disk, except that this node's own committed vote (it was
    /// the leader) comes back uncommitted: see [`restart_vote`].
    async fn read_vote(&mut self) -> StorageResult<Option<Vote<NodeId>>> {
        Ok(self.journal.lock().log_state().vote().map(|v| restart_vote(dec_vote(v), self.me)))
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> StorageResult<()> {
        // Written with the next fsync: a committed index that is lost is
        // found again from the leader (openraft does not need it durable).
        if let Some(c) = committed {
            let mut log = self.journal.lock();
            if log.log_state().committed() < Some(&enc_id(&c)) {
                if let Err(e) = log.commit(enc_id(&c)) {
                    self.journal.stop(&e);
                }
            }
        }
        Ok(())
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId<NodeId>>> {
        Ok(self.journal.lock().log_state().committed().map(dec_id))
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
    {
        let mut records = Vec::new();
        for e in entries {
            let bytes = postcard::to_stdvec(&e.payload)
                .map_err(|err| StorageError::from(StorageIOError::write_logs(&io::Error::other(err))))?;
            records.push((enc_id(&e.log_id), bytes));
        }
        let Some(&(last, _)) = records.last() else {
            callback.log_io_completed(Ok(()));
            return Ok(());
        };
        let mark = self.journal.mark(last);
        let mut log = self.journal.lock();
        let ahead = leads(log.log_state().vote(), self.me, &records) || crate::mutation::on("ack-before-fsync");
        if let Err(e) = log.append(records) {
            self.journal.stop(&e);
        }
        if ahead {
            if let Err(e) = log.flush(true, Some(Flushed::Ahead(mark))) {
                self.journal.stop(&e);
            }
            drop(log);
            callback.log_io_completed(Ok(()));
            return Ok(());
        }
        // openraft is told the entries are flushed only once they are on disk.
        if let Err(e) = log.flush(true, Some(Flushed::Raft(callback, mark))) {
            self.journal.stop(&e);
        }
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        if let Err(e) = self.journal.lock().truncate(log_id.index) {
            self.journal.stop(&e);
        }
        self.journal.sync().await;
        self.journal.reset_durable();
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        if let Err(e) = self.journal.lock().purge(enc_id(&log_id)) {
            self.journal.stop(&e);
        }
        self.journal.sync().await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::store::StateMachine;
    use crate::durable::{DataDir, Mode};
    use openraft::storage::RaftStateMachine;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    /// A fresh data dir per store; removed when the suite's guard drops.
    struct Builder;

    struct Guard(PathBuf);

    impl Drop for Guard {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    static SEQ: AtomicU64 = AtomicU64::new(0);

    impl openraft::testing::StoreBuilder<TypeConfig, DiskLog, StateMachine, Guard> for Builder {
        async fn build(&self) -> StorageResult<(Guard, DiskLog, StateMachine)> {
            let n = SEQ.fetch_add(1, Ordering::Relaxed);
            let path = std::env::temp_dir().join(format!("ticketing-disk-suite-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            let dir = Arc::new(DataDir::open(&path, Mode::Cluster, || 1).map_err(|e| read_err(io::Error::other(e)))?);
            let journal = Journal::open(&dir).map_err(|e| read_err(io::Error::other(e)))?;
            // The suite applies entries it never appended: a watermark past
            // every entry (the wait itself has its own test below).
            let (_, past_all) = tokio::sync::watch::channel(Some(((u64::MAX, u64::MAX), u64::MAX)));
            let sm = StateMachine::recover(dir, past_all).map_err(|e| read_err(io::Error::other(e)))?;
            Ok((Guard(path), DiskLog::new(journal, NodeId(1)), sm))
        }
    }

    type S = openraft::testing::Suite<TypeConfig, DiskLog, StateMachine, Builder, Guard>;
    type Fut = std::pin::Pin<Box<dyn std::future::Future<Output = StorageResult<()>> + Send>>;

    /// openraft's own storage test suite against the durable log and the state machine.
    #[test]
    fn passes_the_openraft_storage_suite() {
        let mut failed = Vec::new();
        let mut run = |name: &str, f: fn(DiskLog, StateMachine) -> Fut| {
            let rt = tokio::runtime::Runtime::new().unwrap();
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                rt.block_on(async {
                    let (_g, l, m) =
                        openraft::testing::StoreBuilder::build(&Builder).await.map_err(|e| e.to_string())?;
                    f(l, m).await.map_err(|e| e.to_string())
                })
            }));
            match r {
                Ok(Ok(())) => {}
                Ok(Err(e)) => failed.push(format!("{name}: {e}")),
                Err(_) => failed.push(format!("{name}: panicked")),
            }
        };
        run("last_membership_in_log_initial", |l, m| Box::pin(S::last_membership_in_log_initial(l, m)));
        run("last_membership_in_log", |l, m| Box::pin(S::last_membership_in_log(l, m)));
        run("last_membership_in_log_multi_step", |l, m| Box::pin(S::last_membership_in_log_multi_step(l, m)));
        run("get_membership_initial", |l, m| Box::pin(S::get_membership_initial(l, m)));
        run("get_membership_from_log_and_empty_sm", |l, m| Box::pin(S::get_membership_from_log_and_empty_sm(l, m)));
        run("get_membership_from_empty_log_and_sm", |l, m| Box::pin(S::get_membership_from_empty_log_and_sm(l, m)));
        run("get_membership_from_log_le_sm_last_applied", |l, m| {
            Box::pin(S::get_membership_from_log_le_sm_last_applied(l, m))
        });
        run("get_membership_from_log_gt_sm_last_applied_1", |l, m| {
            Box::pin(S::get_membership_from_log_gt_sm_last_applied_1(l, m))
        });
        run("get_membership_from_log_gt_sm_last_applied_2", |l, m| {
            Box::pin(S::get_membership_from_log_gt_sm_last_applied_2(l, m))
        });
        run("get_initial_state_without_init", |l, m| Box::pin(S::get_initial_state_without_init(l, m)));
        // Not run: get_initial_state_membership_from_log_and_sm appends
        // index 1 after get_initial_state purged the log up to the state
        // machine's index 2, which openraft itself never does; the WAL
        // refuses an append below its purge point ("cannot be reversed").
        run("get_initial_state_with_state", |l, m| Box::pin(S::get_initial_state_with_state(l, m)));
        run("get_initial_state_last_log_gt_sm", |l, m| Box::pin(S::get_initial_state_last_log_gt_sm(l, m)));
        run("get_initial_state_last_log_lt_sm", |l, m| Box::pin(S::get_initial_state_last_log_lt_sm(l, m)));
        run("get_initial_state_log_ids", |l, m| Box::pin(S::get_initial_state_log_ids(l, m)));
        run("get_initial_state_re_apply_committed", |l, m| Box::pin(S::get_initial_state_re_apply_committed(l, m)));
        run("save_vote", |l, m| Box::pin(S::save_vote(l, m)));
        run("get_log_entries", |l, m| Box::pin(S::get_log_entries(l, m)));
        run("limited_get_log_entries", |l, m| Box::pin(S::limited_get_log_entries(l, m)));
        run("try_get_log_entry", |l, m| Box::pin(S::try_get_log_entry(l, m)));
        run("initial_logs", |l, m| Box::pin(S::initial_logs(l, m)));
        run("get_log_state", |l, m| Box::pin(S::get_log_state(l, m)));
        run("get_log_id", |l, m| Box::pin(S::get_log_id(l, m)));
        run("last_id_in_log", |l, m| Box::pin(S::last_id_in_log(l, m)));
        run("last_applied_state", |l, m| Box::pin(S::last_applied_state(l, m)));
        run("purge_logs_upto_0", |l, m| Box::pin(S::purge_logs_upto_0(l, m)));
        run("purge_logs_upto_5", |l, m| Box::pin(S::purge_logs_upto_5(l, m)));
        run("purge_logs_upto_20", |l, m| Box::pin(S::purge_logs_upto_20(l, m)));
        run("delete_logs_since_11", |l, m| Box::pin(S::delete_logs_since_11(l, m)));
        run("delete_logs_since_0", |l, m| Box::pin(S::delete_logs_since_0(l, m)));
        run("append_to_log", |l, m| Box::pin(S::append_to_log(l, m)));
        run("snapshot_meta", |l, m| Box::pin(S::snapshot_meta(l, m)));
        run("apply_single", |l, m| Box::pin(S::apply_single(l, m)));
        run("apply_multiple", |l, m| Box::pin(S::apply_multiple(l, m)));
        let rt = tokio::runtime::Runtime::new().unwrap();
        if let Err(e) = rt.block_on(S::transfer_snapshot(&Builder)) {
            failed.push(format!("transfer_snapshot: {e}"));
        }
        assert!(failed.is_empty(), "{failed:#?}");
    }

    /// What was appended, voted and committed is there after a reopen.
    #[tokio::test]
    async fn vote_and_entries_survive_a_reopen() {
        let path = std::env::temp_dir().join(format!("ticketing-disk-reopen-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        let open = || {
            let dir = DataDir::open(&path, Mode::Cluster, || 3).unwrap();
            let journal = Journal::open(&dir).unwrap();
            (dir, DiskLog::new(journal, NodeId(1)))
        };
        let id = |i| LogId::new(CommittedLeaderId::new(2, NodeId(3)), i);
        {
            let (_dir, mut log) = open();
            log.save_vote(&Vote::new_committed(2, NodeId(3))).await.unwrap();
            let entries: Vec<Entry<TypeConfig>> =
                (1..=3).map(|i| Entry { log_id: id(i), payload: EntryPayload::Blank }).collect();
            log.journal
                .lock()
                .append(entries.iter().map(|e| (enc_id(&e.log_id), postcard::to_stdvec(&e.payload).unwrap())))
                .unwrap();
            log.journal.sync().await;
            log.save_committed(Some(id(2))).await.unwrap();
            log.journal.sync().await;
        }
        let (_dir, mut log) = open();
        assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new_committed(2, NodeId(3))));
        assert_eq!(log.get_log_state().await.unwrap().last_log_id, Some(id(3)));
        assert_eq!(log.read_committed().await.unwrap(), Some(id(2)));
        let got = log.try_get_log_entries(1..4).await.unwrap();
        assert_eq!(got.iter().map(|e| e.log_id).collect::<Vec<_>>(), vec![id(1), id(2), id(3)]);
        drop((_dir, log));
        std::fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn a_leader_hurries_only_its_own_entries_under_its_committed_vote() {
        let me = NodeId(2);
        let entries = |leader: (u64, u64)| vec![((leader, 7), Vec::new()), ((leader, 8), Vec::new())];
        assert!(leads(Some(&((5, 2), 1)), me, &entries((5, 2))));
        // Not yet elected, another's vote, or entries of another term or leader.
        assert!(!leads(Some(&((5, 2), 0)), me, &entries((5, 2))));
        assert!(!leads(Some(&((5, 3), 1)), me, &entries((5, 3))));
        assert!(!leads(Some(&((5, 2), 1)), me, &entries((4, 2))));
        assert!(!leads(Some(&((5, 2), 1)), me, &[(((5, 2), 7), Vec::new()), (((5, 3), 8), Vec::new())]));
        assert!(!leads(None, me, &entries((5, 2))));
    }

    #[test]
    fn a_leader_restarts_uncommitted_in_its_term_and_campaigns() {
        let me = NodeId(2);
        assert_eq!(restart_vote(Vote::new_committed(5, me), me), Vote::new(5, me));
        // Another's leadership, or an uncommitted vote, is kept as it is.
        assert_eq!(restart_vote(Vote::new_committed(5, NodeId(3)), me), Vote::new_committed(5, NodeId(3)));
        assert_eq!(restart_vote(Vote::new(5, me), me), Vote::new(5, me));
        assert_eq!(restart_vote(Vote::new(5, NodeId(3)), me), Vote::new(5, NodeId(3)));
    }

    /// A node that led when it stopped reads its vote back uncommitted, so
    /// openraft starts it as a follower, not as the leader it was.
    #[tokio::test]
    async fn a_reopened_leader_reads_its_vote_uncommitted() {
        let (path, _dir, journal) = scratch("restart-vote");
        let mut log = DiskLog::new(journal, NodeId(1));
        log.save_vote(&Vote::new_committed(4, NodeId(1))).await.unwrap();
        assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(4, NodeId(1))));
        log.save_vote(&Vote::new_committed(5, NodeId(2))).await.unwrap();
        assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new_committed(5, NodeId(2))));
        drop((log, _dir));
        std::fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn followers_are_told_no_commit_past_the_leaders_fsync() {
        let id = |t, i| LogId::new(CommittedLeaderId::new(t, NodeId(1)), i);
        assert_eq!(clamp_commit(Some(id(3, 9)), Some(((3, 1), 6))), Some(id(3, 6)));
        assert_eq!(clamp_commit(Some(id(3, 4)), Some(((3, 1), 6))), Some(id(3, 4)));
        assert_eq!(clamp_commit(Some(id(3, 4)), None), None);
        assert_eq!(clamp_commit(None, Some(((3, 1), 6))), None);
    }

    fn scratch(name: &str) -> (PathBuf, Arc<DataDir>, Journal) {
        let path = std::env::temp_dir().join(format!("ticketing-disk-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        let dir = Arc::new(DataDir::open(&path, Mode::Cluster, || 1).unwrap());
        let journal = Journal::open(&dir).unwrap();
        (path, dir, journal)
    }

    /// The watermark moves with each fsync, and back to the log's end after a truncation.
    #[tokio::test]
    async fn the_watermark_follows_the_fsyncs() {
        let (path, _dir, journal) = scratch("watermark");
        let mut durable = journal.durable();
        assert_eq!(*durable.borrow(), None);
        let at = |t, i| ((t, 1), i);
        {
            let mut log = journal.lock();
            log.append((1..=4).map(|i| (at(2, i), Vec::new()))).unwrap();
            log.flush(true, Some(Flushed::Ahead(journal.mark(at(2, 4))))).unwrap();
        }
        durable.wait_for(|d| *d == Some(at(2, 4))).await.unwrap();
        let mut log = DiskLog::new(journal.clone(), NodeId(1));
        log.truncate(dec_id(&at(2, 3))).await.unwrap();
        assert_eq!(*durable.borrow(), Some(at(2, 2)));
        drop((log, journal, _dir));
        std::fs::remove_dir_all(&path).unwrap();
    }

    /// The state machine applies an entry only once the watermark covers it.
    #[tokio::test(flavor = "current_thread")]
    async fn nothing_is_applied_before_its_fsync() {
        let (path, dir, _journal) = scratch("apply-wait");
        let (tx, rx) = tokio::sync::watch::channel(Some(((1, 1), 1)));
        let mut sm = StateMachine::recover(dir, rx).unwrap();
        let id = |i| LogId::new(CommittedLeaderId::new(1, NodeId(1)), i);
        let mut applying = sm.clone();
        let task = tokio::spawn(async move {
            let entries = vec![Entry { log_id: id(2), payload: EntryPayload::<TypeConfig>::Blank }];
            applying.apply(entries).await.map(|_| ())
        });
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!task.is_finished());
        assert_eq!(sm.applied_state().await.unwrap().0, None);
        tx.send_replace(Some(((1, 1), 2)));
        task.await.unwrap().unwrap();
        assert_eq!(sm.applied_state().await.unwrap().0, Some(id(2)));
        std::fs::remove_dir_all(&path).unwrap();
    }
}
