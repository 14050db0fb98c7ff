//! One client connection as a pure state machine (docs/protocol.md §3, docs/client.md, Connections keepalive,
//! docs/client.md, Response matching response matching, docs/client.md, Acquire step 6, and the Indeterminate rule).
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

use crate::auth::{self, Label};
use crate::frame::{
    decode_server, Addr, ClientFrame, ErrorCode, FrameError, Hex32, Key, Owner, RequestId, Role, ServerFrame, Token,
};
use crate::op::OpId;
use crate::timer::TimerTable;
use bytes::{Bytes, BytesMut};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

/// Timing of one session. The defaults are the values of docs/protocol.md §3, docs/client.md, Connections, docs/client.md, Acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionConfig {
    /// The handshake (connect, TLS, greeting, AUTH, OK) must finish within this (5 s).
    pub handshake_timeout: Duration,
    /// Send `P` after this much silence on a ready connection (1 s).
    pub keepalive_idle: Duration,
    /// The session is dead after this much more silence (3 s).
    pub keepalive_dead: Duration,
    /// An acquire must be answered within `wait` plus this (5 s).
    pub answer_grace: Duration,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            handshake_timeout: crate::limits::HANDSHAKE_TIMEOUT,
            keepalive_idle: Duration::from_secs(1),
            keepalive_dead: Duration::from_secs(3),
            answer_grace: Duration::from_secs(5),
        }
    }
}

/// A request the caller can send on a ready session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `A <id> <key> <owner> <wait> <lease>`
    Acquire {
        /// Key.
        key: Key,
        /// Fresh owner of this logical acquire.
        owner: Owner,
        /// Whole seconds 0–255.
        wait: u8,
        /// Whole seconds 1–250.
        lease: u8,
    },
    /// `R <id> <key> <owner> <token>`
    Release {
        /// Key.
        key: Key,
        /// Owner of the grant.
        owner: Owner,
        /// Token of the grant.
        token: Token,
    },
}

/// A definite answer to a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// `A`: granted.
    Granted {
        /// Key (as registered and echoed).
        key: Key,
        /// Owner (as registered and echoed).
        owner: Owner,
        /// The fencing token.
        token: Token,
        /// Server-side milliseconds from reading the request to the commit.
        waited_ms: u32,
        /// When the request was registered (≤ the moment it was written).
        t_send: Instant,
    },
    /// `T`: not granted within `wait`.
    Timeout,
    /// `B`: refused for capacity (final).
    Busy,
    /// `R`: released.
    Released,
    /// `N`: not the current holder.
    NotHolder,
}

/// Why a session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CloseReason {
    /// The transport ended (EOF, I/O error, connect or TLS failure).
    TransportLost,
    /// The handshake did not finish in time.
    HandshakeTimeout,
    /// `E auth_failed`, or the server's `smac` was wrong.
    AuthFailed,
    /// `E not_active`.
    NotActive,
    /// `E no_leader`.
    NoLeader,
    /// `M <addr>`: the node is not the leader.
    Moved(Addr),
    /// Any other `E <code>`.
    ServerError(ErrorCode),
    /// A malformed, oversized, unknown, mismatched or unsolicited frame.
    Protocol(&'static str),
    /// Nothing arrived for `keepalive_idle + keepalive_dead`.
    KeepaliveTimeout,
    /// An acquire was not answered within `wait + answer_grace`.
    AnswerTimeout,
    /// A possibly-sent acquire was cancelled (docs/client.md, Acquire step 7).
    Cancelled,
    /// Closed by the caller.
    Local,
}

impl CloseReason {
    /// `auth_failed` and `not_active` make the reconnect backoff jump to its cap (docs/client.md, Connections).
    pub fn backoff_to_cap(&self) -> bool {
        matches!(self, CloseReason::AuthFailed | CloseReason::NotActive)
    }
}

/// The end of a session, with everything that was still pending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closed {
    /// Why.
    pub reason: CloseReason,
    /// Registered requests whose bytes were never handed out.
    pub unsent: Vec<(OpId, Request)>,
    /// Requests whose bytes were handed out (any byte may have been written).
    pub possibly_sent: Vec<(OpId, Request)>,
}

