//! Leadership on the client port, driven through a replicator whose
//! leadership this test controls (the cluster implementation publishes the
//! same `Leadership` values): `OK follower`, `M`, `E no_leader`,
//! `E not_active`, `L` on changes, closing on step-down, leases restarted on
//! a new term.

mod common;
use common::*;
use std::sync::Arc;
use std::time::Duration;
use ticketing_proto::Addr;
use ticketing_server::config::Config;
use ticketing_server::locks::{Command, LockState};
use ticketing_server::manager;
use ticketing_server::metrics::Metrics;
use ticketing_server::replication::{Leadership, Proposal, Replicator, Standalone};
use ticketing_server::server;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

struct Controlled {
    inner: Standalone,
    leadership: watch::Sender<Leadership>,
}

impl Replicator for Controlled {
    fn propose(&self, cmds: Vec<Command>) -> Proposal {
        self.inner.propose(cmds)
    }
    fn with_applied(&self, f: &mut dyn FnMut(&LockState)) {
        self.inner.with_applied(f)
    }
    fn leadership(&self) -> watch::Receiver<Leadership> {
        self.leadership.subscribe()
    }
}

struct Node {
    addr: String,
    control: Arc<Controlled>,
    _stop: oneshot::Sender<()>,
}

impl Node {
    async fn start(initial: Leadership) -> Node {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let me = Addr::new(addr.clone()).unwrap();
        let (tx, _) = watch::channel(initial);
        let control = Arc::new(Controlled { inner: Standalone::new(me.clone()), leadership: tx });
        let replicator: Arc<dyn Replicator> = control.clone();
        let config = Config::default();
        let manager =
            manager::spawn(replicator.clone(), config.limits.clone(), Arc::new(Metrics::default()), me.clone());
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(async move {
            server::Builder::new(config)
                .replicator(me, replicator, manager)
                .run(listener, async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        Node { addr, control, _stop: stop }
    }

    fn set(&self, l: Leadership) {
        self.control.leadership.send_replace(l);
    }

    fn me(&self) -> Option<Addr> {
        Some(Addr::new(self.addr.clone()).unwrap())
    }
}

fn other(a: &str) -> Option<Addr> {
    Some(Addr::new(a.to_owned()).unwrap())
}

fn follower(leader: Option<Addr>) -> Leadership {
    Leadership { serving: false, active: true, leader, epoch: 0 }
}

#[tokio::test]
async fn node_without_domain_answers_not_active_after_a_correct_auth() {
    let n = Node::start(Leadership { serving: false, active: false, leader: None, epoch: 0 }).await;
    let mut c = Client::raw(&n.addr).await;
    assert_eq!(c.auth_role(b"").await.unwrap_err(), "E not_active");
    c.expect_closed().await;
}

#[tokio::test]
async fn follower_redirects_with_m_and_answers_pings() {
    let n = Node::start(follower(other("10.0.0.9:5225"))).await;
    let mut c = Client::raw(&n.addr).await;
    assert_eq!(c.auth_role(b"").await.unwrap(), "follower");
    c.expect("L 10.0.0.9:5225").await;
    c.send(b"P 1\n").await;
    c.expect("P 1").await;
    c.acquire(2, "k", &owner(), 5, 5).await;
    c.expect("M 10.0.0.9:5225").await;
    c.expect_closed().await;

    let mut c = Client::raw(&n.addr).await;
    c.auth_role(b"").await.unwrap();
    c.expect("L 10.0.0.9:5225").await;
    c.release(1, "k", &owner(), 5).await;
    c.expect("M 10.0.0.9:5225").await;
    c.expect_closed().await;
}

#[tokio::test]
async fn follower_without_leader_answers_no_leader_and_sends_l_when_one_appears() {
    let n = Node::start(follower(None)).await;
    let mut c = Client::raw(&n.addr).await;
    assert_eq!(c.auth_role(b"").await.unwrap(), "follower");
    c.silent(Duration::from_millis(100)).await;
    n.set(follower(other("10.0.0.7:1")));
    c.expect("L 10.0.0.7:1").await;
    n.set(follower(other("10.0.0.8:2")));
    c.expect("L 10.0.0.8:2").await;

    let mut d = Client::raw(&n.addr).await;
    d.auth_role(b"").await.unwrap();
    d.expect("L 10.0.0.8:2").await;
    n.set(follower(None));
    d.acquire(1, "k", &owner(), 0, 5).await;
    d.expect_error("no_leader").await;
}

#[tokio::test]
async fn stepping_down_closes_clients_with_m_and_a_new_term_restarts_leases() {
    let n = Node::start(Leadership { serving: true, active: true, leader: None, epoch: 1 }).await;
    n.set(Leadership { serving: true, active: true, leader: n.me(), epoch: 1 });
    let mut h = Client::raw(&n.addr).await;
    h.auth(b"").await.unwrap();
    let _ = h.line().await; // L <self>
    let me = owner();
    let token = h.grab(1, "lk", &me, 3).await;
    let mut w = Client::raw(&n.addr).await;
    w.auth(b"").await.unwrap();
    let _ = w.line().await;
    w.acquire(1, "lk", &owner(), 30, 5).await;
    w.send(b"P 2\n").await;
    w.expect("P 2").await;

    n.set(follower(other("10.0.0.5:5225")));
    h.expect("M 10.0.0.5:5225").await;
    h.expect_closed().await;
    w.expect("M 10.0.0.5:5225").await;
    w.expect_closed().await;

    // Back as leader in a new term: the grant is still held, its lease restarted at full length.
    n.set(Leadership { serving: true, active: true, leader: n.me(), epoch: 2 });
    let mut c = Client::raw(&n.addr).await;
    c.auth(b"").await.unwrap();
    c.expect(&format!("L {}", n.addr)).await;
    c.acquire(1, "lk", &owner(), 0, 5).await;
    c.expect("T 1 lk").await;
    c.release(2, "lk", &me, token).await;
    c.expect("R 2 lk").await;
}

#[tokio::test]
async fn a_merged_leadership_flap_closes_every_old_connection() {
    let serving = |epoch| Leadership { serving: true, active: true, leader: None, epoch };
    let n = Node::start(serving(1)).await;
    // A holder, a waiter and an idle connection, all of epoch 1.
    let mut h = Client::raw(&n.addr).await;
    h.auth(b"").await.unwrap();
    let _token = h.grab(1, "flap", &owner(), 30).await;
    let mut w = Client::raw(&n.addr).await;
    w.auth(b"").await.unwrap();
    w.acquire(1, "flap", &owner(), 30, 5).await;
    w.send(b"P 2\n").await;
    w.expect("P 2").await;
    let mut idle = Client::raw(&n.addr).await;
    idle.auth(b"").await.unwrap();
    idle.send(b"P 1\n").await;
    idle.expect("P 1").await;
    // "Not serving" then "serving again" seen as ONE update: only the epoch moved.
    n.set(serving(2));
    for c in [&mut h, &mut w, &mut idle] {
        c.expect_error("no_leader").await;
    }
    // A connection of the new epoch is served and stays open.
    let mut c = Client::raw(&n.addr).await;
    c.auth(b"").await.unwrap();
    c.send(b"P 3\n").await;
    c.expect("P 3").await;
    let o = owner();
    c.grab(4, "other", &o, 5).await;
    c.send(b"P 5\n").await;
    c.expect("P 5").await;
}
