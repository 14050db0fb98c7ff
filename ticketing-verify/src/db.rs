//! The protected resource: a per-key counter in SQLite (one file, WAL) or
//! PostgreSQL, written with the fence recipe of docs/protocol.md §6 in ONE
//! transaction with the business write:
//! `UPDATE fence SET high_water = :token WHERE key = :key AND high_water < :token`,
//! zero rows → stale → roll back.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{params, Connection, TransactionBehavior};

use crate::clock::mono_ns;

/// Where the counter lives: a SQLite file, or a PostgreSQL database given by
/// URL (the run owns its tables `fence`, `counter` and `writes`: they are
/// dropped and created again at the start of each run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A SQLite file (WAL).
    Sqlite(PathBuf),
    /// A `postgres://` or `postgresql://` URL.
    Postgres(String),
}

impl Target {
    /// A URL with a PostgreSQL scheme, else a SQLite file path.
    pub fn parse(s: &str) -> Target {
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            Target::Postgres(s.to_owned())
        } else {
            Target::Sqlite(PathBuf::from(s))
        }
    }

    /// The form [`Target::parse`] reads back (for a client process's `--db`).
    pub fn arg(&self) -> std::ffi::OsString {
        match self {
            Target::Sqlite(p) => p.clone().into_os_string(),
            Target::Postgres(url) => url.into(),
        }
    }
}

/// An open connection to the counter's database.
pub enum Conn {
    /// SQLite.
    Sqlite(Connection),
    /// PostgreSQL (the synchronous client: never call it on async threads).
    Postgres(Box<postgres::Client>),
}

fn open_sqlite(path: &Path) -> anyhow::Result<Connection> {
    let c = Connection::open(path)?;
    c.busy_timeout(Duration::from_secs(10))?;
    c.pragma_update(None, "journal_mode", "WAL")?;
    c.pragma_update(None, "synchronous", "NORMAL")?;
    Ok(c)
}

/// Opens the database of a run (SQLite: WAL, waits up to 10 s for the write lock).
pub fn open(t: &Target) -> anyhow::Result<Conn> {
    Ok(match t {
        Target::Sqlite(p) => Conn::Sqlite(open_sqlite(p)?),
        Target::Postgres(url) => {
            let mut c = postgres::Client::connect(url, postgres::NoTls)?;
            c.batch_execute("SET lock_timeout = '10s'")?;
            Conn::Postgres(Box::new(c))
        }
    })
}

