//! The manager task end to end (standalone replicator, real tokio time).

use super::*;
use crate::replication::Standalone;
use std::time::Duration;
use ticketing_proto::ServerFrame;

fn k(s: &str) -> Key {
    Key::new(s.to_owned()).unwrap()
}
fn o(s: &str) -> Owner {
    Owner::new(s.to_owned()).unwrap()
}

async fn setup(limits: Limits) -> (ManagerHandle, mpsc::Receiver<Delivery>) {
    let rep = Arc::new(Standalone::new(Addr::new("127.0.0.1:1").unwrap()));
    let h = spawn(rep, limits, Arc::default(), Addr::new("127.0.0.1:1").unwrap());
    let (tx, rx) = mpsc::channel(64);
    h.send(ManagerRequest::Register { conn: ConnId(1), tx, client: "127.0.0.1:50001".into() }).await.unwrap();
    (h, rx)
}

async fn acquire(h: &ManagerHandle, id: u64, key: &str, owner: &str, wait: u8, lease: u8) {
    let req = ManagerRequest::Acquire {
        conn: ConnId(1),
        id: RequestId(id),
        key: k(key),
        owner: o(owner),
        wait,
        lease,
        read_at: Instant::now(),
    };
    h.send(req).await.unwrap();
}

async fn next(rx: &mut mpsc::Receiver<Delivery>) -> ServerFrame {
    match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.unwrap().unwrap() {
        Delivery::Reply { frame, .. } | Delivery::Fatal(frame) => frame,
        Delivery::Dropped(id) => panic!("request {id} dropped"),
    }
}

