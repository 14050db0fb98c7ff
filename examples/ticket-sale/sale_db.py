"""The demo's side of the database: schema, the seat audit, a throw-away
PostgreSQL. Python standard library only (SQLite through ``sqlite3``,
PostgreSQL through the ``psql`` command-line client).

The sellers write to three tables (see ``README.md``):

- ``fence(key, high_water)``: the fencing high-water mark per lock key;
- ``stock(event, seats, remaining)``: what is left to sell;
- ``sales(id, event, seat, token, seller)``: one row per sale. There is
  deliberately NO unique constraint on ``(event, seat)``: a stale write that
  got through would show up as a seat with two rows, which is exactly what
  ``double_sold`` counts;
- ``windows(event, slot, seats, remaining)``: general admission only, the
  box-office window of each slot of the semaphore and what it has left.

Fence keys: the event key (one lock), ``EVENT/SEAT`` (basket mode: the lock
of each seat) or ``EVENT#SLOT`` (general admission: one per slot).
"""

from __future__ import annotations

import os
import shutil
import socket
import sqlite3
import subprocess
import time
from dataclasses import dataclass
from typing import Callable, List, Optional

SQLITE_SCHEMA = [
    "CREATE TABLE IF NOT EXISTS fence (key TEXT PRIMARY KEY, high_water INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS stock (event TEXT PRIMARY KEY, seats INTEGER NOT NULL, remaining INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS sales (id INTEGER PRIMARY KEY AUTOINCREMENT, event TEXT NOT NULL,"
    " seat INTEGER NOT NULL, token INTEGER NOT NULL, seller TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS windows (event TEXT NOT NULL, slot INTEGER NOT NULL, seats INTEGER NOT NULL,"
    " remaining INTEGER NOT NULL, PRIMARY KEY (event, slot))",
]

PG_SCHEMA = [
    "CREATE TABLE IF NOT EXISTS fence (key TEXT PRIMARY KEY, high_water BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS stock (event TEXT PRIMARY KEY, seats INTEGER NOT NULL, remaining INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS sales (id BIGSERIAL PRIMARY KEY, event TEXT NOT NULL,"
    " seat INTEGER NOT NULL, token BIGINT NOT NULL, seller TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS windows (event TEXT NOT NULL, slot INTEGER NOT NULL, seats INTEGER NOT NULL,"
    " remaining INTEGER NOT NULL, PRIMARY KEY (event, slot))",
]


def window_seats(seats: int, windows: int) -> List[int]:
    """How many seats each window sells: window s sells s+1, s+1+N, s+1+2N, ..."""
    return [len(range(s + 1, seats + 1, windows)) for s in range(windows)]


def is_postgres(url: str) -> bool:
    return url.startswith("postgres://") or url.startswith("postgresql://")


def sqlite_path(url: str) -> str:
    """``sqlite:///abs/path.db``, ``sqlite:rel.db`` or a plain path."""
    if url.startswith("sqlite://"):
        return url[len("sqlite://"):]
    if url.startswith("sqlite:"):
        return url[len("sqlite:"):]
    return url


@dataclass
class Audit:
    sold: int  # sale rows of the event
    distinct: int  # distinct seats among them
    double_sold: int  # seats with more than one sale row
    out_of_range: int  # sale rows whose seat is not in 1..seats
    remaining: int  # the stock row's remaining count
    seats: int
    high_water: int  # the fence's high-water mark of the event key (0 if none)
    last_token: int  # the largest token among the event's sales (0 if none)


# One statement (one round trip), the same text for SQLite and PostgreSQL.
AUDIT_SQL = """SELECT
 (SELECT count(*) FROM sales WHERE event = {e}),
 (SELECT count(DISTINCT seat) FROM sales WHERE event = {e}),
 (SELECT count(*) FROM (SELECT seat FROM sales WHERE event = {e} GROUP BY seat HAVING count(*) > 1) AS d),
 (SELECT count(*) FROM sales s JOIN stock k ON k.event = s.event WHERE s.event = {e}
   AND (s.seat < 1 OR s.seat > k.seats)),
 (SELECT coalesce(max(remaining), -1) FROM stock WHERE event = {e}),
 (SELECT coalesce(max(seats), -1) FROM stock WHERE event = {e}),
 (SELECT coalesce(max(high_water), 0) FROM fence WHERE key = {e}),
 (SELECT coalesce(max(token), 0) FROM sales WHERE event = {e})"""


