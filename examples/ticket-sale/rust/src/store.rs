//! The seller's database side: read the stock, and the fenced sale in ONE
//! transaction, for SQLite (rusqlite) and PostgreSQL (postgres): one seat
//! under the event's lock, a basket of seats under the locks of every seat
//! (fenced per seat), or a seat of a window under a permit of the event's
//! semaphore (fenced per slot).

use rusqlite::{params, TransactionBehavior};

pub enum Store {
    Sqlite(rusqlite::Connection),
    Postgres(Box<postgres::Client>),
}

/// Tokens are below 2^63, so they fit the databases' signed 64-bit integers.
fn sql_token(token: u64) -> Result<i64, String> {
    i64::try_from(token).map_err(|_| format!("token {token} does not fit a signed 64-bit column"))
}

/// The lock key (and fence key) of one seat of `event` in basket mode.
pub fn seat_key(event: &str, seat: i64) -> String {
    format!("{event}/{seat}")
}

/// The fence key of slot `slot` of the semaphore on `event` (general
/// admission): one high-water mark per (key, slot).
pub fn slot_fence_key(event: &str, slot: u16) -> String {
    format!("{event}#{slot}")
}

/// `seats` as an SQL list (integers only, so no quoting is needed).
fn sql_list(seats: &[i64]) -> String {
    seats.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}

/// The fence in an open SQLite transaction: `Ok(false)` if `token` is stale.
fn fence_sqlite(tx: &rusqlite::Transaction<'_>, key: &str, token: i64) -> rusqlite::Result<bool> {
    tx.execute("INSERT OR IGNORE INTO fence (key, high_water) VALUES (?1, 0)", [key])?;
    let n = tx.execute("UPDATE fence SET high_water = ?1 WHERE key = ?2 AND high_water < ?1", params![token, key])?;
    Ok(n == 1)
}

