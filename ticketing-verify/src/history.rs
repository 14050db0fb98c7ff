//! The history: one JSON object per line, appended by each client process
//! (`client-<n>.jsonl`) and by the nemesis (`nemesis.jsonl`). Every
//! timestamp is `CLOCK_MONOTONIC` nanoseconds (`clock::mono_ns`).
//!
//! A counted grant (`S … n`) carries its `n` and `slot`; a multi-key grant
//! (`K`) its `keys` (every key of the ticket, `key` is the first) and `want`
//! (the keys asked for, in the order sent). Those fields are left out of a
//! plain exclusive grant's line, so older histories read the same.
//!
//! An acquire also records, when it knows them, `sent` (the request had been
//! handed to a connection by then), `wait_ms` and `lease_ms` (what it asked
//! for): the FIFO rule of the checker needs them, and leaves out an acquire
//! without them. An acquire that ended Indeterminate is followed by what the
//! client library's release lane found out about it, one event per key:
//! [`Event::IndeterminateHeld`] or [`Event::IndeterminateNotHeld`].

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// One recorded event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Event {
    /// An acquire that returned a ticket.
    Grant {
        /// Client process number.
        client: u32,
        /// The key.
        key: String,
        /// The fencing token.
        token: u64,
        /// When `acquire` was called.
        call: u64,
        /// When it returned (the grant answer, as seen by the caller).
        ans: u64,
        /// The ticket's conservative deadline, never later than the client's own.
        dl: u64,
        /// Multi-key grant: every key the ticket holds (`key` is the first); empty otherwise.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        keys: Vec<String>,
        /// Multi-key grant: the keys asked for, in the order sent; empty otherwise.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        want: Vec<String>,
        /// Counted grant: the `n` asked for (at most `n` counted holders); `None`: exclusive.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        n: Option<u16>,
        /// Counted grant: the slot the server gave (`0..n`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        slot: Option<u16>,
        /// By then the request had certainly been handed to a connection
        /// (the client was ready to route it right after the call); `None`:
        /// unknown (it may have waited in the client for a connection).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sent: Option<u64>,
        /// The `wait` asked for, ms.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait_ms: Option<u64>,
        /// The lease asked for, ms (with `dl`: when the server read the request, at the latest).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lease_ms: Option<u64>,
    },
    /// An acquire that returned anything else.
    Acquire {
        /// Client process number.
        client: u32,
        /// The key (a multi-key request: the first).
        key: String,
        /// When `acquire` was called.
        call: u64,
        /// When it returned.
        ans: u64,
        /// `timeout` (T), or the error's code (`busy`, `indeterminate`, …).
        result: String,
        /// Multi-key request: every key asked for; empty otherwise.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        keys: Vec<String>,
        /// Counted request: its `n`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        n: Option<u16>,
        /// As for [`Event::Grant`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sent: Option<u64>,
        /// The `wait` asked for, ms.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait_ms: Option<u64>,
        /// The lease asked for, ms.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lease_ms: Option<u64>,
    },
    /// An acquire that ended Indeterminate WAS granted: the client library's
    /// release lane asked the leader (`Q`) and it answered `H` with this
    /// token, so the acquire held `key` with `token` at some instant after
    /// `call` and before `at` (then the lane released it, or the grant had
    /// ended by the time it tried).
    IndeterminateHeld {
        /// Client process number.
        client: u32,
        /// The key asked about.
        key: String,
        /// The token `H` named.
        token: u64,
        /// When the acquire was called (the grant was committed after it).
        call: u64,
        /// When the acquire ended Indeterminate.
        ans: u64,
        /// When the client heard the lane's result (after the `H`, and after the lane's release).
        at: u64,
        /// The lane's release answered `R` (held until that release, before `at`).
        released: bool,
        /// Multi-key request: every key asked for (each has its own event); empty otherwise.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        keys: Vec<String>,
        /// Counted request: its `n`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        n: Option<u16>,
    },
    /// An acquire that ended Indeterminate and was not found held: the
    /// lane's `Q` answered `N` (`not_held`: not granted, or its grant had
    /// already ended), or nothing was learnt (`unconfirmed`: no answer within
    /// the lane's 5 s; `unknown`: the client heard nothing in time).
    IndeterminateNotHeld {
        /// Client process number.
        client: u32,
        /// The key asked about.
        key: String,
        /// When the acquire was called.
        call: u64,
        /// When it ended Indeterminate.
        ans: u64,
        /// When the client heard the result (or gave up).
        at: u64,
        /// `not_held`, `unconfirmed` or `unknown`.
        result: String,
        /// Multi-key request: every key asked for; empty otherwise.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        keys: Vec<String>,
        /// Counted request: its `n`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        n: Option<u16>,
    },
    /// A holder about to stop itself (the client-pause nemesis).
    Pause {
        /// Client process number.
        client: u32,
        /// The key.
        key: String,
        /// The token it holds.
        token: u64,
        /// Its conservative deadline.
        dl: u64,
        /// Multi-key grant: every key it holds; empty otherwise.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        keys: Vec<String>,
        /// Counted grant: its slot.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        slot: Option<u16>,
    },
    /// A fenced write attempt: one transaction with the fence update.
    Write {
        /// Client process number.
        client: u32,
        /// The key.
        key: String,
        /// The token it was fenced with.
        token: u64,
        /// When the write was issued (inside the transaction, write lock held).
        issued: u64,
        /// When the commit or rollback returned.
        done: u64,
        /// `accepted` (committed), `refused` (fence: zero rows), `skipped`
        /// (too close to the deadline, nothing written) or `error`.
        result: String,
        /// Multi-key grant: every key written in this ONE transaction (`key`
        /// is the first); empty otherwise.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        keys: Vec<String>,
        /// Counted grant: the slot fenced (`(key, slot)`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        slot: Option<u16>,
    },
    /// A release (of a multi-key ticket: one event, every key released by it).
    Release {
        /// Client process number.
        client: u32,
        /// The key (a multi-key ticket: its first).
        key: String,
        /// The token released.
        token: u64,
        /// When `release` was called (the holder stopped using the lock).
        start: u64,
        /// When it returned.
        end: u64,
        /// `released`, `not_held`, or the error's code.
        result: String,
    },
    /// A fault of the nemesis.
    Fault {
        /// Its name (`kill-leader`, `partition-leader`, …).
        name: String,
        /// Nodes in the cluster of this fault.
        nodes: u32,
        /// When it started.
        start: u64,
        /// When it healed (the cluster must grant again within the bound from here).
        heal: u64,
        /// What it did, for the log.
        detail: String,
    },
}

