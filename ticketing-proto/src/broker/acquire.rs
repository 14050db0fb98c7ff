//! Acquires (docs/client.md, Acquire): start, cancel, the answer with its
//! conservative-deadline check, and the end of the `wait` budget.

use super::*;

impl Broker {
    /// Starts an acquire (docs/client.md, Acquire): a fresh owner, then routing within the
    /// `wait` budget. The result comes as [`BrokerEvent::Acquired`].
    pub fn acquire(&mut self, now: Instant, params: &AcquireParams) -> OpId {
        let p = params;
        self.start_acquire(now, p.key.clone(), AcquireKind::Exclusive, p.wait, p.lease, p.budget)
    }

    /// Starts a counted acquire (`S … n`, docs/protocol.md, "Counted and multi-key grants"): like
    /// [`Broker::acquire`], answered with a grant that has a slot.
    pub fn acquire_shared(&mut self, now: Instant, params: &SharedParams) -> OpId {
        let p = params;
        self.start_acquire(now, p.key.clone(), AcquireKind::Shared { n: p.n }, p.wait, p.lease, p.budget)
    }

    /// Starts a multi-key acquire (`K`, docs/protocol.md, "Counted and multi-key grants"): like
    /// [`Broker::acquire`], one grant (one token) for every key. An
    /// Indeterminate end queries and releases every key through the lane.
    pub fn acquire_all(&mut self, now: Instant, params: &AllParams) -> OpId {
        let p = params;
        let kind = AcquireKind::All { keys: p.keys.clone() };
        self.start_acquire(now, p.keys.first().clone(), kind, p.wait, p.lease, p.budget)
    }

    fn start_acquire(&mut self, now: Instant, key: Key, kind: AcquireKind, wait: u8, lease: u8, budget: u8) -> OpId {
        let op = self.alloc_op();
        if self.phase != Phase::Open {
            self.events.push_back(BrokerEvent::Acquired { op, result: Err(Failure::Closed) });
            return op;
        }
        let owner = params::owner(&mut &mut *self.rng);
        let budget_deadline = now + Duration::from_secs(u64::from(wait));
        self.ops.insert(
            op,
            AcquireOp {
                key,
                kind,
                owner,
                wait,
                lease,
                budget: Duration::from_secs(u64::from(budget)),
                budget_deadline,
                state: OpState::Waiting,
            },
        );
        self.waiting.push_back(op);
        self.timers.set(Timer::Budget(op), budget_deadline);
        self.dispatch(now);
        // `wait` 0 (or a budget already spent): one routing attempt, no waiting.
        if self.ops.get(&op).map(|o| o.state) == Some(OpState::Waiting) && budget_deadline <= now {
            self.expire_waiting(op);
        }
        op
    }

    /// Cancels acquire `op` (docs/client.md, Acquire step 7): an unsent one just disappears;
    /// for a possibly-sent one the session is closed (its other possibly-sent
    /// acquires become Indeterminate). No event is reported for `op`.
    pub fn cancel(&mut self, now: Instant, op: OpId) {
        let Some(a) = self.ops.remove(&op) else { return };
        self.timers.clear(Timer::Budget(op));
        match a.state {
            OpState::Waiting => self.waiting.retain(|w| *w != op),
            OpState::Sent(conn) => {
                let Some(&slot) = self.conn_slot.get(&conn) else { return };
                let Some(c) = self.slots[slot].conn.as_mut() else { return };
                match c.session.cancel(op) {
                    CancelOutcome::Unsent | CancelOutcome::NotFound => {}
                    CancelOutcome::PossiblySent => {
                        c.session.close(CloseReason::Cancelled);
                        self.after_session(now, slot);
                    }
                }
                self.sync_session_timer(slot);
                self.dispatch(now);
            }
        }
    }

    pub(super) fn on_answer(&mut self, now: Instant, op: OpId, answer: Answer) {
        if self.lane.contains(op) {
            match answer {
                Answer::Released => self.lane.answer(op, true),
                Answer::NotHolder => self.lane.answer(op, false),
                Answer::Forbidden { .. } => self.lane.forbidden(op),
                Answer::Held { token, .. } => {
                    self.lane.held(op, token);
                    self.dispatch(now);
                }
                _ => {}
            }
            self.drain_lane();
            self.sync_lane_timer();
            return;
        }
        let Some(a) = self.ops.remove(&op) else {
            // The caller is gone (closed): a grant it will never see is compensated, every key.
            if let Answer::Granted { key, owner, token, other_keys, .. } = answer {
                let mut keys = vec![key];
                keys.extend(other_keys);
                for g in exacts(&keys, &owner, token) {
                    self.enqueue_compensation(now, g);
                }
            }
            return;
        };
        self.timers.clear(Timer::Budget(op));
        let result = match answer {
            Answer::Granted { token, waited_ms, t_send, slot, .. } => {
                let keys = match &a.kind {
                    AcquireKind::All { keys } => keys.as_slice().to_vec(),
                    AcquireKind::Exclusive | AcquireKind::Shared { .. } => vec![a.key.clone()],
                };
                match deadline::check(t_send, waited_ms, a.lease, a.budget, now) {
                    Verdict::Ticket { deadline } => {
                        let grant = Grant { id: op, key: a.key, keys, owner: a.owner, token, slot, deadline };
                        self.live.insert(op, grant.exacts());
                        Ok(Some(grant))
                    }
                    Verdict::InsufficientTime => {
                        // Every key goes back (docs/client.md, Acquire step 4).
                        for g in exacts(&keys, &a.owner, token) {
                            self.enqueue_compensation(now, g);
                        }
                        Err(Failure::InsufficientTime)
                    }
                }
            }
            Answer::Timeout => Ok(None),
            Answer::Busy => Err(Failure::Busy),
            Answer::Forbidden { key } => Err(Failure::Forbidden(key)),
            Answer::Released | Answer::NotHolder | Answer::Held { .. } => Err(Failure::Indeterminate),
        };
        self.events.push_back(BrokerEvent::Acquired { op, result });
    }

    pub(super) fn expire_waiting(&mut self, op: OpId) {
        if self.ops.remove(&op).is_none() {
            return;
        }
        self.waiting.retain(|w| *w != op);
        self.timers.clear(Timer::Budget(op));
        let failure = if self.slots.iter().any(|s| s.auth_failed) { Failure::AuthFailed } else { Failure::Unavailable };
        self.events.push_back(BrokerEvent::Acquired { op, result: Err(failure) });
    }

    /// A grant the caller could not take (e.g. its result had nowhere to go):
    /// release it through the lane as a compensation.
    pub fn compensate(&mut self, now: Instant, grant: &Grant) {
        self.live.remove(&grant.id);
        for g in grant.exacts() {
            self.enqueue_compensation(now, g);
        }
        self.dispatch(now);
    }
}
