//! The driver task: owns the sockets and the `proto::Broker`, and is the only
//! place that feeds it. Handles talk to it through a command channel; every
//! connection has a small task that moves bytes between its socket and the
//! driver (`crate::transport`), and on plain TCP the driver writes to the
//! socket itself when it can.

use crate::transport::{ConnHandle, Dial, Stalled};
use bytes::Bytes;
use std::collections::HashMap;
use std::time::Instant;
use ticketing_proto::broker::{Broker, BrokerEvent, ConnId, Failure, Grant, OpId};
use ticketing_proto::lane::Purpose;
use ticketing_proto::params::{AcquireParams, AllParams, SharedParams};
use ticketing_proto::session::CloseReason;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

/// Now, on tokio's clock (the real monotonic clock unless the runtime's
/// time is paused): the one clock the client reads; the sans-IO core takes
/// it as an input.
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Commands from the handles waiting for the driver. A full queue makes
/// the async calls wait (back-pressure); a `Drop` that finds it full hands
/// its command to a task that waits (docs/configuration.md, "Queues").
pub(crate) const COMMAND_QUEUE: usize = 1024;
/// Socket reads (or connection events) waiting for the driver: a full
/// queue stops the reading tasks, so TCP pushes back on the server.
pub(crate) const INPUT_QUEUE: usize = 256;
/// Chunks (a driver pass's frames, or what the socket did not take at once)
/// waiting to be written on one connection. The broker never has
/// more than `max_pending_per_conn` requests in flight on a connection, so
/// this fills only when the server stops reading: the connection is then
/// dropped as lost (its requests fail or are retried by the rules of
/// docs/client.md), never a frame silently skipped.
pub(crate) const OUTBOUND_QUEUE: usize = 2 * ticketing_proto::limits::MAX_PENDING_PER_CONN + 16;

/// At most this many more commands and socket reads are taken per pass of
/// the driver before its output is drained (each pass ends with one write
/// per connection).
const BATCH: usize = 128;

/// Where an acquire's result goes.
pub(crate) type AcquireReply = oneshot::Sender<Result<Option<Grant>, Failure>>;

/// What an acquire asks for (`A`, `S` or `K`).
pub(crate) enum AcquireReq {
    Exclusive(AcquireParams),
    Shared(SharedParams),
    All(AllParams),
}

/// A request from a handle.
pub(crate) enum Cmd {
    Acquire {
        cid: u64,
        params: AcquireReq,
        reply: AcquireReply,
    },
    Cancel {
        cid: u64,
    },
    Release {
        grant: Grant,
        reply: oneshot::Sender<Result<bool, Failure>>,
    },
    /// Best-effort release of a dropped ticket, or a grant nobody took.
    Abandon {
        grant: Grant,
        purpose: Purpose,
    },
    WaitReady {
        deadline: Instant,
        reply: oneshot::Sender<bool>,
    },
    /// A snapshot of the pool's state.
    Status {
        reply: oneshot::Sender<crate::Status>,
    },
    /// Answered once a request could be routed, or every slot's first
    /// connection attempt has settled (or the broker is closed).
    WaitUsable {
        reply: oneshot::Sender<()>,
    },
    Close {
        reply: oneshot::Sender<()>,
    },
}

pub(crate) enum Io {
    Data(ConnId, Bytes),
    Lost(ConnId),
    /// The transport could not be opened (TCP connect or TLS handshake): `addr: error`.
    Failed(ConnId, String),
}

struct Driver {
    broker: Broker,
    dial: Dial,
    io_tx: mpsc::Sender<Io>,
    conns: HashMap<ConnId, ConnHandle>,
    acquires: HashMap<OpId, (u64, AcquireReply)>,
    by_cid: HashMap<u64, OpId>,
    releases: HashMap<OpId, oneshot::Sender<Result<bool, Failure>>>,
    ready_waiters: Vec<(Instant, oneshot::Sender<bool>)>,
    usable_waiters: Vec<oneshot::Sender<()>>,
    /// The last transport failure (connect or TLS), for `Status`.
    last_error: Option<String>,
    close_waiters: Vec<oneshot::Sender<()>>,
    finished: bool,
}

