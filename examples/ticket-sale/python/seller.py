"""A ticket seller in Python: sells seats of one event until none is left.

Each sale: take the lock on the event key, read the stock, then in ONE
database transaction guarded by the fence (docs/fencing.md) record the seat
and decrement the stock; commit; release. With ``--basket K``: K unsold seats
at once under the locks of every seat (``acquire_all``), fenced per seat.
With ``--general N``: a permit of a semaphore of N on the event key
(``acquire_shared``) and a seat of the box-office window of its slot, fenced
per (key, slot). Run by ``examples/ticket-sale/demo``; the arguments are
described in ``examples/README.md``. Checked with ``mypy --strict``.
"""

from __future__ import annotations

import argparse
import importlib
import random
import sqlite3
import sys
import time
from typing import Any, List, Optional, Sequence, Tuple, Type

import ticketing


def seat_key(event: str, seat: int) -> str:
    """Basket mode: the lock key (and fence key) of one seat."""
    return f"{event}/{seat}"


def slot_fence_key(event: str, slot: int) -> str:
    """General admission: the fence key of one slot of the event's semaphore."""
    return f"{event}#{slot}"


def sql_list(seats: Sequence[int]) -> str:
    """Seat numbers as an SQL list (integers only: nothing to quote)."""
    return ",".join(str(int(s)) for s in seats)


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

    # -- baskets and general admission: one statement style per database -----------------
    P = "?"  # the driver's placeholder

    def query(self, sql: str, params: Tuple[Any, ...]) -> List[Tuple[Any, ...]]:
        raise NotImplementedError

    def fenced(self, token: int, fence_keys: Sequence[str], writes: Sequence[Tuple[str, Tuple[Any, ...]]]) -> bool:
        """ONE transaction: every key of `fence_keys` fenced with `token`
        (False if any is stale: rolled back, nothing written), then `writes`."""
        raise NotImplementedError

    def unsold_seats(self, event: str) -> List[int]:
        _, seats = self.read_stock(event)
        sold = {int(r[0]) for r in self.query(f"SELECT DISTINCT seat FROM sales WHERE event = {self.P}", (event,))}
        return [s for s in range(1, seats + 1) if s not in sold]

    def sold_among(self, event: str, seats: Sequence[int]) -> int:
        q = f"SELECT count(*) FROM sales WHERE event = {self.P} AND seat IN ({sql_list(seats)})"
        return int(self.query(q, (event,))[0][0])

    def read_window(self, event: str, slot: int) -> Tuple[int, int]:
        rows = self.query(f"SELECT remaining, seats FROM windows WHERE event = {self.P} AND slot = {self.P}",
                          (event, slot))
        if not rows:
            raise RuntimeError(f"no window {slot} for {event}")
        return int(rows[0][0]), int(rows[0][1])

    def sell_basket(self, event: str, token: int, seats: Sequence[int], seller: str, fence: bool) -> bool:
        """Every seat sold, each fenced, in ONE transaction; the stock is
        decremented in the database (other baskets sell at the same time)."""
        p = self.P
        ordered = sorted(seats)  # one order for every writer
        sale = f"INSERT INTO sales (event, seat, token, seller) VALUES ({p}, {p}, {p}, {p})"
        writes: List[Tuple[str, Tuple[Any, ...]]] = [(sale, (event, s, token, seller)) for s in ordered]
        writes.append((f"UPDATE stock SET remaining = remaining - {p} WHERE event = {p}", (len(ordered), event)))
        return self.fenced(token, [seat_key(event, s) for s in ordered] if fence else [], writes)

    def sell_general(self, event: str, slot: int, token: int, seat: int, window_remaining: int, seller: str,
                     fence: bool) -> bool:
        """A seat of window `slot`: fenced per (key, slot), the window's count
        written from what was read under the permit, the stock decremented."""
        p = self.P
        return self.fenced(token, [slot_fence_key(event, slot)] if fence else [], [
            (f"INSERT INTO sales (event, seat, token, seller) VALUES ({p}, {p}, {p}, {p})", (event, seat, token, seller)),
            (f"UPDATE windows SET remaining = {p} WHERE event = {p} AND slot = {p}", (window_remaining - 1, event, slot)),
            (f"UPDATE stock SET remaining = remaining - 1 WHERE event = {p}", (event,)),
        ])


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

    def query(self, sql: str, params: Tuple[Any, ...]) -> List[Tuple[Any, ...]]:
        return list(self.db.execute(sql, params).fetchall())

    def fenced(self, token: int, fence_keys: Sequence[str], writes: Sequence[Tuple[str, Tuple[Any, ...]]]) -> bool:
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            for key in fence_keys:
                db.execute("INSERT OR IGNORE INTO fence (key, high_water) VALUES (?, 0)", (key,))
                cur = db.execute("UPDATE fence SET high_water = ? WHERE key = ? AND high_water < ?", (token, key, token))
                if cur.rowcount == 0:
                    db.execute("ROLLBACK")
                    return False
            for sql, params in writes:
                db.execute(sql, params)
            db.execute("COMMIT")
            return True
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise


