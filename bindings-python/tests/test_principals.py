"""Principals (docs/security.md, "Several teams: principals"): a key outside
the token's prefixes raises ForbiddenError with the key, never retried, in
the sync and the asyncio API; the broker goes on serving allowed keys."""
from __future__ import annotations

import asyncio
import pickle
from pathlib import Path
from typing import Iterator

import pytest

import ticketing
from ticketing import aio

from conftest import Server


@pytest.fixture
def orders_server(tmp_path: Path) -> Iterator[Server]:
    tokens = tmp_path / "orders.tokens"
    tokens.write_text("orders-token\n")
    config = tmp_path / "ticketing.toml"
    config.write_text(
        f'[[principal]]\nname = "orders"\ntokens_file = "{tokens}"\nkeys = ["orders/"]\n'
    )
    srv = Server(extra_env={"TICKETING_CONFIG": str(config)})
    try:
        yield srv
    finally:
        srv.stop()


def test_forbidden_key_raises_with_the_key(orders_server: Server) -> None:
    with ticketing.TicketBroker([orders_server.addr], token="orders-token") as b:
        assert b.wait_ready(5)
        with pytest.raises(ticketing.ForbiddenError) as e:
            b.acquire("payments/1", 1, 10)
        assert e.value.key == "payments/1" and e.value.code == "forbidden"
        assert "payments/1" in str(e.value)
        assert isinstance(e.value, ticketing.TicketingError)
        # The first key of a multi-key acquire it may not use; nothing granted.
        with pytest.raises(ticketing.ForbiddenError) as e:
            b.acquire_all(["orders/1", "payments/2"], 1, 10)
        assert e.value.key == "payments/2"
        # Pickles with its key (raised across processes).
        again = pickle.loads(pickle.dumps(e.value))
        assert isinstance(again, ticketing.ForbiddenError) and again.key == "payments/2"
        t = b.acquire("orders/1", 1, 10)
        assert t is not None and t.release() is True


def test_forbidden_key_raises_in_asyncio(orders_server: Server) -> None:
    async def main() -> None:
        async with aio.TicketBroker([orders_server.addr], token="orders-token") as b:
            assert await b.wait_ready(5)
            with pytest.raises(ticketing.ForbiddenError) as e:
                await b.acquire_shared("carts/1", 3, 1, 10)
            assert e.value.key == "carts/1"
            t = await b.acquire("orders/2", 1, 10)
            assert t is not None and await t.release() is True

    asyncio.run(asyncio.wait_for(main(), 60))
