"""asyncio example: many tasks queue for one key; each gets it in turn.

Run against a server: ``python examples/python/async_example.py [ADDR]``
(default ``127.0.0.1:5225``). Checked with ``mypy --strict``.
"""

from __future__ import annotations

import asyncio
import sys

import ticketing
from ticketing import aio


async def worker(broker: aio.TicketBroker, n: int, tokens: list[int]) -> None:
    try:
        async with broker.lock("counter", wait=30, lease=10, budget=1) as ticket:
            tokens.append(ticket.token)
            await asyncio.sleep(0.01)  # the critical section
    except ticketing.LockTimeout:
        print(f"worker {n}: not granted within 30 s")
    except ticketing.IndeterminateError:
        print(f"worker {n}: outcome unknown, did not enter the critical section")


async def main(addr: str) -> int:
    async with await aio.TicketBroker.connect(addr) as broker:
        if not await broker.wait_ready(5):
            print("no server at", addr, file=sys.stderr)
            return 1
        tokens: list[int] = []
        await asyncio.gather(*(worker(broker, n, tokens) for n in range(20)))
        assert tokens == sorted(tokens), "tokens increase in grant order"
        print(f"{len(tokens)} grants, tokens {tokens[0]}..{tokens[-1]}")

        # Cancelling a waiting acquire cancels it on the client.
        ticket = await broker.acquire("counter", wait=0, lease=5)
        if ticket is not None:
            waiter = asyncio.create_task(broker.acquire("counter", wait=30, lease=5))
            await asyncio.sleep(0.2)
            waiter.cancel()
            try:
                await waiter
            except asyncio.CancelledError:
                print("waiting acquire cancelled")
            print("released:", await ticket.release())
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:5225")))
