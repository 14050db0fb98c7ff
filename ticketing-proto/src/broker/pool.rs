//! The connection slots (docs/client.md, Connections): one transport per
//! slot, reconnect backoff, the leader hint and roles from each session's
//! events, and what happens to a session's requests when it ends.

use super::*;

impl Broker {
    /// Marks the first attempt of `slot` as settled (ready or failed).
    pub(super) fn settle_first_attempt(&mut self, slot: usize) {
        self.slots[slot].first_attempt = false;
    }

    pub(super) fn connect(&mut self, now: Instant, slot: usize) {
        if self.slots[slot].conn.is_some() {
            return;
        }
        let id = ConnId(self.next_conn);
        self.next_conn += 1;
        let mut cnonce = [0u8; 32];
        self.rng.fill_bytes(&mut cnonce);
        let session = Session::new(now, self.config.session.clone(), self.config.token.expose(), Hex32(cnonce));
        self.slots[slot].conn = Some(Conn { id, session, role: None });
        self.conn_slot.insert(id, slot);
        self.events.push_back(BrokerEvent::Connect { conn: id, addr: self.slots[slot].addr.clone() });
        self.sync_session_timer(slot);
    }

    pub(super) fn sync_session_timer(&mut self, slot: usize) {
        if let Some(c) = &self.slots[slot].conn {
            self.timers.set_opt(Timer::Session(c.id), c.session.poll_timeout());
        }
    }

    pub(super) fn allowlisted(&self, addr: &Addr) -> bool {
        self.config.addrs.iter().any(|a| a.as_bytes() == addr.as_bytes())
    }

    /// Drains the session of `slot` into broker state and events.
    pub(super) fn after_session(&mut self, now: Instant, slot: usize) {
        loop {
            let Some(c) = self.slots[slot].conn.as_mut() else { return };
            let conn = c.id;
            let Some(ev) = c.session.poll_event() else { break };
            match ev {
                SessionEvent::Ready { role } => {
                    c.role = Some(role);
                    self.settle_first_attempt(slot);
                    let s = &mut self.slots[slot];
                    s.step = 0;
                    s.auth_failed = false;
                    if role == Role::Leader {
                        self.hint = Some(s.addr.clone());
                    }
                }
                SessionEvent::Leader(addr) => {
                    if self.allowlisted(&addr) {
                        let own = self.slots[slot].addr.as_bytes() == addr.as_bytes();
                        if let Some(c) = self.slots[slot].conn.as_mut() {
                            c.role = Some(if own { Role::Leader } else { Role::Follower });
                        }
                        self.hint = Some(addr.as_str().to_owned());
                    }
                }
                SessionEvent::Answer { op, answer } => self.on_answer(now, op, answer),
                SessionEvent::OrphanGrant { key, owner, token, other_keys } => {
                    let mut keys = vec![key];
                    keys.extend(other_keys);
                    for g in exacts(&keys, &owner, token) {
                        self.enqueue_compensation(now, g);
                    }
                }
                SessionEvent::Closed(closed) => {
                    self.on_session_closed(now, slot, conn, closed);
                    return;
                }
            }
        }
        self.sync_session_timer(slot);
    }

    /// A session ended, for any reason (docs/client.md, Response matching:
    /// "when a session ends").
    pub(super) fn on_session_closed(&mut self, now: Instant, slot: usize, conn: ConnId, closed: Closed) {
        self.free_slot(now, slot, conn, &closed.reason);
        self.requeue_unsent(closed.unsent);
        self.fail_possibly_sent(now, conn, closed.possibly_sent);
        self.settle_waiting_after(now, &closed.reason);
        self.sync_lane_timer();
    }

