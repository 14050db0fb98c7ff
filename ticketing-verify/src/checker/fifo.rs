//! Rule 10: FIFO order per key (no waiter granted before an earlier one
//! still waiting, on one leader), with its exemptions.

use super::*;

/// FIFO (rule 10): a request is certainly ahead of another in its leader's
/// queue when the server had read it at least this long before the other
/// was even called. It covers the server's step from reading a request on
/// its connection to handing it to the leader's queue (the order of the
/// queue): the same task, with no wait in between but a full hand-over
/// channel (first come, first served), so only a thread kept off the CPU.
pub const FIFO_ORDER_MARGIN_NS: u64 = 300 * MS;
/// FIFO: a pair is not judged when a fault that reaches the servers was
/// active during it, from the fault's start to this long after its heal: a
/// leader cut off or paused may go on answering its waiters after another
/// leader has been elected, until it hears of it or its quorum-ack gate
/// takes it out of service (the election timeout, 1.2 s). Faults that only
/// touch the clients (`pause-client`, faults on the client links:
/// `client-…`) change no leader and exempt nothing.
pub const FIFO_SETTLE_NS: u64 = 2_000 * MS;

/// A fault that only touches the clients: every part of its name (`a+b`)
/// is `pause-client` or a fault on the client links (`client-…`).
fn clients_only(fault: &str) -> bool {
    fault.split('+').all(|p| p == "pause-client" || p.starts_with("client-"))
}

/// Whole seconds, rounded up, as the client library sends `wait` and `lease`.
fn secs_up(ms: u64) -> u64 {
    ms.div_ceil(1000)
}

/// One request, as the FIFO rule sees it.
struct Req<'a> {
    client: u32,
    keys: Vec<&'a str>,
    call: u64,
    ans: u64,
    /// Granted at the server (answered by `ans`): a ticket, or a grant handed back (`insufficient_time`).
    granted: bool,
    /// The latest moment the server can have read it: `None` unknown.
    read_by: Option<u64>,
    /// The earliest moment it can have left its queue (its grant, or the
    /// end of its wait): `None` unknown.
    left_after: Option<u64>,
    /// How it ended, for the message.
    end: String,
}

/// The requests of the history, per client in call order.
fn requests(events: &[Event]) -> BTreeMap<u32, Vec<Req<'_>>> {
    let mut per: BTreeMap<u32, Vec<Req<'_>>> = BTreeMap::new();
    for e in events {
        let req = match e {
            Event::Grant { client, key, keys, call, ans, dl, sent, lease_ms, .. } => {
                // The conservative deadline is `t_send + waited_ms + lease × 0.999`
                // (docs/client.md, Acquire step 4): `start` = t_send + waited_ms,
                // never later than the leader's commit. The server read the
                // request `waited_ms` before it answered, so at the latest
                // `t_send + (ans − start)`, and `t_send` ≤ `sent`.
                let start = lease_ms.map(|l| dl.saturating_sub(secs_up(l) * 999 * MS));
                Req {
                    client: *client,
                    keys: keys_of(key, keys),
                    call: *call,
                    ans: *ans,
                    granted: true,
                    read_by: start.zip(*sent).map(|(st, sent)| sent + ans.saturating_sub(st)),
                    left_after: start,
                    end: format!("granted at {} ms", ans / MS),
                }
            }
            Event::Acquire { client, key, keys, call, ans, result, sent, wait_ms, .. } => {
                let (granted, read_by, left_after) = match (result.as_str(), wait_ms) {
                    // The library asks the server to wait what is left of
                    // `wait` since the call, rounded up to whole seconds; the
                    // server answers `T` that long after it read the request.
                    ("timeout", Some(w)) => {
                        let wait = secs_up(*w) * SEC;
                        let read_by = sent.and_then(|sent| {
                            let left = wait.checked_sub(sent.saturating_sub(*call)).filter(|l| *l > 0)?;
                            ans.checked_sub(left.div_ceil(SEC) * SEC)
                        });
                        (false, read_by, Some(call + wait))
                    }
                    ("insufficient_time", _) => (true, None, None),
                    _ => (false, None, None),
                };
                Req {
                    client: *client,
                    keys: keys_of(key, keys),
                    call: *call,
                    ans: *ans,
                    granted,
                    read_by,
                    left_after,
                    end: format!("answered {result} at {} ms", ans / MS),
                }
            }
            _ => continue,
        };
        per.entry(req.client).or_default().push(req);
    }
    for rs in per.values_mut() {
        rs.sort_by_key(|r| r.call);
    }
    per
}

