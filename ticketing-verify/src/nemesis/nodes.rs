//! The faults on whole nodes and on the membership: a rebuild of a dead
//! domain, a restart of every node, a power cut, the shrink-grow of a
//! 5-node cluster, and the rolling upgrade from an earlier release.

use std::time::Duration;

use tokio::time::{sleep, Instant};

use super::{Done, World};
use crate::clock::mono_ns;

impl World {
    /// [`Nemesis::RollingUpgrade`]: every node still on an earlier binary,
    /// the leader last, moved to the run's; healed once the last is a voter
    /// and a leader serves. A node already on the run's binary is left alone
    /// (a second upgrade in one run is a no-op).
    pub(super) async fn rolling_upgrade(&mut self) -> anyhow::Result<Done> {
        let l = self.leader().await?;
        let n = self.cluster.nodes.len();
        let mut order: Vec<usize> = (0..n).filter(|&i| i != l).collect();
        self.rng.shuffle(&mut order);
        order.push(l);
        let mut notes = Vec::new();
        for i in order {
            if self.cluster.nodes[i].bin == self.cluster.bin {
                continue;
            }
            self.cluster.stop(i).await;
            self.cluster.nodes[i].bin = self.cluster.bin.clone();
            notes.push(self.restart(i).await?);
        }
        let l2 = self.leader().await?;
        let done = if notes.is_empty() { "every node already ran it".to_owned() } else { notes.join("; ") };
        Ok(Done {
            heal: mono_ns(),
            detail: format!(
                "rolling upgrade to {} (leader {l} last): {done}; node {l2} serving",
                self.cluster.bin.display()
            ),
        })
    }

    /// [`Nemesis::ShrinkGrow`]: healed once the 3 that stay serve again
    /// (a removed leader steps down); done once all 5 are voters again.
    pub(super) async fn shrink_grow(&mut self) -> anyhow::Result<Done> {
        let n = self.cluster.nodes.len();
        let l = self.leader().await?;
        let mut others: Vec<usize> = (0..n).filter(|&i| i != l).collect();
        self.rng.shuffle(&mut others);
        let victims = if self.rng.index(2) == 0 { vec![l, others[0]] } else { vec![others[0], others[1]] };
        let peers: Vec<String> = victims.iter().map(|&i| self.cluster.net.addrs[i].to_string()).collect();
        let t = Instant::now();
        let body = serde_json::json!({ "nodes": peers }).to_string();
        self.cluster.admin_post(l, "/cluster/remove", body).await?;
        let removed = t.elapsed().as_millis();
        for &i in &victims {
            self.cluster.stop(i).await;
            self.cluster.nodes[i].generation += 1;
        }
        let l2 = self.leader().await?;
        let heal = mono_ns();
        for &i in &victims {
            self.cluster.start(i, false)?;
        }
        let body = serde_json::json!({ "peers": peers }).to_string();
        let t2 = Instant::now();
        self.cluster.admin_post(l2, "/cluster/add", body).await?;
        for &i in &victims {
            if !self.cluster.wait_voter(i, Duration::from_secs(40)).await {
                anyhow::bail!("node {i} added back but not a voter within 40 s");
            }
        }
        Ok(Done {
            heal,
            detail: format!(
                "nodes {victims:?} removed (leader was {l}) in {removed} ms, node {l2} serving; added back as new \
                 nodes in {} ms",
                t2.elapsed().as_millis()
            ),
        })
    }

    /// Memory mode: `kill -9` of every node (the domain is dead), then every
    /// node started afresh, node 0 with `--bootstrap`, all with
    /// `--start-grace` longer than the longest lease in flight; healed once
    /// the new domain's leader serves (it grants only after the grace).
    pub(super) async fn rebuild(&mut self) -> anyhow::Result<Done> {
        let n = self.cluster.nodes.len();
        for i in 0..n {
            self.cluster.kill9(i);
        }
        let grace = crate::run::LEASE + Duration::from_secs(1);
        self.cluster.extra = vec!["--start-grace".into(), format!("{}", grace.as_secs_f64())];
        let t = Instant::now();
        let started = (0..n).rev().try_for_each(|i| self.cluster.start(i, i == 0));
        self.cluster.extra.clear();
        started?;
        let l = self.leader().await?;
        Ok(Done {
            heal: mono_ns(),
            detail: format!(
                "kill -9 of all {n} nodes, a new domain with --start-grace {} s: node {l} serving {} ms after the restart",
                grace.as_secs_f64(),
                t.elapsed().as_millis()
            ),
        })
    }

