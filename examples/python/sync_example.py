"""Sync example: a fenced stock decrement under a Ticketing lock.

Run against a server: ``python examples/python/sync_example.py [ADDR]``
(default ``127.0.0.1:5225``). Checked with ``mypy --strict``.
"""

from __future__ import annotations

import sqlite3
import sys
from typing import Optional

import ticketing


class _Stale(Exception):
    """The token is not above the fence's high-water mark."""


def fenced_decrement(db: sqlite3.Connection, key: str, token: int) -> bool:
    """Decrements the stock in ONE transaction with the fence update (docs/fencing.md).
    Returns False when the token is stale (a newer holder already wrote)."""
    try:
        with db:  # one transaction: commit on success, roll back on an exception
            db.execute("INSERT OR IGNORE INTO fence(key, high_water) VALUES (?, 0)", (key,))
            cur = db.execute("UPDATE fence SET high_water = ? WHERE key = ? AND high_water < ?", (token, key, token))
            if cur.rowcount == 0:
                raise _Stale(token)
            db.execute("UPDATE stock SET count = count - 1 WHERE key = ?", (key,))
    except _Stale:
        return False
    return True


def main(addr: str) -> int:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE fence(key TEXT PRIMARY KEY, high_water INTEGER NOT NULL)")
    db.execute("CREATE TABLE stock(key TEXT PRIMARY KEY, count INTEGER NOT NULL)")
    db.execute("INSERT INTO stock VALUES ('seat-42', 10)")
    db.commit()

    with ticketing.TicketBroker.connect(addr) as broker:
        if not broker.wait_ready(5):
            print("no server at", addr, file=sys.stderr)
            return 1

        # Scoped form: LockTimeout if not granted within `wait`.
        try:
            with broker.lock("seat-42", wait=5, lease=30, budget=2) as ticket:
                fenced_decrement(db, ticket.key, ticket.token)
                print(f"token {ticket.token}, {ticket.remaining():.1f} s left")
        except ticketing.LockTimeout:
            print("busy, try later")

        # Plain form: None on timeout, explicit release.
        maybe: Optional[ticketing.Ticket] = broker.acquire("seat-42", 1, 10)
        if maybe is not None:
            try:
                fenced_decrement(db, maybe.key, maybe.token)
            finally:
                released: bool = maybe.release()
                print("released:", released)
        else:
            print("not granted within 1 s")

    (count,) = db.execute("SELECT count FROM stock WHERE key = 'seat-42'").fetchone()
    print("stock left:", count)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:5225"))
