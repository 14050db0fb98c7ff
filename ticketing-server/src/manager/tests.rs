//! The driver end to end (a standalone or gated replicator, the tokio
//! runtime): registration, deliveries to the connections' queues, batches
//! committed at once or in a task, queries. The rules themselves are tested
//! on a simulated clock in `leader::tests`.

use super::*;
use crate::leader::Request;
use crate::locks::GrantKind;
use crate::replication::Standalone;
use std::time::Duration;
use ticketing_proto::{RequestId, ServerFrame};
use tokio::time::Instant;

use crate::test_fields::{k, o};

async fn setup(limits: Limits) -> (ManagerHandle, mpsc::Receiver<Delivery>) {
    let rep = Arc::new(Standalone::new(Addr::new("127.0.0.1:1").unwrap()));
    let h = spawn(rep, limits, Arc::default(), Addr::new("127.0.0.1:1").unwrap());
    let (tx, rx) = mpsc::channel(64);
    h.send(ManagerRequest::Register { conn: ConnId(1), tx, client: "127.0.0.1:50001".into() }).await.unwrap();
    (h, rx)
}

async fn acquire(h: &ManagerHandle, id: u64, key: &str, owner: &str, wait: u8, lease: u8) {
    let request = Request::Acquire {
        id: RequestId(id),
        key: k(key),
        kind: GrantKind::Exclusive,
        owner: o(owner),
        wait,
        lease,
        read_at: Instant::now().into_std(),
        principal: None,
    };
    let req = ManagerRequest::Request { conn: ConnId(1), request };
    h.send(req).await.unwrap();
}

async fn next(rx: &mut mpsc::Receiver<Delivery>) -> ServerFrame {
    match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.unwrap().unwrap() {
        Delivery::Reply { frame, .. } | Delivery::Fatal(frame) => frame,
        Delivery::Dropped(id) => panic!("request {id} dropped"),
    }
}

#[tokio::test]
async fn answers_reach_the_connection_and_the_gauges_follow() {
    let (h, mut rx) = setup(Limits::default()).await;
    acquire(&h, 1, "a", "o1", 0, 5).await;
    let ServerFrame::Granted { token: t1, .. } = next(&mut rx).await else { panic!() };
    acquire(&h, 2, "a", "o2", 10, 5).await;
    h.send(ManagerRequest::Request {
        conn: ConnId(1),
        request: Request::Holds { id: RequestId(3), key: k("a"), owner: o("o1") },
    })
    .await
    .unwrap();
    assert!(matches!(next(&mut rx).await, ServerFrame::Held { id: RequestId(3), token, .. } if token == t1));
    assert_eq!((h.metrics().held_keys.get(), h.metrics().waiters.get()), (1, 1));
    h.send(ManagerRequest::Request {
        conn: ConnId(1),
        request: Request::Release { id: RequestId(4), key: k("a"), owner: o("o1"), token: t1 },
    })
    .await
    .unwrap();
    assert_eq!(next(&mut rx).await, ServerFrame::Released { id: RequestId(4), key: k("a") });
    assert!(matches!(next(&mut rx).await, ServerFrame::Granted { id: RequestId(2), .. }));
    let info = h.lock_info(k("a")).await.unwrap();
    assert_eq!(info.holder.map(|h| h.owner_prefix), Some("o".to_owned()));
    assert_eq!((h.metrics().grants.get(), h.metrics().waiters.get()), (2, 0));
}

#[tokio::test]
async fn leave_queues_drops_waiters_but_keeps_answering() {
    let (h, mut rx) = setup(Limits::default()).await;
    acquire(&h, 1, "lq", "o1", 0, 5).await;
    assert!(matches!(next(&mut rx).await, ServerFrame::Granted { .. }));
    acquire(&h, 2, "lq", "o2", 30, 5).await;
    h.send(ManagerRequest::LeaveQueues { conn: ConnId(1) }).await.unwrap();
    let dropped = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.unwrap().unwrap();
    assert!(matches!(dropped, Delivery::Dropped(RequestId(2))), "{dropped:?}");
    // The connection still gets answers to its other requests.
    acquire(&h, 3, "lq-other", "o3", 0, 5).await;
    assert!(matches!(next(&mut rx).await, ServerFrame::Granted { id: RequestId(3), .. }));
    let info = h.lock_info(Key::new("lq").unwrap()).await.unwrap();
    assert!(info.waiters.is_empty());
}

