//! Proposals: what a key needs proposed next (one in flight per key), and
//! routing each committed effect — or a failure — back to the connections.

use super::projection::{Holding, Waiter};
use super::task::Manager;
use super::ConnId;
use super::Delivery;
use crate::locks::{Applied, Command, NextHolder};
use crate::replication::{BatchOutcome, Proposal, ProposeError};
use std::time::{SystemTime, UNIX_EPOCH};
use ticketing_proto::{ErrorCode, Key, RequestId, ServerFrame, Token};
use tokio::time::Instant;
use tracing::{debug, warn};

/// What a proposal was for, so its outcome can be routed.
#[derive(Debug)]
pub(super) enum Intent {
    Grant(Waiter, u64),
    Release { conn: ConnId, id: RequestId, next: Option<Waiter>, dt: u64 },
    Expire { next: Option<Waiter>, dt: u64 },
    Tick,
}

/// The most commands in one batch (one proposal, one Raft log entry).
pub(super) const MAX_BATCH_COMMANDS: usize = 128;

/// The most estimated encoded bytes ([`encoded_estimate`]) of the commands in
/// one batch. openraft sends at most 300 entries in one AppendEntries, and
/// 300 × 32 KiB stays well below the peer protocol's 16 MiB frame limit
/// (docs/cluster-protocol.md). A single command is never refused for its size.
pub(super) const MAX_BATCH_BYTES: usize = 32 * 1024;

/// Batches being committed at once. Commands proposed meanwhile wait in the
/// outbox and go out together, as the next batch, when one finishes (or when
/// the outbox holds a full batch and this allows another).
pub(super) const MAX_BATCHES_IN_FLIGHT: usize = 1;

/// An upper bound of a command's JSON size in a log entry (a key or owner
/// character can take 2 bytes escaped).
fn encoded_estimate(cmd: &Command) -> usize {
    let text = match cmd {
        Command::Tick { .. } => 0,
        Command::Grant { key, owner, .. } => key.as_str().len() + owner.as_str().len(),
        Command::Release { key, owner, next, .. } | Command::Expire { key, owner, next, .. } => {
            key.as_str().len() + owner.as_str().len() + next.as_ref().map_or(0, |n| n.owner.as_str().len())
        }
    };
    160 + 2 * text
}

/// How many of `cmds` (from the front) go into the next batch: at least one,
/// at most [`MAX_BATCH_COMMANDS`] and [`MAX_BATCH_BYTES`].
fn batch_len(cmds: &[Command]) -> usize {
    let mut bytes = 0;
    for (i, cmd) in cmds.iter().take(MAX_BATCH_COMMANDS).enumerate() {
        bytes += encoded_estimate(cmd);
        if bytes > MAX_BATCH_BYTES && i > 0 {
            return i;
        }
    }
    cmds.len().min(MAX_BATCH_COMMANDS)
}

/// One proposed command: which key it holds busy and what it was for.
#[derive(Debug)]
pub(super) struct Item {
    /// `None` for a `Tick`.
    key: Option<Key>,
    intent: Intent,
}

/// Commands proposed but not yet handed to the replicator, in order.
#[derive(Debug, Default)]
pub(super) struct Outbox {
    cmds: Vec<Command>,
    items: Vec<Item>,
}

/// A finished batch, reported back to the manager task (or routed inline
/// when the replicator answered at once).
#[derive(Debug)]
pub(super) struct Done {
    epoch: Option<u64>,
    items: Vec<Item>,
    result: BatchOutcome,
}

fn wall_micros() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX)).unwrap_or(0)
}

fn next_holder(next: &Option<Waiter>) -> Option<NextHolder> {
    next.as_ref().map(|w| NextHolder { owner: w.owner.clone(), lease_s: w.lease })
}

impl Manager {
    /// Queues `cmd` in the outbox (the key is busy from now on); the
    /// manager hands the outbox to the replicator once per loop pass ([`Self::flush`]).
    fn propose(&mut self, cmd: Command, intent: Intent) {
        let key = cmd.key().cloned();
        if let Some(key) = &key {
            self.proj.set_busy(key, true);
        }
        self.in_flight += 1;
        self.last_proposed = Instant::now();
        self.outbox.cmds.push(cmd);
        self.outbox.items.push(Item { key, intent });
    }