/// The fence in an open PostgreSQL transaction: `Ok(false)` if `token` is stale.
fn fence_pg(tx: &mut postgres::Transaction<'_>, key: &str, token: i64) -> Result<bool, postgres::Error> {
    tx.execute("INSERT INTO fence (key, high_water) VALUES ($1, 0) ON CONFLICT (key) DO NOTHING", &[&key])?;
    // READ COMMITTED re-checks `high_water < $1` on the latest row version
    // after waiting for a concurrent writer.
    let n = tx.execute("UPDATE fence SET high_water = $1 WHERE key = $2 AND high_water < $1", &[&token, &key])?;
    Ok(n == 1)
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

    /// The seats of `event` without a sale row (basket mode), ascending.
    pub fn unsold_seats(&mut self, event: &str) -> Result<Vec<i64>, String> {
        let (_, seats) = self.read_stock(event)?;
        let sold: std::collections::HashSet<i64> = match self {
            Store::Sqlite(db) => {
                let mut st =
                    db.prepare("SELECT DISTINCT seat FROM sales WHERE event = ?1").map_err(|e| e.to_string())?;
                let rows = st.query_map([event], |r| r.get::<_, i64>(0)).map_err(|e| e.to_string())?;
                rows.collect::<Result<_, _>>().map_err(|e| e.to_string())?
            }
            Store::Postgres(c) => c
                .query("SELECT DISTINCT seat FROM sales WHERE event = $1", &[&event])
                .map_err(|e| e.to_string())?
                .iter()
                .map(|r| i64::from(r.get::<_, i32>(0)))
                .collect(),
        };
        Ok((1..=seats).filter(|s| !sold.contains(s)).collect())
    }

    /// How many of `seats` of `event` have a sale row.
    pub fn sold_among(&mut self, event: &str, seats: &[i64]) -> Result<i64, String> {
        let q = format!("SELECT count(*) FROM sales WHERE event = $1 AND seat IN ({})", sql_list(seats));
        match self {
            Store::Sqlite(db) => {
                db.query_row(&q.replace("$1", "?1"), [event], |r| r.get::<_, i64>(0)).map_err(|e| e.to_string())
            }
            Store::Postgres(c) => c.query_one(&q, &[&event]).map(|r| r.get::<_, i64>(0)).map_err(|e| e.to_string()),
        }
    }

    /// `(remaining, seats)` of window `slot` of `event` (general admission).
    pub fn read_window(&mut self, event: &str, slot: u16) -> Result<(i64, i64), String> {
        let slot = i32::from(slot);
        match self {
            Store::Sqlite(db) => db
                .query_row(
                    "SELECT remaining, seats FROM windows WHERE event = ?1 AND slot = ?2",
                    params![event, slot],
                    |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
                )
                .map_err(|e| e.to_string()),
            Store::Postgres(c) => {
                let row = c
                    .query_one("SELECT remaining, seats FROM windows WHERE event = $1 AND slot = $2", &[&event, &slot])
                    .map_err(|e| e.to_string())?;
                Ok((i64::from(row.get::<_, i32>(0)), i64::from(row.get::<_, i32>(1))))
            }
        }
    }

    /// Basket mode: records the sale of every seat of `seats` and takes
    /// them off the stock, in ONE transaction with the fence of every seat
    /// (`seat_key`). `Ok(false)`: the token is stale for at least one seat
    /// (a newer holder of it already wrote); nothing was written.
    pub fn sell_basket(
        &mut self,
        event: &str,
        token: u64,
        seats: &[i64],
        seller: &str,
        fence: bool,
    ) -> Result<bool, String> {
        let token = sql_token(token)?;
        let err = |e: &dyn std::fmt::Display| e.to_string();
        // One order for every writer, so two transactions never wait on each other's fence rows.
        let mut seats = seats.to_vec();
        seats.sort_unstable();
        let k = i32::try_from(seats.len()).map_err(|e| err(&e))?;
        match self {
            Store::Sqlite(db) => {
                let tx = db.transaction_with_behavior(TransactionBehavior::Immediate).map_err(|e| err(&e))?;
                if fence {
                    for &seat in &seats {
                        if !fence_sqlite(&tx, &seat_key(event, seat), token).map_err(|e| err(&e))? {
                            tx.rollback().map_err(|e| err(&e))?;
                            return Ok(false);
                        }
                    }
                }
                for &seat in &seats {
                    tx.execute(
                        "INSERT INTO sales (event, seat, token, seller) VALUES (?1, ?2, ?3, ?4)",
                        params![event, seat, token, seller],
                    )
                    .map_err(|e| err(&e))?;
                }
                // Baskets of different seats are sold at the same time: the
                // stock is decremented in the database, not written from a read.
                tx.execute("UPDATE stock SET remaining = remaining - ?1 WHERE event = ?2", params![k, event])
                    .map_err(|e| err(&e))?;
                tx.commit().map_err(|e| err(&e))?;
                Ok(true)
            }
            Store::Postgres(c) => {
                let mut tx = c.transaction().map_err(|e| err(&e))?;
                if fence {
                    for &seat in &seats {
                        if !fence_pg(&mut tx, &seat_key(event, seat), token).map_err(|e| err(&e))? {
                            tx.rollback().map_err(|e| err(&e))?;
                            return Ok(false);
                        }
                    }
                }
                for &seat in &seats {
                    let seat = i32::try_from(seat).map_err(|e| err(&e))?;
                    tx.execute(
                        "INSERT INTO sales (event, seat, token, seller) VALUES ($1, $2, $3, $4)",
                        &[&event, &seat, &token, &seller],
                    )
                    .map_err(|e| err(&e))?;
                }
                tx.execute("UPDATE stock SET remaining = remaining - $1 WHERE event = $2", &[&k, &event])
                    .map_err(|e| err(&e))?;
                tx.commit().map_err(|e| err(&e))?;
                Ok(true)
            }
        }
    }

    /// General admission: records the sale of `seat` from window `slot`,
    /// sets the window's count to `window_remaining - 1` and takes the seat
    /// off the event's stock, in ONE transaction with the fence of (event,
    /// slot) (`slot_fence_key`). `Ok(false)`: the token is stale for the
    /// slot; nothing was written.
    #[allow(clippy::too_many_arguments)]
    pub fn sell_general(
        &mut self,
        event: &str,
        slot: u16,
        token: u64,
        seat: i64,
        window_remaining: i64,
        seller: &str,
        fence: bool,
    ) -> Result<bool, String> {
        let token = sql_token(token)?;
        let err = |e: &dyn std::fmt::Display| e.to_string();
        let fence_key = slot_fence_key(event, slot);
        let slot = i32::from(slot);
        match self {
            Store::Sqlite(db) => {
                let tx = db.transaction_with_behavior(TransactionBehavior::Immediate).map_err(|e| err(&e))?;
                if fence && !fence_sqlite(&tx, &fence_key, token).map_err(|e| err(&e))? {
                    tx.rollback().map_err(|e| err(&e))?;
                    return Ok(false);
                }
                tx.execute(
                    "INSERT INTO sales (event, seat, token, seller) VALUES (?1, ?2, ?3, ?4)",
                    params![event, seat, token, seller],
                )
                .map_err(|e| err(&e))?;
                // The window's count: written from what was read under the
                // permit of this slot (only the fence guards it).
                tx.execute(
                    "UPDATE windows SET remaining = ?1 WHERE event = ?2 AND slot = ?3",
                    params![window_remaining - 1, event, slot],
                )
                .map_err(|e| err(&e))?;
                // The event's stock: other windows sell at the same time.
                tx.execute("UPDATE stock SET remaining = remaining - 1 WHERE event = ?1", [event])
                    .map_err(|e| err(&e))?;
                tx.commit().map_err(|e| err(&e))?;
                Ok(true)
            }
            Store::Postgres(c) => {
                let seat = i32::try_from(seat).map_err(|e| err(&e))?;
                let left = i32::try_from(window_remaining - 1).map_err(|e| err(&e))?;
                let mut tx = c.transaction().map_err(|e| err(&e))?;
                if fence && !fence_pg(&mut tx, &fence_key, token).map_err(|e| err(&e))? {
                    tx.rollback().map_err(|e| err(&e))?;
                    return Ok(false);
                }
                tx.execute(
                    "INSERT INTO sales (event, seat, token, seller) VALUES ($1, $2, $3, $4)",
                    &[&event, &seat, &token, &seller],
                )
                .map_err(|e| err(&e))?;
                tx.execute("UPDATE windows SET remaining = $1 WHERE event = $2 AND slot = $3", &[&left, &event, &slot])
                    .map_err(|e| err(&e))?;
                tx.execute("UPDATE stock SET remaining = remaining - 1 WHERE event = $1", &[&event])
                    .map_err(|e| err(&e))?;
                tx.commit().map_err(|e| err(&e))?;
                Ok(true)
            }
        }
    }
}
