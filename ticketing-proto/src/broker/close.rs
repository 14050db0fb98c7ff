//! Closing the broker (docs/client.md, Release lane): pending acquires fail,
//! live tickets get best-effort releases, then every transport is dropped.

use super::*;

impl Broker {
    /// Closes the broker: pending and future acquires fail with `Closed`, live
    /// tickets get best-effort releases; once the lane is empty (at most 5 s)
    /// every transport is dropped and [`BrokerEvent::Closed`] is reported.
    pub fn close(&mut self, now: Instant) {
        if self.phase != Phase::Open {
            return;
        }
        self.phase = Phase::Closing;
        let mut ops: Vec<OpId> = self.ops.keys().copied().collect();
        ops.sort();
        for op in ops {
            // A grant for a sent one that still arrives is compensated (unknown op).
            self.ops.remove(&op);
            self.timers.clear(Timer::Budget(op));
            self.events.push_back(BrokerEvent::Acquired { op, result: Err(Failure::Closed) });
        }
        self.waiting.clear();
        let mut live: Vec<(OpId, Vec<ExactGrant>)> = self.live.drain().collect();
        live.sort_by_key(|(id, _)| *id);
        for g in live.into_iter().flat_map(|(_, all)| all) {
            let _ = self.put_on_lane(now, g.key, g.owner, Some(g.token), Purpose::BestEffort);
        }
        self.timers.set(Timer::CloseGrace, now + lane::DEADLINE);
        self.dispatch(now);
        self.sync_lane_timer();
        self.maybe_finish_close();
    }

    pub(super) fn maybe_finish_close(&mut self) {
        if self.phase == Phase::Closing && self.lane.is_empty() {
            self.finish_close();
        }
    }

    pub(super) fn finish_close(&mut self) {
        if self.phase == Phase::Closed {
            return;
        }
        self.phase = Phase::Closed;
        self.timers = TimerTable::new();
        for s in &mut self.slots {
            if let Some(c) = s.conn.take() {
                self.events.push_back(BrokerEvent::Disconnect { conn: c.id });
            }
        }
        self.conn_slot.clear();
        // Whatever the lane still holds is given up.
        self.lane.give_up_all();
        self.drain_lane();
        self.events.push_back(BrokerEvent::Closed);
    }
}
