//! Releases through the lane (docs/client.md, Release lane): explicit
//! releases, compensations, and the lane's outcomes.

use super::*;

impl Broker {
    /// Releases a ticket's exact grant through the lane. `Explicit` results
    /// come as [`BrokerEvent::Released`]; a full lane or a closed broker fails
    /// at once (`Err`, nothing enqueued).
    pub fn release(&mut self, now: Instant, grant: &Grant, purpose: Purpose) -> Result<OpId, Failure> {
        if self.phase != Phase::Open {
            return Err(Failure::Closed);
        }
        self.live.remove(&grant.id);
        let op = self.alloc_op();
        match self.lane.enqueue(now, op, grant.exact(), purpose) {
            Ok(()) => {
                self.dispatch(now);
                self.sync_lane_timer();
                Ok(op)
            }
            Err(lane::LaneFull) => {
                if purpose != Purpose::Explicit {
                    self.events.push_back(BrokerEvent::LaneDone {
                        grant: grant.exact(),
                        purpose,
                        outcome: Outcome::Unconfirmed,
                    });
                }
                Err(Failure::ReleaseUnconfirmed)
            }
        }
    }

    pub(super) fn enqueue_compensation(&mut self, now: Instant, grant: ExactGrant) {
        if self.phase == Phase::Closed {
            self.events.push_back(BrokerEvent::LaneDone {
                grant,
                purpose: Purpose::Compensation,
                outcome: Outcome::Unconfirmed,
            });
            return;
        }
        let op = self.alloc_op();
        if self.lane.enqueue(now, op, grant.clone(), Purpose::Compensation).is_err() {
            self.events.push_back(BrokerEvent::LaneDone {
                grant,
                purpose: Purpose::Compensation,
                outcome: Outcome::Unconfirmed,
            });
        }
        self.sync_lane_timer();
    }

    /// An acquire ended Indeterminate: the lane asks (`Q`) whether `owner`
    /// holds `key` and releases the exact token on `H` (docs/client.md,
    /// Release lane). Call `dispatch` afterwards.
    pub(super) fn enqueue_resolve(&mut self, now: Instant, key: Key, owner: Owner) {
        if self.phase == Phase::Closed {
            self.events.push_back(BrokerEvent::Resolved { key, owner, token: None, outcome: Outcome::Unconfirmed });
            return;
        }
        let op = self.alloc_op();
        if self.lane.enqueue_query(now, op, key.clone(), owner.clone()).is_err() {
            self.events.push_back(BrokerEvent::Resolved { key, owner, token: None, outcome: Outcome::Unconfirmed });
        }
        self.sync_lane_timer();
    }

    pub(super) fn drain_lane(&mut self) {
        while let Some((id, entry, outcome)) = self.lane.poll_done() {
            match entry.purpose {
                Purpose::Explicit => {
                    let result = match outcome {
                        Outcome::Released => Ok(true),
                        Outcome::NotHolder => Ok(false),
                        Outcome::Unconfirmed => Err(Failure::ReleaseUnconfirmed),
                    };
                    self.events.push_back(BrokerEvent::Released { op: id, result });
                }
                Purpose::Resolve => self.events.push_back(BrokerEvent::Resolved {
                    key: entry.key,
                    owner: entry.owner,
                    token: entry.token,
                    outcome,
                }),
                purpose => {
                    if let Some(grant) = entry.grant() {
                        self.events.push_back(BrokerEvent::LaneDone { grant, purpose, outcome });
                    }
                }
            }
        }
        self.maybe_finish_close();
    }

    pub(super) fn sync_lane_timer(&mut self) {
        self.timers.set_opt(Timer::Lane, self.lane.poll_timeout());
    }
}