    /// The slot forgets its session: the hint learns from the reason, the
    /// reconnect is scheduled with backoff, the driver drops the transport.
    fn free_slot(&mut self, now: Instant, slot: usize, conn: ConnId, reason: &CloseReason) {
        self.settle_first_attempt(slot);
        self.timers.clear(Timer::Session(conn));
        self.conn_slot.remove(&conn);
        self.slots[slot].conn = None;
        match reason {
            CloseReason::Moved(a) if self.allowlisted(a) => self.hint = Some(a.as_str().to_owned()),
            CloseReason::NoLeader => self.hint = None,
            _ => {}
        }
        let s = &mut self.slots[slot];
        if reason.backoff_to_cap() {
            s.step = BACKOFF_MAX_STEP;
        }
        s.auth_failed = *reason == CloseReason::AuthFailed;
        let delay = backoff_delay(s.step);
        s.step = (s.step + 1).min(BACKOFF_MAX_STEP);
        let addr = s.addr.clone();
        if self.phase != Phase::Closed {
            self.timers.set(Timer::Retry(slot), now + delay);
        }
        self.events.push_back(BrokerEvent::Disconnect { conn });
        self.events.push_back(BrokerEvent::SessionEnded { conn, addr, reason: reason.clone() });
    }

    /// Never written: acquires go back to the front of the router's queue (in
    /// their order), releases back to the lane.
    fn requeue_unsent(&mut self, unsent: Vec<(OpId, Request)>) {
        let mut back: Vec<OpId> = Vec::new();
        for (op, req) in unsent {
            match req {
                Request::Acquire { .. } | Request::AcquireShared { .. } | Request::AcquireAll { .. } => {
                    if let Some(a) = self.ops.get_mut(&op) {
                        a.state = OpState::Waiting;
                        self.timers.set(Timer::Budget(op), a.budget_deadline);
                        back.push(op);
                    }
                }
                Request::Release { .. } | Request::Query { .. } => self.lane.requeue(op, None),
            }
        }
        back.sort();
        for op in back.into_iter().rev() {
            self.waiting.push_front(op);
        }
    }

    /// Possibly written: acquires end Indeterminate (never resent) and the
    /// lane resolves them (`Q`, then the exact `R` on `H`); lane requests are
    /// retried on another connection.
    fn fail_possibly_sent(&mut self, now: Instant, conn: ConnId, possibly_sent: Vec<(OpId, Request)>) {
        for (op, req) in possibly_sent {
            if let Some((owner, keys)) = req.acquire_keys() {
                if self.ops.remove(&op).is_some() {
                    self.timers.clear(Timer::Budget(op));
                    self.events.push_back(BrokerEvent::Acquired { op, result: Err(Failure::Indeterminate) });
                }
                // Also for a cancelled acquire (no longer in `ops`): it may have been granted.
                // A multi-key acquire: every key is asked about (and released on `H`) on its own.
                for key in keys {
                    self.enqueue_resolve(now, key, owner.clone());
                }
            } else {
                self.lane.requeue(op, Some(conn));
            }
        }
    }

    /// Waiting acquires after a session ended: all fail `AuthFailed` when
    /// authentication fails everywhere; otherwise each gets one routing
    /// attempt, and those whose budget ran out meanwhile fail `Unavailable`.
    fn settle_waiting_after(&mut self, now: Instant, reason: &CloseReason) {
        if *reason == CloseReason::AuthFailed && self.auth_failing_everywhere() {
            let all: Vec<OpId> = self.waiting.drain(..).collect();
            for op in all {
                self.ops.remove(&op);
                self.timers.clear(Timer::Budget(op));
                self.events.push_back(BrokerEvent::Acquired { op, result: Err(Failure::AuthFailed) });
            }
            return;
        }
        let overdue: Vec<OpId> = self
            .waiting
            .iter()
            .copied()
            .filter(|op| self.ops.get(op).map(|a| a.budget_deadline <= now).unwrap_or(false))
            .collect();
        self.dispatch(now);
        for op in overdue {
            if self.ops.get(&op).map(|o| o.state) == Some(OpState::Waiting) {
                self.expire_waiting(op);
            }
        }
    }

    /// Every slot's last handshake failed authentication and none is ready.
    pub(super) fn auth_failing_everywhere(&self) -> bool {
        !self.is_ready()
            && self
                .slots
                .iter()
                .all(|s| s.auth_failed && s.conn.as_ref().map(|c| !c.session.is_ready()).unwrap_or(true))
    }
}
