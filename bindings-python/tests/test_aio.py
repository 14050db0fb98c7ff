"""asyncio API against a real standalone server."""

from __future__ import annotations

from typing import TYPE_CHECKING

import asyncio
import gc
import time
from typing import Any, Coroutine, TypeVar

import pytest

import ticketing
from ticketing import aio

if TYPE_CHECKING:
    from conftest import Server

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
    """Runs a test coroutine with a hard time bound."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def ready(addr: str) -> aio.TicketBroker:
    b = await aio.TicketBroker.connect(addr)
    assert await b.wait_ready(5)
    return b


def test_async_acquire_release(addr: str, key: str) -> None:
    async def main() -> None:
        async with await ready(addr) as b:
            t = await b.acquire(key, 1, 10)
            assert isinstance(t, aio.Ticket)
            assert t.key == key and 1 <= t.token < 2**63
            assert 8 < t.remaining() <= 10 and not t.expired
            assert await t.release() is True
            assert await t.release() is True
            with pytest.raises(ValueError):
                await b.acquire(key, -1, 10)
            with pytest.raises(ValueError):
                await b.acquire("bad key", 1, 10)

    run(main())


def test_async_lock_and_timeout(addr: str, key: str) -> None:
    async def main() -> None:
        async with await ready(addr) as a, aio.TicketBroker([addr]) as b:
            assert await b.wait_ready(5)
            async with a.lock(key, wait=1, lease=10) as t:
                assert t.key == key
                assert await b.acquire(key, 0, 5) is None
                with pytest.raises(ticketing.LockTimeout):
                    async with b.lock(key, wait=0.5, lease=5):
                        pytest.fail("must not enter")
            t2 = await b.acquire(key, 0, 5)
            assert t2 is not None
            await t2.release()
        with pytest.raises(ticketing.ClosedError):
            await a.acquire(key, 0, 5)

    run(main())


def test_many_tasks_contend(addr: str, key: str) -> None:
    n = 40

    async def main() -> None:
        async with await ready(addr) as b:
            inside = 0
            peak = 0
            tokens: list[int] = []

            async def worker() -> None:
                nonlocal inside, peak
                async with b.lock(key, wait=60, lease=10) as t:
                    inside += 1
                    peak = max(peak, inside)
                    tokens.append(t.token)
                    await asyncio.sleep(0.005)
                    inside -= 1

            await asyncio.gather(*(worker() for _ in range(n)))
            assert peak == 1
            assert len(tokens) == n
            assert tokens == sorted(tokens) and len(set(tokens)) == n

    run(main(), timeout=120)


def test_cancel_waiting_acquire(server: Server, key: str) -> None:
    addr = server.addr

    async def main() -> None:
        async with await ready(addr) as a, await ready(addr) as b, await ready(addr) as c:
            held = await a.acquire(key, 0, 30)
            assert held is not None
            waiter = asyncio.create_task(b.acquire(key, 60, 30))
            await asyncio.to_thread(server.wait_waiters, key, 1)  # queued at the server
            assert not waiter.done()
            t0 = time.monotonic()
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            assert time.monotonic() - t0 < 30, "cancellation is prompt (hang bound)"
            # The client closed the waiter's connection before CancelledError
            # propagated; wait until the server read that close (a release
            # racing it could hand the key to the cancelled waiter).
            await asyncio.to_thread(server.wait_waiters, key, 0)
            assert await held.release() is True
            # The cancelled waiter must not end up holding the key for its 30 s lease:
            # either it left the queue, or the client released a late grant.
            t = await c.acquire(key, 10, 5)
            assert t is not None, "the cancelled acquire kept the lock"
            await t.release()

    run(main())


def test_cancel_unsent_acquire_is_harmless(addr: str, key: str) -> None:
    async def main() -> None:
        async with await ready(addr) as b:
            task = asyncio.create_task(b.acquire(key, 5, 5))
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            t = await b.acquire(key, 5, 5)
            assert t is not None
            await t.release()

    run(main())


def test_async_gc_ticket_released(addr: str, key: str) -> None:
    async def main() -> None:
        async with await ready(addr) as a, await ready(addr) as b:
            t = await a.acquire(key, 0, 60)
            assert t is not None
            del t
            gc.collect()
            t2 = await b.acquire(key, 5, 5)
            assert t2 is not None
            await t2.release()

    run(main())


def test_sync_and_async_share_one_client(addr: str, key: str) -> None:
    sync_b = ticketing.TicketBroker.connect(addr)
    assert sync_b.wait_ready(5)
    held = sync_b.acquire(key, 0, 30)
    assert held is not None

    async def main() -> None:
        async with await ready(addr) as b:
            assert await b.acquire(key, 0, 5) is None
            loop_ticks = 0

            async def ticker() -> None:
                nonlocal loop_ticks
                while True:
                    loop_ticks += 1
                    await asyncio.sleep(0.01)

            tick = asyncio.create_task(ticker())
            got = await b.acquire(key, 1, 5)  # waits ~1 s without blocking the loop
            tick.cancel()
            assert got is None
            assert loop_ticks > 20, loop_ticks

    run(main())
    assert held.release() is True
    sync_b.close()