/// Creates the schema: the fence, the counter and the log of accepted writes.
pub fn init(t: &Target, keys: &[String]) -> anyhow::Result<()> {
    match open(t)? {
        Conn::Sqlite(c) => {
            c.execute_batch(
                "CREATE TABLE IF NOT EXISTS fence (key TEXT PRIMARY KEY, high_water INTEGER NOT NULL);
                 CREATE TABLE IF NOT EXISTS counter (key TEXT PRIMARY KEY, n INTEGER NOT NULL);
                 CREATE TABLE IF NOT EXISTS writes (seq INTEGER PRIMARY KEY AUTOINCREMENT,
                     key TEXT NOT NULL, token INTEGER NOT NULL, client INTEGER NOT NULL);",
            )?;
            for k in keys {
                c.execute("INSERT OR IGNORE INTO counter (key, n) VALUES (?1, 0)", params![k])?;
            }
        }
        Conn::Postgres(mut c) => {
            c.batch_execute(
                "DROP TABLE IF EXISTS fence, counter, writes;
                 CREATE TABLE fence (key TEXT PRIMARY KEY, high_water BIGINT NOT NULL);
                 CREATE TABLE counter (key TEXT PRIMARY KEY, n BIGINT NOT NULL);
                 CREATE TABLE writes (seq BIGSERIAL PRIMARY KEY,
                     key TEXT NOT NULL, token BIGINT NOT NULL, client INTEGER NOT NULL);",
            )?;
            for k in keys {
                c.execute("INSERT INTO counter (key, n) VALUES ($1, 0)", &[k])?;
            }
        }
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

impl Conn {
    /// One transaction: take the write lock (SQLite: the database's,
    /// `BEGIN IMMEDIATE`; PostgreSQL: the key's fence row, `FOR UPDATE`),
    /// note the time (`issued`), ask `proceed(issued)`, then fence and
    /// increment. Returns `(issued, result)`.
    pub fn fenced_write(
        &mut self,
        key: &str,
        token: u64,
        client: u32,
        proceed: impl FnOnce(u64) -> bool,
    ) -> anyhow::Result<(u64, WriteResult)> {
        let token = i64::try_from(token)?;
        match self {
            Conn::Sqlite(c) => {
                let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let issued = mono_ns();
                if !proceed(issued) {
                    tx.rollback()?;
                    return Ok((issued, WriteResult::Skipped));
                }
                tx.execute("INSERT OR IGNORE INTO fence (key, high_water) VALUES (?1, 0)", params![key])?;
                let fenced = tx.execute(
                    "UPDATE fence SET high_water = ?1 WHERE key = ?2 AND high_water < ?1",
                    params![token, key],
                )?;
                if fenced == 0 {
                    tx.rollback()?;
                    return Ok((issued, WriteResult::Refused));
                }
                tx.execute("UPDATE counter SET n = n + 1 WHERE key = ?1", params![key])?;
                tx.execute("INSERT INTO writes (key, token, client) VALUES (?1, ?2, ?3)", params![key, token, client])?;
                tx.commit()?;
                Ok((issued, WriteResult::Accepted))
            }
            Conn::Postgres(c) => {
                let mut tx = c.transaction()?;
                tx.execute("INSERT INTO fence (key, high_water) VALUES ($1, 0) ON CONFLICT DO NOTHING", &[&key])?;
                tx.query_one("SELECT high_water FROM fence WHERE key = $1 FOR UPDATE", &[&key])?;
                let issued = mono_ns();
                if !proceed(issued) {
                    tx.rollback()?;
                    return Ok((issued, WriteResult::Skipped));
                }
                let fenced =
                    tx.execute("UPDATE fence SET high_water = $1 WHERE key = $2 AND high_water < $1", &[&token, &key])?;
                if fenced == 0 {
                    tx.rollback()?;
                    return Ok((issued, WriteResult::Refused));
                }
                tx.execute("UPDATE counter SET n = n + 1 WHERE key = $1", &[&key])?;
                let client = i32::try_from(client)?;
                tx.execute("INSERT INTO writes (key, token, client) VALUES ($1, $2, $3)", &[&key, &token, &client])?;
                tx.commit()?;
                Ok((issued, WriteResult::Accepted))
            }
        }
    }

    /// The fence's high water of `key` (0 without a row).
    pub fn high_water(&mut self, key: &str) -> anyhow::Result<u64> {
        let v: Option<i64> = match self {
            Conn::Sqlite(c) => c
                .query_row("SELECT high_water FROM fence WHERE key = ?1", params![key], |r| r.get(0))
                .or_else(
                |e| if e == rusqlite::Error::QueryReturnedNoRows { Ok(None) } else { Err(e) },
            )?,
            Conn::Postgres(c) => c.query_opt("SELECT high_water FROM fence WHERE key = $1", &[&key])?.map(|r| r.get(0)),
        };
        Ok(v.unwrap_or(0) as u64)
    }

    /// The sum of all counters (progress, read by the nemesis).
    pub fn total(&mut self) -> anyhow::Result<u64> {
        let v: i64 = match self {
            Conn::Sqlite(c) => c.query_row("SELECT COALESCE(SUM(n), 0) FROM counter", [], |r| r.get(0))?,
            Conn::Postgres(c) => c.query_one("SELECT COALESCE(SUM(n), 0)::BIGINT FROM counter", &[])?.get(0),
        };
        Ok(v as u64)
    }
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
pub fn read_final(t: &Target) -> anyhow::Result<Final> {
    let mut f = Final::default();
    match open(t)? {
        Conn::Sqlite(c) => {
            let mut s = c.prepare("SELECT key, n FROM counter ORDER BY key")?;
            for r in s.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64)))? {
                f.counters.push(r?);
            }
            let mut s = c.prepare("SELECT key, token, client FROM writes ORDER BY seq")?;
            for r in s.query_map([], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64, r.get::<_, i64>(2)? as u32))
            })? {
                f.writes.push(r?);
            }
        }
        Conn::Postgres(mut c) => {
            for r in c.query("SELECT key, n FROM counter ORDER BY key", &[])? {
                f.counters.push((r.get(0), r.get::<_, i64>(1) as u64));
            }
            for r in c.query("SELECT key, token, client FROM writes ORDER BY seq", &[])? {
                f.writes.push((r.get(0), r.get::<_, i64>(1) as u64, r.get::<_, i32>(2) as u32));
            }
        }
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fence's contract on `t`: accepted above the high water, refused at
    /// or below it, skipped when `proceed` says no; the counter and the
    /// writes log follow.
    pub(crate) fn check_fence(t: &Target) {
        init(t, &["k".to_owned()]).unwrap();
        let mut c = open(t).unwrap();
        assert_eq!(c.fenced_write("k", 10, 1, |_| true).unwrap().1, WriteResult::Accepted);
        assert_eq!(c.fenced_write("k", 10, 2, |_| true).unwrap().1, WriteResult::Refused);
        assert_eq!(c.fenced_write("k", 9, 2, |_| true).unwrap().1, WriteResult::Refused);
        assert_eq!(c.fenced_write("k", 11, 2, |_| false).unwrap().1, WriteResult::Skipped);
        assert_eq!(c.fenced_write("k", 12, 2, |_| true).unwrap().1, WriteResult::Accepted);
        assert_eq!(c.high_water("k").unwrap(), 12);
        assert_eq!(c.high_water("other").unwrap(), 0);
        assert_eq!(c.total().unwrap(), 2);
        let f = read_final(t).unwrap();
        assert_eq!(f.counters, vec![("k".to_owned(), 2)]);
        assert_eq!(f.writes, vec![("k".to_owned(), 10, 1), ("k".to_owned(), 12, 2)]);
    }

    #[test]
    fn the_fence_refuses_a_token_not_above_the_high_water() {
        let dir = std::env::temp_dir().join(format!("tv-db-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("db.sqlite");
        let _ = std::fs::remove_file(&p);
        check_fence(&Target::Sqlite(p));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The same on PostgreSQL at `TICKETING_VERIFY_PG_URL`: ignored (so
    /// counted as skipped, never as passed) unless run with
    /// `--include-ignored`, as ticketing-verify/run-tests.sh does once it has
    /// started a throw-away database; without the URL it then fails.
    #[test]
    #[ignore = "needs PostgreSQL: TICKETING_VERIFY_PG_URL and --include-ignored (ticketing-verify/run-tests.sh)"]
    fn the_fence_refuses_a_token_not_above_the_high_water_on_postgres() {
        let url =
            std::env::var("TICKETING_VERIFY_PG_URL").expect("TICKETING_VERIFY_PG_URL names a PostgreSQL database");
        check_fence(&Target::parse(&url));
    }

    #[test]
    fn a_postgres_url_is_postgres_and_anything_else_a_sqlite_file() {
        assert!(matches!(Target::parse("postgres://u@127.0.0.1:5/db"), Target::Postgres(_)));
        assert!(matches!(Target::parse("postgresql://u@h/db"), Target::Postgres(_)));
        assert_eq!(Target::parse("x/counter.sqlite"), Target::Sqlite(PathBuf::from("x/counter.sqlite")));
        assert_eq!(
            Target::parse(&Target::parse("postgres://h/d").arg().into_string().unwrap()),
            Target::Postgres("postgres://h/d".into())
        );
    }
}
