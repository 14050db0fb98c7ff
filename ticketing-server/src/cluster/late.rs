//! Late AppendEntries answers (docs/cluster-protocol.md "Slow peer links").
//!
//! openraft 0.9 gives every AppendEntries RPC a deadline of one heartbeat
//! interval and forgets the request when it passes. On a peer link whose
//! round trip is longer than that (the default 50 ms heartbeat against a
//! 60–80 ms round trip) every RPC timed out, nothing committed, and the
//! cluster stopped granting while every node stayed up.
//!
//! The follower's answer still arrives, one round trip after the request.
//! So a request whose deadline passed is kept here, its answer still
//! awaited; the next AppendEntries to the same follower in the same term
//! waits for its own answer OR for such a late one. A late success says the
//! follower holds the leader's log up to that request's last entry: when
//! that lies within the new request's range it is a true answer to the new
//! request too (a partial success up to there), exactly what a pipelined
//! Raft counts. A late "higher vote" is true for any request. Anything else
//! late says nothing about the new request and is dropped.
//!
//! Freshness: openraft dates every answer by the time ITS request was sent,
//! and the quorum-ack gate (`millis_since_quorum_ack`, `publish_leadership`)
//! serves from that date. A late answer proves the follower was with the
//! leader only when the EARLIER request was sent, so passing it on as the
//! newer request's answer dates it too fresh by the gap between the two
//! sends. That gap is bounded: a late answer serves only a request sent at
//! most [`max_reuse_age`] after its own, and the gate allows that much less
//! ([`gate_limit`]), so a leader never serves on an acknowledgment older than
//! the quorum limit, late answers or not.

use super::peer::{RpcError, Sent};
use super::types::NodeId;
use super::wire::Body;
use openraft::raft::AppendEntriesResponse;
use openraft::{LogId, Vote};
use std::task::Poll;
use std::time::{Duration, Instant};

/// At most this many requests per follower are kept for their late answers.
pub const MAX_LATE: usize = 8;

/// The most a late answer's request may precede the request it serves: a
/// third of the quorum limit (`election_timeout_max`; 400 ms by default, so
/// late answers keep round trips up to about 400 ms replicating).
pub fn max_reuse_age(quorum_limit: Duration) -> Duration {
    quorum_limit / 3
}

/// The quorum-ack gate's limit: the quorum limit less what a reused late
/// answer can overstate ([`max_reuse_age`]).
pub fn gate_limit(quorum_limit: Duration) -> Duration {
    quorum_limit - max_reuse_age(quorum_limit)
}

/// THE quorum-ack gate: a leader whose last quorum acknowledgment (as
/// openraft dates it) is `ack_at` may serve at `now`.
pub fn quorum_acked(ack_at: Option<Instant>, now: Instant, quorum_limit: Duration) -> bool {
    ack_at.is_some_and(|at| now.saturating_duration_since(at) <= gate_limit(quorum_limit))
}

/// [`reuse`], only for a request sent at most `max_age` after the earlier one
/// (`earlier_at`, `now_at`: when each request was handed to the network).
pub fn reuse_in_time(
    earlier: &Range,
    earlier_at: Instant,
    answer: &AppendEntriesResponse<NodeId>,
    now: &Range,
    now_at: Instant,
    max_age: Duration,
) -> Option<AppendEntriesResponse<NodeId>> {
    if now_at.saturating_duration_since(earlier_at) > max_age {
        return None;
    }
    reuse(earlier, answer, now)
}

/// What a request covered: the leader's vote, its `prev_log_id` and the last
/// log id it carried (`prev` for a heartbeat).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Range {
    /// The vote the request was sent under.
    pub vote: Vote<NodeId>,
    /// The request's `prev_log_id`.
    pub prev: Option<LogId<NodeId>>,
    /// The last log id the request carried (`prev` when it carried none).
    pub last: Option<LogId<NodeId>>,
}

/// What a late answer to `earlier` tells about the request `now`, if anything.
pub fn reuse(
    earlier: &Range,
    answer: &AppendEntriesResponse<NodeId>,
    now: &Range,
) -> Option<AppendEntriesResponse<NodeId>> {
    if earlier.vote != now.vote {
        return None;
    }
    let matching = match answer {
        AppendEntriesResponse::Success => earlier.last,
        AppendEntriesResponse::PartialSuccess(m) => *m,
        AppendEntriesResponse::HigherVote(v) => return Some(AppendEntriesResponse::HigherVote(*v)),
        AppendEntriesResponse::Conflict => return None,
    };
    let index = |l: &Option<LogId<NodeId>>| l.map(|l| l.index);
    let within = matching >= now.prev
        && matching <= now.last
        && index(&matching) >= index(&now.prev)
        && index(&matching) <= index(&now.last);
    if !within {
        None
    } else if matching == now.last {
        Some(AppendEntriesResponse::Success)
    } else {
        Some(AppendEntriesResponse::PartialSuccess(matching))
    }
}

