"""Client behaviour through the binding against scripted fake servers
(docs/client.md, Response matching to Release lane): the binding must surface the client's typed outcomes."""

from __future__ import annotations

import math
import time

import pytest

import ticketing
from fakeserver import FakeServer, SilentServer, busy, close_after_read, grant, wait_until


def connect(fake: FakeServer) -> ticketing.TicketBroker:
    broker = ticketing.TicketBroker.connect(fake.addr)
    assert broker.wait_ready(5), "client did not become ready against the fake server"
    return broker


def test_busy_is_final_and_not_retried() -> None:
    with FakeServer(busy) as fake, connect(fake) as broker:
        t0 = time.monotonic()
        with pytest.raises(ticketing.BusyError):
            broker.acquire("k", 10, 5)
        assert time.monotonic() - t0 < 9, "B must be returned at once, not after the 10 s wait"
        # An observation window, not a synchronisation: a retry would arrive within it.
        time.sleep(0.5)
        assert len(fake.sent("A")) == 1, fake.frames


def test_session_lost_after_send_is_indeterminate_and_not_resent() -> None:
    with FakeServer(close_after_read) as fake, connect(fake) as broker:
        with pytest.raises(ticketing.IndeterminateError):
            broker.acquire("k", 3, 5)
        # An observation window, not a synchronisation: a resend would arrive within it.
        time.sleep(1.0)
        assert len(fake.sent("A")) == 1, fake.frames


def test_wrong_server_proof_is_auth_failed_and_nothing_sent() -> None:
    with FakeServer(grant(), bad_smac=True) as fake:
        with ticketing.TicketBroker.connect(fake.addr) as broker:
            assert not broker.wait_ready(1)
            with pytest.raises(ticketing.AuthFailedError):
                broker.acquire("k", 2, 5)
        assert fake.sent("AUTH"), "the client did connect"
        assert fake.sent("A") == []


def test_client_token_is_used_and_never_sent() -> None:
    with FakeServer(grant(), token="s3cret-token") as fake:
        with ticketing.TicketBroker([fake.addr], token="s3cret-token") as broker:
            assert broker.wait_ready(5)
            t = broker.acquire("k", 1, 5)
            assert t is not None
            assert t.release() is True
        assert not any("s3cret-token" in f for f in fake.frames)


def test_grant_passes_token_and_key_through() -> None:
    big = 2**62 + 12345
    with FakeServer(grant(token=big)) as fake, connect(fake) as broker:
        t = broker.acquire("stock:42", 2, 10)
        assert t is not None
        assert t.token == big and isinstance(t.token, int)
        assert t.key == "stock:42"
        assert 8.0 < t.remaining() <= 10.0
        assert t.expired is False
        assert "stock:42" in repr(t)
        assert t.release() is True
        r = fake.sent("R")
        assert len(r) == 1 and r[0][2] == "stock:42" and r[0][4] == str(big)
        a = fake.sent("A")[0]
        assert r[0][3] == a[3], "release carries the acquire's owner"


@pytest.mark.parametrize(
    "args",
    [
        ("k", math.nan, 5, 0),
        ("k", -1, 5, 0),
        ("k", -0.001, 5, 0),
        ("k", 255.5, 5, 0),
        ("k", 256, 5, 0),
        ("k", math.inf, 5, 0),
        ("k", 10**400, 5, 0),
        ("k", 1, 0, 0),
        ("k", 1, 250.01, 0),
        ("k", 1, math.nan, 0),
        ("k", 1, 5, 5.5),
        ("k", 1, 5, -1),
        ("k", 1, 5, math.nan),
        ("", 1, 5, 0),
        ("a b", 1, 5, 0),
        ("k" * 251, 1, 5, 0),
        ("ключ", 1, 5, 0),
        ("tab\tkey", 1, 5, 0),
    ],
)
def test_bad_arguments_raise_value_error_and_send_nothing(args: tuple) -> None:  # type: ignore[type-arg]
    with FakeServer(grant()) as fake, connect(fake) as broker:
        with pytest.raises(ValueError):
            broker.acquire(*args)
        # A valid acquire after it: once the fake has read that one, the bad one would have come before.
        t = broker.acquire("marker", 1, 5)
        assert t is not None and t.release() is True
        assert [a[2] for a in fake.sent("A")] == ["marker"], fake.frames


