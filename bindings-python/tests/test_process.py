"""Process life: Ctrl-C during a blocking acquire, fork (docs/client.md, Process life)."""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from typing import IO, Optional

import pytest

import ticketing
from conftest import Server

CHILD = textwrap.dedent(
    """
    import signal, sys, time, ticketing
    # Ctrl-C raises KeyboardInterrupt even when this process was started
    # with SIGINT ignored (a job started with `&` by a shell without job control).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    addr, key = sys.argv[1], sys.argv[2]
    b = ticketing.TicketBroker.connect(addr)
    assert b.wait_ready(5)
    print("waiting", flush=True)
    try:
        b.acquire(key, 60, 5)
        print("acquired", flush=True)
        sys.exit(3)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    # the broker keeps working after the interrupt
    t = b.acquire(key + "-other", 0, 5)
    print("still-works" if t is not None and t.release() else "broken", flush=True)
    b.close()
    """
)


class _Lines:
    """Reads a pipe's lines in a thread, so a bounded wait works even when
    several lines arrive at once."""

    def __init__(self, pipe: IO[str]) -> None:
        self.q: "queue.Queue[str]" = queue.Queue()
        threading.Thread(target=self._pump, args=(pipe,), daemon=True).start()

    def _pump(self, pipe: IO[str]) -> None:
        for line in pipe:
            self.q.put(line.strip())

    def next(self, timeout: float) -> str:
        try:
            return self.q.get(timeout=timeout)
        except queue.Empty:
            return ""


def test_ctrl_c_interrupts_blocking_acquire(server: Server, addr: str, key: str) -> None:
    with ticketing.TicketBroker.connect(addr) as holder_broker:
        held = holder_broker.acquire(key, 5, 30)
        assert held is not None
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, addr, key], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None
        lines = _Lines(proc.stdout)
        try:
            assert lines.next(20) == "waiting"
            server.wait_waiters(key, 1)  # now blocked in acquire, queued at the server
            t0 = time.monotonic()
            proc.send_signal(signal.SIGINT)
            assert lines.next(5) == "interrupted"
            assert time.monotonic() - t0 < 30, "Ctrl-C must interrupt (hang bound)"
            assert lines.next(10) == "still-works"
            assert proc.wait(timeout=10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            assert proc.stderr is not None
            err = proc.stderr.read()
            proc.stderr.close()
        assert "Traceback" not in err, err
        assert held.release() is True


def _wait_child(pid: int, timeout: float) -> Optional[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


def _use_in_child(b: ticketing.TicketBroker, key: str) -> str:
    try:
        t = b.acquire(key, 5, 5)
        if t is None:
            return "none"
        return "ticket" if t.release() else "release-false"
    except ticketing.TicketingError as e:
        return "error:" + type(e).__name__ + ":" + str(e)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_child_starts_afresh(addr: str, key: str) -> None:
    b = ticketing.TicketBroker.connect(addr)
    assert b.wait_ready(5)
    parent_ticket = b.acquire(key, 0, 30)  # the parent's runtime and sockets are live
    assert parent_ticket is not None
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        code = 1
        try:
            os.close(r)
            try:
                parent_ticket.release()
                theirs = "released-parents"
            except ticketing.ClosedError:
                theirs = "closed"  # tickets stay with the process that acquired them
            os.write(w, (theirs + "|" + _use_in_child(b, key + "-child")).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    rc = _wait_child(pid, 30)
    msg = os.read(r, 4096).decode()
    os.close(r)
    assert rc is not None, "the forked child hung using the parent's broker"
    assert rc == 0
    theirs, msg = msg.split("|", 1)
    print("fork child:", theirs, msg)
    assert theirs == "closed", "a child must not release its parent's ticket"
    assert msg == "ticket" or msg.startswith("error:"), msg
    if msg.startswith("error:"):
        assert len(msg.split(":", 2)[2]) > 10, "the error must say what happened"
    # the parent is unaffected
    assert parent_ticket.release() is True
    t = b.acquire(key, 1, 5)
    assert t is not None and t.release() is True
    b.close()


_POOL_BROKER: Optional[ticketing.TicketBroker] = None


def _pool_task(key: str) -> str:
    assert _POOL_BROKER is not None
    return _use_in_child(_POOL_BROKER, key)


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")
def test_multiprocessing_fork_pool(addr: str, key: str) -> None:
    global _POOL_BROKER
    _POOL_BROKER = ticketing.TicketBroker.connect(addr)
    assert _POOL_BROKER.wait_ready(5)
    t = _POOL_BROKER.acquire(key, 0, 5)
    assert t is not None and t.release() is True
    ctx = multiprocessing.get_context("fork")
    pool = ctx.Pool(2)
    try:
        results = pool.map_async(_pool_task, [f"{key}-{i}" for i in range(4)]).get(timeout=60)
    except multiprocessing.TimeoutError:
        pytest.fail("a forked worker hung using the parent's broker")
    finally:
        pool.terminate()
        pool.join()
    print("fork pool:", results)
    for r in results:
        assert r == "ticket" or r.startswith("error:"), results
    _POOL_BROKER.close()
    _POOL_BROKER = None


EXIT_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from ticketing import aio

    async def main(addr, key):
        async with await aio.TicketBroker.connect(addr) as b:
            assert await b.wait_ready(5)
            for _ in range(3):
                async with b.lock(key, wait=5, lease=5):
                    pass
        # the interpreter exits right after the last callback from a client thread

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


def test_interpreter_exit_right_after_async_calls_is_clean(addr: str, key: str) -> None:
    # Regression: a client thread completing an asyncio callback while the
    # interpreter finalized was killed by CPython (SIGABRT/SIGSEGV at exit).
    for i in range(20):
        out = subprocess.run(
            [sys.executable, "-c", EXIT_SCRIPT, addr, f"{key}-{i}"], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, (i, out.returncode, out.stderr[-2000:])
