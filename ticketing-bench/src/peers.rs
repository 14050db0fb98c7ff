//! Adapters for the peers (feature `peers`): each drives W1–W3 the way that
//! system's own documentation recommends for a lock, over ONE shared client
//! per run, as Ticketing's shared broker does.
//!
//! - etcd: the v3 lock API (`Lock` / `Unlock`) with one lease per workload
//!   client (a lock's owner is its lease). Token: the lock response's revision.
//! - ZooKeeper: the ephemeral-sequential recipe: create
//!   `/bench-locks/KEY/lock-N`, the lowest N holds, the others watch their
//!   predecessor; release deletes the node. Token: the node's czxid.
//! - Redis: `SET key val NX PX lease`, release by a compare-and-delete Lua
//!   script; waiting is a spin-retry of `SET NX` (Redis has no queue). No token.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::system::{Acq, Backend, Fut, Held};

/// Connects the adapter for `system` to `endpoints` for `clients` workload clients.
pub async fn connect(system: &str, endpoints: &[String], clients: usize) -> anyhow::Result<Arc<dyn Backend>> {
    if endpoints.is_empty() {
        anyhow::bail!("{system} needs --endpoints host:port[,host:port...]");
    }
    Ok(match system {
        "etcd" => Arc::new(Etcd::connect(endpoints, clients).await?),
        "zookeeper" => Arc::new(Zk::connect(endpoints).await?),
        "redis" => Arc::new(Redis::connect(&endpoints[0]).await?),
        other => anyhow::bail!("no adapter for {other}"),
    })
}

// --- etcd ----------------------------------------------------------------------

struct Etcd {
    client: etcd_client::Client,
    /// One lease per workload client.
    leases: Vec<i64>,
    /// One client per endpoint, for `leader`.
    each: Vec<Option<etcd_client::Client>>,
    /// Member id of each endpoint, as its `Status` last said.
    ids: Mutex<Vec<Option<u64>>>,
}

/// Lease TTL: longer than any run (no keep-alive needed); a lock whose holder
/// vanished would block its key for this long.
const ETCD_LEASE_TTL: i64 = 300;

impl Etcd {
    async fn connect(endpoints: &[String], clients: usize) -> anyhow::Result<Etcd> {
        let opts = || {
            etcd_client::ConnectOptions::new()
                .with_connect_timeout(Duration::from_secs(2))
                .with_timeout(Duration::from_secs(10))
        };
        let client = etcd_client::Client::connect(endpoints, Some(opts())).await?;
        let mut leases = Vec::new();
        let mut c = client.clone();
        for _ in 0..clients {
            leases.push(c.lease_grant(ETCD_LEASE_TTL, None).await?.id());
        }
        let mut each = Vec::new();
        let mut ids = Vec::new();
        for e in endpoints {
            let c = etcd_client::Client::connect([e], Some(opts().with_timeout(Duration::from_secs(1)))).await.ok();
            let id = match &c {
                Some(c) => c.clone().status().await.ok().and_then(|s| s.header().map(|h| h.member_id())),
                None => None,
            };
            ids.push(id);
            each.push(c);
        }
        Ok(Etcd { client, leases, each, ids: Mutex::new(ids) })
    }
}

impl Backend for Etcd {
    fn acquire<'a>(&'a self, client: usize, key: &'a str, wait: Duration, _lease: Duration) -> Fut<'a, Acq> {
        Box::pin(async move {
            let mut lc = self.client.lock_client();
            let opts = etcd_client::LockOptions::new().with_lease(self.leases[client]);
            match tokio::time::timeout(wait.max(Duration::from_millis(1)), lc.lock(key, Some(opts))).await {
                Ok(Ok(resp)) => {
                    let token = resp.header().map_or(0, |h| h.revision()) as u64;
                    Acq::Granted(Held { token, slot: None, inner: Box::new(resp.key().to_vec()) })
                }
                Ok(Err(e)) => Acq::Failed(format!("etcd:{e}")),
                // The lock request may stay queued in etcd under this lease.
                Err(_) => Acq::Indeterminate,
            }
        })
    }