/// What a session reports; drain with [`Session::poll_event`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionEvent {
    /// The handshake succeeded (the server's proof was verified).
    Ready {
        /// The role from `OK`.
        role: Role,
    },
    /// A definite, correctly matched answer.
    Answer {
        /// The operation the request belongs to.
        op: OpId,
        /// The answer.
        answer: Answer,
    },
    /// `L <addr>`: the leader is now `addr` (not filtered; the broker applies the allowlist).
    Leader(Addr),
    /// An `A` with no pending entry: its exact grant, for the release lane.
    /// Always followed by [`SessionEvent::Closed`].
    OrphanGrant {
        /// Key as echoed.
        key: Key,
        /// Owner as echoed.
        owner: Owner,
        /// Token as echoed.
        token: Token,
    },
    /// The session is over (reported exactly once).
    Closed(Closed),
}

/// Why [`Session::send`] refused a request (nothing was registered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// The handshake has not finished.
    NotReady,
    /// The session is closed.
    Closed,
    /// The operation already has a request pending on this session.
    DuplicateOp,
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SendError::NotReady => "the session's handshake has not finished",
            SendError::Closed => "the session is closed",
            SendError::DuplicateOp => "the operation already has a request pending on this session",
        })
    }
}

impl std::error::Error for SendError {}