#[tokio::test]
async fn held_keys_cap_is_checked_again_when_a_queued_free_key_is_granted() {
    let limits = Limits { max_held_keys: 1, ..Limits::default() };
    let (h, mut rx) = setup(limits).await;
    // A no-op release keeps key "a" busy; the A behind it waits for it.
    let release = ManagerRequest::Release {
        conn: ConnId(1),
        id: RequestId(1),
        key: k("a"),
        owner: o("x"),
        token: Token::new(5).unwrap(),
    };
    h.send(release).await.unwrap();
    acquire(&h, 2, "a", "o1", 0, 5).await;
    // Meanwhile key "b" takes the only held-key slot.
    acquire(&h, 3, "b", "o2", 0, 5).await;
    let mut frames = Vec::new();
    for _ in 0..3 {
        frames.push(next(&mut rx).await);
    }
    assert!(frames.contains(&ServerFrame::NotHolder { id: RequestId(1), key: k("a") }), "{frames:?}");
    assert!(frames.iter().any(|f| matches!(f, ServerFrame::Granted { id: RequestId(3), .. })), "{frames:?}");
    assert!(frames.contains(&ServerFrame::Busy { id: RequestId(2), key: k("a") }), "{frames:?}");
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
async fn grant_queue_release_handover_and_query() {
    let (h, mut rx) = setup(Limits::default()).await;
    acquire(&h, 1, "a", "o1", 0, 5).await;
    let ServerFrame::Granted { token: t1, .. } = next(&mut rx).await else { panic!() };
    acquire(&h, 2, "a", "o2", 0, 5).await;
    assert_eq!(next(&mut rx).await, ServerFrame::Timeout { id: RequestId(2), key: k("a") });
    acquire(&h, 3, "a", "o3", 10, 5).await;
    let info = h.lock_info(k("a")).await.unwrap();
    assert_eq!(info.waiters.len(), 1);
    assert_eq!(info.holder.as_ref().unwrap().token, t1);
    h.send(ManagerRequest::Release { conn: ConnId(1), id: RequestId(4), key: k("a"), owner: o("o1"), token: t1 })
        .await
        .unwrap();
    assert_eq!(next(&mut rx).await, ServerFrame::Released { id: RequestId(4), key: k("a") });
    let ServerFrame::Granted { id, token: t2, owner, .. } = next(&mut rx).await else { panic!() };
    assert_eq!((id, owner), (RequestId(3), o("o3")));
    assert!(t2 > t1);
    assert_eq!(h.metrics().grants.get(), 2);
    assert_eq!(h.metrics().held_keys.get(), 1);
}

#[tokio::test]
async fn closed_connection_leaves_queue() {
    let (h, mut rx) = setup(Limits::default()).await;
    let (tx2, mut rx2) = mpsc::channel(8);
    h.send(ManagerRequest::Register { conn: ConnId(2), tx: tx2, client: "127.0.0.1:50002".into() }).await.unwrap();
    acquire(&h, 1, "a", "o1", 0, 5).await;
    let ServerFrame::Granted { token, .. } = next(&mut rx).await else { panic!() };
    let req = ManagerRequest::Acquire {
        conn: ConnId(2),
        id: RequestId(1),
        key: k("a"),
        owner: o("dead"),
        wait: 10,
        lease: 5,
        read_at: Instant::now(),
    };
    h.send(req).await.unwrap();
    h.send(ManagerRequest::Disconnected { conn: ConnId(2) }).await.unwrap();
    assert!(h.lock_info(k("a")).await.unwrap().waiters.is_empty());
    h.send(ManagerRequest::Release { conn: ConnId(1), id: RequestId(2), key: k("a"), owner: o("o1"), token })
        .await
        .unwrap();
    assert_eq!(next(&mut rx).await, ServerFrame::Released { id: RequestId(2), key: k("a") });
    assert!(h.lock_info(k("a")).await.unwrap().holder.is_none());
    assert!(rx2.try_recv().is_err());
}

#[tokio::test]
async fn query_answers_h_for_the_holder_and_n_otherwise_and_changes_nothing() {
    let (h, mut rx) = setup(Limits::default()).await;
    acquire(&h, 1, "q", "owner-one-0123456789", 0, 5).await;
    let ServerFrame::Granted { token, .. } = next(&mut rx).await else { panic!() };
    acquire(&h, 2, "q", "owner-two-0123456789", 30, 5).await;
    let ask = |id: u64, key: &str, owner: &str| ManagerRequest::Holds {
        conn: ConnId(1),
        id: RequestId(id),
        key: k(key),
        owner: o(owner),
    };
    h.send(ask(3, "q", "owner-one-0123456789")).await.unwrap();
    match next(&mut rx).await {
        ServerFrame::Held { id, key, owner, token: t, remaining_ms } => {
            assert_eq!((id, key, owner, t), (RequestId(3), k("q"), o("owner-one-0123456789"), token));
            assert!((1..=5000).contains(&remaining_ms), "{remaining_ms}");
        }
        other => panic!("{other:?}"),
    }
    h.send(ask(4, "q", "owner-two-0123456789")).await.unwrap();
    assert_eq!(
        next(&mut rx).await,
        ServerFrame::NotHolder { id: RequestId(4), key: k("q") },
        "a waiter is not a holder"
    );
    h.send(ask(5, "nothing-here", "owner-one-0123456789")).await.unwrap();
    assert_eq!(next(&mut rx).await, ServerFrame::NotHolder { id: RequestId(5), key: k("nothing-here") });
    let info = h.lock_info(k("q")).await.unwrap();
    assert_eq!(info.holder.as_ref().map(|h| (h.token, h.owner_prefix.as_str())), Some((token, "owner-on")));
    assert_eq!(info.waiters.len(), 1, "queries change nothing");
    assert_eq!(info.waiters[0].client, "127.0.0.1:50001");
    assert_eq!(info.waiters[0].owner_prefix, "owner-tw");
    assert_eq!(h.metrics().queries.get(), 3);
}

#[tokio::test]
async fn ticks_are_committed_while_nothing_else_is() {
    let limits = Limits { tick_ms: 20, ..Limits::default() };
    let (h, _rx) = setup(limits).await;
    let end = Instant::now() + Duration::from_secs(5);
    while h.metrics().ticks.get() < 3 {
        assert!(Instant::now() < end, "no ticks");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let info = h.lock_info(k("x")).await.unwrap();
    assert!(info.domain_time_ms >= 40, "domain time advances: {}", info.domain_time_ms);
}