def test_wrong_types_raise_type_error() -> None:
    with FakeServer(grant()) as fake, connect(fake) as broker:
        with pytest.raises(TypeError):
            broker.acquire("k", "1", 5)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            broker.acquire(b"k", 1, 5)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            broker.acquire("k", None, 5)  # type: ignore[arg-type]
        assert fake.sent("A") == []


@pytest.mark.parametrize(
    "wait,lease,budget,wire",
    [
        (0.2, 1.5, 0.1, ("1", "2")),
        (0, 0.001, 0, ("0", "1")),
        (254.01, 249.5, 249.2, ("255", "250")),
        (3, 7, 0, ("3", "7")),
    ],
)
def test_fractions_round_up_on_the_wire(wait: float, lease: float, budget: float, wire: tuple[str, str]) -> None:
    with FakeServer(grant()) as fake, connect(fake) as broker:
        try:
            broker.acquire("k", wait, lease, budget)
        except ticketing.InsufficientTimeError:
            pass  # budget close to lease: the grant is handed back, still a valid wire check
        a = fake.sent("A")
        assert len(a) == 1
        assert (a[0][4], a[0][5]) == wire


def test_insufficient_time_compensates_with_exact_release() -> None:
    with FakeServer(grant(token=777)) as fake, connect(fake) as broker:
        with pytest.raises(ticketing.InsufficientTimeError):
            broker.acquire("k", 1, 2, 2)  # budget == lease: never enough after any delay
        assert wait_until(lambda: len(fake.sent("R")) == 1, 5), fake.frames
        r = fake.sent("R")[0]
        a = fake.sent("A")[0]
        assert (r[2], r[3], r[4]) == ("k", a[3], "777")


def test_unanswered_release_is_unconfirmed_after_about_5s() -> None:
    with FakeServer(grant()) as fake, connect(fake) as broker:
        t = broker.acquire("k", 1, 30)
        assert t is not None
        fake.answer_release = False
        t0 = time.monotonic()
        with pytest.raises(ticketing.ReleaseUnconfirmedError):
            t.release()
        took = time.monotonic() - t0
        assert 4.0 < took < 9.0, took


def test_no_server_is_unavailable() -> None:
    with FakeServer(grant()) as fake:
        addr = fake.addr
    # the port is closed now
    with ticketing.TicketBroker.connect(addr) as broker:
        assert broker.wait_ready(0.3) is False
        t0 = time.monotonic()
        with pytest.raises(ticketing.UnavailableError):
            broker.acquire("k", 1, 5)
        assert time.monotonic() - t0 < 30  # hang bound


def test_hung_node_costs_an_acquire_its_wait_and_no_more() -> None:
    with SilentServer() as silent:
        broker = ticketing.TicketBroker([silent.addr])
        try:
            t0 = time.monotonic()
            with pytest.raises(ticketing.UnavailableError):
                broker.acquire("k", 1, 10, 0)
            took = time.monotonic() - t0
            assert 0.95 <= took < 2.0, took  # wait=1 bounds it, not the 5 s handshake limit
        finally:
            broker.close()


def test_wait_zero_without_a_ready_connection_is_unavailable_at_once() -> None:
    with SilentServer() as silent:
        broker = ticketing.TicketBroker([silent.addr])
        try:
            t0 = time.monotonic()
            with pytest.raises(ticketing.UnavailableError):
                broker.acquire("k", 0, 10, 0)
            assert time.monotonic() - t0 < 9, "at once, not after the 10 s wait"
        finally:
            broker.close()