#[tokio::test]
async fn closed_connection_leaves_queue() {
    let (h, mut rx) = setup(Limits::default()).await;
    let (tx2, mut rx2) = mpsc::channel(8);
    h.send(ManagerRequest::Register { conn: ConnId(2), tx: tx2, client: "127.0.0.1:50002".into() }).await.unwrap();
    acquire(&h, 1, "a", "o1", 0, 5).await;
    let ServerFrame::Granted { token, .. } = next(&mut rx).await else { panic!() };
    let request = Request::Acquire {
        id: RequestId(1),
        key: k("a"),
        kind: GrantKind::Exclusive,
        owner: o("dead"),
        wait: 10,
        lease: 5,
        read_at: Instant::now().into_std(),
        principal: None,
    };
    let req = ManagerRequest::Request { conn: ConnId(2), request };
    h.send(req).await.unwrap();
    h.send(ManagerRequest::Disconnected { conn: ConnId(2) }).await.unwrap();
    assert!(h.lock_info(k("a")).await.unwrap().waiters.is_empty());
    h.send(ManagerRequest::Request {
        conn: ConnId(1),
        request: Request::Release { id: RequestId(2), key: k("a"), owner: o("o1"), token },
    })
    .await
    .unwrap();
    assert_eq!(next(&mut rx).await, ServerFrame::Released { id: RequestId(2), key: k("a") });
    assert!(h.lock_info(k("a")).await.unwrap().holder.is_none());
    assert!(rx2.try_recv().is_err());
}

/// A replicator whose batches wait until the test commits (applies) or
/// fails them; it records every batch it was given.
/// The keys of one batch, and where the test says commit (`true`) or fail.
type GatedBatch = (Vec<Key>, Option<oneshot::Sender<bool>>);

struct Gated {
    state: Arc<Standalone>,
    batches: std::sync::Mutex<Vec<GatedBatch>>,
}

impl Gated {
    fn new() -> Arc<Gated> {
        Arc::new(Gated {
            state: Arc::new(Standalone::new(Addr::new("127.0.0.1:1").unwrap())),
            batches: Default::default(),
        })
    }

    /// Waits for the `n`-th batch (1-based) and returns its keys.
    async fn batch(&self, n: usize) -> Vec<Key> {
        let end = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some((keys, _)) = self.batches.lock().unwrap().get(n - 1) {
                return keys.clone();
            }
            assert!(Instant::now() < end, "no batch {n}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn count(&self) -> usize {
        self.batches.lock().unwrap().len()
    }

    /// Commits (`true`) or fails (`false`) the `n`-th batch.
    fn finish(&self, n: usize, commit: bool) {
        let tx = self.batches.lock().unwrap()[n - 1].1.take().expect("a batch is finished once");
        tx.send(commit).unwrap();
    }
}

impl crate::replication::Replicator for Gated {
    fn propose(&self, cmds: Vec<crate::locks::Command>) -> crate::replication::Proposal {
        let (tx, rx) = oneshot::channel();
        let keys = cmds.iter().filter_map(|c| c.keys().first().copied().cloned()).collect();
        self.batches.lock().unwrap().push((keys, Some(tx)));
        let state = self.state.clone();
        crate::replication::Proposal::Pending(Box::pin(async move {
            match rx.await {
                Ok(true) => match state.propose(cmds) {
                    crate::replication::Proposal::Ready(outcome) => outcome,
                    crate::replication::Proposal::Pending(fut) => fut.await,
                },
                _ => Err(crate::replication::ProposeError::Unknown),
            }
        }))
    }