    /// Proposes the outbox, in batches of at most [`MAX_BATCH_COMMANDS`] /
    /// [`MAX_BATCH_BYTES`], while fewer than [`MAX_BATCHES_IN_FLIGHT`] are
    /// being committed. A batch the replicator answers at once (standalone)
    /// is routed here, without a task or a channel; what its outcomes
    /// propose next is flushed by the same loop.
    pub(super) fn flush(&mut self) {
        while !self.outbox.cmds.is_empty() && self.batches_in_flight < MAX_BATCHES_IN_FLIGHT {
            let n = batch_len(&self.outbox.cmds);
            // One exact allocation per batch; the outbox keeps its capacity.
            let cmds: Vec<Command> = self.outbox.cmds.drain(..n).collect();
            let items: Vec<Item> = self.outbox.items.drain(..n).collect();
            let epoch = self.epoch;
            match self.replicator.propose(cmds) {
                Proposal::Ready(result) => self.on_done(Done { epoch, items, result }),
                Proposal::Pending(fut) => {
                    self.batches_in_flight += 1;
                    let tx = self.done_tx.clone();
                    tokio::spawn(async move {
                        let result = fut.await;
                        let _ = tx.send(Done { epoch, items, result }).await;
                    });
                }
            }
        }
    }

    /// Drops the outbox unproposed (a new term, or stepping down): its
    /// commands were never proposed, so nothing of them is committed, and
    /// their connections are closed by the leadership change.
    pub(super) fn discard_outbox(&mut self) {
        self.outbox.cmds.clear();
        for item in self.outbox.items.drain(..) {
            self.in_flight -= 1;
            if item.key.is_none() {
                self.tick_in_flight = false;
            }
        }
    }

    /// The frame for a failed proposal.
    fn error_frame(&self, e: &ProposeError) -> ServerFrame {
        match e {
            ProposeError::NotLeader(leader) => self.redirect_frame(leader.as_ref()),
            ProposeError::Unknown => ServerFrame::error(ErrorCode::NoLeader),
            ProposeError::Shutdown => ServerFrame::error(ErrorCode::ShuttingDown),
        }
    }

    /// Proposes a `Tick`: only the domain time moves (docs/protocol.md, "Domain time").
    pub(super) fn propose_tick(&mut self, now: Instant) {
        self.tick_in_flight = true;
        let dt = self.domain_now(now);
        self.propose(Command::Tick { dt }, Intent::Tick);
    }

    /// Re-reads one key's holder from the applied state (after a surprise or
    /// an error); a holder found there gets a full-length lease from now
    /// (conservative: its commit time at this leader is not known).
    fn resync_key(&mut self, key: &Key) {
        let holding = self
            .replicator
            .applied_holder(key)
            .map(|h| self.proj.committed(h.owner, h.token, h.lease_s, h.granted_dt, Instant::now()));
        self.hold(key, holding);
    }

    /// Proposes a grant of a free key to `w` (the key counts as held meanwhile).
    pub(super) fn grant(&mut self, w: Waiter) {
        let gen = self.proj.new_gen();
        self.hold(&w.key, Some(Holding { owner: w.owner.clone(), token: None, deadline: None, gen, granted_dt: 0 }));
        let dt = self.domain_now(Instant::now());
        let cmd =
            Command::Grant { key: w.key.clone(), owner: w.owner.clone(), lease_s: w.lease, micros: wall_micros(), dt };
        self.propose(cmd, Intent::Grant(w, dt));
    }