class Database:
    """Schema, setup of one event and the independent audit."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.pg = is_postgres(url)
        if self.pg and not shutil.which("psql"):
            raise RuntimeError("PostgreSQL needs the psql client here: apt-get install postgresql-client")

    # -- plumbing ------------------------------------------------------------
    def _sqlite(self) -> sqlite3.Connection:
        db = sqlite3.connect(sqlite_path(self.url), timeout=30, isolation_level=None)
        db.execute("PRAGMA busy_timeout = 30000")
        return db

    def _psql(self, sql: str) -> List[List[str]]:
        out = subprocess.run(
            ["psql", self.url, "-X", "-q", "-At", "-F", "\t", "-v", "ON_ERROR_STOP=1", "-c", sql],
            capture_output=True, text=True, timeout=60,
        )
        if out.returncode != 0:
            raise RuntimeError(f"psql failed: {out.stderr.strip()}")
        return [line.split("\t") for line in out.stdout.splitlines() if line]

    @staticmethod
    def _quote(s: str) -> str:
        return "'" + s.replace("'", "''") + "'"

    # -- setup -----------------------------------------------------------------
    def create_event(self, event: str, seats: int, windows: int = 0) -> None:
        """Creates the tables if missing and a fresh stock row for `event`
        (and, for general admission, one row per window); removes the
        event's old sales and fence rows (its seats' and slots' too)."""
        e = self._quote(event)
        n = len(event) + 1
        own_fences = f"key = {e} OR substr(key, 1, {n}) IN ({self._quote(event + '/')}, {self._quote(event + '#')})"
        rows = [f"({e}, {s}, {c}, {c})" for s, c in enumerate(window_seats(seats, windows))]
        if self.pg:
            stmts = PG_SCHEMA + [
                f"DELETE FROM sales WHERE event = {e}",
                f"DELETE FROM fence WHERE {own_fences}",
                f"DELETE FROM stock WHERE event = {e}",
                f"DELETE FROM windows WHERE event = {e}",
                f"INSERT INTO stock (event, seats, remaining) VALUES ({e}, {seats}, {seats})",
            ]
            if rows:
                stmts.append("INSERT INTO windows (event, slot, seats, remaining) VALUES " + ", ".join(rows))
            self._psql(";\n".join(stmts))
            return
        db = self._sqlite()
        try:
            # WAL: readers (the audit, the sellers' stock reads) never block the writer.
            mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise RuntimeError(f"SQLite refused WAL mode (got {mode})")
            for s in SQLITE_SCHEMA:
                db.execute(s)
            db.execute("BEGIN IMMEDIATE")
            db.execute("DELETE FROM sales WHERE event = ?", (event,))
            db.execute(f"DELETE FROM fence WHERE {own_fences}")
            db.execute("DELETE FROM stock WHERE event = ?", (event,))
            db.execute("DELETE FROM windows WHERE event = ?", (event,))
            db.execute("INSERT INTO stock (event, seats, remaining) VALUES (?, ?, ?)", (event, seats, seats))
            if rows:
                db.execute("INSERT INTO windows (event, slot, seats, remaining) VALUES " + ", ".join(rows))
            db.execute("COMMIT")
        finally:
            db.close()

    def newest_token(self, event: str, seats: List[int]) -> int:
        """The largest token among the sales of `seats` of `event` (0 if none)."""
        if not seats:
            return 0
        q = (f"SELECT coalesce(max(token), 0) FROM sales WHERE event = {self._quote(event)} "
             f"AND seat IN ({','.join(str(int(s)) for s in seats)})")
        if self.pg:
            return int(self._psql(q)[0][0])
        db = self._sqlite()
        try:
            return int(db.execute(q).fetchone()[0])
        finally:
            db.close()

    def windows_left(self, event: str) -> int:
        """General admission: the seats the windows of `event` say they have left, together."""
        q = f"SELECT coalesce(sum(remaining), 0) FROM windows WHERE event = {self._quote(event)}"
        if self.pg:
            return int(self._psql(q)[0][0])
        db = self._sqlite()
        try:
            return int(db.execute(q).fetchone()[0])
        finally:
            db.close()

    # -- audit -------------------------------------------------------------------
    def audit(self, event: str) -> Audit:
        """Counts from the database alone, not from what the sellers say."""
        q = AUDIT_SQL.format(e=self._quote(event))
        if self.pg:
            row = [int(x) for x in self._psql(q)[0]]
        else:
            db = self._sqlite()
            try:
                row = [int(x) for x in db.execute(q).fetchone()]
            finally:
                db.close()
        return Audit(
            sold=row[0], distinct=row[1], double_sold=row[2], out_of_range=row[3],
            remaining=row[4], seats=row[5], high_water=row[6], last_token=row[7],
        )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pg_bin(name: str) -> Optional[str]:
    found = shutil.which(name)
    if found:
        return found
    base = "/usr/lib/postgresql"
    if os.path.isdir(base):
        for v in sorted(os.listdir(base), reverse=True):
            p = os.path.join(base, v, "bin", name)
            if os.access(p, os.X_OK):
                return p
    return None


