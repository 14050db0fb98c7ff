"""The exception hierarchy of the ``ticketing`` package, defined once.

The native module (``ticketing._native``) raises these classes by importing
this module; the public names are re-exported from ``ticketing``.
"""

from __future__ import annotations

__all__ = [
    "TicketingError",
    "BusyError",
    "ForbiddenError",
    "IndeterminateError",
    "InsufficientTimeError",
    "UnavailableError",
    "ReleaseUnconfirmedError",
    "ClosedError",
    "AuthFailedError",
    "LockTimeout",
]


class TicketingError(Exception):
    """Base class of every error the Ticketing client raises.

    ``code`` is the stable machine-readable name of the error (the Rust
    client's ``Error::code()``), e.g. ``"busy"`` or ``"indeterminate"``.
    Bad arguments are not a ``TicketingError``: they raise ``ValueError``
    (or ``TypeError`` for a wrong type) before anything is sent.
    """

    code: str = "error"


class BusyError(TicketingError):
    """The server refused the acquire for capacity (``B``). Final, never
    retried internally; back off and start a new acquire if you want."""

    code = "busy"


class ForbiddenError(TicketingError):
    """This client's principal may not use ``key`` (``F``); nothing was
    granted. For ``acquire_all``, ``key`` is the first key it may not use.
    Final and never retried: the server's configuration decides which key
    prefixes a principal may use."""

    code = "forbidden"

    def __init__(self, message: str = "", key: "str | None" = None) -> None:
        super().__init__(message, key)
        self.key = key

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class IndeterminateError(TicketingError):
    """The acquire was possibly sent but no definite answer arrived (the
    session was lost, or no answer within ``wait + 5 s``). Do NOT enter the
    critical section. The client asks the leader whether that acquire holds
    the key and releases exactly that grant within 5 s, so the key is free
    again in about a failover time; only if no leader answers within those
    5 s does a grant stay until its lease ends."""

    code = "indeterminate"


class InsufficientTimeError(TicketingError):
    """A grant arrived, but less than ``budget`` seconds of its conservative
    lease remained. The grant was handed back (released) by the client."""

    code = "insufficient_time"


class UnavailableError(TicketingError):
    """No ready connection within the wait budget. Nothing was sent: the
    lock was definitely not acquired."""

    code = "unavailable"


class ReleaseUnconfirmedError(TicketingError):
    """A release got no final answer within 5 s (or the release lane was
    full). The lock returns at its lease end at the latest."""

    code = "release_unconfirmed"


class ClosedError(TicketingError):
    """The broker was closed; every later call raises this."""

    code = "closed"


class AuthFailedError(TicketingError):
    """Authentication failed: the server rejected the client token, or the
    server's proof (``smac``) was wrong (a possible fake server)."""

    code = "auth_failed"


class LockTimeout(TicketingError, TimeoutError):
    """Raised by the scoped forms (``with broker.lock(...)``) when the lock
    was not granted within ``wait`` (the server answered ``T``). The plain
    ``acquire`` returns ``None`` instead."""

    code = "timeout"


# Shown (and pickled) under the public package name.
for _cls in (
    TicketingError,
    BusyError,
    ForbiddenError,
    IndeterminateError,
    InsufficientTimeError,
    UnavailableError,
    ReleaseUnconfirmedError,
    ClosedError,
    AuthFailedError,
    LockTimeout,
):
    _cls.__module__ = "ticketing"
del _cls