/// Runs one broker until it is closed (explicitly, or when every handle is gone).
pub(crate) async fn run(broker: Broker, dial: Dial, mut cmds: mpsc::Receiver<Cmd>) {
    let (io_tx, mut io_rx) = mpsc::channel(INPUT_QUEUE);
    let mut d = Driver {
        broker,
        dial,
        io_tx,
        conns: HashMap::new(),
        acquires: HashMap::new(),
        by_cid: HashMap::new(),
        releases: HashMap::new(),
        ready_waiters: Vec::new(),
        usable_waiters: Vec::new(),
        last_error: None,
        close_waiters: Vec::new(),
        finished: false,
    };
    let mut cmds_open = true;
    loop {
        d.drain();
        if d.finished {
            break;
        }
        let wake = [d.broker.poll_timeout(), d.ready_waiters.iter().map(|(t, _)| *t).min()].into_iter().flatten().min();
        let sleep = async move {
            match wake {
                Some(t) => tokio::time::sleep_until(t.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            cmd = cmds.recv(), if cmds_open => d.on_cmd_or_end(cmd, &mut cmds_open),
            Some(io) = io_rx.recv() => d.on_io(io),
            _ = sleep => {
                let now = now();
                d.broker.handle_timeout(now);
                d.expire_waiters(now);
            }
        }
        // Take whatever else is already queued before draining, so the frames
        // of many requests leave in one write per connection (one wake-up of
        // its writer, one syscall) instead of one each. Bounded per pass.
        for _ in 0..BATCH {
            let mut took = false;
            if cmds_open {
                match cmds.try_recv() {
                    Ok(cmd) => {
                        d.on_cmd(cmd);
                        took = true;
                    }
                    Err(mpsc::error::TryRecvError::Disconnected) => d.on_cmd_or_end(None, &mut cmds_open),
                    Err(mpsc::error::TryRecvError::Empty) => {}
                }
            }
            if let Ok(io) = io_rx.try_recv() {
                d.on_io(io);
                took = true;
            }
            if !took {
                break;
            }
        }
    }
    for (_, c) in d.conns.drain() {
        c.abort();
    }
}

impl Driver {
    fn on_cmd_or_end(&mut self, cmd: Option<Cmd>, cmds_open: &mut bool) {
        match cmd {
            Some(cmd) => self.on_cmd(cmd),
            None => {
                // Every handle is gone: close (best-effort releases), then stop.
                *cmds_open = false;
                self.broker.close(now());
            }
        }
    }

    fn on_io(&mut self, io: Io) {
        match io {
            Io::Data(conn, bytes) => self.broker.handle_input(now(), conn, &bytes),
            Io::Lost(conn) => self.broker.handle_conn_lost(now(), conn),
            Io::Failed(conn, error) => {
                self.last_error = Some(error);
                self.broker.handle_conn_lost(now(), conn);
            }
        }
    }

    fn on_cmd(&mut self, cmd: Cmd) {
        let now = now();
        match cmd {
            Cmd::Acquire { cid, params, reply } => {
                let op = match &params {
                    AcquireReq::Exclusive(p) => self.broker.acquire(now, p),
                    AcquireReq::Shared(p) => self.broker.acquire_shared(now, p),
                    AcquireReq::All(p) => self.broker.acquire_all(now, p),
                };
                self.acquires.insert(op, (cid, reply));
                self.by_cid.insert(cid, op);
            }
            Cmd::Cancel { cid } => {
                if let Some(op) = self.by_cid.remove(&cid) {
                    self.acquires.remove(&op);
                    self.broker.cancel(now, op);
                }
            }
            Cmd::Release { grant, reply } => match self.broker.release(now, &grant, Purpose::Explicit) {
                Ok(op) => {
                    self.releases.insert(op, reply);
                }
                Err(f) => {
                    let _ = reply.send(Err(f));
                }
            },
            Cmd::Abandon { grant, purpose } => {
                if let Err(f) = self.broker.release(now, &grant, purpose) {
                    debug!(key = %grant.key, token = grant.token.get(), ?f, "best-effort release not enqueued");
                }
            }
            Cmd::WaitReady { deadline, reply } => {
                if self.broker.is_ready() {
                    let _ = reply.send(true);
                } else if self.broker.is_closed() || deadline <= now {
                    let _ = reply.send(false);
                } else {
                    self.ready_waiters.push((deadline, reply));
                }
            }
            Cmd::WaitUsable { reply } => self.usable_waiters.push(reply),
            Cmd::Status { reply } => {
                let _ = reply.send(crate::Status {
                    ready: self.broker.is_ready(),
                    leader: self.broker.leader_hint().map(str::to_owned),
                    auth_failed: self.broker.auth_failing(),
                    settled: self.broker.first_attempts_settled(),
                    last_error: self.last_error.clone(),
                });
            }
            Cmd::Close { reply } => {
                self.close_waiters.push(reply);
                self.broker.close(now);
                for (_, w) in self.ready_waiters.drain(..) {
                    let _ = w.send(false);
                }
            }
        }
    }

    fn expire_waiters(&mut self, now: Instant) {
        let (due, keep): (Vec<_>, Vec<_>) = self.ready_waiters.drain(..).partition(|(t, _)| *t <= now);
        self.ready_waiters = keep;
        for (_, w) in due {
            let _ = w.send(false);
        }
    }

    /// Moves everything the broker has to say out: bytes first, then events.
    fn drain(&mut self) {
        loop {
            let mut moved = false;
            let mut stalled = Vec::new();
            while let Some(t) = self.broker.poll_transmit() {
                moved = true;
                if let Some(c) = self.conns.get(&t.conn) {
                    if let Err(Stalled) = c.send(t.data) {
                        stalled.push(t.conn);
                    }
                }
            }
            for conn in stalled {
                // The server does not read: this connection is lost, not a frame skipped.
                if let Some(c) = self.conns.remove(&conn) {
                    warn!(conn = conn.0, queued = OUTBOUND_QUEUE, "the server does not read; dropping the connection");
                    c.abort();
                    self.last_error = Some("the server stopped reading; connection dropped".into());
                    self.broker.handle_conn_lost(now(), conn);
                }
            }
            while let Some(ev) = self.broker.poll_event() {
                moved = true;
                self.on_event(ev);
            }
            if !moved {
                break;
            }
        }
        let ready = self.broker.is_ready();
        if ready {
            for (_, w) in self.ready_waiters.drain(..) {
                let _ = w.send(true);
            }
        }
        if ready || self.broker.first_attempts_settled() {
            for w in self.usable_waiters.drain(..) {
                let _ = w.send(());
            }
        }
    }

    fn on_event(&mut self, ev: BrokerEvent) {
        match ev {
            BrokerEvent::Connect { conn, addr } => {
                let handle = ConnHandle::spawn(conn, addr, self.dial.clone(), self.io_tx.clone());
                self.conns.insert(conn, handle);
            }
            BrokerEvent::Disconnect { conn } => {
                if let Some(c) = self.conns.remove(&conn) {
                    c.abort();
                }
            }
            BrokerEvent::Acquired { op, result } => {
                let Some((cid, reply)) = self.acquires.remove(&op) else {
                    // Nobody waits (cancelled): a grant is released.
                    if let Ok(Some(grant)) = result {
                        self.broker.compensate(now(), &grant);
                    }
                    return;
                };
                self.by_cid.remove(&cid);
                if let Err(Ok(Some(grant))) = reply.send(result) {
                    // The caller went away between the grant and its delivery (docs/client.md, Acquire step 7).
                    self.broker.compensate(now(), &grant);
                }
            }
            BrokerEvent::Released { op, result } => {
                if let Some(reply) = self.releases.remove(&op) {
                    let _ = reply.send(result);
                }
            }
            BrokerEvent::LaneDone { grant, purpose, outcome } => {
                debug!(key = %grant.key, token = grant.token.get(), ?purpose, ?outcome, "release lane entry done");
            }
            BrokerEvent::Resolved { key, token, outcome, .. } => {
                // An Indeterminate acquire, resolved by Q (+ R on H): docs/client.md, Release lane.
                debug!(key = %key, token = token.map(|t| t.get()), ?outcome, "indeterminate acquire resolved");
            }
            BrokerEvent::SessionEnded { conn, addr, reason } => {
                debug!(conn = conn.0, %addr, ?reason, "session ended");
                let why = match reason {
                    CloseReason::HandshakeTimeout => Some(format!(
                        "no handshake within {} s (TLS mismatch? check the tls option on both sides)",
                        ticketing_proto::limits::HANDSHAKE_TIMEOUT.as_secs()
                    )),
                    CloseReason::AuthFailed => {
                        Some("authentication failed (wrong token, or the server could not prove it knows it)".into())
                    }
                    CloseReason::NotActive => Some("the node is not active (it belongs to no fencing domain)".into()),
                    CloseReason::NoLeader => Some("the node knows no leader".into()),
                    CloseReason::ServerError(code) => Some(format!("server error {code:?}")),
                    CloseReason::Protocol(why) => Some(format!("protocol violation by the server: {why}")),
                    _ => None,
                };
                if let Some(why) = why {
                    self.last_error = Some(format!("{addr}: {why}"));
                }
            }
            BrokerEvent::Closed => {
                for w in self.close_waiters.drain(..) {
                    let _ = w.send(());
                }
                for (_, w) in self.ready_waiters.drain(..) {
                    let _ = w.send(false);
                }
                self.finished = true;
            }
        }
    }
}
