//! Proposals: what a key needs proposed next (one in flight per key), the
//! outbox and its batches (at most [`MAX_BATCHES_IN_FLIGHT`] handed to the
//! replicator), and routing each committed effect — or a failure — back to
//! the connections.

use super::projection::{Grant, Holding, Waiter};
use super::{AppliedView, ConnId, Delivery, Leader};
use crate::locks::{Applied, Command, FreeReason, GrantKind, Issued, NextHolder};
use crate::replication::{BatchOutcome, ProposeError};
use ticketing_proto::{ErrorCode, Key, Owner, RequestId, ServerFrame, Token};
use tracing::{debug, warn};

/// What a proposal was for, so its outcome can be routed.
#[derive(Debug)]
enum Intent {
    /// A grant to the waiter, proposed at domain time `dt`.
    Grant(Waiter, u64),
    /// A release (`by`: the `R` that asked) or an expiry (`by` is `None`)
    /// of the grant `(owner, token)`, handing over to `next` (in FIFO
    /// order), proposed at domain time `dt`.
    Free {
        reason: FreeReason,
        by: Option<(ConnId, RequestId)>,
        freed: (Owner, Token),
        next: Vec<Waiter>,
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
        // A byte written as a JSON number takes up to 4 characters.
        Command::Restore { state, .. } => 2 * state.len(),
        Command::Grant { key, owner, .. } | Command::GrantShared { key, owner, .. } => {
            key.as_str().len() + owner.as_str().len()
        }
        Command::GrantAll { keys, owner, .. } => keys_len(keys) + owner.as_str().len(),
        Command::Free { key, owner, next, .. } => {
            let next: usize = next.iter().map(|n| 40 + n.owner.as_str().len() + kind_len(&n.kind)).sum();
            key.as_str().len() + owner.as_str().len() + next
        }
    };
    160 + 2 * text
}

/// Text bytes of a key list, with room for its punctuation.
fn keys_len(keys: &[Key]) -> usize {
    keys.iter().map(|k| k.as_str().len() + 3).sum()
}