    fn release<'a>(&'a self, _client: usize, held: Held) -> Fut<'a, Result<(), String>> {
        Box::pin(async move {
            let key = held.inner.downcast::<Vec<u8>>().map_err(|_| "not an etcd lock".to_owned())?;
            self.client.lock_client().unlock(*key).await.map(|_| ()).map_err(|e| format!("etcd:{e}"))
        })
    }

    fn leader(&self) -> Fut<'_, Option<usize>> {
        Box::pin(async move {
            // Every endpoint at once, a short bound each, and an answer as
            // soon as a majority replied: a killed endpoint costs no wait,
            // so W3 sees the new leader at its 20 ms polling step (as with
            // Ticketing's /status and ZooKeeper's srvr), not a timeout's.
            let mut set = tokio::task::JoinSet::new();
            for (i, c) in self.each.iter().enumerate() {
                let Some(c) = c.clone() else { continue };
                set.spawn(async move {
                    let st = tokio::time::timeout(ETCD_STATUS_WAIT, c.clone().status()).await.ok().and_then(|r| r.ok());
                    (i, st.map(|s| (s.header().map_or(0, |h| h.member_id()), s.leader(), s.raft_term())))
                });
            }
            let majority = self.each.len() / 2 + 1;
            let mut answers = Vec::new();
            while let Some(done) = set.join_next().await {
                if let Ok((i, Some(a))) = done {
                    answers.push((i, a));
                    if answers.len() >= majority {
                        break;
                    }
                }
            }
            set.abort_all();
            let mut ids = self.ids.lock().unwrap_or_else(|p| p.into_inner());
            for (i, (id, _, _)) in &answers {
                if *id != 0 {
                    ids[*i] = Some(*id);
                }
            }
            // The leader of the highest term any of them knows.
            let (_, (_, leader, _)) =
                answers.iter().filter(|(_, (_, l, _))| *l != 0).max_by_key(|(_, (_, _, t))| *t)?;
            ids.iter().position(|id| *id == Some(*leader))
        })
    }
}

/// Bound on one etcd `Status` call of [`Etcd::leader`].
const ETCD_STATUS_WAIT: Duration = Duration::from_millis(200);

// --- ZooKeeper -------------------------------------------------------------------

struct Zk {
    client: zookeeper_client::Client,
    endpoints: Vec<String>,
    parents: Mutex<HashSet<String>>,
}

const ZK_ROOT: &str = "/bench-locks";

impl Zk {
    async fn connect(endpoints: &[String]) -> anyhow::Result<Zk> {
        let mut connector = zookeeper_client::Client::connector();
        connector.session_timeout(Duration::from_secs(10));
        let client = connector.connect(&endpoints.join(",")).await?;
        let zk = Zk { client, endpoints: endpoints.to_vec(), parents: Mutex::default() };
        zk.ensure(ZK_ROOT).await?;
        Ok(zk)
    }

    async fn ensure(&self, path: &str) -> Result<(), zookeeper_client::Error> {
        let opts = zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
        match self.client.create(path, b"", &opts).await {
            Ok(_) | Err(zookeeper_client::Error::NodeExists) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn lock(&self, key: &str, wait: Duration) -> Result<Option<(String, u64)>, zookeeper_client::Error> {
        let deadline = Instant::now() + wait;
        let parent = format!("{ZK_ROOT}/{key}");
        let known = self.parents.lock().unwrap_or_else(|p| p.into_inner()).contains(&parent);
        if !known {
            self.ensure(&parent).await?;
            self.parents.lock().unwrap_or_else(|p| p.into_inner()).insert(parent.clone());
        }
        let opts = zookeeper_client::CreateMode::EphemeralSequential.with_acls(zookeeper_client::Acls::anyone_all());
        let (stat, seq) = self.client.create(&format!("{parent}/lock-"), b"", &opts).await?;
        let me = format!("lock-{seq}");
        let path = format!("{parent}/{me}");
        loop {
            let (mut children, _) = self.client.get_children(&parent).await?;
            children.sort();
            let Some(pos) = children.iter().position(|c| *c == me) else {
                return Err(zookeeper_client::Error::NoNode);
            };
            if pos == 0 {
                return Ok(Some((path, stat.czxid as u64)));
            }
            let pred = format!("{parent}/{}", children[pos - 1]);
            let (exists, watcher) = self.client.check_and_watch_stat(&pred).await?;
            if exists.is_none() {
                continue;
            }
            if tokio::time::timeout_at(deadline.into(), watcher.changed()).await.is_err() {
                let _ = self.client.delete(&path, None).await;
                return Ok(None);
            }
        }
    }
}

impl Backend for Zk {
    fn acquire<'a>(&'a self, _client: usize, key: &'a str, wait: Duration, _lease: Duration) -> Fut<'a, Acq> {
        Box::pin(async move {
            match self.lock(key, wait).await {
                Ok(Some((path, token))) => Acq::Granted(Held { token, slot: None, inner: Box::new(path) }),
                Ok(None) => Acq::NotGranted,
                Err(zookeeper_client::Error::ConnectionLoss) => Acq::Indeterminate,
                Err(e) => Acq::Failed(format!("zk:{e}")),
            }
        })
    }

    fn release<'a>(&'a self, _client: usize, held: Held) -> Fut<'a, Result<(), String>> {
        Box::pin(async move {
            let path = held.inner.downcast::<String>().map_err(|_| "not a zk lock".to_owned())?;
            self.client.delete(&path, None).await.map_err(|e| format!("zk:{e}"))
        })
    }

