//! The nemesis: faults drawn from the seed, each recorded as a `Fault`
//! event with its start and the moment it healed.

use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::time::{sleep, Instant};

use crate::clock::mono_ns;
use crate::cluster::Cluster;
use crate::proxy::Rule;
use crate::rng::Rng;

mod client;
mod nodes;

/// Every link delayed 0–40 ms per chunk, reset with chance 0.4 % per chunk.
const FLAKY: Rule = Rule::Flaky { min_ms: 0, max_ms: 40, reset_permille: 4 };
/// Every link delayed 20–120 ms per chunk.
const SLOW: Rule = Rule::Delay { min_ms: 20, max_ms: 120 };

/// Election timeout maximum of the server's defaults (docs/deployment.md).
pub const ELECTION_MAX: Duration = Duration::from_millis(1200);

/// The faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nemesis {
    /// `kill -9` of the serving leader, then a restart (learner replacement).
    KillLeader,
    /// `kill -9` of a follower, then a restart.
    KillFollower,
    /// The leader cut off from every other node (both directions).
    PartitionLeader,
    /// A follower cut off from every other node.
    IsolateFollower,
    /// One-way: the leader's bytes to every follower dropped, theirs still arrive.
    OneWay,
    /// Every link delayed 0–40 ms and reset at random.
    Flaky,
    /// Every link delayed 20–120 ms.
    Slow,
    /// Every peer connection reset, four times.
    ResetLinks,
    /// Every node in turn: SIGTERM, restart, wait until it is a voter again.
    RollingRestart,
    /// A client stopped while holding, past its lease; SIGCONT once a newer
    /// token has written: its write must be refused by the fence.
    PauseClient,
    /// The leader stopped (SIGSTOP) past the election timeout, then SIGCONT.
    PauseLeader,
    /// Durable cluster: `kill -9` of every node at once, each restarted on
    /// its data dir; the domain, its holders and its token counter survive.
    RestartAll,
    /// Durable standalone server: `kill -9`, restarted on its data dir.
    RestartStandalone,
    /// Durable: every node's power cut at once (every write not fsynced
    /// lost, on disks slowed down so writes are in flight), restarted on
    /// their data dirs.
    PowerLossAll,
    /// Durable cluster: the leader's power cut (its own entries may be on
    /// the followers' disks and not on its own), the others elect; then it
    /// restarts on its data dir.
    PowerLossLeader,
    /// Durable cluster: the power of a minority of followers cut, restarted.
    PowerLossMinority,
    /// Durable: every node's power cut while writing, its last write torn
    /// (a random strict prefix) or zero-filled.
    TornTail,
    /// Every client link delayed 0–40 ms and reset at random.
    ClientFlaky,
    /// Every byte between the clients and the leader dropped (both ways),
    /// then those connections reset.
    ClientDrop,
    /// Every client connection reset, four times.
    ClientReset,
    /// Two at once: every peer link slow while the leader is killed.
    SlowKillLeader,
    /// Two at once: flaky client links while a follower is killed.
    ClientFlakyKillFollower,
    /// Two at once (durable): flaky client links while the leader loses power.
    ClientFlakyPowerLossLeader,
    /// 5 nodes: two voters (the leader among them every other time) removed
    /// through the leader's admin port (5 → 3), stopped, started again as
    /// new nodes (a new NodeId; durable: an empty data dir) and added back
    /// (3 → 5), all under load.
    ShrinkGrow,
    /// Memory mode: `kill -9` of every node, then a new domain bootstrapped
    /// with a start grace longer than any lease in flight: no double grant
    /// across the rebuild.
    Rebuild,
    /// A run started on an earlier release (`--upgrade-from`): every node in
    /// turn, the followers first and the leader last, stopped (SIGTERM),
    /// started on the run's binary (durable: on its data dir), and waited
    /// for until it is a voter again (docs/versioning.md, "Upgrading a
    /// running cluster, step by step").
    RollingUpgrade,
}

impl Nemesis {
    /// Every fault.
    pub const ALL: [Nemesis; 16] = [
        Nemesis::KillLeader,
        Nemesis::KillFollower,
        Nemesis::PartitionLeader,
        Nemesis::IsolateFollower,
        Nemesis::OneWay,
        Nemesis::Flaky,
        Nemesis::Slow,
        Nemesis::ResetLinks,
        Nemesis::RollingRestart,
        Nemesis::PauseClient,
        Nemesis::PauseLeader,
        Nemesis::ClientFlaky,
        Nemesis::ClientDrop,
        Nemesis::ClientReset,
        Nemesis::SlowKillLeader,
        Nemesis::ClientFlakyKillFollower,
    ];

