//! One client connection as a pure state machine: the handshake of
//! docs/protocol.md §3, and from docs/client.md the keepalive (Connections),
//! response matching (Response matching), the answer deadline (Acquire
//! step 6) and the Indeterminate rule. What goes in and out of it is in
//! `messages`.
//!
//! # Driving it
//! Create a [`Session`] when the transport is opened (the handshake clock
//! starts then), then after every input:
//!
//! 1. feed bytes with [`Session::handle_input`], a transport end with
//!    [`Session::handle_closed`], expired timers with [`Session::handle_timeout`];
//! 2. drain [`Session::poll_transmit`] (hand every chunk to the transport: from
//!    that moment its requests count as *possibly written*);
//! 3. drain [`Session::poll_event`];
//! 4. sleep until [`Session::poll_timeout`].
//!
//! Requests are registered in the pending table by [`Session::send`] before
//! their bytes can be handed out, so an answer can never arrive for an
//! unregistered request. The first fatal condition closes the session for
//! good and is reported once as [`SessionEvent::Closed`], which lists what was
//! pending: requests whose bytes were never handed out (`unsent`, safe to
//! route elsewhere) and requests that were possibly written (`possibly_sent`:
//! an acquire among them is Indeterminate and must never be resent).

mod messages;
#[cfg(test)]
mod tests;

pub use messages::{Answer, CancelOutcome, CloseReason, Closed, Request, SendError, SessionConfig, SessionEvent};

use crate::auth::{self, Label, Secret};
use crate::frame::{
    decode_server, ClientFrame, ErrorCode, FrameError, Hex32, Key, Owner, RequestId, ServerFrame, Token,
};
use crate::op::OpId;
use crate::timer::TimerTable;
use bytes::{Bytes, BytesMut};
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
enum Phase {
    AwaitGreeting,
    AwaitOk { snonce: Hex32, cnonce: Hex32 },
    Ready,
    Closed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Timer {
    Handshake,
    Idle,
    Dead,
    Answer(RequestId),
}

/// Which requests an answer may answer (docs/client.md, Response matching).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// `T`, `B`.
    Acquire,
    /// `R`.
    Release,
    /// `N`.
    ReleaseOrQuery,
    /// `H`.
    Query,
    /// `F`: answers every request kind.
    Any,
}

#[derive(Debug, Clone)]
enum Kind {
    Request(OpId, Request),
    Ping,
}

#[derive(Debug, Clone)]
struct Pending {
    kind: Kind,
    written: bool,
    t_send: Instant,
}

/// One client connection (see the module docs for the driving order).
#[derive(Debug)]
pub struct Session {
    config: SessionConfig,
    token: Secret,
    pending_cnonce: Option<Hex32>,
    phase: Phase,
    next_id: u64,
    pending: HashMap<RequestId, Pending>,
    by_op: HashMap<OpId, RequestId>,
    outbound: VecDeque<(Option<RequestId>, Bytes)>,
    inbound: BytesMut,
    events: VecDeque<SessionEvent>,
    timers: TimerTable<Timer>,
    ping_in_flight: bool,
    acquires: usize,
    releases: usize,
}

impl Session {
    /// A session whose transport is being opened at `now`. `token` is the
    /// shared client token (empty when auth is off); `cnonce` must be 32 fresh
    /// random bytes (the caller's CSPRNG).
    pub fn new(now: Instant, config: SessionConfig, token: &[u8], cnonce: Hex32) -> Session {
        let mut timers = TimerTable::new();
        timers.set(Timer::Handshake, now + config.handshake_timeout);
        Session {
            config,
            token: Secret::new(token),
            pending_cnonce: Some(cnonce),
            phase: Phase::AwaitGreeting,
            next_id: 1,
            pending: HashMap::new(),
            by_op: HashMap::new(),
            outbound: VecDeque::new(),
            inbound: BytesMut::new(),
            events: VecDeque::new(),
            timers,
            ping_in_flight: false,
            acquires: 0,
            releases: 0,
        }
    }

    /// True after a verified `OK` and before the end.
    pub fn is_ready(&self) -> bool {
        matches!(self.phase, Phase::Ready)
    }