    /// The power of `victims` cut while the workload writes: their disks
    /// are slowed down first (each fsync 10–40 ms more, for 0.3–1 s of
    /// traffic) so that writes are in flight, then every write not fsynced
    /// is lost (`torn`: the last one torn or zero-filled, else lost whole or
    /// torn or zero-filled at random), the processes are killed and the
    /// disks work again. Healed once a leader serves (a minority: at once;
    /// the victims are restarted after 1–2 s and waited for as voters).
    pub(super) async fn power_loss(&mut self, victims: Vec<usize>, torn: bool) -> anyhow::Result<Done> {
        let n = self.cluster.nodes.len();
        if self.cluster.disks.len() != n {
            anyhow::bail!("power loss needs every data dir on faultfs (durable mode)");
        }
        let slow = 10 + self.rng.range(0, 30);
        for &i in &victims {
            self.cluster.disks[i].delay_fsync(slow).map_err(|e| anyhow::anyhow!(e))?;
        }
        sleep(Duration::from_millis(300 + self.rng.range(0, 700))).await;
        let mut lost = Vec::new();
        for &i in &victims {
            let mode = if torn { ["torn", "zero"][self.rng.index(2)] } else { ["", "torn", "zero"][self.rng.index(3)] };
            let answer = self.cluster.disks[i].crash(mode).map_err(|e| anyhow::anyhow!(e))?;
            let bytes = answer.split_whitespace().find_map(|w| w.strip_prefix("lost_bytes=")).unwrap_or("?").to_owned();
            lost.push(format!("node {i} {} lost {bytes} B", if mode.is_empty() { "plain" } else { mode }));
        }
        for &i in &victims {
            self.cluster.kill9(i);
            let disk = &self.cluster.disks[i];
            disk.thaw().and_then(|_| disk.command("delay off")).map_err(|e| anyhow::anyhow!(e))?;
        }
        let t = Instant::now();
        let whole = victims.len() == n;
        if !whole {
            // A majority runs on: it must grant again at once.
            let heal = mono_ns();
            sleep(Duration::from_millis(1000 + self.rng.range(0, 1000))).await;
            let mut notes = Vec::new();
            for &i in &victims {
                notes.push(self.restart(i).await?);
            }
            return Ok(Done {
                heal,
                detail: format!(
                    "power cut of node(s) {victims:?} ({}) after {slow} ms slower fsyncs; {}",
                    lost.join(", "),
                    notes.join("; ")
                ),
            });
        }
        for i in 0..n {
            self.cluster.start(i, false)?;
        }
        let l = self.leader().await?;
        Ok(Done {
            heal: mono_ns(),
            detail: format!(
                "power cut of all {n} node(s) ({}) after {slow} ms slower fsyncs; node {l} serving {} ms after the restart",
                lost.join(", "),
                t.elapsed().as_millis()
            ),
        })
    }

    /// `kill -9` of every node (writers running), then each restarted on
    /// its data dir; healed once a leader serves again.
    pub(super) async fn restart_all(&mut self) -> anyhow::Result<Done> {
        let n = self.cluster.nodes.len();
        for i in 0..n {
            self.cluster.kill9(i);
        }
        let down = self.rng.range(0, 1500);
        sleep(Duration::from_millis(down)).await;
        let t = Instant::now();
        for i in 0..n {
            self.cluster.start(i, false)?;
        }
        let l = self.leader().await?;
        Ok(Done {
            heal: mono_ns(),
            detail: format!(
                "kill -9 of all {n} node(s), down {down} ms, node {l} serving {} ms after the restart",
                t.elapsed().as_millis()
            ),
        })
    }
}
