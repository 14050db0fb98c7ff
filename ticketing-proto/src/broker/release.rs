//! Releases through the lane (docs/client.md, Release lane): explicit
//! releases, compensations, and the lane's outcomes.

use super::*;

impl Broker {
    /// Releases a ticket's exact grant through the lane: one `R` per key
    /// (a multi-key grant has one token for all its keys). `Explicit` results
    /// come as one [`BrokerEvent::Released`] for the returned op once every
    /// key has ended: true iff every key answered `R`, false if any answered
    /// `N`, else [`Failure::ReleaseUnconfirmed`]. A lane without room for
    /// every key, or a closed broker, fails at once (`Err`, nothing enqueued).
    pub fn release(&mut self, now: Instant, grant: &Grant, purpose: Purpose) -> Result<OpId, Failure> {
        if self.phase != Phase::Open {
            return Err(Failure::Closed);
        }
        self.live.remove(&grant.id);
        let mut all = grant.exacts();
        if all.len() <= 1 {
            let g = all.pop().unwrap_or_else(|| grant.exact());
            let op = self.put_on_lane(now, g.key, g.owner, Some(g.token), purpose)?;
            self.dispatch(now);
            self.sync_lane_timer();
            return Ok(op);
        }
        if purpose == Purpose::Explicit && self.lane.room() < all.len() {
            return Err(Failure::ReleaseUnconfirmed);
        }
        let group = self.alloc_op();
        let mut left = 0;
        for g in all {
            if let Ok(op) = self.put_on_lane(now, g.key, g.owner, Some(g.token), purpose) {
                if purpose == Purpose::Explicit {
                    self.group_of.insert(op, group);
                    left += 1;
                }
            }
        }
        if purpose == Purpose::Explicit {
            self.groups.insert(group, ReleaseGroup { left, ..ReleaseGroup::default() });
        }
        self.dispatch(now);
        self.sync_lane_timer();
        Ok(group)
    }

    pub(super) fn enqueue_compensation(&mut self, now: Instant, grant: ExactGrant) {
        let _ = self.put_on_lane(now, grant.key, grant.owner, Some(grant.token), Purpose::Compensation);
        self.sync_lane_timer();
    }

    /// An acquire ended Indeterminate: the lane asks (`Q`) whether `owner`
    /// holds `key` and releases the exact token on `H` (docs/client.md,
    /// Release lane). Call `dispatch` afterwards.
    pub(super) fn enqueue_resolve(&mut self, now: Instant, key: Key, owner: Owner) {
        let _ = self.put_on_lane(now, key, owner, None, Purpose::Resolve);
        self.sync_lane_timer();
    }

    /// Puts one entry on the lane (`token: None` asks with `Q` first). The
    /// one home of "the lane refused": when it is full or the broker is
    /// closed, the entry ends `Unconfirmed` at once and is reported as a
    /// finished entry is — except an explicit release, whose caller gets the
    /// `Err` instead of an event.
    pub(super) fn put_on_lane(
        &mut self,
        now: Instant,
        key: Key,
        owner: Owner,
        token: Option<Token>,
        purpose: Purpose,
    ) -> Result<OpId, Failure> {
        let op = self.alloc_op();
        let accepted = self.phase != Phase::Closed
            && match token {
                Some(token) => {
                    let grant = ExactGrant { key: key.clone(), owner: owner.clone(), token };
                    self.lane.enqueue(now, op, grant, purpose).is_ok()
                }
                None => self.lane.enqueue_query(now, op, key.clone(), owner.clone()).is_ok(),
            };
        if accepted {
            return Ok(op);
        }
        if purpose != Purpose::Explicit {
            self.report_lane(op, key, owner, token, purpose, Outcome::Unconfirmed);
        }
        Err(Failure::ReleaseUnconfirmed)
    }

    /// The event of a finished lane entry, by its purpose.
    fn report_lane(
        &mut self,
        op: OpId,
        key: Key,
        owner: Owner,
        token: Option<Token>,
        purpose: Purpose,
        outcome: Outcome,
    ) {
        let event = match purpose {
            Purpose::Explicit => match self.group_of.remove(&op) {
                Some(group) => {
                    let Some(g) = self.groups.get_mut(&group) else { return };
                    g.left = g.left.saturating_sub(1);
                    g.not_holder |= outcome == Outcome::NotHolder;
                    g.unconfirmed |= outcome == Outcome::Unconfirmed;
                    if outcome == Outcome::Forbidden && g.forbidden.is_none() {
                        g.forbidden = Some(key);
                    }
                    if g.left > 0 {
                        return;
                    }
                    let result = match (g.forbidden.take(), g.not_holder, g.unconfirmed) {
                        (Some(key), _, _) => Err(Failure::Forbidden(key)),
                        (None, true, _) => Ok(false),
                        (None, false, true) => Err(Failure::ReleaseUnconfirmed),
                        (None, false, false) => Ok(true),
                    };
                    self.groups.remove(&group);
                    BrokerEvent::Released { op: group, result }
                }
                None => {
                    let result = match outcome {
                        Outcome::Released => Ok(true),
                        Outcome::NotHolder => Ok(false),
                        Outcome::Unconfirmed => Err(Failure::ReleaseUnconfirmed),
                        Outcome::Forbidden => Err(Failure::Forbidden(key)),
                    };
                    BrokerEvent::Released { op, result }
                }
            },
            Purpose::Resolve => BrokerEvent::Resolved { key, owner, token, outcome },
            purpose => match token {
                Some(token) => BrokerEvent::LaneDone { grant: ExactGrant { key, owner, token }, purpose, outcome },
                None => return,
            },
        };
        self.events.push_back(event);
    }

    pub(super) fn drain_lane(&mut self) {
        while let Some((id, entry, outcome)) = self.lane.poll_done() {
            self.report_lane(id, entry.key, entry.owner, entry.token, entry.purpose, outcome);
        }
        self.maybe_finish_close();
    }

    pub(super) fn sync_lane_timer(&mut self) {
        self.timers.set_opt(Timer::Lane, self.lane.poll_timeout());
    }
}