    /// The faults a run of `nodes` nodes (1: a standalone server) in durable
    /// mode or not can take: the whole-cluster restart needs durable nodes,
    /// a standalone server takes only its own restart.
    pub fn for_run(nodes: usize, durable: bool) -> Vec<Nemesis> {
        match (nodes, durable) {
            (1, false) => vec![Nemesis::RestartStandalone],
            (1, true) => {
                vec![Nemesis::RestartStandalone, Nemesis::PowerLossAll, Nemesis::TornTail, Nemesis::ClientReset]
            }
            (_, true) => Nemesis::ALL
                .iter()
                .copied()
                .chain([
                    Nemesis::RestartAll,
                    Nemesis::PowerLossAll,
                    Nemesis::PowerLossLeader,
                    Nemesis::PowerLossMinority,
                    Nemesis::TornTail,
                    Nemesis::ClientFlakyPowerLossLeader,
                ])
                .collect(),
            (_, false) => Nemesis::ALL.iter().copied().chain([Nemesis::Rebuild]).collect(),
        }
        .into_iter()
        .chain((nodes == 5).then_some(Nemesis::ShrinkGrow))
        .collect()
    }

    /// Its name in the history and the table.
    pub fn name(self) -> &'static str {
        match self {
            Nemesis::KillLeader => "kill-leader",
            Nemesis::KillFollower => "kill-follower",
            Nemesis::PartitionLeader => "partition-leader",
            Nemesis::IsolateFollower => "isolate-follower",
            Nemesis::OneWay => "one-way-drop",
            Nemesis::Flaky => "flaky-links",
            Nemesis::Slow => "slow-links",
            Nemesis::ResetLinks => "reset-links",
            Nemesis::RollingRestart => "rolling-restart",
            Nemesis::PauseClient => "pause-client",
            Nemesis::PauseLeader => "pause-leader",
            Nemesis::RestartAll => "restart-all",
            Nemesis::RestartStandalone => "restart-standalone",
            Nemesis::PowerLossAll => "power-loss-all",
            Nemesis::PowerLossLeader => "power-loss-leader",
            Nemesis::PowerLossMinority => "power-loss-minority",
            Nemesis::TornTail => "torn-tail",
            Nemesis::ClientFlaky => "client-flaky",
            Nemesis::ClientDrop => "client-drop",
            Nemesis::ClientReset => "client-reset",
            Nemesis::SlowKillLeader => "slow-links+kill-leader",
            Nemesis::ClientFlakyKillFollower => "client-flaky+kill-follower",
            Nemesis::ClientFlakyPowerLossLeader => "client-flaky+power-loss-leader",
            Nemesis::Rebuild => "rebuild",
            Nemesis::ShrinkGrow => "shrink-grow",
            Nemesis::RollingUpgrade => "rolling-upgrade",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Option<Nemesis> {
        Nemesis::ALL
            .into_iter()
            .chain([
                Nemesis::RestartAll,
                Nemesis::RestartStandalone,
                Nemesis::Rebuild,
                Nemesis::ShrinkGrow,
                Nemesis::RollingUpgrade,
                Nemesis::PowerLossAll,
                Nemesis::PowerLossLeader,
                Nemesis::PowerLossMinority,
                Nemesis::TornTail,
                Nemesis::ClientFlakyPowerLossLeader,
            ])
            .find(|n| n.name() == s)
    }
}

/// Everything a fault acts on.
pub struct World {
    /// The cluster.
    pub cluster: Cluster,
    /// Workload client processes (index = client id).
    pub clients: Vec<Child>,
    /// The run directory.
    pub dir: PathBuf,
    /// The database.
    pub db: crate::db::Target,
    /// Choices.
    pub rng: Rng,
}

/// What a fault did.
pub struct Done {
    /// When the cluster should grant again within the bound from.
    pub heal: u64,
    /// A line for the log.
    pub detail: String,
}

impl World {
    /// The serving leader (waits up to 20 s), or an error.
    async fn leader(&self) -> anyhow::Result<usize> {
        self.cluster
            .wait_leader(Duration::from_secs(20))
            .await
            .ok_or_else(|| anyhow::anyhow!("no serving leader within 20 s"))
    }