/// When FIFO is not judged, merged, in order: every fault that reaches the
/// servers from its start to [`FIFO_SETTLE_NS`] after its heal, and every
/// disturbance (an acquire that ended Indeterminate, unavailable or in
/// another error, a release not answered `R`: a session died or a leader
/// was missing) from its call to its answer.
fn unsettled(events: &[Event]) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Fault { name, start, heal, .. } if !clients_only(name) => {
                Some((*start, (*heal).max(*start) + FIFO_SETTLE_NS))
            }
            Event::Acquire { call, ans, result, .. }
                if !matches!(result.as_str(), "timeout" | "busy" | "insufficient_time") =>
            {
                Some((*call, *ans))
            }
            Event::Release { start, end, result, .. } if result != "released" => Some((*start, *end)),
            _ => None,
        })
        .collect();
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (a, b) in v {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// 10, FIFO without overtaking (docs/protocol.md, "A key's holders"): a
/// waiter is never granted before an earlier waiter of any of its keys,
/// whatever the kinds, at one leader. A violation: requests `a` and `b` of
/// different clients share a key, `a` ended granted or `T`, `b` was
/// granted (or granted and handed back, `insufficient_time`); the server had
/// certainly read `a` [`FIFO_ORDER_MARGIN_NS`] before `b` was called; `b`
/// was answered before `a` can have left the queue; and neither a fault
/// that reaches the servers nor a disturbance touches `[a called, b
/// answered]` (see [`unsettled`]). One leader: a leader change drops every
/// waiter, whose acquire then ends Indeterminate, so a granted or
/// timed-out `a` waited at one leader throughout.
///
/// When the server had read `a` at the latest (the client library sends a
/// request once, on one connection; `sent` is no earlier than that):
/// - granted: `sent` + (answer − start), where start = deadline − lease ×
///   0.999 = send time + `waited_ms` (docs/client.md, Acquire step 4), and
///   the server counts `waited_ms` from reading the request to the grant;
/// - `T`: the answer minus the wait the library asked for (what was left of
///   `wait` at `sent`, rounded up to whole seconds): the server answers `T`
///   that long after reading the request.
///
/// Without `sent`, `wait_ms` or `lease_ms`, a request is never `a`.
///
/// When `a` left the queue at the earliest: granted, at its start (no later
/// than the moment the leader applied its grant: a `b` answered before it
/// was granted by an earlier command, while `a` waited; two grants of one
/// command are never an overtaking); `T`, at its call plus its wait (the
/// server waits the whole `wait` left at the send, counted from reading it).
pub(super) fn fifo(events: &[Event], r: &mut Report) {
    let per = requests(events);
    let unsettled = unsettled(events);
    let touches = |from: u64, to: u64| {
        let i = unsettled.partition_point(|(_, e)| *e < from);
        unsettled.get(i).is_some_and(|(s, _)| *s <= to)
    };
    for bs in per.values() {
        for b in bs.iter().filter(|b| b.granted) {
            for (c, rs) in &per {
                if *c == b.client {
                    continue;
                }
                // The request of client c in flight when b was called, if any.
                let i = rs.partition_point(|a| a.call < b.call);
                let Some(a) = i.checked_sub(1).map(|i| &rs[i]) else { continue };
                if a.ans <= b.call {
                    continue;
                }
                let (Some(read_by), Some(left_after)) = (a.read_by, a.left_after) else { continue };
                let Some(key) = a.keys.iter().find(|k| b.keys.contains(k)) else { continue };
                if read_by + FIFO_ORDER_MARGIN_NS >= b.call || touches(a.call, b.ans) {
                    continue;
                }
                r.fifo_pairs += 1;
                if b.ans < left_after {
                    r.violations.push(format!(
                        "FIFO on {key}: client {} (called at {} ms) was granted by {} ms while client {}, whose request the server had read by {} ms, still waited ({})",
                        b.client,
                        b.call / MS,
                        b.ans / MS,
                        a.client,
                        read_by / MS,
                        a.end
                    ));
                }
            }
        }
    }
}