/// What [`Session::cancel`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The bytes were never handed out: the request is gone, nothing was sent.
    Unsent,
    /// Bytes may have been written: the caller must close the session (docs/client.md, Acquire step 7).
    PossiblySent,
    /// No such pending request.
    NotFound,
}

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
    token: Vec<u8>,
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
            token: token.to_vec(),
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

    /// Releases in flight (registered, not answered).
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
                self.acquires += 1;
                let deadline = now + Duration::from_secs(u64::from(*wait)) + self.config.answer_grace;
                self.timers.set(Timer::Answer(id), deadline);
                ClientFrame::Acquire { id, key: key.clone(), owner: owner.clone(), wait: *wait, lease: *lease }
            }
            Request::Release { key, owner, token } => {
                self.releases += 1;
                ClientFrame::Release { id, key: key.clone(), owner: owner.clone(), token: *token }
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
                match req {
                    Request::Acquire { .. } => self.acquires -= 1,
                    Request::Release { .. } => self.releases -= 1,
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
                let cmac = auth::mac(&self.token, Label::Client, &snonce, &cnonce);
                self.outbound.push_back((None, ClientFrame::Auth { cnonce, cmac }.to_bytes()));
                self.phase = Phase::AwaitOk { snonce, cnonce };
            }
            Phase::AwaitOk { snonce, cnonce } => {
                self.phase = Phase::AwaitOk { snonce, cnonce };
                let ServerFrame::Ok { role, smac } = frame else {
                    return self.close(CloseReason::Protocol("expected OK"));
                };
                if !auth::verify(&self.token, Label::Server, &snonce, &cnonce, &smac) {
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
                let matched = match self.pending.get(&id) {
                    Some(Pending {
                        kind: Kind::Request(_, Request::Acquire { key: k, owner: o, .. }),
                        written,
                        ..
                    }) => {
                        if !written {
                            None // an answer to bytes never handed out: unsolicited
                        } else {
                            Some(*k == key && *o == owner)
                        }
                    }
                    Some(_) => Some(false),
                    None => None,
                };
                match matched {
                    None => {
                        self.events.push_back(SessionEvent::OrphanGrant { key, owner, token });
                        self.close(CloseReason::Protocol("grant with no pending acquire"));
                    }
                    Some(false) => self.close(CloseReason::Protocol("grant does not match its request")),
                    Some(true) => {
                        if let Some(p) = self.take_pending(id) {
                            if let Kind::Request(op, _) = p.kind {
                                let answer = Answer::Granted { key, owner, token, waited_ms, t_send: p.t_send };
                                self.events.push_back(SessionEvent::Answer { op, answer });
                            }
                        }
                    }
                }
            }
            ServerFrame::Timeout { id, key } => self.keyed_answer(id, &key, true, Answer::Timeout),
            ServerFrame::Busy { id, key } => self.keyed_answer(id, &key, true, Answer::Busy),
            ServerFrame::Released { id, key } => self.keyed_answer(id, &key, false, Answer::Released),
            ServerFrame::NotHolder { id, key } => self.keyed_answer(id, &key, false, Answer::NotHolder),
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

    /// `T`/`B` (acquire) and `R`/`N` (release): id, op class and key must match.
    fn keyed_answer(&mut self, id: RequestId, key: &Key, acquire: bool, answer: Answer) {
        let ok = match self.pending.get(&id) {
            Some(Pending { kind: Kind::Request(_, req), written: true, .. }) => match req {
                Request::Acquire { key: k, .. } => acquire && k == key,
                Request::Release { key: k, .. } => !acquire && k == key,
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

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &[u8] = b"secret";

    fn k(s: &str) -> Key {
        Key::new(s.to_owned()).unwrap()
    }
    fn o(s: &str) -> Owner {
        Owner::new(s.to_owned()).unwrap()
    }
    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A session plus the server half of its handshake.
    struct Harness {
        s: Session,
        t0: Instant,
        wire: Vec<u8>,
        events: Vec<SessionEvent>,
    }

    impl Harness {
        fn new() -> Harness {
            let t0 = Instant::now();
            Harness {
                s: Session::new(t0, SessionConfig::default(), TOKEN, Hex32([7; 32])),
                t0,
                wire: vec![],
                events: vec![],
            }
        }

        fn at(&self, ms_: u64) -> Instant {
            self.t0 + ms(ms_)
        }

        fn drain(&mut self) {
            while let Some(b) = self.s.poll_transmit() {
                self.wire.extend_from_slice(&b);
            }
            while let Some(e) = self.s.poll_event() {
                self.events.push(e);
            }
        }

        fn input(&mut self, at: u64, bytes: &[u8]) {
            let now = self.at(at);
            self.s.handle_input(now, bytes);
            self.drain();
        }

        fn timeout(&mut self, at: u64) {
            self.s.handle_timeout(self.at(at));
            self.drain();
        }

        fn take_wire(&mut self) -> String {
            String::from_utf8(std::mem::take(&mut self.wire)).unwrap()
        }

        fn ready(role: &str, token: &[u8]) -> Harness {
            let mut h = Harness::new();
            let snonce = Hex32([3; 32]);
            h.input(0, format!("TICKETING 1 {}\n", snonce.to_hex_string()).as_bytes());
            let auth = h.take_wire();
            let cnonce = Hex32([7; 32]);
            let cmac = auth::mac(TOKEN, Label::Client, &snonce, &cnonce);
            assert_eq!(auth, format!("AUTH {} {}\n", cnonce.to_hex_string(), cmac.to_hex_string()));
            let smac = auth::mac(token, Label::Server, &snonce, &cnonce);
            h.input(1, format!("OK {role} {}\n", smac.to_hex_string()).as_bytes());
            h
        }

        fn acquire(&mut self, at: u64, op: u64, key: &str, owner: &str, wait: u8) -> RequestId {
            let req = Request::Acquire { key: k(key), owner: o(owner), wait, lease: 10 };
            let id = self.s.send(self.at(at), OpId(op), req).unwrap();
            self.drain();
            id
        }

        fn closed(&self) -> Option<&Closed> {
            self.events.iter().find_map(|e| match e {
                SessionEvent::Closed(c) => Some(c),
                _ => None,
            })
        }
    }

    #[test]
    fn handshake_ok_and_token_never_on_wire() {
        let mut h = Harness::ready("leader", TOKEN);
        assert_eq!(h.events, vec![SessionEvent::Ready { role: Role::Leader }]);
        assert!(h.s.is_ready());
        h.acquire(2, 1, "k", "o1", 5);
        let wire = h.take_wire();
        assert_eq!(wire, "A 1 k o1 5 10\n");
        assert!(!wire.contains("secret"));
    }

    #[test]
    fn wrong_smac_is_auth_failed_and_nothing_can_be_sent() {
        let mut h = Harness::ready("leader", b"other-token");
        let c = h.closed().unwrap();
        assert_eq!(c.reason, CloseReason::AuthFailed);
        assert!(c.reason.backoff_to_cap());
        assert_eq!(
            h.s.send(h.at(2), OpId(1), Request::Release { key: k("k"), owner: o("o"), token: Token::new(5).unwrap() }),
            Err(SendError::Closed)
        );
        h.drain();
        assert!(h.wire.is_empty());
    }

    #[test]
    fn send_before_ready_is_refused() {
        let mut h = Harness::new();
        let r = h.s.send(h.t0, OpId(1), Request::Acquire { key: k("k"), owner: o("o"), wait: 0, lease: 1 });
        assert_eq!(r, Err(SendError::NotReady));
    }

    #[test]
    fn handshake_timeout_and_errors_during_handshake() {
        let mut h = Harness::new();
        h.timeout(4999);
        assert!(h.closed().is_none());
        h.timeout(5000);
        assert_eq!(h.closed().unwrap().reason, CloseReason::HandshakeTimeout);

        let mut h = Harness::new();
        h.input(0, b"E not_active\n");
        assert_eq!(h.closed().unwrap().reason, CloseReason::NotActive);
        assert!(h.closed().unwrap().reason.backoff_to_cap());

        let mut h = Harness::new();
        h.input(0, b"OK leader 0000000000000000000000000000000000000000000000000000000000000000\n");
        assert_eq!(h.closed().unwrap().reason, CloseReason::Protocol("expected the greeting"));
    }

    #[test]
    fn out_of_order_answers_by_id_not_fifo() {
        let mut h = Harness::ready("leader", TOKEN);
        h.events.clear();
        h.acquire(2, 10, "k", "o1", 5);
        h.acquire(2, 11, "k", "o2", 5);
        h.input(3, b"T 2 k\nA 1 k o1 99 0\n");
        assert_eq!(
            h.events,
            vec![
                SessionEvent::Answer { op: OpId(11), answer: Answer::Timeout },
                SessionEvent::Answer {
                    op: OpId(10),
                    answer: Answer::Granted {
                        key: k("k"),
                        owner: o("o1"),
                        token: Token::new(99).unwrap(),
                        waited_ms: 0,
                        t_send: h.at(2)
                    }
                },
            ]
        );
        assert_eq!(h.s.pending_acquires(), 0);
    }

    #[test]
    fn busy_and_release_answers() {
        let mut h = Harness::ready("leader", TOKEN);
        h.events.clear();
        h.acquire(2, 1, "k", "o1", 5);
        let r = Request::Release { key: k("j"), owner: o("o2"), token: Token::new(4).unwrap() };
        h.s.send(h.at(2), OpId(2), r.clone()).unwrap();
        h.s.send(h.at(2), OpId(3), r).unwrap();
        h.drain();
        assert_eq!(h.take_wire(), "A 1 k o1 5 10\nR 2 j o2 4\nR 3 j o2 4\n");
        h.input(3, b"N 3 j\nB 1 k\nR 2 j\n");
        let answers: Vec<_> = h
            .events
            .iter()
            .map(|e| match e {
                SessionEvent::Answer { op, answer } => (op.0, answer.clone()),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(answers, vec![(3, Answer::NotHolder), (1, Answer::Busy), (2, Answer::Released)]);
    }

    fn fatal_after_acquire(answer: &[u8]) -> Closed {
        let mut h = Harness::ready("leader", TOKEN);
        h.acquire(2, 1, "k", "o1", 5);
        h.input(3, answer);
        let c = h.closed().unwrap_or_else(|| panic!("{:?} did not close", String::from_utf8_lossy(answer))).clone();
        assert_eq!(c.possibly_sent.len(), 1, "the sent acquire is possibly sent");
        assert!(c.unsent.is_empty());
        c
    }

    #[test]
    fn every_mismatch_is_session_fatal() {
        for bad in [
            &b"A 1 other o1 5 0\n"[..], // wrong key
            b"A 1 k o2 5 0\n",          // wrong owner
            b"T 1 other\n",             // wrong key on T
            b"B 1 other\n",             // wrong key on B
            b"R 1 k\n",                 // wrong op class
            b"N 1 k\n",                 // wrong op class
            b"P 1\n",                   // pong for an acquire
            b"T 9 k\n",                 // unknown id
            b"Z 1\n",                   // unknown frame
            b"T 1  k\n",                // malformed
            b"OK leader 0000000000000000000000000000000000000000000000000000000000000000\n",
            b"E bad_frame\n",
            b"E internal some text\n",
            b"E duplicate_id\n",
        ] {
            let c = fatal_after_acquire(bad);
            assert!(!c.reason.backoff_to_cap());
        }
        let c = fatal_after_acquire(&[b'x'; 600]);
        assert_eq!(c.reason, CloseReason::Protocol("oversized frame"));
    }

    #[test]
    fn e_codes_and_moved() {
        assert_eq!(fatal_after_acquire(b"E no_leader\n").reason, CloseReason::NoLeader);
        assert_eq!(fatal_after_acquire(b"E auth_failed\n").reason, CloseReason::AuthFailed);
        assert_eq!(fatal_after_acquire(b"E not_active\n").reason, CloseReason::NotActive);
        assert_eq!(
            fatal_after_acquire(b"M 10.0.0.1:5225\n").reason,
            CloseReason::Moved(Addr::new("10.0.0.1:5225").unwrap())
        );
        assert_eq!(fatal_after_acquire(b"E shutting_down\n").reason, CloseReason::ServerError(ErrorCode::ShuttingDown));
    }

    #[test]
    fn unsolicited_grant_goes_to_the_lane_then_closes() {
        let mut h = Harness::ready("leader", TOKEN);
        h.events.clear();
        h.input(2, b"A 5 k owner 77 0\n");
        assert_eq!(
            h.events[0],
            SessionEvent::OrphanGrant { key: k("k"), owner: o("owner"), token: Token::new(77).unwrap() }
        );
        assert!(matches!(h.events[1], SessionEvent::Closed(Closed { reason: CloseReason::Protocol(_), .. })));
    }

    #[test]
    fn leader_notification_keeps_the_connection() {
        let mut h = Harness::ready("follower", TOKEN);
        h.input(2, b"L 10.0.0.2:5225\n");
        assert_eq!(h.events[1], SessionEvent::Leader(Addr::new("10.0.0.2:5225").unwrap()));
        assert!(h.s.is_ready());
        assert!(h.closed().is_none());
    }

    #[test]
    fn registered_before_written_and_unsent_on_close() {
        let mut h = Harness::ready("leader", TOKEN);
        let req = Request::Acquire { key: k("k"), owner: o("o"), wait: 1, lease: 1 };
        h.s.send(h.at(2), OpId(1), req.clone()).unwrap();
        assert_eq!(h.s.possibly_written(OpId(1)), Some(false));
        // closed before the bytes were handed out: unsent, may be routed elsewhere
        h.s.handle_closed();
        h.drain();
        let c = h.closed().unwrap();
        assert_eq!(c.unsent, vec![(OpId(1), req)]);
        assert!(c.possibly_sent.is_empty());
        assert!(h.wire.is_empty());
    }

    #[test]
    fn cancel_unsent_and_possibly_sent() {
        let mut h = Harness::ready("leader", TOKEN);
        let req = Request::Acquire { key: k("k"), owner: o("o"), wait: 1, lease: 1 };
        h.s.send(h.at(2), OpId(1), req.clone()).unwrap();
        assert_eq!(h.s.cancel(OpId(1)), CancelOutcome::Unsent);
        h.drain();
        assert!(h.wire.is_empty());
        assert_eq!(h.s.pending_acquires(), 0);
        h.s.send(h.at(2), OpId(2), req).unwrap();
        h.drain();
        assert_eq!(h.s.cancel(OpId(2)), CancelOutcome::PossiblySent);
        assert_eq!(h.s.cancel(OpId(3)), CancelOutcome::NotFound);
    }

    #[test]
    fn keepalive_ping_then_dead() {
        let mut h = Harness::ready("leader", TOKEN);
        h.take_wire();
        h.timeout(1000);
        assert!(h.wire.is_empty(), "1 s of silence counts from the OK at t=1ms");
        h.timeout(1001);
        assert_eq!(h.take_wire(), "P 1\n");
        h.input(1500, b"P 1\n");
        assert!(h.closed().is_none());
        h.timeout(2499);
        assert!(h.wire.is_empty());
        h.timeout(2500);
        assert_eq!(h.take_wire(), "P 2\n");
        // no ping twice, dead 4 s after the last arrival
        h.timeout(4000);
        assert!(h.wire.is_empty());
        h.timeout(5499);
        assert!(h.closed().is_none());
        h.timeout(5500);
        assert_eq!(h.closed().unwrap().reason, CloseReason::KeepaliveTimeout);
    }

    #[test]
    fn answer_deadline_is_wait_plus_five() {
        let mut h = Harness::ready("leader", TOKEN);
        h.acquire(10, 1, "k", "o", 2);
        // keep the connection alive with pongs
        for t in (1000..7000).step_by(900) {
            h.timeout(t);
            let w = h.take_wire();
            if let Some(id) = w.strip_prefix("P ") {
                h.input(t, format!("P {id}").as_bytes());
            }
        }
        assert!(h.closed().is_none());
        h.timeout(7009);
        assert!(h.closed().is_none());
        h.timeout(7010);
        let c = h.closed().unwrap();
        assert_eq!(c.reason, CloseReason::AnswerTimeout);
        assert_eq!(c.possibly_sent.len(), 1);
    }
}