    fn leader(&self) -> Fut<'_, Option<usize>> {
        Box::pin(async move {
            for (i, e) in self.endpoints.iter().enumerate() {
                if zk_mode(e).await.as_deref() == Some("leader") {
                    return Some(i);
                }
            }
            None
        })
    }
}

/// The `Mode:` of a ZooKeeper server from the `srvr` four-letter command
/// (needs `4lw.commands.whitelist=srvr`, as scripts/bench-peers configures).
async fn zk_mode(endpoint: &str) -> Option<String> {
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(endpoint).await.ok()?;
        s.write_all(b"srvr").await.ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).await.ok()?;
        out.lines().find_map(|l| l.strip_prefix("Mode: ").map(|m| m.trim().to_owned()))
    };
    tokio::time::timeout(Duration::from_secs(1), fut).await.ok().flatten()
}

// --- Redis -----------------------------------------------------------------------

struct Redis {
    con: redis::aio::MultiplexedConnection,
    unlock: redis::Script,
    next: AtomicU64,
}

impl Redis {
    async fn connect(endpoint: &str) -> anyhow::Result<Redis> {
        let client = redis::Client::open(format!("redis://{endpoint}/"))?;
        let con = client.get_multiplexed_async_connection().await?;
        let unlock = redis::Script::new(
            "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end",
        );
        Ok(Redis { con, unlock, next: AtomicU64::new(1) })
    }
}

impl Backend for Redis {
    fn acquire<'a>(&'a self, _client: usize, key: &'a str, wait: Duration, lease: Duration) -> Fut<'a, Acq> {
        Box::pin(async move {
            let deadline = Instant::now() + wait;
            let value = format!("{}-{}", std::process::id(), self.next.fetch_add(1, Ordering::Relaxed));
            let mut con = self.con.clone();
            loop {
                let set: redis::RedisResult<Option<String>> = redis::cmd("SET")
                    .arg(key)
                    .arg(&value)
                    .arg("NX")
                    .arg("PX")
                    .arg(lease.as_millis() as u64)
                    .query_async(&mut con)
                    .await;
                match set {
                    Ok(Some(_)) => {
                        return Acq::Granted(Held { token: 0, slot: None, inner: Box::new((key.to_owned(), value)) })
                    }
                    Ok(None) if Instant::now() < deadline => continue, // spin-retry
                    Ok(None) => return Acq::NotGranted,
                    Err(e) => return Acq::Failed(format!("redis:{e}")),
                }
            }
        })
    }

    fn release<'a>(&'a self, _client: usize, held: Held) -> Fut<'a, Result<(), String>> {
        Box::pin(async move {
            let (key, value) = *held.inner.downcast::<(String, String)>().map_err(|_| "not a redis lock".to_owned())?;
            let mut con = self.con.clone();
            let n: i64 =
                self.unlock.key(key).arg(value).invoke_async(&mut con).await.map_err(|e| format!("redis:{e}"))?;
            if n == 1 {
                Ok(())
            } else {
                Err("not_held".to_owned())
            }
        })
    }
}
