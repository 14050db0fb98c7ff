"""A ticket seller in Python: sells seats of one event until none is left.

Each sale: take the lock on the event key, read the stock, then in ONE
database transaction guarded by the fence (docs/fencing.md) record the seat
and decrement the stock; commit; release. Run by ``examples/ticket-sale/demo``;
the arguments are described in ``examples/README.md``. Checked with
``mypy --strict``.
"""

from __future__ import annotations

import argparse
import importlib
import random
import sqlite3
import sys
import time
from typing import Any, Optional, Tuple, Type

import ticketing


class Store:
    """The three statements a sale needs, for one database."""

    errors: Tuple[Type[BaseException], ...] = ()  # the driver's error classes

    def read_stock(self, event: str) -> Tuple[int, int]:
        raise NotImplementedError

    def sell(self, event: str, token: int, seat: int, remaining: int, seller: str, fence: bool) -> bool:
        """Records the sale of `seat` and sets the stock to `remaining - 1`,
        in ONE transaction with the fence. False: the token is stale (a newer
        holder already wrote); nothing was written."""
        raise NotImplementedError


class SqliteStore(Store):
    def __init__(self, path: str) -> None:
        # isolation_level=None: we issue BEGIN/COMMIT ourselves.
        self.errors = (sqlite3.Error,)
        self.db = sqlite3.connect(path, timeout=30, isolation_level=None)
        self.db.execute("PRAGMA busy_timeout = 30000")

    def read_stock(self, event: str) -> Tuple[int, int]:
        row = self.db.execute("SELECT remaining, seats FROM stock WHERE event = ?", (event,)).fetchone()
        if row is None:
            raise RuntimeError(f"no stock row for {event}")
        return int(row[0]), int(row[1])

    def sell(self, event: str, token: int, seat: int, remaining: int, seller: str, fence: bool) -> bool:
        db = self.db
        # IMMEDIATE: take SQLite's write lock now, so the fence check and the
        # writes below see one state and commit together.
        db.execute("BEGIN IMMEDIATE")
        try:
            if fence:
                db.execute("INSERT OR IGNORE INTO fence (key, high_water) VALUES (?, 0)", (event,))
                cur = db.execute("UPDATE fence SET high_water = ? WHERE key = ? AND high_water < ?",
                                 (token, event, token))
                if cur.rowcount == 0:
                    db.execute("ROLLBACK")
                    return False
            db.execute("INSERT INTO sales (event, seat, token, seller) VALUES (?, ?, ?, ?)",
                       (event, seat, token, seller))
            db.execute("UPDATE stock SET remaining = ? WHERE event = ?", (remaining - 1, event))
            db.execute("COMMIT")
            return True
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise


class PostgresStore(Store):
    def __init__(self, url: str) -> None:
        self.mod: Any
        try:
            self.mod = importlib.import_module("psycopg")
        except ImportError:
            self.mod = importlib.import_module("psycopg2")
        self.errors = (self.mod.Error,)
        self.db: Any = self.mod.connect(url)

    def read_stock(self, event: str) -> Tuple[int, int]:
        with self.db.cursor() as cur:
            cur.execute("SELECT remaining, seats FROM stock WHERE event = %s", (event,))
            row = cur.fetchone()
        self.db.commit()
        if row is None:
            raise RuntimeError(f"no stock row for {event}")
        return int(row[0]), int(row[1])

    def sell(self, event: str, token: int, seat: int, remaining: int, seller: str, fence: bool) -> bool:
        # psycopg opens the transaction at the first statement; READ COMMITTED
        # re-checks `high_water < token` on the latest row version after
        # waiting for a concurrent writer of the fence row.
        try:
            with self.db.cursor() as cur:
                if fence:
                    cur.execute("INSERT INTO fence (key, high_water) VALUES (%s, 0) ON CONFLICT (key) DO NOTHING",
                                (event,))
                    cur.execute("UPDATE fence SET high_water = %s WHERE key = %s AND high_water < %s",
                                (token, event, token))
                    if cur.rowcount == 0:
                        self.db.rollback()
                        return False
                cur.execute("INSERT INTO sales (event, seat, token, seller) VALUES (%s, %s, %s, %s)",
                            (event, seat, token, seller))
                cur.execute("UPDATE stock SET remaining = %s WHERE event = %s", (remaining - 1, event))
            self.db.commit()
            return True
        except BaseException:
            self.db.rollback()
            raise