    /// Starts the next proposal the key needs, if none is in flight: a due
    /// expiry first, then the oldest waiting release, then a grant of a free
    /// key to its queue head.
    pub(super) fn pump(&mut self, key: &Key) {
        if self.proj.is_busy(key) {
            return;
        }
        // Queries that waited for the key's proposal see its outcome.
        for q in self.proj.take_queries(key) {
            self.answer_query(q.conn, q.id, key, &q.owner);
        }
        let now = Instant::now();
        let dt = self.domain_now(now);
        if let Some(Holding { owner, token: Some(token), deadline: Some(deadline), .. }) = self.proj.holder(key) {
            if *deadline <= now {
                let (owner, token) = (owner.clone(), *token);
                let next = self.proj.pop_head(key);
                let cmd = Command::Expire {
                    key: key.clone(),
                    owner,
                    token,
                    next: next_holder(&next),
                    micros: wall_micros(),
                    dt,
                };
                self.propose(cmd, Intent::Expire { next, dt });
                return;
            }
        }
        if let Some(r) = self.proj.pop_release(key) {
            let matches = self.proj.holder(key).is_some_and(|h| h.owner == r.owner && h.token == Some(r.token));
            let next = if matches { self.proj.pop_head(key) } else { None };
            let cmd = Command::Release {
                key: key.clone(),
                owner: r.owner,
                token: r.token,
                next: next_holder(&next),
                micros: wall_micros(),
                dt,
            };
            self.propose(cmd, Intent::Release { conn: r.conn, id: r.id, next, dt });
            return;
        }
        if self.proj.holder(key).is_none() {
            while let Some(head) = self.proj.pop_head(key) {
                // The held-keys cap was checked when this waiter arrived;
                // other keys may have filled the server since
                // (docs/configuration.md, "Limits": B).
                if self.proj.held() >= self.limits.max_held_keys {
                    self.refuse_busy(head.conn, head.id, key.clone());
                    continue;
                }
                self.grant(head);
                return;
            }
        }
        self.proj.remove_if_idle(key);
    }

    fn granted(&mut self, w: Waiter, token: Token, dt: u64) {
        let now = Instant::now();
        let holding = self.proj.committed(w.owner.clone(), token, w.lease, dt, now);
        self.hold(&w.key, Some(holding));
        let waited = now.saturating_duration_since(w.read_at);
        let waited_ms = u32::try_from(waited.as_millis()).unwrap_or(u32::MAX);
        self.metrics.observe_grant(waited_ms);
        let frame = ServerFrame::Granted { id: w.id, key: w.key.clone(), owner: w.owner, token, waited_ms };
        self.reply(w.conn, w.id, frame);
    }

    /// After a committed release/expiry: the key goes to `next` (with the
    /// handed-over token) or becomes free.
    fn handed_over(&mut self, key: &Key, next: Option<Waiter>, token: Option<Token>, dt: u64) {
        match (next, token) {
            (Some(w), Some(t)) => self.granted(w, t, dt),
            (next, _) => {
                self.hold(key, None);
                if let Some(w) = next {
                    // The state machine could not issue a token (counter exhausted).
                    warn!(key = %key, "hand-over without a token");
                    self.put_back(w);
                }
            }
        }
    }

    /// Routes every outcome of a finished batch, in order; a failed batch
    /// (or one whose outcomes do not match its commands) fails every
    /// command in it, each exactly as a single failed proposal.
    pub(super) fn on_done(&mut self, done: Done) {
        let Done { epoch, items, result } = done;
        match result {
            Ok(outcomes) if outcomes.len() == items.len() => {
                for (item, applied) in items.into_iter().zip(outcomes) {
                    self.on_outcome(epoch, item, Ok(applied));
                }
            }
            result => {
                let e = result.err().unwrap_or(ProposeError::Unknown);
                for item in items {
                    self.on_outcome(epoch, item, Err(e.clone()));
                }
            }
        }
    }

