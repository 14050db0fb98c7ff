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

use super::peer::{RpcError, Sent};
use super::types::NodeId;
use super::wire::Body;
use openraft::raft::AppendEntriesResponse;
use openraft::{LogId, Vote};
use std::task::Poll;

/// At most this many requests per follower are kept for their late answers.
pub const MAX_LATE: usize = 8;

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
    sent: Sent,
}

/// The requests in flight to one follower, the newest last.
#[derive(Default)]
pub struct Pending {
    list: Vec<InFlight>,
    next_seq: u64,
}

impl Pending {
    /// Records a request just written; returns its sequence number. Requests
    /// of an older vote are forgotten; beyond [`MAX_LATE`] the oldest goes.
    pub fn push(&mut self, range: Range, sent: Sent) -> u64 {
        self.list.retain(|f| f.range.vote == range.vote);
        if self.list.len() >= MAX_LATE {
            self.list.remove(0);
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.list.push(InFlight { range, seq, sent });
        seq
    }

    /// Waits for request `seq`'s own answer or a late answer that is true for
    /// it (`now` is its range), given as an `AppendResp` body. The request
    /// stays kept when a late answer serves it, so its own answer can serve
    /// the next one.
    pub async fn answer(&mut self, seq: u64, now: &Range) -> Result<Body, RpcError> {
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
                    if let Some(derived) = reuse(&done.range, &resp, now) {
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
    fn another_vote_or_a_conflict_says_nothing_and_a_higher_vote_always_counts() {
        assert_eq!(reuse(&range(1, 10, 14), &AppendEntriesResponse::Success, &range(2, 10, 20)), None);
        assert_eq!(reuse(&range(2, 10, 14), &AppendEntriesResponse::Conflict, &range(2, 10, 20)), None);
        let higher = AppendEntriesResponse::HigherVote(vote(3));
        assert_eq!(reuse(&range(2, 10, 14), &higher, &range(2, 30, 40)), Some(higher));
    }
}
