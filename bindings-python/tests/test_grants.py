"""Counted (semaphore, read/write) and multi-key grants, sync and asyncio,
against a real standalone server (docs/python.md; the rules in
docs/client.md and docs/protocol.md)."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import TYPE_CHECKING, Any, Callable, Coroutine, Optional, TypeVar

import pytest

import ticketing
from ticketing import aio

if TYPE_CHECKING:
    from conftest import Server

T = TypeVar("T")


def broker_for(addr: str) -> ticketing.TicketBroker:
    b = ticketing.TicketBroker.connect(addr)
    assert b.wait_ready(5)
    return b


def fresh_key(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class Background:
    """Runs ``fn`` in a thread; ``result()`` joins it (bounded) and returns
    its value or re-raises its exception."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._value: Any = None
        self._error: Optional[BaseException] = None
        self.done = threading.Event()

        def body() -> None:
            try:
                self._value = fn()
            except BaseException as e:  # re-raised by result()
                self._error = e
            finally:
                self.done.set()

        self._thread = threading.Thread(target=body, daemon=True)
        self._thread.start()

    def result(self, timeout: float = 60) -> Any:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the background call hung"
        if self._error is not None:
            raise self._error
        return self._value


def test_semaphore_of_two_third_waits_and_reuses_the_released_slot(server: Server, key: str) -> None:
    with broker_for(server.addr) as a, broker_for(server.addr) as b, broker_for(server.addr) as c:
        t1 = a.acquire_shared(key, 2, 0, 30)
        t2 = b.acquire_shared(key, 2, 0, 30)
        assert t1 is not None and t2 is not None
        assert {t1.slot, t2.slot} == {0, 1}
        assert t1.keys == (key,) and t1.key == key
        assert t2.token > t1.token, "each counted grant has its own token"

        assert c.acquire_shared(key, 2, 0, 30) is None, "both permits held: wait=0 is refused at once"
        assert c.acquire_shared(key, 2, 1, 30) is None, "not granted within wait"
        with pytest.raises(ticketing.LockTimeout):
            with c.shared_lock(key, 2, wait=0, lease=5):
                pytest.fail("must not enter")

        third = Background(lambda: c.acquire_shared(key, 2, 30, 30))
        server.wait_waiters(key, 1)
        assert not third.done.is_set()
        freed = t1.slot
        assert t1.release() is True
        t3 = third.result()
        assert t3 is not None
        assert t3.slot == freed, "the released permit's slot is the lowest free one"
        assert t3.token > t2.token
        assert t2.release() is True and t3.release() is True
        assert t1.release() is True, "a second release returns the first result"


def test_shared_lock_scoped_releases_on_exit_and_when_the_body_raises(server: Server, key: str) -> None:
    with broker_for(server.addr) as a, broker_for(server.addr) as b:
        with a.shared_lock(key, 1, wait=1, lease=30) as t:
            assert isinstance(t, ticketing.Ticket) and t.slot == 0
            assert b.acquire_shared(key, 1, 0, 5) is None
        again = b.acquire_shared(key, 1, 0, 5)
        assert again is not None and again.slot == 0
        assert again.release() is True

        with pytest.raises(KeyError):
            with a.shared_lock(key, 1, wait=1, lease=30):
                raise KeyError("boom")
        after = b.acquire_shared(key, 1, 0, 5)
        assert after is not None
        assert after.release() is True


def test_read_lock_is_shared_and_a_writer_waits_for_the_readers(server: Server, key: str) -> None:
    with broker_for(server.addr) as a, broker_for(server.addr) as b, broker_for(server.addr) as w:
        entered = threading.Event()

        def writer() -> Optional[int]:
            with w.write_lock(key, wait=30, lease=30) as t:
                entered.set()
                return t.slot

        # Leases longer than the writer's wait: only the release on exit lets it in.
        with a.read_lock(key, wait=1, lease=120) as r1, b.read_lock(key, wait=1, lease=120) as r2:
            assert r1.slot is not None and r2.slot is not None and r1.slot != r2.slot
            assert r1.token != r2.token
            with pytest.raises(ticketing.LockTimeout):
                with w.write_lock(key, wait=0, lease=5):
                    pytest.fail("a writer must not enter while readers hold the key")
            bg = Background(writer)
            server.wait_waiters(key, 1)
            assert not entered.is_set(), "the writer entered while two readers held the key"
        assert bg.result() is None, "a write grant is exclusive: no slot"
        assert entered.is_set()

        # While a writer holds the key, a reader does not get in.
        with w.write_lock(key, wait=1, lease=30):
            with pytest.raises(ticketing.LockTimeout):
                with a.read_lock(key, wait=0, lease=5):
                    pytest.fail("a reader must not enter while the writer holds the key")
        with a.read_lock(key, wait=1, lease=5) as r:
            assert r.slot is not None


def test_acquire_all_one_token_for_every_key_and_release_frees_both(server: Server) -> None:
    k1, k2, k3 = fresh_key("all1"), fresh_key("all2"), fresh_key("all3")
    with broker_for(server.addr) as a, broker_for(server.addr) as b:
        t = a.acquire_all([k1, k2], 0, 30)
        assert t is not None
        assert t.keys == (k1, k2) and t.key == k1
        assert t.slot is None
        assert b.acquire(k1, 0, 5) is None and b.acquire(k2, 0, 5) is None, "both keys are held"
        assert b.acquire_all((k2, k3), 0, 5) is None, "an overlapping acquire_all is not granted"
        free = b.acquire(k3, 0, 5)
        assert free is not None, "k3 stays free: the refused acquire_all took nothing"
        assert free.release() is True
        assert t.release() is True
        for k in (k1, k2):
            after = b.acquire(k, 0, 5)
            assert after is not None and after.token > t.token, k
            assert after.release() is True


