//! Proposals: what a key needs proposed next (one in flight per key), the
//! outbox and its batches (at most [`MAX_BATCHES_IN_FLIGHT`] handed to the
//! replicator), and routing each committed effect — or a failure — back to
//! the connections.

use super::projection::{Grant, Holding, Waiter};
use super::{AppliedView, ConnId, Delivery, Leader};
use crate::locks::{Applied, Command, FreeReason, NextHolder};
use crate::replication::{BatchOutcome, ProposeError};
use std::time::{SystemTime, UNIX_EPOCH};
use ticketing_proto::{ErrorCode, Key, RequestId, ServerFrame, Token};
use tracing::{debug, warn};

/// What a proposal was for, so its outcome can be routed.
#[derive(Debug)]
enum Intent {
    /// A grant to the waiter, proposed at domain time `dt`.
    Grant(Waiter, u64),
    /// A release (`by`: the `R` that asked) or an expiry (`by` is `None`)
    /// handing over to `next`, proposed at domain time `dt`.
    Free {
        reason: FreeReason,
        by: Option<(ConnId, RequestId)>,
        next: Option<Waiter>,
        dt: u64,
    },
    Tick,
}

/// The most commands in one batch (one proposal, one Raft log entry).
pub const MAX_BATCH_COMMANDS: usize = 128;

/// The most estimated encoded bytes ([`encoded_estimate`]) of the commands in
/// one batch. openraft sends at most 300 entries in one AppendEntries, and
/// 300 × 32 KiB stays well below the peer protocol's 16 MiB frame limit
/// (docs/cluster-protocol.md). A single command is never refused for its size.
pub const MAX_BATCH_BYTES: usize = 32 * 1024;

/// Batches being committed at once. Commands proposed meanwhile wait in the
/// outbox and go out together, as the next batch, when one finishes.
pub const MAX_BATCHES_IN_FLIGHT: usize = 1;

/// An upper bound of a command's JSON size in a log entry (a key or owner
/// character can take 2 bytes escaped).
fn encoded_estimate(cmd: &Command) -> usize {
    let text = match cmd {
        Command::Tick { .. } => 0,
        Command::Grant { key, owner, .. } => key.as_str().len() + owner.as_str().len(),
        Command::Free { key, owner, next, .. } => {
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
struct Item {
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

impl Outbox {
    pub(super) fn len(&self) -> usize {
        self.items.len()
    }
}

/// Identifies one batch handed out by [`Leader::poll_proposal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BatchId(pub u64);

/// A batch to commit: hand `cmds` to the replicator as one proposal, and
/// its outcome back with [`Leader::handle_committed`] under `id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// Names the batch in [`Leader::handle_committed`].
    pub id: BatchId,
    /// At least one, at most [`MAX_BATCH_COMMANDS`] commands, at most one per key.
    pub cmds: Vec<Command>,
}

/// A batch handed to the replicator and not yet finished.
#[derive(Debug)]
pub(super) struct InFlight {
    id: BatchId,
    /// The epoch it was proposed in (its outcomes are dropped in another).
    epoch: Option<u64>,
    items: Vec<Item>,
}

impl InFlight {
    pub(super) fn len(&self) -> usize {
        self.items.len()
    }
}

fn wall_micros() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX)).unwrap_or(0)
}

fn next_holder(next: &Option<Waiter>) -> Option<NextHolder> {
    next.as_ref().map(|w| NextHolder { owner: w.owner.clone(), lease_s: w.lease })
}

impl Leader {
    /// The next batch to hand to the replicator: the outbox, cut to at most
    /// [`MAX_BATCH_COMMANDS`] / [`MAX_BATCH_BYTES`], while fewer than
    /// [`MAX_BATCHES_IN_FLIGHT`] are being committed. Call after a pass of
    /// inputs (the commands they need accumulate in the outbox, so inputs
    /// handled together go out as one batch) and again after every
    /// [`Leader::handle_committed`], until `None`. A batch the replicator
    /// commits at once is fed back at once, inline.
    #[must_use]
    pub fn poll_proposal(&mut self) -> Option<Batch> {
        if self.outbox.cmds.is_empty() || self.batches.len() >= MAX_BATCHES_IN_FLIGHT {
            return None;
        }
        let n = batch_len(&self.outbox.cmds);
        // One exact allocation per batch; the outbox keeps its capacity.
        let cmds: Vec<Command> = self.outbox.cmds.drain(..n).collect();
        let items: Vec<Item> = self.outbox.items.drain(..n).collect();
        self.next_batch += 1;
        let id = BatchId(self.next_batch);
        self.batches.push(InFlight { id, epoch: self.epoch, items });
        Some(Batch { id, cmds })
    }