impl Event {
    /// The client that recorded it, if any.
    pub fn client(&self) -> Option<u32> {
        match self {
            Event::Grant { client, .. }
            | Event::Acquire { client, .. }
            | Event::Pause { client, .. }
            | Event::Write { client, .. }
            | Event::Release { client, .. }
            | Event::IndeterminateHeld { client, .. }
            | Event::IndeterminateNotHeld { client, .. } => Some(*client),
            Event::Fault { .. } => None,
        }
    }
}

/// The keys of an event with `key` and `keys`: `keys` when given, else `key` alone.
pub fn keys_of<'a>(key: &'a str, keys: &'a [String]) -> Vec<&'a str> {
    if keys.is_empty() {
        vec![key]
    } else {
        keys.iter().map(String::as_str).collect()
    }
}

/// Appends events to one file, one line each, flushed per event (a
/// process may be killed at any time; what it wrote stays).
pub struct Recorder {
    file: File,
}

impl Recorder {
    /// Creates (or appends to) `path`.
    pub fn open(path: &Path) -> anyhow::Result<Recorder> {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Recorder { file })
    }

    /// Writes one event.
    pub fn record(&mut self, e: &Event) -> anyhow::Result<()> {
        let mut line = serde_json::to_vec(e)?;
        line.push(b'\n');
        self.file.write_all(&line)?;
        Ok(())
    }
}

/// Reads every `*.jsonl` file of `dir`. A torn last line (a killed writer)
/// is skipped; any other malformed line is an error.
pub fn load(dir: &Path) -> anyhow::Result<Vec<Event>> {
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    for f in files {
        let lines: Vec<String> = BufReader::new(File::open(&f)?).lines().collect::<Result<_, _>>()?;
        let n = lines.len();
        for (i, line) in lines.into_iter().enumerate() {
            match serde_json::from_str::<Event>(&line) {
                Ok(e) => out.push(e),
                Err(_) if i + 1 == n => {}
                Err(e) => anyhow::bail!("{}: line {}: {e}", f.display(), i + 1),
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_and_a_torn_tail_is_skipped() {
        let dir = std::env::temp_dir().join(format!("tv-hist-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("client-1.jsonl");
        let _ = std::fs::remove_file(&p);
        let e = Event::Grant {
            client: 1,
            key: "k".into(),
            token: 5,
            call: 1,
            ans: 2,
            dl: 3,
            keys: vec![],
            want: vec![],
            n: None,
            slot: None,
            sent: None,
            wait_ms: None,
            lease_ms: None,
        };
        let mut r = Recorder::open(&p).unwrap();
        r.record(&e).unwrap();
        // An exclusive grant's line has none of the counted or multi-key fields.
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"ev":"grant","client":1,"key":"k","token":5,"call":1,"ans":2,"dl":3}"#
        );
        let counted = Event::Grant {
            client: 2,
            key: "k".into(),
            token: 6,
            call: 3,
            ans: 4,
            dl: 5,
            keys: vec![],
            want: vec![],
            n: Some(3),
            slot: Some(1),
            sent: Some(3),
            wait_ms: Some(4000),
            lease_ms: Some(3000),
        };
        let basket = Event::Grant {
            client: 3,
            key: "a".into(),
            token: 7,
            call: 3,
            ans: 4,
            dl: 5,
            keys: vec!["a".into(), "b".into()],
            want: vec!["b".into(), "a".into()],
            n: None,
            slot: None,
            sent: None,
            wait_ms: None,
            lease_ms: None,
        };
        let held = Event::IndeterminateHeld {
            client: 4,
            key: "a".into(),
            token: 8,
            call: 1,
            ans: 2,
            at: 3,
            released: true,
            keys: vec!["a".into(), "b".into()],
            n: None,
        };
        let not_held = Event::IndeterminateNotHeld {
            client: 4,
            key: "b".into(),
            call: 1,
            ans: 2,
            at: 3,
            result: "not_held".into(),
            keys: vec!["a".into(), "b".into()],
            n: None,
        };
        r.record(&counted).unwrap();
        r.record(&basket).unwrap();
        r.record(&held).unwrap();
        r.record(&not_held).unwrap();
        assert_eq!(
            serde_json::to_string(&held).unwrap(),
            r#"{"ev":"indeterminate_held","client":4,"key":"a","token":8,"call":1,"ans":2,"at":3,"released":true,"keys":["a","b"]}"#
        );
        std::fs::OpenOptions::new().append(true).open(&p).unwrap().write_all(b"{\"ev\":\"gra").unwrap();
        assert_eq!(load(&dir).unwrap(), vec![e, counted, basket, held, not_held]);
        std::fs::write(dir.join("bad.jsonl"), "nonsense\n{}\n").unwrap();
        assert!(load(&dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