def test_overlapping_acquire_all_waits_for_the_release(server: Server) -> None:
    k1, k2, k3 = fresh_key("ov1"), fresh_key("ov2"), fresh_key("ov3")
    with broker_for(server.addr) as a, broker_for(server.addr) as b:
        t = a.acquire_all([k1, k2], 0, 30)
        assert t is not None
        bg = Background(lambda: b.acquire_all([k3, k2], 30, 30))  # another key order
        server.wait_waiters(k2, 1)
        assert not bg.done.is_set()
        assert t.release() is True
        t2 = bg.result()
        assert t2 is not None
        assert t2.keys == (k3, k2) and t2.token > t.token
        assert a.acquire(k3, 0, 5) is None, "k3 is held by the second acquire_all"
        assert t2.release() is True
        t3 = a.acquire(k3, 0, 5)
        assert t3 is not None
        assert t3.release() is True


def test_lock_all_scoped_and_lock_timeout(server: Server) -> None:
    k1, k2 = fresh_key("la1"), fresh_key("la2")
    with broker_for(server.addr) as a, broker_for(server.addr) as b:
        with a.lock_all([k1, k2], wait=1, lease=30) as t:
            assert t.keys == (k1, k2)
            with pytest.raises(ticketing.LockTimeout):
                with b.lock_all(iter([k2, k1]), wait=0, lease=5):
                    pytest.fail("must not enter")
        again = b.acquire_all([k2, k1], 0, 5)
        assert again is not None, "lock_all released every key on exit"
        assert again.release() is True


def run(coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
    """Runs a test coroutine with a hard time bound."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def ready(addr: str) -> aio.TicketBroker:
    b = await aio.TicketBroker.connect(addr)
    assert await b.wait_ready(5)
    return b


async def wait_waiters(server: Server, key: str, n: int) -> None:
    """``server.wait_waiters`` off the event loop (it polls with blocking HTTP)."""
    await asyncio.get_running_loop().run_in_executor(None, server.wait_waiters, key, n)


def test_async_semaphore_and_scoped_forms(server: Server, key: str) -> None:
    async def main() -> None:
        async with await ready(server.addr) as a, await ready(server.addr) as b, await ready(server.addr) as c:
            t1 = await a.acquire_shared(key, 2, 0, 30)
            assert isinstance(t1, aio.Ticket)
            async with b.shared_lock(key, 2, wait=1, lease=120) as t2:
                assert t1 is not None and {t1.slot, t2.slot} == {0, 1}
                assert t1.keys == (key,)
                assert await c.acquire_shared(key, 2, 0, 5) is None
                with pytest.raises(ticketing.LockTimeout):
                    async with c.shared_lock(key, 2, wait=0, lease=5):
                        pytest.fail("must not enter")
                third = asyncio.ensure_future(c.acquire_shared(key, 2, 30, 30))
                await wait_waiters(server, key, 1)
                assert not third.done()
            t3 = await asyncio.wait_for(third, 30)
            assert t3 is not None and t3.slot == t2.slot, "the slot released on exit is reused"
            assert await t3.release() is True
            assert await t1.release() is True

    run(main())


def test_async_read_write_and_lock_all(server: Server, key: str) -> None:
    k1, k2 = fresh_key("aall1"), fresh_key("aall2")

    async def main() -> None:
        async with await ready(server.addr) as a, await ready(server.addr) as b:
            async with a.read_lock(key, wait=1, lease=30) as r1, b.read_lock(key, wait=1, lease=30) as r2:
                assert r1.slot is not None and r2.slot is not None and r1.slot != r2.slot
                with pytest.raises(ticketing.LockTimeout):
                    async with b.write_lock(key, wait=0, lease=5):
                        pytest.fail("a writer must not enter while readers hold the key")
            async with b.write_lock(key, wait=1, lease=30) as w:
                assert w.slot is None
                with pytest.raises(ticketing.LockTimeout):
                    async with a.read_lock(key, wait=0, lease=5):
                        pytest.fail("a reader must not enter while the writer holds the key")

            t = await a.acquire_all([k1, k2], 0, 30)
            assert t is not None and t.keys == (k1, k2) and t.key == k1 and t.slot is None
            waiting = asyncio.ensure_future(b.acquire_all([k2, k1], 30, 30))
            await wait_waiters(server, k1, 1)
            assert not waiting.done()
            assert await t.release() is True
            t2 = await asyncio.wait_for(waiting, 30)
            assert t2 is not None and t2.token > t.token
            with pytest.raises(ticketing.LockTimeout):
                async with a.lock_all([k1, k2], wait=0, lease=10):
                    pytest.fail("granted while the other acquire_all holds both keys")
            assert await t2.release() is True
            async with a.lock_all([k1, k2], wait=1, lease=10) as t3:
                assert t3.keys == (k1, k2) and t3.token > t2.token
            assert await b.acquire(k1, 0, 5) is not None, "lock_all released on exit"

    run(main())
