//! Hurrying the election a follower would win (docs/deployment.md, "Failover
//! timing"). When the leader dies, a follower whose timer fires asks for
//! votes; openraft 0.9 orders two candidates of one term by NodeId, and a
//! voter refuses a candidate whose log is shorter than its own before it
//! looks at the term. So a round is lost whenever the follower with the
//! longer log has the smaller NodeId: it refuses the other's request for
//! the log, and the other (which voted for itself, or votes for itself
//! later in the same term) refuses its request for the vote. The follower
//! that can win then waits one more election timeout (failovers of 3.6 s
//! with the defaults and 1.1 s with a 300–350 ms profile, one election
//! timeout above the usual 2.4 s and 0.7 s, were seen in earlier runs).
//!
//! Instead, the follower with the longer log campaigns at once in a term
//! above the other's, which the other grants. Only when it has not heard
//! from a leader for `election_timeout_max` (the leader lease openraft
//! itself checks first), so its own timer would fire within one election
//! timeout anyway: this only brings a campaign forward, and an election is
//! always safe in Raft.

use super::types::{NodeId, Raft};
use openraft::raft::{VoteRequest, VoteResponse};
use prometheus_client::metrics::counter::Counter;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::info;

/// When a leader last sent this node entries or a heartbeat, and whether a
/// hurried election is running.
#[derive(Debug, Default)]
pub struct Hurry {
    last_leader_contact: Mutex<Option<Instant>>,
    running: AtomicBool,
    campaigns: Counter,
}

impl Hurry {
    /// No leader heard yet; each campaign counted in `campaigns`.
    pub fn new(campaigns: Counter) -> Hurry {
        Hurry { campaigns, ..Hurry::default() }
    }

    /// An AppendEntries request arrived (from whichever leader).
    pub fn leader_contact(&self, now: Instant) {
        *self.last_leader_contact.lock().unwrap_or_else(|p| p.into_inner()) = Some(now);
    }

    /// Whether a leader sent this node entries or a heartbeat within `within` of `now`.
    pub fn heard_within(&self, now: Instant, within: Duration) -> bool {
        let heard = *self.last_leader_contact.lock().unwrap_or_else(|p| p.into_inner());
        heard.is_some_and(|t| now.saturating_duration_since(t) <= within)
    }

    /// The term this node should campaign above at once, given `resp`, its
    /// answer to `req` (see the module's docs), or `None`: it refused the
    /// candidate for the candidate's shorter log, while no leader has been
    /// heard for `lease`, and either the candidate's term is later than this
    /// node's (its own campaign is still to come) or both are candidates of
    /// one term and the other's NodeId is the greater (a lost round).
    pub fn campaign_above(
        &self,
        me: NodeId,
        now: Instant,
        lease: Duration,
        req: &VoteRequest<NodeId>,
        resp: &VoteResponse<NodeId>,
    ) -> Option<u64> {
        let heard = *self.last_leader_contact.lock().unwrap_or_else(|p| p.into_inner());
        let silent = heard.is_none_or(|t| now.saturating_duration_since(t) >= lease);
        if resp.vote_granted || !silent || resp.last_log_id <= req.last_log_id {
            return None;
        }
        let theirs = req.vote.leader_id();
        let mine = resp.vote.leader_id();
        let later = theirs.term > mine.term;
        let lost_round = theirs.term == mine.term
            && !resp.vote.is_committed()
            && mine.voted_for() == Some(me)
            && theirs.voted_for() > Some(me);
        (later || lost_round).then_some(theirs.term)
    }

    /// Campaigns in a term above `candidate_term` (one campaign at a time;
    /// each step waits at most `step` for the term to move).
    pub fn start(self: &Arc<Self>, raft: Raft, candidate_term: u64, step: Duration) {
        if self.running.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            if campaign(&raft, candidate_term, step).await {
                me.campaigns.inc();
            }
            me.running.store(false, Ordering::Release);
        });
    }
}

