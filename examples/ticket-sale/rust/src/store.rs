//! The seller's database side: read the stock, and the fenced sale in ONE
//! transaction, for SQLite (rusqlite) and PostgreSQL (postgres).

use rusqlite::{params, TransactionBehavior};

pub enum Store {
    Sqlite(rusqlite::Connection),
    Postgres(Box<postgres::Client>),
}

/// Tokens are below 2^63, so they fit the databases' signed 64-bit integers.
fn sql_token(token: u64) -> Result<i64, String> {
    i64::try_from(token).map_err(|_| format!("token {token} does not fit a signed 64-bit column"))
}

impl Store {
    /// `postgres://…` / `postgresql://…`, else `sqlite://PATH`, `sqlite:PATH` or a plain path.
    pub fn open(url: &str) -> Result<Store, String> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let client = postgres::Client::connect(url, postgres::NoTls).map_err(|e| e.to_string())?;
            return Ok(Store::Postgres(Box::new(client)));
        }
        let path = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:")).unwrap_or(url);
        let db = rusqlite::Connection::open(path).map_err(|e| e.to_string())?;
        db.busy_timeout(std::time::Duration::from_secs(30)).map_err(|e| e.to_string())?;
        Ok(Store::Sqlite(db))
    }

    /// `(remaining, seats)` of the event.
    pub fn read_stock(&mut self, event: &str) -> Result<(i64, i64), String> {
        match self {
            Store::Sqlite(db) => db
                .query_row("SELECT remaining, seats FROM stock WHERE event = ?1", [event], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
                })
                .map_err(|e| e.to_string()),
            Store::Postgres(c) => {
                let row = c
                    .query_one("SELECT remaining, seats FROM stock WHERE event = $1", &[&event])
                    .map_err(|e| e.to_string())?;
                Ok((i64::from(row.get::<_, i32>(0)), i64::from(row.get::<_, i32>(1))))
            }
        }
    }

    /// Records the sale of `seat` and sets the stock to `remaining - 1`, in
    /// ONE transaction with the fence. `Ok(false)`: the token is stale (a
    /// newer holder already wrote); nothing was written.
    pub fn sell(
        &mut self,
        event: &str,
        token: u64,
        seat: i64,
        remaining: i64,
        seller: &str,
        fence: bool,
    ) -> Result<bool, String> {
        let token = sql_token(token)?;
        let err = |e: &dyn std::fmt::Display| e.to_string();
        match self {
            Store::Sqlite(db) => {
                // IMMEDIATE: take SQLite's write lock now, so the fence check
                // and the writes see one state and commit together.
                let tx = db.transaction_with_behavior(TransactionBehavior::Immediate).map_err(|e| err(&e))?;
                if fence {
                    tx.execute("INSERT OR IGNORE INTO fence (key, high_water) VALUES (?1, 0)", [event])
                        .map_err(|e| err(&e))?;
                    let n = tx
                        .execute(
                            "UPDATE fence SET high_water = ?1 WHERE key = ?2 AND high_water < ?1",
                            params![token, event],
                        )
                        .map_err(|e| err(&e))?;
                    if n == 0 {
                        tx.rollback().map_err(|e| err(&e))?;
                        return Ok(false);
                    }
                }
                tx.execute(
                    "INSERT INTO sales (event, seat, token, seller) VALUES (?1, ?2, ?3, ?4)",
                    params![event, seat, token, seller],
                )
                .map_err(|e| err(&e))?;
                tx.execute("UPDATE stock SET remaining = ?1 WHERE event = ?2", params![remaining - 1, event])
                    .map_err(|e| err(&e))?;
                tx.commit().map_err(|e| err(&e))?;
                Ok(true)
            }
            Store::Postgres(c) => {
                let seat = i32::try_from(seat).map_err(|e| err(&e))?;
                let left = i32::try_from(remaining - 1).map_err(|e| err(&e))?;
                // Dropping `tx` without commit rolls back.
                let mut tx = c.transaction().map_err(|e| err(&e))?;
                if fence {
                    tx.execute(
                        "INSERT INTO fence (key, high_water) VALUES ($1, 0) ON CONFLICT (key) DO NOTHING",
                        &[&event],
                    )
                    .map_err(|e| err(&e))?;
                    // READ COMMITTED re-checks `high_water < $1` on the latest
                    // row version after waiting for a concurrent writer.
                    let n = tx
                        .execute(
                            "UPDATE fence SET high_water = $1 WHERE key = $2 AND high_water < $1",
                            &[&token, &event],
                        )
                        .map_err(|e| err(&e))?;
                    if n == 0 {
                        tx.rollback().map_err(|e| err(&e))?;
                        return Ok(false);
                    }
                }
                tx.execute(
                    "INSERT INTO sales (event, seat, token, seller) VALUES ($1, $2, $3, $4)",
                    &[&event, &seat, &token, &seller],
                )
                .map_err(|e| err(&e))?;
                tx.execute("UPDATE stock SET remaining = $1 WHERE event = $2", &[&left, &event])
                    .map_err(|e| err(&e))?;
                tx.commit().map_err(|e| err(&e))?;
                Ok(true)
            }
        }
    }
}