    fn with_applied(&self, f: &mut dyn FnMut(&crate::locks::LockState)) {
        self.state.with_applied(f)
    }

    fn leadership(&self) -> tokio::sync::watch::Receiver<crate::replication::Leadership> {
        self.state.leadership()
    }
}

async fn setup_gated() -> (Arc<Gated>, ManagerHandle, mpsc::Receiver<Delivery>) {
    let gated = Gated::new();
    // No ticks during the test: every batch is one the test caused.
    let limits = Limits { tick_ms: 600_000, ..Limits::default() };
    let h = spawn(gated.clone(), limits, Arc::default(), Addr::new("127.0.0.1:1").unwrap());
    let (tx, rx) = mpsc::channel(64);
    h.send(ManagerRequest::Register { conn: ConnId(1), tx, client: "127.0.0.1:50001".into() }).await.unwrap();
    (gated, h, rx)
}

#[tokio::test]
async fn commands_proposed_while_a_batch_is_in_flight_go_out_as_one_batch() {
    let (gated, h, mut rx) = setup_gated().await;
    acquire(&h, 1, "a0", "o0", 0, 5).await;
    assert_eq!(gated.batch(1).await, vec![k("a0")]);
    for i in 1..=5 {
        acquire(&h, i + 1, &format!("a{i}"), &format!("o{i}"), 0, 5).await;
    }
    // The manager has read them all (the query is answered after them), and
    // proposed nothing more while the first batch is in flight.
    h.lock_info(k("a5")).await.unwrap();
    assert_eq!(gated.count(), 1);
    assert!(rx.try_recv().is_err(), "nothing is answered before its commit");
    gated.finish(1, true);
    let ServerFrame::Granted { id: RequestId(1), token: mut last, .. } = next(&mut rx).await else { panic!() };
    assert_eq!(gated.batch(2).await, (1..=5).map(|i| k(&format!("a{i}"))).collect::<Vec<_>>());
    gated.finish(2, true);
    for i in 1..=5 {
        match next(&mut rx).await {
            ServerFrame::Granted { id, token, .. } => {
                assert_eq!(id, RequestId(i + 1), "outcomes are routed in order");
                assert!(token > last, "tokens strictly increase in batch order");
                last = token;
            }
            other => panic!("{other:?}"),
        }
    }
    for i in 0..=5 {
        assert!(h.lock_info(k(&format!("a{i}"))).await.unwrap().holder.is_some());
    }
}

#[tokio::test]
async fn a_failed_batch_fails_every_command_in_it_and_grants_nothing() {
    let (gated, h, mut rx) = setup_gated().await;
    acquire(&h, 1, "x0", "o0", 0, 5).await;
    gated.batch(1).await;
    acquire(&h, 2, "x1", "o1", 0, 5).await;
    acquire(&h, 3, "x2", "o2", 0, 5).await;
    h.lock_info(k("x2")).await.unwrap();
    gated.finish(1, true);
    assert!(matches!(next(&mut rx).await, ServerFrame::Granted { id: RequestId(1), .. }));
    assert_eq!(gated.batch(2).await, vec![k("x1"), k("x2")]);
    gated.finish(2, false);
    // Outcome unknown: never `A`; each request's connection gets `E no_leader`.
    for _ in 0..2 {
        match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.unwrap().unwrap() {
            Delivery::Fatal(frame) => assert_eq!(frame, ServerFrame::error(ticketing_proto::ErrorCode::NoLeader)),
            other => panic!("{other:?}"),
        }
    }
    // The keys follow the applied state (not granted), and are free again.
    assert!(h.lock_info(k("x1")).await.unwrap().holder.is_none());
    assert!(h.lock_info(k("x2")).await.unwrap().holder.is_none());
    acquire(&h, 4, "x1", "o4", 0, 5).await;
    assert_eq!(gated.batch(3).await, vec![k("x1")]);
    gated.finish(3, true);
    assert!(matches!(next(&mut rx).await, ServerFrame::Granted { id: RequestId(4), .. }));
}