def test_closed_broker_raises_closed() -> None:
    with FakeServer(grant()) as fake:
        broker = connect(fake)
        broker.close()
        broker.close()  # idempotent
        with pytest.raises(ticketing.ClosedError):
            broker.acquire("k", 1, 5)
        assert fake.sent("A") == []


def _conn_closed_after(fake: FakeServer, n_closed_before: int) -> bool:
    return sum(c.closed for c in fake.conns) > n_closed_before


def test_async_cancel_after_send_closes_that_session() -> None:
    import asyncio

    from fakeserver import silent
    from ticketing import aio

    async def main() -> None:
        with FakeServer(silent) as fake:
            b = await aio.TicketBroker.connect(fake.addr)
            assert await b.wait_ready(5)
            task = asyncio.create_task(b.acquire("k", 60, 30))
            assert await asyncio.to_thread(wait_until, lambda: len(fake.sent("A")) == 1, 5)
            closed_before = sum(c.closed for c in fake.conns)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # possibly sent → the client closes that session (docs/client.md, Acquire step 7)
            assert await asyncio.to_thread(wait_until, lambda: _conn_closed_after(fake, closed_before), 2)
            # An observation window, not a synchronisation: a resend would arrive within it.
            time.sleep(0.3)
            assert len(fake.sent("A")) == 1, "a cancelled acquire is never resent"
            await b.close()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_ctrl_c_after_send_closes_that_session() -> None:
    import os
    import signal
    import threading

    from fakeserver import silent

    class Interrupted(Exception):
        pass

    def raise_interrupt(signum: int, frame: object) -> None:
        raise Interrupted()

    with FakeServer(silent) as fake, connect(fake) as broker:
        old = signal.signal(signal.SIGUSR1, raise_interrupt)
        try:
            threading.Thread(
                target=lambda: (wait_until(lambda: len(fake.sent("A")) == 1, 5), os.kill(os.getpid(), signal.SIGUSR1))
            ).start()
            closed_before = sum(c.closed for c in fake.conns)
            t0 = time.monotonic()
            with pytest.raises(Interrupted):
                broker.acquire("k", 60, 30)
            assert time.monotonic() - t0 < 30, "interrupted, not after the 60 s wait"
        finally:
            signal.signal(signal.SIGUSR1, old)
        assert wait_until(lambda: _conn_closed_after(fake, closed_before), 2)
        # An observation window, not a synchronisation: a resend would arrive within it.
        time.sleep(0.3)
        assert len(fake.sent("A")) == 1
        # the broker keeps working on a fresh connection
        assert broker.wait_ready(5)


def test_one_address_lock_loop_spreads_acquires_over_both_connections() -> None:
    # docs/client.md, Connections: one address → two connections, round-robin. The releases of a
    # `with lock:` loop must not take every other turn from the acquires
    # (before the fix every acquire went to one connection, every R to the other).
    seen: list[object] = []

    def policy(conn: object, f: list[str]) -> str:
        seen.append(conn)
        return f"A {f[1]} {f[2]} {f[3]} 7 0"

    with FakeServer(policy) as fake, connect(fake) as broker:
        # connect() returns at the FIRST ready connection: let the second one
        # finish its handshake too, so there are two to alternate between.
        assert wait_until(lambda: sum(c.authed for c in fake.conns) == 2, 5)

        # ...and wait until the client has read the second OK: it uses both connections.
        def both_in_use() -> bool:
            with broker.lock("warm-up", wait=1, lease=5):
                pass
            return len(seen) >= 2 and seen[-1] is not seen[-2]

        assert wait_until(both_in_use, 10), "the second connection never took an acquire"
        seen.clear()
        for i in range(4):
            with broker.lock(f"k{i}", wait=1, lease=5):
                pass
        assert len(fake.conns) == 2, "one address → two connections"
        assert len(seen) == 4
        assert all(a is not b for a, b in zip(seen, seen[1:])), "acquires alternate between the connections"
        assert len([r for r in fake.sent("R") if r[2] != "warm-up"]) == 4
