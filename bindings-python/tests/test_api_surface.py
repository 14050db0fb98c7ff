"""The public surface: exception hierarchy, exports, docstrings. No server."""

from __future__ import annotations

import inspect

import pytest

import ticketing
from ticketing import _native, aio

ERRORS = {
    "BusyError": "busy",
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