    fn follower_of(&mut self, leader: usize) -> usize {
        let n = self.cluster.nodes.len();
        (leader + 1 + self.rng.index(n - 1)) % n
    }

    /// Restarts node `i` without `--bootstrap` and waits until it is a voter
    /// and has caught up with the leader. (Its binary is the node's: see
    /// [`Nemesis::RollingUpgrade`].)
    async fn restart(&mut self, i: usize) -> anyhow::Result<String> {
        self.cluster.start(i, false)?;
        let t = Instant::now();
        if !self.cluster.wait_voter(i, Duration::from_secs(40)).await {
            anyhow::bail!("restarted node {i} did not become a voter within 40 s");
        }
        let voter = t.elapsed().as_millis();
        if !self.cluster.wait_caught_up(i, Duration::from_secs(40)).await {
            anyhow::bail!("restarted node {i} did not catch up with the leader within 40 s");
        }
        Ok(format!("node {i} voter again after {voter} ms, caught up after {} ms", t.elapsed().as_millis()))
    }

    /// Runs one fault to its heal.
    pub async fn inject(&mut self, nem: Nemesis) -> anyhow::Result<Done> {
        let hold = |ms: u64| sleep(Duration::from_millis(ms));
        match nem {
            Nemesis::KillLeader | Nemesis::KillFollower => {
                let l = self.leader().await?;
                let victim = if nem == Nemesis::KillLeader { l } else { self.follower_of(l) };
                self.cluster.kill9(victim);
                // A majority is still up: the cluster must grant again at once
                // (after a failover when the leader died).
                let heal = mono_ns();
                hold(1000 + self.rng.range(0, 1000)).await;
                let d = self.restart(victim).await?;
                Ok(Done { heal, detail: format!("kill -9 node {victim} (leader was {l}); {d}") })
            }
            Nemesis::PartitionLeader | Nemesis::IsolateFollower => {
                let l = self.leader().await?;
                let victim = if nem == Nemesis::PartitionLeader { l } else { self.follower_of(l) };
                self.cluster.net.isolate(victim);
                let t = Instant::now();
                let mut note = String::new();
                if victim == l {
                    // The quorum-ack gate: the cut-off leader must stop serving.
                    let limit = ELECTION_MAX * 2 + Duration::from_secs(4);
                    while self.cluster.is_serving(l).await && t.elapsed() < limit {
                        sleep(Duration::from_millis(50)).await;
                    }
                    note = if self.cluster.is_serving(l).await {
                        format!("; the cut-off leader STILL serves after {} ms", t.elapsed().as_millis())
                    } else {
                        format!("; the cut-off leader stopped serving after {} ms", t.elapsed().as_millis())
                    };
                }
                let total = 4000 + self.rng.range(0, 1500);
                let left = total.saturating_sub(t.elapsed().as_millis() as u64);
                hold(left).await;
                self.cluster.net.heal();
                Ok(Done {
                    heal: mono_ns(),
                    detail: format!("node {victim} isolated for {total} ms (leader {l}){note}"),
                })
            }
            Nemesis::OneWay => {
                let l = self.leader().await?;
                for f in (0..self.cluster.nodes.len()).filter(|&f| f != l) {
                    self.cluster.net.set(l, f, Rule::Drop);
                }
                let total = 4000 + self.rng.range(0, 1500);
                hold(total).await;
                self.cluster.net.heal();
                Ok(Done {
                    heal: mono_ns(),
                    detail: format!("bytes from leader {l} to its followers dropped for {total} ms"),
                })
            }
            Nemesis::Flaky => Ok(self.every_link(false, FLAKY).await),
            Nemesis::Slow => Ok(self.every_link(false, SLOW).await),
            Nemesis::ResetLinks => {
                for _ in 0..4 {
                    self.cluster.net.reset_all();
                    hold(500).await;
                }
                Ok(Done { heal: mono_ns(), detail: "every peer connection reset 4 times, 0.5 s apart".into() })
            }
            Nemesis::RollingRestart => {
                let n = self.cluster.nodes.len();
                let mut order: Vec<usize> = (0..n).collect();
                self.rng.shuffle(&mut order);
                let mut notes = Vec::new();
                for i in order {
                    self.cluster.stop(i).await;
                    notes.push(self.restart(i).await?);
                }
                Ok(Done { heal: mono_ns(), detail: format!("rolling restart: {}", notes.join("; ")) })
            }
            Nemesis::PauseLeader => {
                let l = self.leader().await?;
                self.cluster.signal(l, Signal::SIGSTOP);
                let total = (ELECTION_MAX * 2).as_millis() as u64 + 1000 + self.rng.range(0, 1000);
                hold(total).await;
                self.cluster.signal(l, Signal::SIGCONT);
                Ok(Done { heal: mono_ns(), detail: format!("leader {l} stopped (SIGSTOP) for {total} ms") })
            }
            Nemesis::PauseClient => self.pause_client().await,
            Nemesis::RestartAll | Nemesis::RestartStandalone => self.restart_all().await,
            Nemesis::ClientFlaky => Ok(self.every_link(true, FLAKY).await),
            Nemesis::ClientDrop => {
                let l = self.leader().await?;
                let clients = self.cluster.nodes.len();
                self.cluster.clients.set(clients, l, Rule::Drop);
                self.cluster.clients.set(l, clients, Rule::Drop);
                let total = 3000 + self.rng.range(0, 2000);
                hold(total).await;
                self.cluster.clients.heal();
                Ok(Done {
                    heal: mono_ns(),
                    detail: format!("every byte between the clients and leader {l} dropped for {total} ms, then reset"),
                })
            }
            Nemesis::ClientReset => {
                for _ in 0..4 {
                    self.cluster.clients.reset_all();
                    hold(500).await;
                }
                Ok(Done { heal: mono_ns(), detail: "every client connection reset 4 times, 0.5 s apart".into() })
            }
            Nemesis::SlowKillLeader => {
                // The failover runs on slow links; the restart after the
                // heal (a memory-mode node's learner replacement on links
                // this slow took 13 s to over 40 s: not what this fault is for).
                let rule = SLOW;
                self.cluster.net.set_all(rule);
                let l = match self.leader().await {
                    Ok(l) => l,
                    Err(e) => {
                        self.cluster.net.heal();
                        return Err(e);
                    }
                };
                self.cluster.kill9(l);
                let slow = 2000 + self.rng.range(0, 1500);
                hold(slow).await;
                self.cluster.net.heal();
                let heal = mono_ns();
                let d = self.restart(l).await?;
                Ok(Done {
                    heal,
                    detail: format!(
                        "{rule:?} on every peer link; kill -9 of leader {l}, links healed {slow} ms later; {d}"
                    ),
                })
            }
            Nemesis::ClientFlakyKillFollower | Nemesis::ClientFlakyPowerLossLeader => {
                let rule = FLAKY;
                self.cluster.clients.set_all(rule);
                let inner = if nem == Nemesis::ClientFlakyKillFollower {
                    Nemesis::KillFollower
                } else {
                    Nemesis::PowerLossLeader
                };
                let done = Box::pin(self.inject(inner)).await;
                self.cluster.clients.heal();
                let done = done?;
                Ok(Done { heal: mono_ns(), detail: format!("{rule:?} on every client link during: {}", done.detail) })
            }
            Nemesis::PowerLossAll | Nemesis::TornTail => {
                let n = self.cluster.nodes.len();
                self.power_loss((0..n).collect(), nem == Nemesis::TornTail).await
            }
            Nemesis::PowerLossLeader => {
                let l = self.leader().await?;
                self.power_loss(vec![l], false).await
            }
            Nemesis::PowerLossMinority => {
                let l = self.leader().await?;
                let n = self.cluster.nodes.len();
                let mut followers: Vec<usize> = (0..n).filter(|&i| i != l).collect();
                self.rng.shuffle(&mut followers);
                followers.truncate((n - 1) / 2);
                self.power_loss(followers, false).await
            }
            Nemesis::Rebuild => self.rebuild().await,
            Nemesis::ShrinkGrow => self.shrink_grow().await,
            Nemesis::RollingUpgrade => self.rolling_upgrade().await,
        }
    }

    /// `rule` on every peer link (`clients`: every client link) for 5–7 s, then healed.
    async fn every_link(&mut self, clients: bool, rule: Rule) -> Done {
        let net = if clients { &self.cluster.clients } else { &self.cluster.net };
        net.set_all(rule);
        let total = 5000 + self.rng.range(0, 2000);
        sleep(Duration::from_millis(total)).await;
        net.heal();
        let links = if clients { "client link" } else { "link" };
        Done { heal: mono_ns(), detail: format!("{rule:?} on every {links} for {total} ms") }
    }
}
