//! The fault on a client: a client process stopped while it holds a lock,
//! past its lease's deadline (the fence must refuse its late write).

use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::time::{sleep, Instant};

use super::{Done, World};
use crate::clock::{mono_ns, ns};
use crate::history::Event;
use crate::workload::pause_trigger;

impl World {
    pub(super) async fn pause_client(&mut self) -> anyhow::Result<Done> {
        let c = self.rng.index(self.clients.len());
        let history = self.dir.join(format!("client-{c}.jsonl"));
        type Paused = (String, Vec<String>, Option<u16>, u64, u64);
        let pauses = |h: &std::path::Path| -> Vec<Paused> {
            let text = std::fs::read_to_string(h).unwrap_or_default();
            text.lines()
                .filter_map(|l| match serde_json::from_str::<Event>(l) {
                    Ok(Event::Pause { key, keys, slot, token, dl, .. }) => Some((key, keys, slot, token, dl)),
                    _ => None,
                })
                .collect()
        };
        // Only a pause recorded after this trigger counts (a client may be
        // picked twice in a run).
        let before = pauses(&history).len();
        let trigger = pause_trigger(&self.dir, c as u32);
        std::fs::write(&trigger, b"")?;
        let end = Instant::now() + Duration::from_secs(30);
        let paused = loop {
            if let Some(p) = pauses(&history).get(before) {
                break Some(p.clone());
            }
            if Instant::now() > end {
                break None;
            }
            sleep(Duration::from_millis(100)).await;
        };
        let Some((key, keys, slot, token, dl)) = paused else {
            let _ = std::fs::remove_file(&trigger);
            anyhow::bail!("client {c} did not reach a grant within 30 s to be paused");
        };
        // The Pause event is written just before the client stops itself.
        let pid = self.clients[c].id();
        let until = Instant::now() + Duration::from_secs(5);
        while !is_stopped(pid) && Instant::now() < until {
            sleep(Duration::from_millis(10)).await;
        }
        if !is_stopped(pid) {
            anyhow::bail!("client {c} recorded its pause but is not stopped");
        }
        // Wait past its deadline until a newer token has written where its
        // write is fenced (its key; a counted holder: its slot or an
        // exclusive holder of its key; a multi-key holder: any of its keys):
        // only then can the fence tell its write is stale.
        let end = Instant::now() + Duration::from_secs(40);
        let mut hw = 0;
        let keys = if keys.is_empty() { vec![key.clone()] } else { keys };
        while Instant::now() < end {
            let (p, ks) = (self.db.clone(), keys.clone());
            hw = tokio::task::spawn_blocking(move || {
                let fence = match slot {
                    Some(s) => crate::db::Fence::Slot(&ks[0], s),
                    None => crate::db::Fence::Keys(&ks),
                };
                crate::db::open(&p)?.high_water(fence)
            })
            .await??;
            if mono_ns() > dl + ns(Duration::from_millis(200)) && hw > token {
                break;
            }
            sleep(Duration::from_millis(50)).await;
        }
        let stopped_ms = (mono_ns().saturating_sub(dl)) / 1_000_000;
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGCONT);
        Ok(Done {
            heal: mono_ns(),
            detail: format!(
                "client {c} stopped holding {}{} token {token} until {stopped_ms} ms past its deadline; fence high water then {hw}",
                keys.join(","),
                slot.map_or(String::new(), |s| format!(" slot {s}"))
            ),
        })
    }
}

/// Whether process `pid` is stopped (state `T` in `/proc/<pid>/stat`).
fn is_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('T')))
        .unwrap_or(false)
}