class TempPostgres:
    """A throw-away PostgreSQL cluster on loopback (initdb + pg_ctl) in `workdir`.

    Installs PostgreSQL with apt if it is missing and we are root. PostgreSQL
    refuses to run as root, so as root the cluster runs as the `postgres`
    user (created by the Debian package)."""

    def __init__(self, workdir: str, log: Callable[[str], None]) -> None:
        self.workdir = workdir
        self.log = log
        self.data = os.path.join(workdir, "pgdata")
        self.port = 0
        self.started = False
        self.user_prefix: List[str] = []

    def _run(self, argv: List[str], timeout: float = 120) -> None:
        r = subprocess.run(self.user_prefix + argv, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:2])} failed: {(r.stderr or r.stdout).strip()[-800:]}")

    def start(self) -> str:
        if not (_pg_bin("initdb") and _pg_bin("pg_ctl") and shutil.which("psql")):
            if os.geteuid() != 0:
                raise RuntimeError("PostgreSQL is not installed: apt-get install postgresql (or pass --db postgres://…)")
            self.log("installing PostgreSQL with apt (postgresql)…")
            env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
            for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "postgresql"]):
                r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
                if r.returncode != 0:
                    raise RuntimeError(f"{' '.join(argv)} failed: {r.stderr.strip()[-800:]}")
        initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
        assert initdb and pg_ctl
        user = "demo"
        if os.geteuid() == 0:
            # The cluster belongs to `postgres`; its directory must be reachable for it.
            os.chmod(self.workdir, 0o755)
            os.makedirs(self.data, exist_ok=True)
            shutil.chown(self.data, "postgres", "postgres")
            self.user_prefix = ["runuser", "-u", "postgres", "--"]
        self.port = free_port()
        self._run([initdb, "-D", self.data, "-U", user, "--auth=trust", "-E", "UTF8", "--no-sync"])
        opts = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.data} -c fsync=off"
        self._run([pg_ctl, "-D", self.data, "-l", os.path.join(self.data, "server.log"), "-o", opts, "-w",
                   "-t", "60", "start"])
        self.started = True
        url = f"postgres://{user}@127.0.0.1:{self.port}/postgres"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if subprocess.run(["psql", url, "-X", "-q", "-c", "SELECT 1"], capture_output=True).returncode == 0:
                return url
            time.sleep(0.2)
        raise RuntimeError("the throw-away PostgreSQL did not accept connections within 30 s")

    def stop(self) -> None:
        if self.started:
            pg_ctl = _pg_bin("pg_ctl")
            if pg_ctl:
                subprocess.run(self.user_prefix + [pg_ctl, "-D", self.data, "-m", "immediate", "-w", "stop"],
                               capture_output=True, timeout=60)
            self.started = False
