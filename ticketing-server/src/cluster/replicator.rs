//! The cluster [`Replicator`]: proposals through openraft's `client_write`
//! (a failure mapped to the manager's view), the applied state, the status,
//! and [`Leadership`] published from the Raft metrics with the quorum-ack
//! gate (docs/deployment.md, "Failover timing").

use super::*;

/// The cluster [`Replicator`]: commits commands through openraft.
pub struct ClusterReplicator {
    pub(super) node: Arc<Node>,
    pub(super) pool: Arc<super::peer::Pool>,
    pub(super) raft: Raft,
    pub(super) sm: store::StateMachine,
    pub(super) leadership: watch::Sender<Leadership>,
    pub(super) propose_timeout: Duration,
    pub(super) commit_seconds: Option<Histogram>,
}

/// Maps a failed `client_write` to the manager's view (the one place where
/// openraft's `ForwardToLeader` becomes the wire's `M <addr>`).
fn map_write_error(e: RaftError<NodeId, ClientWriteError<NodeId, NodeInfo>>) -> ProposeError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => {
            ProposeError::NotLeader(f.leader_node.and_then(|n| Addr::new(n.client).ok()))
        }
        // Not raised for a lock command; if it were, nothing is known about it.
        RaftError::APIError(ClientWriteError::ChangeMembershipError(_)) => ProposeError::Unknown,
        RaftError::Fatal(Fatal::Stopped) => ProposeError::Shutdown,
        // Raft died under the proposal: whether it committed is unknown.
        RaftError::Fatal(Fatal::Panicked | Fatal::StorageError(_)) => ProposeError::Unknown,
    }
}

impl Replicator for ClusterReplicator {
    /// One `client_write` of one log entry for the whole batch.
    fn propose(&self, cmds: Vec<Command>) -> Proposal {
        let gate = self.leadership.borrow();
        if !gate.serving {
            return Proposal::Ready(Err(ProposeError::NotLeader(gate.leader.clone())));
        }
        drop(gate);
        let raft = self.raft.clone();
        let limit = self.propose_timeout;
        let commit_seconds = self.commit_seconds.clone();
        // The manager checks that the outcomes match the commands (`on_done`).
        Proposal::Pending(Box::pin(async move {
            let started = crate::clock::now();
            match tokio::time::timeout(limit, raft.client_write(types::Batch(cmds))).await {
                Ok(Ok(resp)) => {
                    if let Some(h) = &commit_seconds {
                        h.observe(started.elapsed().as_secs_f64());
                    }
                    Ok(resp.data)
                }
                Ok(Err(e)) => Err(map_write_error(e)),
                Err(_) => Err(ProposeError::Unknown),
            }
        }))
    }

    fn with_applied(&self, f: &mut dyn FnMut(&LockState)) {
        self.sm.with_locks(f)
    }

    fn leadership(&self) -> watch::Receiver<Leadership> {
        self.leadership.subscribe()
    }
}

impl ClusterReplicator {
    /// This process's NodeId.
    pub fn node_id(&self) -> NodeId {
        self.node.id
    }

    /// The Raft handle (admin, tests).
    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// Whether a leader sent this node entries or a heartbeat within the
    /// quorum limit (`--election-timeout-max-ms`): a follower that hears a
    /// leader (`/readyz`).
    pub fn hears_leader(&self) -> bool {
        self.node.hurry.heard_within(crate::clock::now(), self.node.quorum_limit)
    }

    /// The admin HTTP address of the leader this node knows, if it has one.
    pub fn leader_admin(&self) -> Option<String> {
        let m = self.raft.metrics().borrow().clone();
        let leader = m.current_leader?;
        m.membership_config.membership().get_node(&leader)?.admin.clone()
    }

    /// Grows the voters 3 → 5 with the nodes at two peer addresses (docs/operating.md, "Growing and shrinking a cluster").
    pub async fn grow(&self, peers: &[String]) -> Result<(), String> {
        membership::grow(&self.node, &self.pool, peers).await
    }

    /// Shrinks the voters 5 → 3 (two NodeIds or peer addresses).
    pub async fn shrink(&self, nodes: &[String]) -> Result<(), String> {
        membership::shrink(&self.node, &self.pool, nodes).await
    }

    /// A backup of the applied lock state (docs/operating.md, "Backup and
    /// disaster recovery"), or `None` outside a domain. Built off the async
    /// threads.
    pub async fn backup(&self) -> Option<Vec<u8>> {
        let domain = self.node.domain()?.to_string();
        let sm = self.sm.clone();
        tokio::task::spawn_blocking(move || {
            let (index, state) = sm.applied_locks();
            let created = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
            crate::backup::encode(&domain, index, &state, &state.to_snapshot(), created)
        })
        .await
        .ok()
    }

