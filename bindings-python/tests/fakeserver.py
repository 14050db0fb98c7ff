"""A scripted fake Ticketing server for tests: speaks the line protocol of
docs/protocol.md over loopback TCP, computes the server proof with hmac/hashlib, and
records every frame the client sends; and a silent server that accepts TCP
and never greets (a hung node)."""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import threading
import time
from typing import Callable, List, Optional

# What to do with an acquire: returns the reply line (without LF), or None to
# close the connection without answering.
AcquirePolicy = Callable[["FakeConn", List[str]], Optional[str]]


def mac(token: str, label: str, snonce: str, cnonce: str) -> str:
    """HMAC-SHA256 of docs/protocol.md §3 as lowercase hex."""
    msg = f"ticketing/1 {label} {snonce} {cnonce}".encode()
    return hmac.new(token.encode(), msg, hashlib.sha256).hexdigest()


def grant(token: int = 4242, waited_ms: int = 0) -> AcquirePolicy:
    """Grants every acquire with the given token."""

    def policy(conn: "FakeConn", f: List[str]) -> Optional[str]:
        return f"A {f[1]} {f[2]} {f[3]} {token} {waited_ms}"

    return policy


def busy(conn: "FakeConn", f: List[str]) -> Optional[str]:
    """Refuses every acquire with B."""
    return f"B {f[1]} {f[2]}"


SILENT = "silent"


def silent(conn: "FakeConn", f: List[str]) -> Optional[str]:
    """Reads the acquire and never answers it (keeps the connection)."""
    return SILENT


def close_after_read(conn: "FakeConn", f: List[str]) -> Optional[str]:
    """Reads the acquire and closes the connection without answering."""
    return None


class FakeConn:
    """One accepted client connection."""

    def __init__(self, server: "FakeServer", sock: socket.socket) -> None:
        self.server = server
        self.sock = sock
        self.buf = b""
        self.closed = False
        self.authed = False

    def send(self, line: str) -> None:
        self.sock.sendall(line.encode() + b"\n")

    def readline(self) -> Optional[str]:
        while b"\n" not in self.buf:
            try:
                chunk = self.sock.recv(4096)
            except OSError:
                return None
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()

    def run(self) -> None:
        try:
            self._serve()
        finally:
            self.closed = True
            try:
                self.sock.close()
            except OSError:
                pass

    def _serve(self) -> None:
        srv = self.server
        snonce = os.urandom(32).hex()
        self.send(f"TICKETING 1 {snonce}")
        line = self.readline()
        if line is None:
            return
        srv.record(line)
        parts = line.split(" ")
        if len(parts) != 3 or parts[0] != "AUTH":
            self.send("E bad_frame")
            return
        cnonce, cmac = parts[1], parts[2]
        if not hmac.compare_digest(cmac, mac(srv.token, "client", snonce, cnonce)):
            self.send("E auth_failed")
            return
        smac = os.urandom(32).hex() if srv.bad_smac else mac(srv.token, "server", snonce, cnonce)
        self.send(f"OK leader {smac}")
        self.authed = True
        while not srv.stopping.is_set():
            line = self.readline()
            if line is None:
                return
            srv.record(line)
            f = line.split(" ")
            if f[0] == "P":
                self.send(line)
            elif f[0] == "A":
                reply = srv.on_acquire(self, f)
                if reply is None:
                    self.sock.shutdown(socket.SHUT_RDWR)
                    return
                if reply != SILENT:
                    self.send(reply)
            elif f[0] == "R":
                if srv.answer_release:
                    self.send(f"R {f[1]} {f[2]}")
            else:
                self.send("E bad_frame")
                return


class FakeServer:
    """A threaded fake server on 127.0.0.1:<free port>. Use as a context
    manager; ``frames`` lists every line received (all connections)."""

    def __init__(self, on_acquire: AcquirePolicy, token: str = "", bad_smac: bool = False) -> None:
        self.on_acquire = on_acquire
        self.token = token
        self.bad_smac = bad_smac
        self.answer_release = True
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.frames: list[str] = []
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.listener.settimeout(0.1)
        self.addr = "127.0.0.1:%d" % self.listener.getsockname()[1]
        self.conns: list[FakeConn] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def record(self, line: str) -> None:
        with self.lock:
            self.frames.append(line)

    def sent(self, op: str) -> list[list[str]]:
        """Every received frame whose first field is ``op``, split."""
        with self.lock:
            return [f.split(" ") for f in self.frames if f.split(" ")[0] == op]

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                sock, _ = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            sock.settimeout(None)
            conn = FakeConn(self, sock)
            self.conns.append(conn)
            threading.Thread(target=conn.run, daemon=True).start()

    def __enter__(self) -> "FakeServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.listener.close()
        for c in self.conns:
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.thread.join(timeout=5)


class SilentServer:
    """Accepts TCP connections and never greets: a hung or black-holed node."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.addr = "%s:%d" % self.sock.getsockname()
        self.accepted: list[socket.socket] = []
        self._stop = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        self.sock.settimeout(0.1)
        for _ in range(600):  # bounded: at most ~60 s
            if self._stop:
                return
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted.append(conn)

    def __enter__(self) -> "SilentServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop = True
        self._thread.join(2)
        for c in self.accepted:
            c.close()
        self.sock.close()


def wait_until(cond: Callable[[], bool], timeout: float) -> bool:
    """Polls ``cond`` every 20 ms for at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()