    /// True once the session has ended.
    pub fn is_closed(&self) -> bool {
        matches!(self.phase, Phase::Closed)
    }

    /// Acquires in flight (registered, not answered).
    pub fn pending_acquires(&self) -> usize {
        self.acquires
    }

    /// Release-lane requests in flight (releases and queries; registered, not answered).
    pub fn pending_releases(&self) -> usize {
        self.releases
    }

    /// Whether the request `op` is pending and may have been written.
    pub fn possibly_written(&self, op: OpId) -> Option<bool> {
        let id = self.by_op.get(&op)?;
        self.pending.get(id).map(|p| p.written)
    }

    /// Registers `req` and queues its frame. Call [`Session::poll_transmit`] next.
    pub fn send(&mut self, now: Instant, op: OpId, req: Request) -> Result<RequestId, SendError> {
        match self.phase {
            Phase::Ready => {}
            Phase::Closed => return Err(SendError::Closed),
            _ => return Err(SendError::NotReady),
        }
        if self.by_op.contains_key(&op) {
            return Err(SendError::DuplicateOp);
        }
        let id = self.alloc_id();
        let frame = match &req {
            Request::Acquire { key, owner, wait, lease } => {
                self.start_acquire(now, id, *wait);
                ClientFrame::Acquire { id, key: key.clone(), owner: owner.clone(), wait: *wait, lease: *lease }
            }
            Request::AcquireShared { key, owner, wait, lease, n } => {
                self.start_acquire(now, id, *wait);
                let (key, owner) = (key.clone(), owner.clone());
                ClientFrame::AcquireShared { id, key, owner, wait: *wait, lease: *lease, n: *n }
            }
            Request::AcquireAll { keys, owner, wait, lease } => {
                self.start_acquire(now, id, *wait);
                ClientFrame::AcquireAll { id, owner: owner.clone(), wait: *wait, lease: *lease, keys: keys.clone() }
            }
            Request::Release { key, owner, token } => {
                self.releases += 1;
                ClientFrame::Release { id, key: key.clone(), owner: owner.clone(), token: *token }
            }
            Request::Query { key, owner } => {
                self.releases += 1;
                ClientFrame::Query { id, key: key.clone(), owner: owner.clone() }
            }
        };
        // Registration first, bytes second.
        self.pending.insert(id, Pending { kind: Kind::Request(op, req), written: false, t_send: now });
        self.by_op.insert(op, id);
        self.outbound.push_back((Some(id), frame.to_bytes()));
        Ok(id)
    }

    /// Cancels the pending request `op` (docs/client.md, Acquire step 7). An unsent one is
    /// removed; for a possibly-sent one the caller must close the session.
    pub fn cancel(&mut self, op: OpId) -> CancelOutcome {
        let Some(&id) = self.by_op.get(&op) else { return CancelOutcome::NotFound };
        let written = self.pending.get(&id).map(|p| p.written).unwrap_or(false);
        if written {
            return CancelOutcome::PossiblySent;
        }
        self.outbound.retain(|(rid, _)| *rid != Some(id));
        self.take_pending(id);
        CancelOutcome::Unsent
    }

    /// Ends the session now (the caller will drop the transport).
    pub fn close(&mut self, reason: CloseReason) {
        if self.is_closed() {
            return;
        }
        let mut unsent = Vec::new();
        let mut possibly_sent = Vec::new();
        let mut ids: Vec<RequestId> = self.pending.keys().copied().collect();
        ids.sort();
        for id in ids {
            if let Some(p) = self.pending.remove(&id) {
                if let Kind::Request(op, req) = p.kind {
                    if p.written {
                        possibly_sent.push((op, req));
                    } else {
                        unsent.push((op, req));
                    }
                }
            }
        }
        self.by_op.clear();
        self.outbound.clear();
        self.inbound.clear();
        self.timers = TimerTable::new();
        self.acquires = 0;
        self.releases = 0;
        self.ping_in_flight = false;
        self.phase = Phase::Closed;
        self.events.push_back(SessionEvent::Closed(Closed { reason, unsent, possibly_sent }));
    }

    /// The transport ended (EOF, error, failed connect or TLS).
    pub fn handle_closed(&mut self) {
        self.close(CloseReason::TransportLost);
    }