    fn on_outcome(&mut self, epoch: Option<u64>, item: Item, result: Result<Applied, ProposeError>) {
        self.in_flight -= 1;
        let Item { key, intent } = item;
        let Some(key) = key else {
            // A `Tick`: nothing to route.
            self.tick_in_flight = false;
            match result {
                Ok(_) => {
                    self.metrics.ticks.inc();
                }
                Err(e) => debug!(error = ?e, "tick not committed"),
            }
            return;
        };
        if epoch != self.epoch || epoch.is_none() {
            // A proposal of an earlier term: its connections were closed and
            // the projection rebuilt since.
            return;
        }
        self.proj.set_busy(&key, false);
        match (intent, result) {
            (Intent::Grant(w, dt), Ok(Applied::Granted(token))) => self.granted(w, token, dt),
            (Intent::Grant(w, _), Ok(other)) => {
                debug!(key = %key, ?other, "grant found the key held; resyncing");
                self.resync_key(&key);
                if w.wait_until > w.read_at {
                    self.put_back(w);
                } else {
                    self.time_out(w);
                }
            }
            (Intent::Release { conn, id, next, dt }, Ok(Applied::Released { handed_over })) => {
                self.metrics.releases_released.inc();
                self.reply(conn, id, ServerFrame::Released { id, key: key.clone() });
                self.handed_over(&key, next, handed_over, dt);
            }
            (Intent::Release { conn, id, next, .. }, Ok(other)) => {
                self.metrics.releases_not_holder.inc();
                self.reply(conn, id, ServerFrame::NotHolder { id, key: key.clone() });
                if next.is_some() || !matches!(other, Applied::NotHolder) {
                    // The projection said it matched, the state machine disagreed.
                    self.resync_key(&key);
                }
                if let Some(w) = next {
                    self.put_back(w);
                }
            }
            (Intent::Expire { next, dt }, Ok(Applied::Expired { handed_over })) => {
                self.metrics.expiries.inc();
                self.handed_over(&key, next, handed_over, dt);
            }
            (Intent::Expire { next, .. }, Ok(other)) => {
                debug!(key = %key, ?other, "expiry did not match; resyncing");
                self.resync_key(&key);
                if let Some(w) = next {
                    self.put_back(w);
                }
            }
            // A tick has no key and was routed above.
            (Intent::Tick, Ok(_)) => {}
            (intent, Err(e)) => {
                self.metrics.proposal_errors.inc();
                warn!(key = %key, error = ?e, "proposal failed");
                let frame = self.error_frame(&e);
                let fatal = |m: &mut Manager, conn| m.send(conn, Delivery::Fatal(frame.clone()));
                match intent {
                    Intent::Grant(w, _) => fatal(self, w.conn),
                    Intent::Release { conn, next, .. } => {
                        fatal(self, conn);
                        if let Some(w) = next {
                            fatal(self, w.conn);
                        }
                    }
                    Intent::Expire { next, .. } => {
                        if let Some(w) = next {
                            fatal(self, w.conn);
                        }
                    }
                    Intent::Tick => {}
                }
                self.resync_key(&key);
            }
        }
        self.pump(&key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ticketing_proto::Owner;

    fn grant(key: &str, owner: &str) -> Command {
        Command::Grant {
            key: Key::new(key.to_owned()).unwrap(),
            owner: Owner::new(owner.to_owned()).unwrap(),
            lease_s: 5,
            micros: 1,
            dt: 1,
        }
    }

    #[test]
    fn batches_are_bounded_in_count_and_bytes() {
        let small: Vec<Command> = (0..1000).map(|i| grant(&format!("k{i}"), "o")).collect();
        assert_eq!(batch_len(&small), MAX_BATCH_COMMANDS);
        assert_eq!(batch_len(&small[..3]), 3);
        // The longest key and owner, of characters JSON escapes.
        let (key, owner) = ("\"".repeat(250), "\\".repeat(64));
        let big: Vec<Command> = (0..100).map(|_| grant(&key, &owner)).collect();
        let n = batch_len(&big);
        assert!(n > 1 && n < 100, "{n}");
        assert!(n * encoded_estimate(&big[0]) <= MAX_BATCH_BYTES);
        assert!((n + 1) * encoded_estimate(&big[0]) > MAX_BATCH_BYTES);
        // The estimate bounds the real encoding (JSON, as in a log entry).
        let t = Token::new(ticketing_proto::limits::TOKEN_MAX).unwrap();
        let release = Command::Release {
            key: Key::new(key.clone()).unwrap(),
            owner: Owner::new(owner.clone()).unwrap(),
            token: t,
            next: Some(NextHolder { owner: Owner::new(owner.clone()).unwrap(), lease_s: 250 }),
            micros: u64::MAX,
            dt: u64::MAX,
        };
        for cmd in [&big[0], &small[0], &Command::Tick { dt: u64::MAX }, &release] {
            assert!(serde_json::to_vec(cmd).unwrap().len() <= encoded_estimate(cmd), "{cmd:?}");
        }
    }
}
