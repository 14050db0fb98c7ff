//! The protected resource: a per-key counter in SQLite (one file, WAL),
//! written with the fence recipe of docs/protocol.md §6 in ONE transaction
//! with the business write:
//! `UPDATE fence SET high_water = :token WHERE key = :key AND high_water < :token`,
//! zero rows → stale → roll back.

use std::path::Path;
use std::time::Duration;

use rusqlite::{params, Connection, TransactionBehavior};

use crate::clock::mono_ns;

/// Opens the database of a run (WAL, waits up to 10 s for the write lock).
pub fn open(path: &Path) -> anyhow::Result<Connection> {
    let c = Connection::open(path)?;
    c.busy_timeout(Duration::from_secs(10))?;
    c.pragma_update(None, "journal_mode", "WAL")?;
    c.pragma_update(None, "synchronous", "NORMAL")?;
    Ok(c)
}

/// Creates the schema: the fence, the counter and the log of accepted writes.
pub fn init(path: &Path, keys: &[String]) -> anyhow::Result<()> {
    let c = open(path)?;
    c.execute_batch(
        "CREATE TABLE IF NOT EXISTS fence (key TEXT PRIMARY KEY, high_water INTEGER NOT NULL);
         CREATE TABLE IF NOT EXISTS counter (key TEXT PRIMARY KEY, n INTEGER NOT NULL);
         CREATE TABLE IF NOT EXISTS writes (seq INTEGER PRIMARY KEY AUTOINCREMENT,
             key TEXT NOT NULL, token INTEGER NOT NULL, client INTEGER NOT NULL);",
    )?;
    for k in keys {
        c.execute("INSERT OR IGNORE INTO counter (key, n) VALUES (?1, 0)", params![k])?;
    }
    Ok(())
}

/// The outcome of one fenced write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteResult {
    /// Committed: the fence moved to the token and the counter was incremented.
    Accepted,
    /// The fence refused the token (zero rows): rolled back.
    Refused,
    /// `proceed` said no (too close to the deadline): nothing written.
    Skipped,
}

impl WriteResult {
    /// The name used in the history.
    pub fn name(self) -> &'static str {
        match self {
            WriteResult::Accepted => "accepted",
            WriteResult::Refused => "refused",
            WriteResult::Skipped => "skipped",
        }
    }
}

/// One transaction: take the write lock, note the time (`issued`), ask
/// `proceed(issued)`, then fence and increment. Returns `(issued, result)`.
pub fn fenced_write(
    c: &mut Connection,
    key: &str,
    token: u64,
    client: u32,
    proceed: impl FnOnce(u64) -> bool,
) -> anyhow::Result<(u64, WriteResult)> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let issued = mono_ns();
    if !proceed(issued) {
        tx.rollback()?;
        return Ok((issued, WriteResult::Skipped));
    }
    let token = i64::try_from(token)?;
    tx.execute("INSERT OR IGNORE INTO fence (key, high_water) VALUES (?1, 0)", params![key])?;
    let fenced =
        tx.execute("UPDATE fence SET high_water = ?1 WHERE key = ?2 AND high_water < ?1", params![token, key])?;
    if fenced == 0 {
        tx.rollback()?;
        return Ok((issued, WriteResult::Refused));
    }
    tx.execute("UPDATE counter SET n = n + 1 WHERE key = ?1", params![key])?;
    tx.execute("INSERT INTO writes (key, token, client) VALUES (?1, ?2, ?3)", params![key, token, client])?;
    tx.commit()?;
    Ok((issued, WriteResult::Accepted))
}

/// The fence's high water of `key` (0 without a row).
pub fn high_water(c: &Connection, key: &str) -> anyhow::Result<u64> {
    let v: Option<i64> = c
        .query_row("SELECT high_water FROM fence WHERE key = ?1", params![key], |r| r.get(0))
        .or_else(|e| if e == rusqlite::Error::QueryReturnedNoRows { Ok(None) } else { Err(e) })?;
    Ok(v.unwrap_or(0) as u64)
}

/// The sum of all counters (progress, read by the nemesis).
pub fn total(c: &Connection) -> anyhow::Result<u64> {
    let v: i64 = c.query_row("SELECT COALESCE(SUM(n), 0) FROM counter", [], |r| r.get(0))?;
    Ok(v as u64)
}

/// What the database holds at the end, for the checker.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Final {
    /// Counter per key.
    pub counters: Vec<(String, u64)>,
    /// Accepted writes in commit order: (key, token, client).
    pub writes: Vec<(String, u64, u32)>,
}

/// Reads the final state.
pub fn read_final(path: &Path) -> anyhow::Result<Final> {
    let c = open(path)?;
    let mut f = Final::default();
    let mut s = c.prepare("SELECT key, n FROM counter ORDER BY key")?;
    for r in s.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64)))? {
        f.counters.push(r?);
    }
    let mut s = c.prepare("SELECT key, token, client FROM writes ORDER BY seq")?;
    for r in
        s.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64, r.get::<_, i64>(2)? as u32)))?
    {
        f.writes.push(r?);
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fence_refuses_a_token_not_above_the_high_water() {
        let dir = std::env::temp_dir().join(format!("tv-db-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("db.sqlite");
        let _ = std::fs::remove_file(&p);
        init(&p, &["k".to_owned()]).unwrap();
        let mut c = open(&p).unwrap();
        assert_eq!(fenced_write(&mut c, "k", 10, 1, |_| true).unwrap().1, WriteResult::Accepted);
        assert_eq!(fenced_write(&mut c, "k", 10, 2, |_| true).unwrap().1, WriteResult::Refused);
        assert_eq!(fenced_write(&mut c, "k", 9, 2, |_| true).unwrap().1, WriteResult::Refused);
        assert_eq!(fenced_write(&mut c, "k", 11, 2, |_| false).unwrap().1, WriteResult::Skipped);
        assert_eq!(fenced_write(&mut c, "k", 12, 2, |_| true).unwrap().1, WriteResult::Accepted);
        assert_eq!(high_water(&c, "k").unwrap(), 12);
        assert_eq!(high_water(&c, "other").unwrap(), 0);
        let f = read_final(&p).unwrap();
        assert_eq!(f.counters, vec![("k".to_owned(), 2)]);
        assert_eq!(f.writes, vec![("k".to_owned(), 10, 1), ("k".to_owned(), 12, 2)]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