    /// Bytes read from the transport.
    pub fn handle_input(&mut self, now: Instant, data: &[u8]) {
        if self.is_closed() || data.is_empty() {
            return;
        }
        if self.is_ready() {
            self.arm_keepalive(now);
        }
        self.inbound.extend_from_slice(data);
        while !self.is_closed() {
            match decode_server(&self.inbound) {
                Ok(None) => break,
                Ok(Some((frame, used))) => {
                    let _ = self.inbound.split_to(used);
                    self.on_frame(now, frame);
                }
                Err(FrameError::TooLarge) => self.close(CloseReason::Protocol("oversized frame")),
                Err(FrameError::BadFrame(why)) => self.close(CloseReason::Protocol(why)),
            }
        }
    }

    /// Fires every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(timer) = self.timers.pop_expired(now) {
            if self.is_closed() {
                return;
            }
            match timer {
                Timer::Handshake => self.close(CloseReason::HandshakeTimeout),
                Timer::Dead => self.close(CloseReason::KeepaliveTimeout),
                Timer::Answer(_) => self.close(CloseReason::AnswerTimeout),
                Timer::Idle => {
                    if self.is_ready() && !self.ping_in_flight {
                        let id = self.alloc_id();
                        self.ping_in_flight = true;
                        self.pending.insert(id, Pending { kind: Kind::Ping, written: false, t_send: now });
                        self.outbound.push_back((Some(id), ClientFrame::Ping { id }.to_bytes()));
                    }
                }
            }
        }
    }

    /// Bytes to write, if any. Call after every `handle_*`/`send` until `None`;
    /// every request in the returned chunk counts as possibly written from now on.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Bytes> {
        if self.outbound.is_empty() {
            return None;
        }
        if self.outbound.len() == 1 {
            let (id, bytes) = self.outbound.pop_front()?;
            self.mark_written(id);
            return Some(bytes);
        }
        let mut buf = BytesMut::new();
        while let Some((id, bytes)) = self.outbound.pop_front() {
            self.mark_written(id);
            buf.extend_from_slice(&bytes);
        }
        Some(buf.freeze())
    }

    /// The next event. Call after [`Session::poll_transmit`] until `None`.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<SessionEvent> {
        self.events.pop_front()
    }

    /// When [`Session::handle_timeout`] must be called next.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next_deadline()
    }

    /// An acquire is in flight: counted, and answered within `wait` plus the grace.
    fn start_acquire(&mut self, now: Instant, id: RequestId, wait: u8) {
        self.acquires += 1;
        let deadline = now + Duration::from_secs(u64::from(wait)) + self.config.answer_grace;
        self.timers.set(Timer::Answer(id), deadline);
    }

    fn alloc_id(&mut self) -> RequestId {
        let id = RequestId(self.next_id);
        self.next_id += 1;
        id
    }

    fn mark_written(&mut self, id: Option<RequestId>) {
        if let Some(p) = id.and_then(|id| self.pending.get_mut(&id)) {
            p.written = true;
        }
    }

    fn arm_keepalive(&mut self, now: Instant) {
        self.timers.set(Timer::Idle, now + self.config.keepalive_idle);
        self.timers.set(Timer::Dead, now + self.config.keepalive_idle + self.config.keepalive_dead);
    }

    fn take_pending(&mut self, id: RequestId) -> Option<Pending> {
        let p = self.pending.remove(&id)?;
        self.timers.clear(Timer::Answer(id));
        match &p.kind {
            Kind::Request(op, req) => {
                self.by_op.remove(op);
                if req.is_acquire() {
                    self.acquires -= 1;
                } else {
                    self.releases -= 1;
                }
            }
            Kind::Ping => self.ping_in_flight = false,
        }
        Some(p)
    }

    fn on_error(&mut self, code: ErrorCode) {
        let reason = match code {
            ErrorCode::AuthFailed => CloseReason::AuthFailed,
            ErrorCode::NotActive => CloseReason::NotActive,
            ErrorCode::NoLeader => CloseReason::NoLeader,
            other => CloseReason::ServerError(other),
        };
        self.close(reason);
    }

    fn on_frame(&mut self, now: Instant, frame: ServerFrame) {
        if let ServerFrame::Error { code, .. } = frame {
            return self.on_error(code);
        }
        match std::mem::replace(&mut self.phase, Phase::Closed) {
            Phase::AwaitGreeting => {
                self.phase = Phase::AwaitGreeting;
                let ServerFrame::Greeting { snonce } = frame else {
                    return self.close(CloseReason::Protocol("expected the greeting"));
                };
                let Some(cnonce) = self.pending_cnonce.take() else {
                    return self.close(CloseReason::Protocol("second greeting"));
                };
                let cmac = auth::mac(self.token.expose(), Label::Client, &snonce, &cnonce);
                self.outbound.push_back((None, ClientFrame::Auth { cnonce, cmac }.to_bytes()));
                self.phase = Phase::AwaitOk { snonce, cnonce };
            }
            Phase::AwaitOk { snonce, cnonce } => {
                self.phase = Phase::AwaitOk { snonce, cnonce };
                let ServerFrame::Ok { role, smac } = frame else {
                    return self.close(CloseReason::Protocol("expected OK"));
                };
                if !auth::verify(self.token.expose(), Label::Server, &snonce, &cnonce, &smac) {
                    // A fake server: no request is ever sent on this connection.
                    return self.close(CloseReason::AuthFailed);
                }
                self.phase = Phase::Ready;
                self.timers.clear(Timer::Handshake);
                self.arm_keepalive(now);
                self.events.push_back(SessionEvent::Ready { role });
            }
            Phase::Ready => {
                self.phase = Phase::Ready;
                self.on_ready_frame(frame);
            }
            Phase::Closed => {}
        }
    }

    fn on_ready_frame(&mut self, frame: ServerFrame) {
        match frame {
            ServerFrame::Granted { id, key, owner, token, waited_ms } => {
                self.on_grant(id, key, owner, token, waited_ms, None)
            }
            ServerFrame::GrantedShared { id, key, owner, token, waited_ms, slot } => {
                self.on_grant(id, key, owner, token, waited_ms, Some(slot))
            }
            ServerFrame::Timeout { id, key } => self.keyed_answer(id, &key, Class::Acquire, Answer::Timeout),
            ServerFrame::Busy { id, key } => self.keyed_answer(id, &key, Class::Acquire, Answer::Busy),
            ServerFrame::Forbidden { id, key } => {
                let answer = Answer::Forbidden { key: key.clone() };
                self.keyed_answer(id, &key, Class::Any, answer)
            }
            ServerFrame::Released { id, key } => self.keyed_answer(id, &key, Class::Release, Answer::Released),
            ServerFrame::NotHolder { id, key } => self.keyed_answer(id, &key, Class::ReleaseOrQuery, Answer::NotHolder),
            ServerFrame::Held { id, key, owner, token, remaining_ms } => {
                // H answers a query: id, op class, key and owner must match.
                let ok = matches!(
                    self.pending.get(&id),
                    Some(Pending { kind: Kind::Request(_, Request::Query { key: k, owner: o }), written: true, .. })
                        if *k == key && *o == owner
                );
                if !ok {
                    return self.close(CloseReason::Protocol("held answer does not match a pending query"));
                }
                self.keyed_answer(id, &key, Class::Query, Answer::Held { token, remaining_ms })
            }
            ServerFrame::Pong { id } => match self.pending.get(&id) {
                Some(Pending { kind: Kind::Ping, written: true, .. }) => {
                    self.take_pending(id);
                }
                _ => self.close(CloseReason::Protocol("pong with no pending ping")),
            },
            ServerFrame::Moved { addr } => self.close(CloseReason::Moved(addr)),
            ServerFrame::Leader { addr } => self.events.push_back(SessionEvent::Leader(addr)),
            ServerFrame::Error { code, .. } => self.on_error(code),
            ServerFrame::Greeting { .. } | ServerFrame::Ok { .. } => {
                self.close(CloseReason::Protocol("handshake frame after the handshake"))
            }
        }
    }

    /// `A` (answers `A` and `K`) and `G` (answers `S`, `slot` given): id, op
    /// class, key (a `K`'s first key) and owner must match a written acquire;
    /// a `G`'s slot must be below the request's `n`. No written entry: the
    /// grant is an orphan, handed to the release lane with its exact key,
    /// owner and token (docs/client.md, Response matching); any other
    /// mismatch is fatal too.
    fn on_grant(&mut self, id: RequestId, key: Key, owner: Owner, token: Token, waited_ms: u32, slot: Option<u16>) {
        enum Match {
            /// No written entry; the other keys of an unsent `K` it names.
            Orphan(Vec<Key>),
            Mismatch,
            /// The other keys of a `K` (empty for `A` and `S`).
            Ok(Vec<Key>),
        }
        let m = match self.pending.get(&id) {
            None => Match::Orphan(Vec::new()),
            Some(Pending { kind: Kind::Request(_, req), written, .. }) => {
                let others = |keys: &crate::field::KeySet| keys.as_slice()[1..].to_vec();
                match (req, slot) {
                    // An answer to bytes never handed out: unsolicited.
                    (Request::AcquireAll { keys, owner: o, .. }, None) if !written => {
                        Match::Orphan(if keys.first() == &key && *o == owner { others(keys) } else { Vec::new() })
                    }
                    _ if !written => Match::Orphan(Vec::new()),
                    (Request::Acquire { key: k, owner: o, .. }, None) if *k == key && *o == owner => {
                        Match::Ok(Vec::new())
                    }
                    (Request::AcquireAll { keys, owner: o, .. }, None) if keys.first() == &key && *o == owner => {
                        Match::Ok(others(keys))
                    }
                    (Request::AcquireShared { key: k, owner: o, n, .. }, Some(s))
                        if *k == key && *o == owner && s < *n =>
                    {
                        Match::Ok(Vec::new())
                    }
                    _ => Match::Mismatch,
                }
            }
            Some(_) => Match::Mismatch,
        };
        match m {
            Match::Orphan(other_keys) => {
                self.events.push_back(SessionEvent::OrphanGrant { key, owner, token, other_keys });
                self.close(CloseReason::Protocol(if slot.is_some() {
                    "counted grant with no pending acquire"
                } else {
                    "grant with no pending acquire"
                }));
            }
            Match::Mismatch => self.close(CloseReason::Protocol("grant does not match its request")),
            Match::Ok(other_keys) => {
                if let Some(Pending { kind: Kind::Request(op, _), t_send, .. }) = self.take_pending(id) {
                    let answer = Answer::Granted { key, owner, token, waited_ms, t_send, slot, other_keys };
                    self.events.push_back(SessionEvent::Answer { op, answer });
                }
            }
        }
    }

    /// `T`/`B` (acquire), `R` (release), `N` (release or query), `H`
    /// (query): id, op class and key must match.
    fn keyed_answer(&mut self, id: RequestId, key: &Key, class: Class, answer: Answer) {
        let ok = match self.pending.get(&id) {
            Some(Pending { kind: Kind::Request(_, req), written: true, .. }) => match (req, class) {
                (Request::Acquire { key: k, .. } | Request::AcquireShared { key: k, .. }, Class::Acquire) => k == key,
                // A multi-key acquire is answered with its first key
                // (`F`: with the first key it may not use, any of them).
                (Request::AcquireAll { keys, .. }, Class::Acquire) => keys.first() == key,
                (Request::AcquireAll { keys, .. }, Class::Any) => keys.as_slice().contains(key),
                (
                    Request::Acquire { key: k, .. }
                    | Request::AcquireShared { key: k, .. }
                    | Request::Release { key: k, .. }
                    | Request::Query { key: k, .. },
                    Class::Any,
                ) => k == key,
                (Request::Release { key: k, .. }, Class::Release | Class::ReleaseOrQuery) => k == key,
                (Request::Query { key: k, .. }, Class::Query | Class::ReleaseOrQuery) => k == key,
                _ => false,
            },
            _ => false,
        };
        if !ok {
            return self.close(CloseReason::Protocol("answer does not match a pending request"));
        }
        if let Some(Pending { kind: Kind::Request(op, _), .. }) = self.take_pending(id) {
            self.events.push_back(SessionEvent::Answer { op, answer });
        }
    }
}
