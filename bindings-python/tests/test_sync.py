"""Sync API against a real standalone server."""

from __future__ import annotations

from typing import TYPE_CHECKING

import gc
import threading
import time

import pytest

import ticketing

if TYPE_CHECKING:
    from conftest import Server


def broker_for(addr: str) -> ticketing.TicketBroker:
    b = ticketing.TicketBroker.connect(addr)
    assert b.wait_ready(5)
    return b


def test_acquire_release(addr: str, key: str) -> None:
    with broker_for(addr) as b:
        t = b.acquire(key, 1, 10)
        assert isinstance(t, ticketing.Ticket)
        assert t.key == key
        assert 1 <= t.token < 2**63
        assert 8.0 < t.remaining() <= 10.0
        assert t.expired is False
        assert t.release() is True
        assert t.release() is True, "a second call returns the first definite result"
        t2 = b.acquire(key, 0, 10)
        assert t2 is not None and t2.token > t.token
        assert t2.release() is True


def test_connect_takes_one_comma_separated_string_or_a_list(addr: str, key: str) -> None:
    # A dead address first: the broker routes to the live one.
    from conftest import free_port

    dead = f"127.0.0.1:{free_port()}"
    for addrs in (f"{dead}, {addr}", [dead, addr]):
        with ticketing.TicketBroker.connect(addrs) as b:
            assert b.wait_ready(5)
            t = b.acquire(key, 5, 10)
            assert t is not None
            assert t.release() is True
    with pytest.raises(TypeError):
        ticketing.TicketBroker.connect([dead, 5])  # type: ignore[list-item]


def test_none_on_timeout_and_wait_rounds_up(addr: str, key: str) -> None:
    with broker_for(addr) as a, broker_for(addr) as b:
        held = a.acquire(key, 0, 30)
        assert held is not None
        t0 = time.monotonic()
        assert b.acquire(key, 0, 5) is None
        assert time.monotonic() - t0 < 30, "wait=0 is one immediate attempt (hang bound)"
        t0 = time.monotonic()
        assert b.acquire(key, 0.2, 5) is None  # rounds up to 1 s, so it queued ~1 s
        took = time.monotonic() - t0
        assert 0.8 < took < 5, took
        assert held.release() is True


def test_lease_fraction_rounds_up_and_expiry(addr: str, key: str) -> None:
    with broker_for(addr) as b:
        t = b.acquire(key, 0, 0.2)  # lease rounds up to 1 s
        assert t is not None
        assert 0.5 < t.remaining() <= 1.0
        time.sleep(1.3)
        assert t.expired is True
        assert t.remaining() == 0.0
        assert t.release() is False, "expired: no longer the holder"
        again = b.acquire(key, 0, 5)
        assert again is not None and again.token > t.token
        again.release()


def test_lock_context_manager(addr: str, key: str) -> None:
    with broker_for(addr) as a, broker_for(addr) as b:
        with a.lock(key, wait=1, lease=10) as t:
            assert isinstance(t, ticketing.Ticket) and t.key == key
            with pytest.raises(ticketing.LockTimeout) as exc:
                with b.lock(key, wait=0, lease=5):
                    pytest.fail("must not enter")
            assert isinstance(exc.value, TimeoutError)
        # released on exit
        t2 = b.acquire(key, 0, 5)
        assert t2 is not None
        t2.release()


def test_lock_releases_when_body_raises(addr: str, key: str) -> None:
    with broker_for(addr) as a, broker_for(addr) as b:
        with pytest.raises(KeyError):
            with a.lock(key, wait=1, lease=30):
                raise KeyError("boom")
        t = b.acquire(key, 0, 5)
        assert t is not None
        t.release()


def test_broker_context_manager_closes_and_releases(addr: str, key: str) -> None:
    with broker_for(addr) as other:
        with broker_for(addr) as b:
            held = b.acquire(key, 0, 60)
            assert held is not None
        with pytest.raises(ticketing.ClosedError):
            b.acquire(key, 0, 5)
        # close() released the live ticket best-effort: granted well before the 60 s lease
        t = other.acquire(key, 5, 5)
        assert t is not None
        t.release()


def test_garbage_collected_ticket_is_released(addr: str, key: str) -> None:
    with broker_for(addr) as a, broker_for(addr) as b:
        held = a.acquire(key, 0, 60)
        assert held is not None
        del held
        gc.collect()
        t = b.acquire(key, 5, 5)
        assert t is not None, "the dropped ticket was not released"
        t.release()


def test_threads_contend_in_fifo_order(server: Server, key: str) -> None:
    n = 5
    addr = server.addr
    with broker_for(addr) as holder_broker, broker_for(addr) as b:
        holder = holder_broker.acquire(key, 0, 30)
        assert holder is not None
        order: list[int] = []
        tokens: list[int] = []
        errors: list[BaseException] = []
        mu = threading.Lock()

        def worker(i: int) -> None:
            try:
                t = b.acquire(key, 30, 10)
                assert t is not None
                with mu:
                    order.append(i)
                    tokens.append(t.token)
                time.sleep(0.05)
                assert t.release() is True
            except BaseException as e:  # reported below
                errors.append(e)

        threads = []
        for i in range(n):
            th = threading.Thread(target=worker, args=(i,))
            th.start()
            threads.append(th)
            server.wait_waiters(key, i + 1)  # worker i is queued before worker i+1 starts
        assert holder.release() is True
        for th in threads:
            th.join(timeout=60)
        assert not errors, errors
        assert order == list(range(n))
        assert tokens == sorted(tokens) and len(set(tokens)) == n


def test_gil_released_while_blocking(addr: str, key: str) -> None:
    with broker_for(addr) as a, broker_for(addr) as b:
        held = a.acquire(key, 0, 30)
        assert held is not None
        ticks = 0
        stop = threading.Event()

        def spin() -> None:
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                time.sleep(0.001)

        th = threading.Thread(target=spin)
        th.start()
        try:
            assert b.acquire(key, 1, 5) is None  # blocks ~1 s
        finally:
            stop.set()
            th.join()
        assert ticks > 50, ticks
        held.release()


def test_many_addresses_constructor(addr: str, key: str) -> None:
    with ticketing.TicketBroker([addr], token=None, tls="off") as b:
        assert b.wait_ready(5)
        with b.lock(key, 1, 5, 1) as t:
            assert t.remaining() > 1
    with ticketing.TicketBroker(addr) as b:  # a single string is one address
        assert b.wait_ready(5)


def test_examples_run(addr: str) -> None:
    import subprocess
    import sys
    from pathlib import Path

    ex = Path(__file__).resolve().parents[2] / "examples" / "python"
    for script in ("sync_example.py", "async_example.py"):
        out = subprocess.run([sys.executable, str(ex / script), addr], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, (script, out.stdout, out.stderr)