fn kind_len(kind: &GrantKind) -> usize {
    match kind {
        GrantKind::Exclusive | GrantKind::Shared { .. } => 16,
        GrantKind::All { keys } => 16 + keys_len(keys),
    }
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

/// One proposed command: which keys it holds busy and what it was for.
#[derive(Debug)]
struct Item {
    /// Every key the command can change (none for a `Tick`).
    keys: Vec<Key>,
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

fn next_holders(next: &[Waiter]) -> Vec<NextHolder> {
    next.iter().map(|w| NextHolder { owner: w.owner.clone(), lease_s: w.lease, kind: w.kind.clone() }).collect()
}

/// What a key would hold after a hand-over, while its run of grantable
/// waiters is chosen (`Leader::take_run`).
#[derive(Debug, Default)]
struct Hypothetical {
    /// An exclusive holder stays or was chosen.
    exclusive: bool,
    /// Counted holders that stay or were chosen.
    counted: usize,
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

    /// Queues `cmd` in the outbox (its keys are busy from now on).
    fn propose(&mut self, cmd: Command, intent: Intent) {
        let keys: Vec<Key> = cmd.keys().into_iter().cloned().collect();
        for key in &keys {
            self.proj.set_busy(key, true);
        }
        self.in_flight += 1;
        self.last_proposed = self.now;
        self.outbox.cmds.push(cmd);
        self.outbox.items.push(Item { keys, intent });
    }

    /// Drops the outbox unproposed (a new term, or stepping down): its
    /// commands were never proposed, so nothing of them is committed, and
    /// their connections are closed by the leadership change.
    pub(super) fn discard_outbox(&mut self) {
        self.outbox.cmds.clear();
        for item in self.outbox.items.drain(..) {
            self.in_flight -= 1;
            if matches!(item.intent, Intent::Tick) {
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

    /// Re-reads one key's holders from the applied state (after a surprise
    /// or an error); a holder found there gets a full-length lease from now
    /// (conservative: its commit time at this leader is not known), and
    /// keeps the principal the projection had for the same grant.
    fn resync_key(&mut self, key: &Key, applied: &dyn AppliedView) {
        let now = self.now;
        let known = self.proj.holders(key);
        let principal_of = |owner: &Owner, token: Token| {
            known.iter().find(|x| x.owner == *owner && x.token() == Some(token)).and_then(|x| x.principal.clone())
        };
        let holders = applied
            .applied_holders(key)
            .into_iter()
            .map(|h| {
                let principal = principal_of(&h.owner, h.token);
                Holding::committed(h.owner, h.token, h.lease_s, h.granted_dt, h.slot, now).of(principal)
            })
            .collect();
        self.proj.set_holders(key, holders);
    }

    /// Counts `w` as holding each of its keys while its grant is committed.
    fn hold_committing(&mut self, w: &Waiter) {
        let shared = matches!(w.kind, GrantKind::Shared { .. });
        for key in w.keys() {
            self.proj.add_holder(key, Holding::committing(w.owner.clone(), shared).of(w.principal.clone()));
        }
    }

    /// Forgets `w`'s grants being committed (the grant did not happen).
    fn drop_committing(&mut self, w: &Waiter) {
        for key in w.keys() {
            self.proj.remove_committing(key, &w.owner);
        }
    }

    /// Proposes a grant to `w` of its key(s) (they count as held meanwhile).
    pub(super) fn grant(&mut self, w: Waiter) {
        self.hold_committing(&w);
        let dt = self.domain_now(self.now);
        let (owner, lease_s, micros) = (w.owner.clone(), w.lease, (self.wall)());
        let cmd = match &w.kind {
            GrantKind::Exclusive => Command::Grant { key: w.key.clone(), owner, lease_s, micros, dt },
            GrantKind::Shared { n } => Command::GrantShared { key: w.key.clone(), owner, n: *n, lease_s, micros, dt },
            GrantKind::All { keys } => Command::GrantAll { keys: keys.clone(), owner, lease_s, micros, dt },
        };
        self.propose(cmd, Intent::Grant(w, dt));
    }

    /// Whether the first live waiter of `key` can be granted now, if `key`
    /// held what `hypo` says (docs/protocol.md, "A key's holders"): a
    /// multi-key waiter also needs every other key of its set free, idle
    /// and with it at the head of its queue.
    fn head_grantable(&self, key: &Key, hypo: &Hypothetical) -> Option<super::WaiterId> {
        let wid = self.proj.head(key)?;
        let w = self.proj.waiter(wid)?;
        let empty = !hypo.exclusive && hypo.counted == 0;
        let ok = match &w.kind {
            GrantKind::Exclusive => empty,
            GrantKind::Shared { n } => !hypo.exclusive && hypo.counted < usize::from(*n),
            GrantKind::All { keys } => {
                empty
                    && keys
                        .iter()
                        .filter(|k| *k != key)
                        .all(|k| self.proj.is_free(k) && !self.proj.is_busy(k) && self.proj.head(k) == Some(wid))
            }
        };
        ok.then_some(wid)
    }

    /// Takes off `key`'s queue every waiter from the head on that is
    /// grantable with the key's current holders, stopping at the first that
    /// is not (no overtaking) or after `most`; each counts as holding its
    /// keys from now on. `freeing`: the grant being freed with them, whose
    /// place toward `--max-held-keys` the first of them takes. A waiter
    /// that would exceed `--max-held-keys`, or its principal's
    /// `max_held_keys`, is answered `B` and skipped (docs/configuration.md,
    /// "Limits"; docs/security.md, "Several teams: principals"). None during
    /// the start grace.
    fn take_run(&mut self, key: &Key, most: usize, freeing: Option<(&Owner, Token)>) -> Vec<Waiter> {
        let mut run = Vec::new();
        if self.in_grace() {
            return run;
        }
        let holders = self.proj.holders(key).iter().filter(|h| h.holds());
        let mut hypo = Hypothetical::default();
        for h in holders {
            if h.shared {
                hypo.counted += 1;
            } else {
                hypo.exclusive = true;
            }
        }
        let mut held = self.proj.held() - usize::from(freeing.is_some());
        // The principal of the grant being freed: a waiter of the same
        // principal takes its place toward that principal's cap too (one of
        // another principal does not: the freed grant counts for its own
        // until the command commits, see `Grant::Freeing`).
        let freeing_principal = freeing.and_then(|(owner, token)| {
            let h = self.proj.holders(key).iter().find(|h| h.owner == *owner && h.token() == Some(token))?;
            h.principal.clone()
        });
        while run.len() < most {
            let Some(wid) = self.head_grantable(key, &hypo) else { break };
            let Some(w) = self.proj.remove_waiter(wid) else { break };
            // The held-keys cap was checked when this waiter arrived;
            // other keys may have filled the server since.
            if held + w.keys().len() > self.limits.max_held_keys {
                self.refuse_busy(w.conn, w.id, w.key.clone());
                continue;
            }
            let leaving = usize::from(freeing_principal.is_some() && freeing_principal == w.principal);
            if self.over_held_cap(&w, leaving) {
                self.refuse_principal_busy(&w);
                continue;
            }
            held += w.keys().len();
            match w.kind {
                GrantKind::Shared { .. } => hypo.counted += 1,
                _ => hypo.exclusive = true,
            }
            self.hold_committing(&w);
            run.push(w);
        }
        if let (Some((owner, token)), false) = (freeing, run.is_empty()) {
            // Its principal's place is taken only by a next holder of the
            // same principal; else it counts for it until the command commits.
            let taken = freeing_principal.is_some() && run.iter().any(|w| w.principal == freeing_principal);
            self.proj.mark_freeing(key, owner, token, false, !taken);
        }
        run
    }

    /// Starts the next proposal the key needs, if none is in flight: a due
    /// expiry first, then the oldest waiting release, then a grant to its
    /// queue head if that has become grantable (not during the start grace).
    /// A release or expiry hands over, in its own command, to every waiter
    /// from the head on that becomes grantable.
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
        let expired = self.proj.holders(key).iter().find_map(|h| match h.grant {
            Grant::Committed { token, deadline, .. } if deadline <= now => Some((h.owner.clone(), token)),
            _ => None,
        });
        // A release or expiry marks its holder as being freed at once (a
        // failure puts the applied holders back): the waiters it hands over
        // to are those grantable without it.
        if let Some((owner, token)) = expired {
            self.proj.mark_freeing(key, &owner, token, true, true);
            let next = self.take_run(key, usize::MAX, Some((&owner, token)));
            self.propose_free(key, FreeReason::Expiry, None, (owner, token), next, dt);
            return;
        }
        if let Some(r) = self.proj.pop_release(key) {
            let matches = self.proj.holders(key).iter().any(|h| h.is(&r.owner, r.token));
            let next = if matches {
                self.proj.mark_freeing(key, &r.owner, r.token, true, true);
                self.take_run(key, usize::MAX, Some((&r.owner, r.token)))
            } else {
                Vec::new()
            };
            self.propose_free(key, FreeReason::Release, Some((r.conn, r.id)), (r.owner, r.token), next, dt);
            return;
        }
        let hypo_now = self.take_run(key, 1, None);
        if let Some(w) = hypo_now.into_iter().next() {
            // `take_run` counted it as holding already; `grant` does that itself.
            self.drop_committing(&w);
            self.grant(w);
            return;
        }
        self.proj.remove_if_idle(key);
    }

    fn propose_free(
        &mut self,
        key: &Key,
        reason: FreeReason,
        by: Option<(ConnId, RequestId)>,
        freed: (Owner, Token),
        next: Vec<Waiter>,
        dt: u64,
    ) {
        let cmd = Command::Free {
            reason,
            key: key.clone(),
            owner: freed.0.clone(),
            token: freed.1,
            next: next_holders(&next),
            micros: (self.wall)(),
            dt,
        };
        self.propose(cmd, Intent::Free { reason, by, freed, next, dt });
    }

    /// `w`'s grant is committed: its keys are held with `issued`'s token
    /// (and slot); it is answered `A` (or `G` for a counted grant).
    fn granted(&mut self, w: Waiter, issued: Issued, dt: u64) {
        let now = self.now;
        let Issued { token, slot } = issued;
        for key in w.keys() {
            let h = Holding::committed(w.owner.clone(), token, w.lease, dt, slot, now).of(w.principal.clone());
            self.proj.commit_holder(key, &w.owner, h);
        }
        let waited = now.saturating_duration_since(w.read_at);
        let waited_ms = u32::try_from(waited.as_millis()).unwrap_or(u32::MAX);
        self.stats.grant_waits_ms.push(waited_ms);
        self.stats.grants_by_kind[w.kind.index()] += 1;
        let frame = match slot {
            Some(slot) => {
                ServerFrame::GrantedShared { id: w.id, key: w.key.clone(), owner: w.owner, token, waited_ms, slot }
            }
            None => ServerFrame::Granted { id: w.id, key: w.key.clone(), owner: w.owner, token, waited_ms },
        };
        self.reply(w.conn, w.id, frame);
    }

    /// The token counter is at its end (2^63 − 1, unreachable in practice):
    /// nothing can be granted any more; the acquire is answered `B`.
    fn tokens_exhausted(&mut self, w: Waiter) {
        warn!(key = %w.key, "the token counter is exhausted: nothing can be granted");
        self.refuse_busy(w.conn, w.id, w.key);
    }

    /// Puts the waiters of a hand-over that did not happen back at the head
    /// of their queues, the first first.
    fn put_back_all(&mut self, next: Vec<Waiter>) {
        for w in next.into_iter().rev() {
            self.drop_committing(&w);
            self.put_back(w);
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

    /// One proposed item's outcome: routed by its intent.
    fn on_outcome(
        &mut self,
        epoch: Option<u64>,
        item: Item,
        result: Result<Applied, ProposeError>,
        applied: &dyn AppliedView,
    ) {
        self.in_flight -= 1;
        let Item { keys, intent } = item;
        if matches!(intent, Intent::Tick) {
            // A `Tick`: nothing to route.
            self.tick_in_flight = false;
            match result {
                Ok(_) => {
                    self.stats.ticks += 1;
                }
                Err(e) => debug!(error = ?e, "tick not committed"),
            }
            return;
        }
        if epoch != self.epoch || epoch.is_none() {
            // A proposal of an earlier term: its connections were closed and
            // the projection rebuilt since.
            return;
        }
        for key in &keys {
            self.proj.set_busy(key, false);
        }
        match (intent, result) {
            // A tick was routed above.
            (Intent::Tick, _) => {}
            (intent, Err(e)) => self.proposal_failed(intent, &keys, &e, applied),
            (Intent::Grant(w, dt), Ok(effect)) => self.grant_outcome(w, dt, effect, &keys, applied),
            (Intent::Free { reason, by, freed, next, dt }, Ok(effect)) => {
                let freeing = Freeing { reason, by, freed, next, dt };
                self.free_outcome(freeing, effect, &keys, applied)
            }
        }
        for key in &keys {
            self.pump(key);
        }
    }

    /// The projection of `keys` follows the applied state again (it said
    /// something the state machine disagreed with).
    fn resync_keys(&mut self, keys: &[Key], applied: &dyn AppliedView) {
        for key in keys {
            self.resync_key(key, applied);
        }
    }

    /// A committed grant to `w`, proposed at domain time `dt`.
    fn grant_outcome(&mut self, w: Waiter, dt: u64, effect: Applied, keys: &[Key], applied: &dyn AppliedView) {
        match effect {
            Applied::Granted(token) if !matches!(w.kind, GrantKind::Shared { .. }) => {
                self.granted(w, Issued { token, slot: None }, dt)
            }
            Applied::GrantedShared { token, slot } if matches!(w.kind, GrantKind::Shared { .. }) => {
                self.granted(w, Issued { token, slot: Some(slot) }, dt)
            }
            Applied::TokensExhausted => {
                self.resync_keys(keys, applied);
                self.tokens_exhausted(w);
            }
            other => {
                debug!(key = %w.key, ?other, "grant found the key held; resyncing");
                self.resync_keys(keys, applied);
                if w.wait_until > w.read_at {
                    self.put_back(w);
                } else {
                    self.time_out(w);
                }
            }
        }
    }

    /// A committed release or expiry, and its hand-over.
    fn free_outcome(&mut self, f: Freeing, effect: Applied, keys: &[Key], applied: &dyn AppliedView) {
        let Freeing { reason, by, freed, next, dt } = f;
        match (by, effect) {
            (by, Applied::Freed { reason: r, handed_over }) if r == reason => {
                let key = &keys[0];
                match by {
                    Some((conn, id)) => {
                        self.stats.releases_released += 1;
                        self.reply(conn, id, ServerFrame::Released { id, key: key.clone() });
                    }
                    None => {
                        self.stats.expiries += 1;
                    }
                }
                self.proj.remove_holder(key, &freed.0, freed.1);
                let mut outcomes = handed_over.into_iter();
                for w in next {
                    match outcomes.next() {
                        Some(Ok(issued)) => self.granted(w, issued, dt),
                        Some(Err(Applied::TokensExhausted)) => {
                            self.drop_committing(&w);
                            self.tokens_exhausted(w);
                        }
                        _ => {
                            // The projection said it was grantable, the state machine disagreed.
                            debug!(key = %w.key, "hand-over not grantable; resyncing");
                            self.drop_committing(&w);
                            self.resync_keys(keys, applied);
                            self.put_back(w);
                        }
                    }
                }
            }
            (Some((conn, id)), other) => {
                self.stats.releases_not_holder += 1;
                let key = keys[0].clone();
                self.reply(conn, id, ServerFrame::NotHolder { id, key });
                let surprise = !next.is_empty() || !matches!(other, Applied::NotHolder);
                self.put_back_all(next);
                if surprise {
                    // The projection said it matched, the state machine disagreed.
                    self.resync_keys(keys, applied);
                }
            }
            (None, other) => {
                debug!(key = %keys[0], ?other, "expiry did not match; resyncing");
                self.put_back_all(next);
                self.resync_keys(keys, applied);
            }
        }
    }

    /// A proposal that was not committed: every connection it would have
    /// answered is closed with the error.
    fn proposal_failed(&mut self, intent: Intent, keys: &[Key], e: &ProposeError, applied: &dyn AppliedView) {
        self.stats.proposal_errors += 1;
        warn!(keys = ?keys, error = ?e, "proposal failed");
        let frame = self.error_frame(e);
        let fatal = |l: &mut Leader, conn| l.send(conn, Delivery::Fatal(frame.clone()));
        match intent {
            Intent::Grant(w, _) => fatal(self, w.conn),
            Intent::Free { by, next, .. } => {
                if let Some((conn, _)) = by {
                    fatal(self, conn);
                }
                for w in next {
                    fatal(self, w.conn);
                }
            }
            Intent::Tick => {}
        }
        self.resync_keys(keys, applied);
    }
}

/// The fields of [`Intent::Free`], handed to [`Leader::free_outcome`].
struct Freeing {
    reason: FreeReason,
    by: Option<(ConnId, RequestId)>,
    freed: (Owner, Token),
    next: Vec<Waiter>,
    dt: u64,
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
            next: vec![crate::locks::NextHolder::exclusive(Owner::new(owner.clone()).unwrap(), 250)],
            micros: u64::MAX,
            dt: u64::MAX,
        };
        for cmd in [&big[0], &small[0], &Command::Tick { dt: u64::MAX }, &release] {
            assert!(serde_json::to_vec(cmd).unwrap().len() <= encoded_estimate(cmd), "{cmd:?}");
        }
    }
}
