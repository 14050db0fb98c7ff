"""A 3-node Ticketing cluster of real `ticketing-server` processes on free
loopback ports, for the demo (Python standard library only)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import time
import urllib.request
from typing import Any, Callable, Dict, List, Optional


def free_ports(n: int) -> List[int]:
    """`n` distinct free loopback ports (all held open while choosing)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


class Cluster:
    def __init__(self, server_bin: str, workdir: str, log: Callable[[str], None], size: int = 3) -> None:
        self.bin = server_bin
        self.workdir = workdir
        self.log = log
        ports = free_ports(3 * size)
        self.client = ports[0:size]
        self.peer = ports[size:2 * size]
        self.admin = ports[2 * size:3 * size]
        self.procs: List[Optional[subprocess.Popen[bytes]]] = [None] * size
        self.token_file = os.path.join(workdir, "peer.token")

    def client_addrs(self) -> List[str]:
        return [f"127.0.0.1:{p}" for p in self.client]

    def start(self) -> None:
        with open(self.token_file, "w") as f:
            f.write(secrets.token_hex(16) + "\n")
        os.chmod(self.token_file, 0o600)
        peers = ",".join(f"127.0.0.1:{p}" for p in self.peer)
        for i in range(len(self.client)):
            argv = [
                self.bin,
                "--listen", f"127.0.0.1:{self.client[i]}",
                "--advertise", f"127.0.0.1:{self.client[i]}",
                "--peer-listen", f"127.0.0.1:{self.peer[i]}",
                "--peers", peers,
                "--peer-token-file", self.token_file,
                "--admin-listen", f"127.0.0.1:{self.admin[i]}",
            ]
            if i == 0:
                argv.append("--bootstrap")
            env = {k: v for k, v in os.environ.items() if not k.startswith("TICKETING_")}
            env.setdefault("RUST_LOG", "info")
            with open(os.path.join(self.workdir, f"node{i + 1}.log"), "wb") as logf:
                self.procs[i] = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, env=env, start_new_session=True)

    def status(self, i: int) -> Optional[Dict[str, Any]]:
        """The node's admin `/status`, or None if it does not answer."""
        p = self.procs[i]
        if p is None or p.poll() is not None:
            return None
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin[i]}/status", timeout=2) as r:
                v = json.loads(r.read().decode())
                return v if isinstance(v, dict) else None
        except (OSError, ValueError):
            return None

    def leader(self) -> Optional[int]:
        """The index of the one live node whose /status says it leads and serves."""
        leaders = []
        for i in range(len(self.procs)):
            s = self.status(i)
            if s and s.get("role") == "leader" and s.get("serving", True):
                leaders.append(i)
        return leaders[0] if len(leaders) == 1 else None

    def wait_leader(self, limit: float) -> Optional[int]:
        end = time.monotonic() + limit
        while time.monotonic() < end:
            for i, p in enumerate(self.procs):
                if p is not None and p.poll() is not None and p.returncode not in (0, None):
                    raise RuntimeError(f"node {i + 1} exited with status {p.returncode}; see "
                                       f"{os.path.join(self.workdir, f'node{i + 1}.log')}")
            found = self.leader()
            if found is not None:
                return found
            time.sleep(0.1)
        return None

    def kill(self, i: int) -> None:
        """kill -9 of node `i`."""
        p = self.procs[i]
        if p is not None and p.poll() is None:
            p.kill()
            p.wait(timeout=10)

    def stop(self) -> None:
        for p in self.procs:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        end = time.monotonic() + 5
        for p in self.procs:
            if p is not None:
                try:
                    p.wait(timeout=max(0.1, end - time.monotonic()))
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=10)