/// One request in flight to a follower.
pub struct InFlight {
    range: Range,
    seq: u64,
    /// When it was handed to the network (before it was written).
    at: Instant,
    sent: Sent,
}

/// The requests in flight to one follower, the newest last.
pub struct Pending {
    list: Vec<InFlight>,
    next_seq: u64,
    /// [`max_reuse_age`].
    max_age: Duration,
}

impl Pending {
    /// No request in flight; late answers serve requests sent at most
    /// `max_age` after theirs ([`max_reuse_age`]).
    pub fn new(max_age: Duration) -> Pending {
        Pending { list: Vec::new(), next_seq: 0, max_age }
    }

    /// Records a request just written (`at`: taken before it was written);
    /// returns its sequence number. Requests of an older vote are forgotten;
    /// beyond [`MAX_LATE`] the oldest goes.
    pub fn push(&mut self, range: Range, at: Instant, sent: Sent) -> u64 {
        self.list.retain(|f| f.range.vote == range.vote);
        if self.list.len() >= MAX_LATE {
            self.list.remove(0);
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.list.push(InFlight { range, seq, at, sent });
        seq
    }

    /// Waits for request `seq`'s own answer or a late answer that is true for
    /// it (`now` is its range) and recent enough ([`reuse_in_time`]), given
    /// as an `AppendResp` body. The request stays kept when a late answer
    /// serves it, so its own answer can serve the next one.
    pub async fn answer(&mut self, seq: u64, now: &Range) -> Result<Body, RpcError> {
        let Some(now_at) = self.list.iter().find(|f| f.seq == seq).map(|f| f.at) else {
            return Err(RpcError::ConnectionLost);
        };
        let max_age = self.max_age;
        std::future::poll_fn(|cx| {
            let mut i = 0;
            while i < self.list.len() {
                let Poll::Ready(res) = self.list[i].sent.poll_answer(cx) else {
                    i += 1;
                    continue;
                };
                let done = self.list.remove(i);
                if done.seq == seq {
                    return Poll::Ready(res);
                }
                if let Ok(Body::AppendResp(Ok(resp))) = res {
                    if let Some(derived) = reuse_in_time(&done.range, done.at, &resp, now, now_at, max_age) {
                        return Poll::Ready(Ok(Body::AppendResp(Ok(derived))));
                    }
                }
            }
            Poll::Pending
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::CommittedLeaderId;

    fn vote(term: u64) -> Vote<NodeId> {
        Vote::new_committed(term, NodeId(1))
    }

    fn id(term: u64, index: u64) -> Option<LogId<NodeId>> {
        Some(LogId::new(CommittedLeaderId::new(term, NodeId(1)), index))
    }

    fn range(term: u64, prev: u64, last: u64) -> Range {
        Range { vote: vote(term), prev: id(term, prev), last: id(term, last) }
    }

    #[test]
    fn a_late_success_inside_the_new_range_is_a_partial_success() {
        let got = reuse(&range(2, 10, 14), &AppendEntriesResponse::Success, &range(2, 10, 20));
        assert_eq!(got, Some(AppendEntriesResponse::PartialSuccess(id(2, 14))));
    }

    #[test]
    fn a_late_success_up_to_the_new_last_is_a_success() {
        let got = reuse(&range(2, 10, 20), &AppendEntriesResponse::Success, &range(2, 14, 20));
        assert_eq!(got, Some(AppendEntriesResponse::Success));
        // A heartbeat (prev = last) matched exactly.
        let got = reuse(&range(2, 10, 20), &AppendEntriesResponse::Success, &range(2, 20, 20));
        assert_eq!(got, Some(AppendEntriesResponse::Success));
    }

    #[test]
    fn a_late_success_outside_the_new_range_says_nothing() {
        // Below the new prev: the follower is known to hold less than the new request assumes.
        assert_eq!(reuse(&range(2, 4, 8), &AppendEntriesResponse::Success, &range(2, 10, 20)), None);
        // Beyond the new last: cannot be reported for a request that did not carry it.
        assert_eq!(reuse(&range(2, 10, 24), &AppendEntriesResponse::Success, &range(2, 10, 20)), None);
    }

    #[test]
    fn a_late_partial_success_counts_up_to_its_matching() {
        let got = reuse(&range(2, 10, 20), &AppendEntriesResponse::PartialSuccess(id(2, 12)), &range(2, 11, 20));
        assert_eq!(got, Some(AppendEntriesResponse::PartialSuccess(id(2, 12))));
    }

    #[test]
    fn a_late_answer_too_old_for_the_new_request_says_nothing() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let (earlier, now) = (range(2, 10, 10), range(2, 10, 10));
        let ok = AppendEntriesResponse::Success;
        assert_eq!(reuse_in_time(&earlier, t0, &ok, &now, t0 + ms(400), ms(400)), Some(AppendEntriesResponse::Success));
        assert_eq!(reuse_in_time(&earlier, t0, &ok, &now, t0 + ms(401), ms(400)), None);
        assert_eq!((max_reuse_age(ms(1200)), gate_limit(ms(1200))), (ms(400), ms(800)));
        assert!(quorum_acked(Some(t0), t0 + ms(800), ms(1200)));
        assert!(!quorum_acked(Some(t0), t0 + ms(801), ms(1200)));
        assert!(!quorum_acked(None, t0, ms(1200)));
    }

    /// The leader of a simulated link (heartbeats every `hb`, one awaited at
    /// a time as openraft does, each dropped after `hb`; answers after
    /// `rtt`) partitioned at `cut`: the follower receives nothing sent after
    /// `cut - rtt/2`, answers already on their way still arrive. Returns the
    /// send time of the last request the follower received, and the last
    /// instant the gate (`serves(ack_at, now)`) let the leader serve, with
    /// every answer dated as openraft dates it: by the send time of the
    /// request it was returned for.
    fn partitioned(
        rtt: Duration,
        max_age: Duration,
        serves: impl Fn(Option<Instant>, Instant) -> bool,
    ) -> (Duration, Duration) {
        let t0 = Instant::now();
        let (hb, cut) = (Duration::from_millis(50), Duration::from_millis(3000));
        let heartbeat = range(2, 10, 10);
        let ok = AppendEntriesResponse::Success;
        let sent_at = |k: u32| hb * k;
        // Which request is awaited at `t` (offset from t0).
        let awaited = |t: Duration| (t.as_millis() / hb.as_millis()) as u32;
        let delivered: Vec<u32> = (0..).take_while(|k| sent_at(*k) + rtt / 2 < cut).collect();
        // (arrival, date) of every answer that the leader takes as an acknowledgment.
        let dated: Vec<(Duration, Duration)> = delivered
            .iter()
            .filter_map(|&k| {
                let arrives = sent_at(k) + rtt;
                let m = awaited(arrives).max(k);
                let (ek, em) = (t0 + sent_at(k), t0 + sent_at(m));
                let taken = m == k || reuse_in_time(&heartbeat, ek, &ok, &heartbeat, em, max_age).is_some();
                taken.then_some((arrives, sent_at(m)))
            })
            .collect();
        let last_received = sent_at(*delivered.last().unwrap());
        let mut last_serving = Duration::ZERO;
        for now in (0..8000).map(Duration::from_millis) {
            let ack = dated.iter().filter(|(arr, _)| *arr <= now).map(|(_, d)| t0 + *d).max();
            if serves(ack, t0 + now) {
                last_serving = now;
            }
        }
        (last_received, last_serving)
    }

    #[test]
    fn a_partitioned_leader_on_late_answers_stops_serving_within_the_quorum_limit() {
        let limit = Duration::from_millis(1200);
        let max_age = max_reuse_age(limit);
        for rtt in [30, 70, 120, 240, 300, 390, 400, 450, 1000].map(Duration::from_millis) {
            let (received, serving) = partitioned(rtt, max_age, |ack, now| quorum_acked(ack, now, limit));
            // Every acknowledgment the gate counts is at most `limit` old in truth.
            assert!(serving <= received + limit, "rtt {rtt:?}: served until {serving:?}, last proof {received:?}");
            if rtt <= max_age {
                // Until the partition it served on these (late) answers.
                assert!(serving + Duration::from_millis(100) >= received, "rtt {rtt:?}: it served at all");
            }
        }
        // The check can fail: dated by the newer request and gated at the
        // full limit (no age bound), the same late answers keep a
        // partitioned leader serving past the quorum limit.
        let unbounded = Duration::from_secs(3600);
        let full = |ack: Option<Instant>, now: Instant| ack.is_some_and(|a| now.saturating_duration_since(a) <= limit);
        let (received, serving) = partitioned(Duration::from_millis(240), unbounded, full);
        assert!(serving > received + limit, "{serving:?} vs {received:?}");
    }

    #[test]
    fn another_vote_or_a_conflict_says_nothing_and_a_higher_vote_always_counts() {
        assert_eq!(reuse(&range(1, 10, 14), &AppendEntriesResponse::Success, &range(2, 10, 20)), None);
        assert_eq!(reuse(&range(2, 10, 14), &AppendEntriesResponse::Conflict, &range(2, 10, 20)), None);
        let higher = AppendEntriesResponse::HigherVote(vote(3));
        assert_eq!(reuse(&range(2, 10, 14), &higher, &range(2, 30, 40)), Some(higher));
    }
}
