"""The public surface: exception hierarchy, exports, docstrings. No server."""

from __future__ import annotations

import inspect

import pytest

import ticketing
from ticketing import _native, aio

ERRORS = {
    "BusyError": "busy",
    "ForbiddenError": "forbidden",
    "IndeterminateError": "indeterminate",
    "InsufficientTimeError": "insufficient_time",
    "UnavailableError": "unavailable",
    "ReleaseUnconfirmedError": "release_unconfirmed",
    "ClosedError": "closed",
    "AuthFailedError": "auth_failed",
    "LockTimeout": "timeout",
}


def test_exception_hierarchy() -> None:
    assert issubclass(ticketing.TicketingError, Exception)
    for name, code in ERRORS.items():
        cls = getattr(ticketing, name)
        assert issubclass(cls, ticketing.TicketingError), name
        assert cls.code == code
    assert issubclass(ticketing.LockTimeout, TimeoutError)
    assert not issubclass(ticketing.BusyError, TimeoutError)
    assert len({getattr(ticketing, n) for n in ERRORS}) == len(ERRORS)


def test_bad_arguments_raise_a_plain_value_error_not_a_ticketing_error() -> None:
    # A caller's `except ticketing.TicketingError` (retry, back off) must not
    # swallow its own programming errors.
    broker = ticketing.TicketBroker(["127.0.0.1:9"])
    try:
        for args in [("k", 256, 5), ("k", 1, 0), ("k", 1, 5, 6), ("a b", 1, 5), ("k", float("nan"), 5)]:
            with pytest.raises(ValueError) as info:
                broker.acquire(*args)
            assert not isinstance(info.value, ticketing.TicketingError), args
    finally:
        broker.close()


def _public_members(obj: object) -> list[tuple[str, object]]:
    out = []
    for name, member in vars(obj).items():
        if name.startswith("_"):
            continue
        out.append((name, member))
    return out


@pytest.mark.parametrize("module", [ticketing, aio])
def test_docstrings_everywhere(module: object) -> None:
    assert inspect.getdoc(module)
    for name in module.__all__:  # type: ignore[attr-defined]
        obj = getattr(module, name)
        if name == "Seconds":
            continue
        assert inspect.getdoc(obj), f"{module.__name__}.{name} has no docstring"  # type: ignore[attr-defined]
        if inspect.isclass(obj):
            for mname, member in _public_members(obj):
                assert inspect.getdoc(member) or inspect.getdoc(getattr(obj, mname)), f"{name}.{mname}"


def test_native_docstrings() -> None:
    for cls in (_native.Broker, _native.Ticket, _native.Pending):
        assert inspect.getdoc(cls)
        for name in dir(cls):
            if not name.startswith("_"):
                assert inspect.getdoc(getattr(cls, name)), f"{cls.__name__}.{name}"


def test_ticket_is_the_native_class() -> None:
    assert ticketing.Ticket is _native.Ticket
    with pytest.raises(TypeError):
        _native.Ticket()  # type: ignore[call-arg]


def test_bad_constructor_arguments() -> None:
    with pytest.raises(TypeError):
        ticketing.TicketBroker([1, 2])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        ticketing.TicketBroker([])
    with pytest.raises(ValueError):
        ticketing.TicketBroker(["not an address"])


def test_exceptions_pickle_under_the_public_name() -> None:
    import pickle

    for name in ERRORS:
        cls = getattr(ticketing, name)
        assert cls.__module__ == "ticketing"
        err = pickle.loads(pickle.dumps(cls("why")))
        assert type(err) is cls and str(err) == "why"


def test_counted_and_multi_key_argument_errors() -> None:
    # Checked before anything is sent: against an address where nothing
    # listens, the argument error is what the caller sees.
    broker = ticketing.TicketBroker(["127.0.0.1:9"])
    try:
        for n in (0, 65536, -1, 2**70):
            with pytest.raises(ValueError) as info:
                broker.acquire_shared("k", n, 0, 5)
            assert not isinstance(info.value, ticketing.TicketingError), n
            with pytest.raises(ValueError):
                with broker.shared_lock("k", n, wait=0, lease=5):
                    pytest.fail("must not enter")
        for bad_n in (2.0, "2", None):
            with pytest.raises(TypeError):
                broker.acquire_shared("k", bad_n, 0, 5)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            broker.acquire_shared("a b", 2, 0, 5)
        with pytest.raises(ValueError):
            broker.acquire_shared("k", 2, 0, 0)

        too_long = ["x" * 249 + str(i) for i in range(3)]  # each key is fine, the request is over 512 bytes
        for keys in ([], ["a"], ["a", "a"], [f"k{i}" for i in range(17)], ["a b", "c"], too_long):
            with pytest.raises(ValueError) as info:
                broker.acquire_all(keys, 0, 5)
            assert not isinstance(info.value, ticketing.TicketingError), keys
            with pytest.raises(ValueError):
                with broker.lock_all(keys, wait=0, lease=5):
                    pytest.fail("must not enter")
        with pytest.raises(ValueError):
            broker.acquire_all(["a", "b"], 256, 5)
        for bad_keys in ("ab", b"ab", ["a", 1], None):
            with pytest.raises(TypeError):
                broker.acquire_all(bad_keys, 0, 5)  # type: ignore[arg-type]
        for scoped in (broker.read_lock, broker.write_lock):
            with pytest.raises(ValueError):
                with scoped("a b", wait=0, lease=5):
                    pytest.fail("must not enter")
            with pytest.raises(ValueError):
                with scoped("k", wait=0, lease=5, budget=6):
                    pytest.fail("must not enter")
    finally:
        broker.close()


def test_async_counted_and_multi_key_argument_errors() -> None:
    import asyncio

    async def main() -> None:
        broker = aio.TicketBroker(["127.0.0.1:9"])
        try:
            with pytest.raises(ValueError):
                await broker.acquire_shared("k", 0, 0, 5)
            with pytest.raises(TypeError):
                await broker.acquire_shared("k", 1.5, 0, 5)  # type: ignore[arg-type]
            with pytest.raises(ValueError):
                await broker.acquire_all(["a"], 0, 5)
            with pytest.raises(TypeError):
                await broker.acquire_all("ab", 0, 5)
            with pytest.raises(ValueError):
                async with broker.lock_all(["a", "a"], wait=0, lease=5):
                    pytest.fail("must not enter")
            with pytest.raises(ValueError):
                async with broker.shared_lock("k", 65536, wait=0, lease=5):
                    pytest.fail("must not enter")
            for scoped in (broker.read_lock, broker.write_lock):
                with pytest.raises(ValueError):
                    async with scoped("a b", wait=0, lease=5):
                        pytest.fail("must not enter")
        finally:
            await broker.close()

    asyncio.run(asyncio.wait_for(main(), 30))