    /// Queues `cmd` in the outbox (the key is busy from now on).
    fn propose(&mut self, cmd: Command, intent: Intent) {
        let key = cmd.key().cloned();
        if let Some(key) = &key {
            self.proj.set_busy(key, true);
        }
        self.in_flight += 1;
        self.last_proposed = self.now;
        self.outbox.cmds.push(cmd);
        self.outbox.items.push(Item { key, intent });
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
    pub(super) fn propose_tick(&mut self) {
        self.tick_in_flight = true;
        let dt = self.domain_now(self.now);
        self.propose(Command::Tick { dt }, Intent::Tick);
    }

    /// Re-reads one key's holder from the applied state (after a surprise or
    /// an error); a holder found there gets a full-length lease from now
    /// (conservative: its commit time at this leader is not known).
    fn resync_key(&mut self, key: &Key, applied: &dyn AppliedView) {
        let now = self.now;
        let holding =
            applied.applied_holder(key).map(|h| Holding::committed(h.owner, h.token, h.lease_s, h.granted_dt, now));
        self.hold(key, holding);
    }

    /// Proposes a grant of a free key to `w` (the key counts as held meanwhile).
    pub(super) fn grant(&mut self, w: Waiter) {
        self.hold(&w.key, Some(Holding::committing(w.owner.clone())));
        let dt = self.domain_now(self.now);
        let cmd =
            Command::Grant { key: w.key.clone(), owner: w.owner.clone(), lease_s: w.lease, micros: wall_micros(), dt };
        self.propose(cmd, Intent::Grant(w, dt));
    }

    /// The queue head a release or expiry hands the key to (none during the start grace).
    fn next_for_hand_over(&mut self, key: &Key) -> Option<Waiter> {
        if self.in_grace() {
            None
        } else {
            self.proj.pop_head(key)
        }
    }

    /// Starts the next proposal the key needs, if none is in flight: a due
    /// expiry first, then the oldest waiting release, then a grant of a free
    /// key to its queue head (not during the start grace).
    pub(super) fn pump(&mut self, key: &Key) {
        if self.proj.is_busy(key) {
            return;
        }
        // Queries that waited for the key's proposal see its outcome.
        for q in self.proj.take_queries(key) {
            self.answer_query(q.conn, q.id, key, &q.owner);
        }
        let now = self.now;
        let dt = self.domain_now(now);
        if let Some(Holding { owner, grant: Grant::Committed { token, deadline, .. } }) = self.proj.holder(key) {
            if *deadline <= now {
                let (owner, token) = (owner.clone(), *token);
                let next = self.next_for_hand_over(key);
                let reason = FreeReason::Expiry;
                let cmd = Command::Free {
                    reason,
                    key: key.clone(),
                    owner,
                    token,
                    next: next_holder(&next),
                    micros: wall_micros(),
                    dt,
                };
                self.propose(cmd, Intent::Free { reason, by: None, next, dt });
                return;
            }
        }
        if let Some(r) = self.proj.pop_release(key) {
            let matches = self.proj.holder(key).is_some_and(|h| h.owner == r.owner && h.token() == Some(r.token));
            let next = if matches { self.next_for_hand_over(key) } else { None };
            let reason = FreeReason::Release;
            let cmd = Command::Free {
                reason,
                key: key.clone(),
                owner: r.owner,
                token: r.token,
                next: next_holder(&next),
                micros: wall_micros(),
                dt,
            };
            self.propose(cmd, Intent::Free { reason, by: Some((r.conn, r.id)), next, dt });
            return;
        }
        if self.proj.holder(key).is_none() && !self.in_grace() {
            while let Some(head) = self.proj.pop_head(key) {
                // The held-keys cap was checked when this waiter arrived;
                // other keys may have filled the server since
                // (docs/deployment.md, "Limits": B).
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
        let now = self.now;
        self.hold(&w.key, Some(Holding::committed(w.owner.clone(), token, w.lease, dt, now)));
        let waited = now.saturating_duration_since(w.read_at);
        let waited_ms = u32::try_from(waited.as_millis()).unwrap_or(u32::MAX);
        self.metrics.observe_grant(waited_ms);
        let frame = ServerFrame::Granted { id: w.id, key: w.key.clone(), owner: w.owner, token, waited_ms };
        self.reply(w.conn, w.id, frame);
    }

    /// The token counter is at its end (2^63 − 1, unreachable in practice):
    /// nothing can be granted any more; the acquire is answered `B`.
    fn tokens_exhausted(&mut self, w: Waiter) {
        warn!(key = %w.key, "the token counter is exhausted: nothing can be granted");
        self.refuse_busy(w.conn, w.id, w.key);
    }

    /// After a committed release/expiry: the key goes to `next` (with the
    /// handed-over token) or becomes free.
    fn handed_over(&mut self, key: &Key, next: Option<Waiter>, token: Option<Token>, dt: u64) {
        match (next, token) {
            (Some(w), Some(t)) => self.granted(w, t, dt),
            (next, _) => {
                self.hold(key, None);
                if let Some(w) = next {
                    // The state machine could not issue a token.
                    self.tokens_exhausted(w);
                }
            }
        }
    }

    /// The batch `id` finished: `outcome` is one [`Applied`] per command in
    /// order, or the error of the whole batch. `applied` is read only to
    /// follow the applied state after a surprise or a failure. Every
    /// outcome is routed in order; a failed batch (or one whose outcomes do
    /// not match its commands) fails every command in it, each exactly as
    /// a single failed proposal. An unknown `id` is ignored.
    pub fn handle_committed(
        &mut self,
        now: std::time::Instant,
        id: BatchId,
        outcome: BatchOutcome,
        applied: &dyn AppliedView,
    ) {
        self.advance(now);
        let Some(at) = self.batches.iter().position(|b| b.id == id) else { return };
        let InFlight { epoch, items, .. } = self.batches.swap_remove(at);
        match outcome {
            Ok(outcomes) if outcomes.len() == items.len() => {
                for (item, effect) in items.into_iter().zip(outcomes) {
                    self.on_outcome(epoch, item, Ok(effect), applied);
                }
            }
            result => {
                let e = result.err().unwrap_or(ProposeError::Unknown);
                for item in items {
                    self.on_outcome(epoch, item, Err(e.clone()), applied);
                }
            }
        }
    }

    fn on_outcome(
        &mut self,
        epoch: Option<u64>,
        item: Item,
        result: Result<Applied, ProposeError>,
        applied: &dyn AppliedView,
    ) {
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
            (Intent::Grant(w, _), Ok(Applied::TokensExhausted)) => {
                self.resync_key(&key, applied);
                self.tokens_exhausted(w);
            }
            (Intent::Grant(w, _), Ok(other)) => {
                debug!(key = %key, ?other, "grant found the key held; resyncing");
                self.resync_key(&key, applied);
                if w.wait_until > w.read_at {
                    self.put_back(w);
                } else {
                    self.time_out(w);
                }
            }
            (Intent::Free { reason, by, next, dt }, Ok(Applied::Freed { reason: r, handed_over })) if r == reason => {
                match by {
                    Some((conn, id)) => {
                        self.metrics.releases_released.inc();
                        self.reply(conn, id, ServerFrame::Released { id, key: key.clone() });
                    }
                    None => {
                        self.metrics.expiries.inc();
                    }
                }
                self.handed_over(&key, next, handed_over, dt);
            }
            (Intent::Free { by: Some((conn, id)), next, .. }, Ok(other)) => {
                self.metrics.releases_not_holder.inc();
                self.reply(conn, id, ServerFrame::NotHolder { id, key: key.clone() });
                if next.is_some() || !matches!(other, Applied::NotHolder) {
                    // The projection said it matched, the state machine disagreed.
                    self.resync_key(&key, applied);
                }
                if let Some(w) = next {
                    self.put_back(w);
                }
            }
            (Intent::Free { by: None, next, .. }, Ok(other)) => {
                debug!(key = %key, ?other, "expiry did not match; resyncing");
                self.resync_key(&key, applied);
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
                let fatal = |l: &mut Leader, conn| l.send(conn, Delivery::Fatal(frame.clone()));
                match intent {
                    Intent::Grant(w, _) => fatal(self, w.conn),
                    Intent::Free { by, next, .. } => {
                        if let Some((conn, _)) = by {
                            fatal(self, conn);
                        }
                        if let Some(w) = next {
                            fatal(self, w.conn);
                        }
                    }
                    Intent::Tick => {}
                }
                self.resync_key(&key, applied);
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
        let release = Command::Free {
            reason: FreeReason::Release,
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