/// Elects until this node's term is above `candidate_term` (at most 3
/// steps), stopping once a leader of that term or a later one is known;
/// `true` if it started an election.
async fn campaign(raft: &Raft, candidate_term: u64, step: Duration) -> bool {
    let mut started = false;
    for _ in 0..3 {
        let (term, settled) = {
            let m = raft.metrics();
            let m = m.borrow();
            // The vote stays committed to the dead leader until this node
            // votes again: only a leader of the candidate's term or later counts.
            let settled = m.vote.is_committed() && m.vote.leader_id().term >= candidate_term;
            (m.current_term, settled)
        };
        if term > candidate_term || settled {
            break;
        }
        info!(term, candidate_term, "refused a candidate with a shorter log: campaigning at once");
        if raft.trigger().elect().await.is_err() {
            break;
        }
        started = true;
        let _ = raft.wait(Some(step)).metrics(|m| m.current_term > term, "the campaign's term").await;
    }
    started
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{CommittedLeaderId, LogId, Vote};

    fn log(term: u64, index: u64) -> Option<LogId<NodeId>> {
        Some(LogId::new(CommittedLeaderId::new(term, NodeId(1)), index))
    }

    fn req(term: u64, last: Option<LogId<NodeId>>) -> VoteRequest<NodeId> {
        VoteRequest::new(Vote::new(term, NodeId(2)), last)
    }

    fn refused(term: u64, last: Option<LogId<NodeId>>) -> VoteResponse<NodeId> {
        VoteResponse::new(Vote::new_committed(term, NodeId(1)), last, false)
    }

    const LEASE: Duration = Duration::from_millis(350);

    #[test]
    fn campaigns_only_for_a_later_candidate_with_a_shorter_log_after_the_lease() {
        let h = Hurry::default();
        let me = NodeId(1);
        let t0 = Instant::now();
        h.leader_contact(t0);
        let later = t0 + LEASE;
        // Refused for its shorter log, a later term, the leader silent for the lease.
        assert_eq!(h.campaign_above(me, later, LEASE, &req(3, log(2, 9)), &refused(2, log(2, 10))), Some(3));
        // The leader was heard within the lease (openraft refused by lease): no.
        assert_eq!(h.campaign_above(me, t0 + LEASE / 2, LEASE, &req(3, log(2, 9)), &refused(2, log(2, 10))), None);
        // The candidate's log is as long: the refusal was not about the log.
        assert_eq!(h.campaign_above(me, later, LEASE, &req(3, log(2, 10)), &refused(2, log(2, 10))), None);
        // The candidate is of this node's (committed) term: an old request, no.
        assert_eq!(h.campaign_above(me, later, LEASE, &req(2, log(2, 9)), &refused(2, log(2, 10))), None);
        // Granted: no.
        let granted = VoteResponse::new(Vote::new(3, NodeId(2)), log(2, 10), true);
        assert_eq!(h.campaign_above(me, later, LEASE, &req(3, log(2, 9)), &granted), None);
        // Never heard from a leader at all: silent.
        assert_eq!(Hurry::default().campaign_above(me, t0, LEASE, &req(3, None), &refused(2, log(2, 1))), Some(3));
    }

    #[test]
    fn in_a_lost_round_the_candidate_with_the_longer_log_campaigns_again() {
        let t0 = Instant::now();
        let h = Hurry::default();
        // Node 1 and node 2 are both candidates in term 3 (each voted for itself).
        let own = |id: u64, last| VoteResponse::new(Vote::new(3, NodeId(id)), last, false);
        let from = |id: u64, last| VoteRequest::new(Vote::new(3, NodeId(id)), last);
        // Node 1 has the longer log, node 2 the greater NodeId: each refuses the other.
        assert_eq!(h.campaign_above(NodeId(1), t0, LEASE, &from(2, log(2, 9)), &own(1, log(2, 10))), Some(3));
        // Node 2 with the longer log needs nothing: node 1 grants it (greater NodeId, longer log).
        assert_eq!(h.campaign_above(NodeId(2), t0, LEASE, &from(1, log(2, 9)), &own(2, log(2, 10))), None);
        // Equal logs: the greater NodeId wins the round by itself.
        assert_eq!(h.campaign_above(NodeId(1), t0, LEASE, &from(2, log(2, 10)), &own(1, log(2, 10))), None);
        // A refusal by a node that voted for someone else in that term is no lost round of its own.
        let other = VoteResponse::new(Vote::new(3, NodeId(5)), log(2, 10), false);
        assert_eq!(h.campaign_above(NodeId(1), t0, LEASE, &from(2, log(2, 9)), &other), None);
    }
}