def open_store(url: str) -> Store:
    if url.startswith(("postgres://", "postgresql://")):
        return PostgresStore(url)
    for prefix in ("sqlite://", "sqlite:"):
        if url.startswith(prefix):
            return SqliteStore(url[len(prefix):])
    return SqliteStore(url)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="A fenced ticket seller (Python).")
    p.add_argument("--addrs", required=True, help="comma-separated server addresses")
    p.add_argument("--db", required=True, help="sqlite:///path.db or postgres://…")
    p.add_argument("--event", required=True, help="the event: lock key and fence key")
    p.add_argument("--name", required=True, help="this seller's name (written with each sale)")
    p.add_argument("--lease", type=int, default=5, help="lease in seconds (default 5)")
    p.add_argument("--wait", type=int, default=10, help="queue wait in seconds (default 10)")
    p.add_argument("--work-ms", type=int, default=10, help="simulated work between read and write (default 10)")
    p.add_argument("--deadline", type=float, default=300, help="give up after this many seconds (default 300)")
    p.add_argument("--wait-start", action="store_true",
                   help="once connected: print READY and wait for a line on stdin before selling")
    p.add_argument("--pause-after-sales", type=int, default=None,
                   help="after this many sales, at the next grant: print HOLDING and wait for a line on stdin")
    p.add_argument("--no-fence", action="store_true", help="write without the fence (demonstration only)")
    return p.parse_args()


def main() -> int:
    a = parse_args()
    store = open_store(a.db)
    broker = ticketing.TicketBroker(a.addrs.split(","))
    counts = dict(sold=0, fence_refusals=0, timeouts=0, busy=0, indeterminate=0, unavailable=0,
                  insufficient_time=0, release_failures=0, db_errors=0)
    paused = False
    backoff = 0.05
    end = time.monotonic() + a.deadline

    def log(msg: str) -> None:
        print(f"{a.name}: {msg}", file=sys.stderr, flush=True)

    def retry_later(what: str) -> None:
        nonlocal backoff
        counts[what] += 1
        time.sleep(backoff * (0.5 + random.random()))
        backoff = min(backoff * 2, 1.0)

    if not broker.wait_ready(10):
        log("no leader within 10 s; trying anyway")
    if a.wait_start:
        print("READY", flush=True)
        sys.stdin.readline()
    done = False
    while not done:
        if time.monotonic() > end:
            log(f"deadline of {a.deadline} s passed")
            print("RESULT name=" + a.name + "".join(f" {k}={v}" for k, v in counts.items()), flush=True)
            return 3
        try:
            ticket: Optional[ticketing.Ticket] = broker.acquire(a.event, a.wait, a.lease, 1)
        except ticketing.BusyError:
            retry_later("busy")
            continue
        except ticketing.IndeterminateError:
            # Maybe granted, maybe not: never enter. A grant returns at lease end.
            retry_later("indeterminate")
            continue
        except ticketing.UnavailableError:
            retry_later("unavailable")
            continue
        except ticketing.InsufficientTimeError:
            retry_later("insufficient_time")
            continue
        if ticket is None:
            counts["timeouts"] += 1
            continue
        backoff = 0.05
        try:
            remaining, seats = store.read_stock(a.event)
            if remaining <= 0:
                done = True
            else:
                seat = seats - remaining + 1
                if a.pause_after_sales is not None and not paused and counts["sold"] >= a.pause_after_sales:
                    paused = True
                    print(f"HOLDING token={ticket.token} seat={seat}", flush=True)
                    sys.stdin.readline()
                time.sleep(a.work_ms / 1000)  # e.g. the payment provider's answer
                if store.sell(a.event, ticket.token, seat, remaining, a.name, not a.no_fence):
                    counts["sold"] += 1
                else:
                    counts["fence_refusals"] += 1
                    log(f"fence refused token {ticket.token} (seat {seat}): a newer holder wrote first")
        except store.errors + (RuntimeError,) as e:
            counts["db_errors"] += 1
            log(f"database error, rolled back: {e}")
        finally:
            try:
                ticket.release()
            except ticketing.TicketingError as e:
                counts["release_failures"] += 1
                log(f"release: {e}")
    broker.close()
    print("RESULT name=" + a.name + "".join(f" {k}={v}" for k, v in counts.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