    /// The cluster state for `/status` and `/metrics`.
    pub async fn status(&self) -> ClusterStatus {
        let m = self.raft.metrics().borrow().clone();
        let commit_index = self.raft.with_raft_state(|st| st.committed.map(|l| l.index)).await.ok().flatten();
        let membership = m.membership_config.membership();
        let members = membership
            .nodes()
            .map(|(id, n)| MemberView {
                id: *id,
                peer: n.peer.clone(),
                client: n.client.clone(),
                voter: membership.voter_ids().any(|v| v == *id),
                admin: n.admin.clone(),
                matched_index: m.replication.as_ref().and_then(|r| r.get(id).copied().flatten()).map(|l| l.index),
            })
            .collect();
        let leadership = self.leadership.borrow().clone();
        ClusterStatus {
            node_id: self.node.id,
            domain: self.node.domain().map(|d| d.to_string()),
            role: membership::role_text(m.state).to_owned(),
            serving: leadership.serving,
            leader_id: m.current_leader,
            leader: leadership.leader.map(|a| a.as_str().to_owned()),
            members,
            term: m.current_term,
            last_log_index: m.last_log_index,
            commit_index,
            applied_index: m.last_applied.map(|l| l.index),
            millis_since_quorum_ack: if m.state == ServerState::Leader { m.millis_since_quorum_ack } else { None },
        }
    }

    /// Stops Raft (graceful shutdown; the peer port stops answering Raft).
    pub async fn shutdown(&self) {
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(error = %e, "Raft did not shut down cleanly");
        }
    }
}

/// The exit code of a node whose Raft stopped on an error other than storage
/// (`EX_SOFTWARE`).
pub const EXIT_RAFT_FAILED: i32 = 70;

/// Derives [`Leadership`] from the Raft metrics, re-checked every few
/// milliseconds so the quorum-ack gate closes on time even when the metrics
/// stand still.
pub(super) async fn publish_leadership(rep: Arc<ClusterReplicator>, quorum_limit: Duration) {
    let mut metrics = rep.raft.metrics();
    let mut ack_at: Option<Instant> = None;
    let mut epoch = 0u64;
    let tick = Duration::from_millis(20);
    loop {
        let m = metrics.borrow_and_update().clone();
        let now = crate::clock::now();
        let is_leader = m.state == ServerState::Leader && m.current_leader == Some(rep.node.id);
        // Anchor the last quorum ack in local time whenever metrics report it.
        ack_at = match (is_leader, m.millis_since_quorum_ack) {
            (true, Some(ms)) => {
                let at = now.checked_sub(Duration::from_millis(ms)).unwrap_or(now);
                Some(ack_at.map_or(at, |prev| prev.max(at)))
            }
            _ => None,
        };
        let quorum_ok = late::quorum_acked(ack_at, now, quorum_limit);
        let membership = m.membership_config.membership();
        let member = membership.get_node(&rep.node.id).is_some();
        let active = rep.node.domain().is_some() && member;
        // A new leader serves once it has applied an entry of its own term
        // (its blank entry): everything before is applied too.
        let caught_up = m.last_applied.is_some_and(|l| l.leader_id.get_term() == m.current_term);
        let restoring = rep.node.restoring.load(Ordering::Acquire);
        let serving = active && is_leader && quorum_ok && caught_up && !restoring;
        let leader = if serving {
            Addr::new(rep.node.client_addr.clone()).ok()
        } else if is_leader || !active {
            None
        } else {
            m.current_leader
                .filter(|l| *l != rep.node.id)
                .and_then(|l| membership.get_node(&l))
                .and_then(|n| Addr::new(n.client.clone()).ok())
        };
        let was_serving = rep.node.serving.swap(serving, Ordering::AcqRel);
        if serving && !was_serving {
            epoch += 1;
            info!(node = %rep.node.id, term = m.current_term, epoch, "serving as leader");
        } else if !serving && was_serving {
            info!(node = %rep.node.id, quorum_ok, is_leader, "stopped serving");
        }
        let next = Leadership { serving, active, leader, epoch };
        rep.leadership.send_if_modified(|cur| {
            if *cur != next {
                *cur = next;
                true
            } else {
                false
            }
        });
        if let Some(e) = m.running_state.as_ref().err().filter(|e| !matches!(e, Fatal::Stopped)) {
            // Raft stopped on an error (a log or state machine that cannot be
            // read, a panic): the node can serve nothing more, so it exits
            // for its supervisor to restart it, never lingers as a process
            // that answers nothing (docs/deployment.md, "Disk faults").
            error!(node = %rep.node.id, error = %e, "Raft stopped on an error: exiting");
            let code = match e {
                Fatal::StorageError(_) => crate::durable::EXIT_DISK_FAILED,
                _ => EXIT_RAFT_FAILED,
            };
            std::process::exit(code);
        }
        if m.running_state.is_err() || m.state == ServerState::Shutdown {
            rep.node.serving.store(false, Ordering::Release);
            rep.leadership.send_if_modified(|cur| {
                let stopped = Leadership { serving: false, active: cur.active, leader: None, epoch: cur.epoch };
                let changed = *cur != stopped;
                *cur = stopped;
                changed
            });
            return;
        }
        tokio::select! {
            r = metrics.changed() => if r.is_err() { return },
            _ = tokio::time::sleep(tick) => {}
        }
    }
}
