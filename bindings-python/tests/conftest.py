"""Fixtures: a real standalone ``ticketing-server`` on a free loopback port.

The binary is ``$TICKETING_SERVER_BIN``, by default
``<repo>/target/debug/ticketing-server`` (built by ``scripts/test`` or
``cargo build -p ticketing-server``). A missing binary fails the tests.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import json
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Iterator

import pytest

sys.path.insert(0, str(Path(__file__).parent))

REPO = Path(__file__).resolve().parents[2]


def server_bin() -> Path:
    path = Path(os.environ.get("TICKETING_SERVER_BIN", REPO / "target" / "debug" / "ticketing-server"))
    if not path.is_file():
        pytest.fail(f"server binary {path} not found: build it (cargo build -p ticketing-server) "
                    "or set TICKETING_SERVER_BIN")
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
            s.settimeout(0.5)
            return s.recv(12).startswith(b"TICKETING 1 ")
    except OSError:
        return False


def _bound(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


class Server:
    """A running server process; ``addr`` is its client address, ``admin`` its admin port."""

    def __init__(self, extra_env: dict[str, str] | None = None, tls: bool = False) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TICKETING_")}
        env.setdefault("RUST_LOG", "warn")
        env.update(extra_env or {})
        last = ""
        for _attempt in range(5):  # the free port may be taken before the server binds it
            port = free_port()
            self.addr = f"127.0.0.1:{port}"
            self.admin = free_port()
            self.log = tempfile.TemporaryFile()
            self.proc = subprocess.Popen(
                [str(server_bin()), "--listen", self.addr, "--admin-listen", f"127.0.0.1:{self.admin}"],
                env=env,
                stdout=self.log,
                stderr=subprocess.STDOUT,
            )
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and self.proc.poll() is None:
                # A TLS port sends no plain greeting: a bound port is enough there.
                if _accepts(port) if not tls else _bound(port):
                    return
                time.sleep(0.05)
            self._terminate()
            self.log.seek(0)
            last = self.log.read().decode(errors="replace")
            self.log.close()
        raise RuntimeError(f"ticketing-server did not start: {last[-2000:]}")

    def stop(self) -> None:
        self._terminate()
        self.log.close()

    def waiters(self, key: str) -> int | None:
        """Waiters queued on ``key`` according to the admin ``/locks/<key>`` view."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/locks/{key}", timeout=3) as r:
                return len(json.load(r)["waiters"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def wait_waiters(self, key: str, n: int, timeout: float = 30) -> None:
        """Waits (bounded) until ``key`` has ``n`` waiters: a condition, not a sleep."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.waiters(key)
            if got == n:
                return
            assert time.monotonic() < deadline, f"key {key}: {got} waiters, expected {n}"
            time.sleep(0.02)

    def _terminate(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


@pytest.fixture
def server() -> Iterator[Server]:
    """A fresh standalone server for one test."""
    srv = Server()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def addr(server: Server) -> str:
    return server.addr


@pytest.fixture
def key() -> str:
    """A unique key per test."""
    return "k-" + uuid.uuid4().hex[:12]