class PostgresStore(Store):
    P = "%s"

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

    def query(self, sql: str, params: Tuple[Any, ...]) -> List[Tuple[Any, ...]]:
        with self.db.cursor() as cur:
            cur.execute(sql, params)
            rows = list(cur.fetchall())
        self.db.commit()
        return rows

    def fenced(self, token: int, fence_keys: Sequence[str], writes: Sequence[Tuple[str, Tuple[Any, ...]]]) -> bool:
        try:
            with self.db.cursor() as cur:
                for key in fence_keys:
                    cur.execute("INSERT INTO fence (key, high_water) VALUES (%s, 0) ON CONFLICT (key) DO NOTHING",
                                (key,))
                    cur.execute("UPDATE fence SET high_water = %s WHERE key = %s AND high_water < %s",
                                (token, key, token))
                    if cur.rowcount == 0:
                        self.db.rollback()
                        return False
                for sql, params in writes:
                    cur.execute(sql, params)
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
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--basket", type=int, default=None, choices=range(2, 17), metavar="K",
                      help="K seats (2-16) at once, under the lock of every seat")
    mode.add_argument("--general", type=int, default=None, choices=range(1, 1001), metavar="N",
                      help="general admission: a semaphore of N permits on the event key, a window per slot")
    return p.parse_args()


def main() -> int:
    a = parse_args()
    store = open_store(a.db)
    broker = ticketing.TicketBroker(a.addrs.split(","))
    counts = dict(sold=0, fence_refusals=0, timeouts=0, busy=0, indeterminate=0, unavailable=0,
                  insufficient_time=0, release_failures=0, db_errors=0, basket_conflicts=0)
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
    if a.basket is not None or a.general is not None:
        return sell_many(a, store, broker, counts, log, retry_later)
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
            # Maybe granted, maybe not: never enter. The client releases such a grant within 5 s.
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


def sell_many(a: argparse.Namespace, store: Store, broker: ticketing.TicketBroker, counts: dict[str, int],
              log: Any, retry_later: Any) -> int:
    """Basket mode (--basket K) and general admission (--general N)."""
    paused = False
    end = time.monotonic() + a.deadline
    empty: List[ticketing.Ticket] = []  # general admission: permits of sold-out windows, kept

    def result() -> str:
        return "RESULT name=" + str(a.name) + "".join(f" {k}={v}" for k, v in counts.items())

    def release(t: ticketing.Ticket) -> None:
        try:
            t.release()
        except ticketing.TicketingError as e:
            counts["release_failures"] += 1
            log(f"release: {e}")

    def release_empty() -> None:
        while empty:
            release(empty.pop())

    def pause(what: str) -> None:
        nonlocal paused
        if a.pause_after_sales is not None and not paused and counts["sold"] >= a.pause_after_sales:
            paused = True
            print(f"HOLDING {what}", flush=True)
            sys.stdin.readline()

    def acquire(get: Any) -> Optional[ticketing.Ticket]:
        """Every outcome of an acquire the library defines: the ticket, or None to try again."""
        try:
            t: Optional[ticketing.Ticket] = get()
        except ticketing.BusyError:
            retry_later("busy")
            return None
        except ticketing.IndeterminateError:
            # Maybe granted, maybe not: never enter. The client releases such a grant within 5 s.
            retry_later("indeterminate")
            return None
        except ticketing.UnavailableError:
            retry_later("unavailable")
            return None
        except ticketing.InsufficientTimeError:
            retry_later("insufficient_time")
            return None
        if t is None:
            counts["timeouts"] += 1
        return t

    while True:
        if time.monotonic() > end:
            log(f"deadline of {a.deadline} s passed")
            print(result(), flush=True)
            return 3
        ticket: Optional[ticketing.Ticket] = None
        try:
            if a.basket is not None:
                unsold = store.unsold_seats(a.event)
                if not unsold:
                    break
                # K of the unsold seats, drawn at random, in random order.
                seats = random.sample(unsold, min(a.basket, len(unsold)))
                keys = [seat_key(a.event, s) for s in seats]
                ticket = acquire(lambda: broker.acquire(keys[0], a.wait, a.lease, 1) if len(keys) == 1
                                 else broker.acquire_all(keys, a.wait, a.lease, 1))
                if ticket is None:
                    continue
                if store.sold_among(a.event, seats) > 0:
                    counts["basket_conflicts"] += 1  # another basket took one of them before our grant
                    continue
                listed = ",".join(map(str, seats))
                pause(f"token={ticket.token} seats={listed}")
                time.sleep(a.work_ms / 1000)
                if store.sell_basket(a.event, ticket.token, seats, a.name, not a.no_fence):
                    counts["sold"] += len(seats)
                else:
                    counts["fence_refusals"] += 1
                    log(f"fence refused token {ticket.token} (seats {listed}): a newer holder wrote first")
            else:
                # The event's stock is exact (decremented in the database): it says when the sale is over.
                left, _ = store.read_stock(a.event)
                if left <= 0:
                    break
                n = int(a.general)
                ticket = acquire(lambda: broker.acquire_shared(a.event, n, a.wait, a.lease, 1))
                if ticket is None:
                    release_empty()
                    continue
                slot = int(ticket.slot or 0)
                remaining, seats_w = store.read_window(a.event, slot)
                if remaining <= 0:
                    empty.append(ticket)  # sold-out window: keep the permit, ask for another
                    ticket = None
                    continue
                # Window `slot` sells the seats slot+1, slot+1+N, slot+1+2N, ...
                seat = slot + 1 + n * (seats_w - remaining)
                pause(f"token={ticket.token} seat={seat} slot={slot}")
                time.sleep(a.work_ms / 1000)
                if store.sell_general(a.event, slot, ticket.token, seat, remaining, a.name, not a.no_fence):
                    counts["sold"] += 1
                else:
                    counts["fence_refusals"] += 1
                    log(f"fence refused token {ticket.token} (slot {slot}, seat {seat}): "
                        f"a newer holder of the slot wrote first")
        except store.errors + (RuntimeError,) as e:
            counts["db_errors"] += 1
            log(f"database error, rolled back: {e}")
        finally:
            if ticket is not None:
                release(ticket)
                release_empty()
    release_empty()
    broker.close()
    print(result(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
