//! Routing (docs/client.md, Leader hint and roles): which ready connection
//! gets a request, and sending what waits.

use super::*;

impl Broker {
    /// Candidate slots for a request, leader first, then not-follower; round-robin
    /// (acquires and lane releases each keep their own rotation).
    pub(super) fn pick(&mut self, for_lane: bool, avoid: &[ConnId]) -> Option<usize> {
        let acquire_limit = self.config.max_pending_per_conn - self.config.lane_slots_per_conn - 1;
        let lane_limit = self.config.lane_slots_per_conn;
        let mut leaders = Vec::new();
        let mut others = Vec::new();
        for (i, s) in self.slots.iter().enumerate() {
            let Some(c) = &s.conn else { continue };
            if !c.session.is_ready() || c.role == Some(Role::Follower) {
                continue;
            }
            let room = if for_lane {
                c.session.pending_releases() < lane_limit
            } else {
                c.session.pending_acquires() < acquire_limit
            };
            if !room {
                continue;
            }
            if c.role == Some(Role::Leader) {
                leaders.push(i);
            } else {
                others.push(i);
            }
        }
        let mut pool = if leaders.is_empty() { others } else { leaders };
        if let Some(h) = &self.hint {
            let at_hint: Vec<usize> = pool.iter().copied().filter(|&i| &self.slots[i].addr == h).collect();
            if !at_hint.is_empty() {
                pool = at_hint;
            }
        }
        if !avoid.is_empty() {
            let fresh: Vec<usize> = pool
                .iter()
                .copied()
                .filter(|&i| self.slots[i].conn.as_ref().map(|c| !avoid.contains(&c.id)).unwrap_or(false))
                .collect();
            if !fresh.is_empty() {
                pool = fresh;
            }
        }
        if pool.is_empty() {
            return None;
        }
        let rr = &mut self.rr[usize::from(for_lane)];
        let i = pool[*rr % pool.len()];
        *rr = rr.wrapping_add(1);
        Some(i)
    }

    /// Routes queued lane entries first, then waiting acquires in FIFO order.
    pub(super) fn dispatch(&mut self, now: Instant) {
        if self.phase == Phase::Closed {
            return;
        }
        let queued: Vec<(OpId, Request, Vec<ConnId>)> = self
            .lane
            .queued()
            .map(|(id, e)| {
                let (key, owner) = (e.key.clone(), e.owner.clone());
                let req = match e.token {
                    Some(token) => Request::Release { key, owner, token },
                    None => Request::Query { key, owner },
                };
                (id, req, e.tried.clone())
            })
            .collect();
        let mut touched: Vec<usize> = Vec::new();
        for (id, req, tried) in queued {
            let Some(slot) = self.pick(true, &tried) else { break };
            let Some(c) = self.slots[slot].conn.as_mut() else { continue };
            if c.session.send(now, id, req).is_ok() {
                let conn = c.id;
                self.lane.mark_sent(id, conn);
                touched.push(slot);
            }
        }
        while let Some(&op) = self.waiting.front() {
            let Some(a) = self.ops.get(&op) else {
                self.waiting.pop_front();
                continue;
            };
            let (key, kind, owner, max_wait, lease, budget_deadline) =
                (a.key.clone(), a.kind.clone(), a.owner.clone(), a.wait, a.lease, a.budget_deadline);
            let Some(slot) = self.pick(false, &[]) else { break };
            self.waiting.pop_front();
            // Never promise the server more waiting than the caller's budget has left.
            let left = budget_deadline.saturating_duration_since(now);
            let left_secs = left.as_secs() + u64::from(left.subsec_nanos() > 0);
            let wait = u8::try_from(left_secs.min(u64::from(max_wait))).unwrap_or(max_wait);
            let req = match kind {
                AcquireKind::Exclusive => Request::Acquire { key, owner, wait, lease },
                AcquireKind::Shared { n } => Request::AcquireShared { key, owner, wait, lease, n },
                AcquireKind::All { keys } => Request::AcquireAll { keys, owner, wait, lease },
            };
            let Some(c) = self.slots[slot].conn.as_mut() else { continue };
            match c.session.send(now, op, req) {
                Ok(_) => {
                    let conn = c.id;
                    if let Some(a) = self.ops.get_mut(&op) {
                        a.state = OpState::Sent(conn);
                    }
                    self.timers.clear(Timer::Budget(op));
                    touched.push(slot);
                }
                Err(_) => {
                    self.waiting.push_front(op);
                    break;
                }
            }
        }
        touched.sort_unstable();
        touched.dedup();
        for slot in touched {
            self.sync_session_timer(slot);
        }
    }
}
