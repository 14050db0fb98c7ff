"""Client for Ticketing, a distributed FIFO lock service with fencing tokens.

Synchronous API (this module) and asyncio API (:mod:`ticketing.aio`), both
driven by the one Rust client (``ticketing-client``) through the native
module ``ticketing._native``. Durations are seconds (``int`` or ``float``;
fractions round up to whole seconds).

Example::

    import ticketing

    with ticketing.TicketBroker.connect("127.0.0.1:5225") as broker:
        with broker.lock("stock:42", wait=5, lease=30, budget=2) as ticket:
            ...  # fence your database write with ticket.token

Blocking calls release the GIL and can be interrupted with Ctrl-C
(``KeyboardInterrupt``), which cancels a waiting acquire.
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import Callable, Iterable, Optional, Type, Union

from . import _native
from ._errors import (
    AuthFailedError,
    BusyError,
    ForbiddenError,
    ClosedError,
    IndeterminateError,
    InsufficientTimeError,
    LockTimeout,
    ReleaseUnconfirmedError,
    TicketingError,
    UnavailableError,
)
from ._native import Ticket

__version__: str = _native.__version__

__all__ = [
    "TicketBroker",
    "Ticket",
    "Lock",
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
    "Seconds",
]

#: A duration in seconds; fractions are rounded up to whole seconds.
Seconds = Union[int, float]

#: A file path (``tls_client_cert``, ``tls_client_key``).
_PathLike = Union[str, "os.PathLike[str]"]


def _addr_list(addrs: Union[str, Iterable[str]]) -> list[str]:
    """The configured addresses as a list; a single string is one item (the
    library splits every item at its commas: ``"a:1,b:2"`` is two addresses)."""
    if isinstance(addrs, str):
        return [addrs]
    return list(addrs)


def _key_list(keys: Iterable[str]) -> list[str]:
    """The keys of a multi-key acquire as a list. A single string is refused
    (``TypeError``) rather than taken as its characters."""
    if isinstance(keys, (str, bytes)):
        raise TypeError("keys must be an iterable of str (e.g. a list), not one string")
    return list(keys)


class TicketBroker:
    """A connection pool and router to a Ticketing service (one server or
    every member of a 3/5-node cluster).

    ``TicketBroker(["10.0.0.1:5225", "10.0.0.2:5225", "10.0.0.3:5225"],
    token="secret", tls="system-roots")``. ``tls`` is ``"off"`` (default),
    ``"system-roots"``, a path to a CA file, or ``"insecure-skip-verify"``
    (tests only). ``tls_client_cert`` and ``tls_client_key`` (PEM file paths,
    both or neither, with a TLS mode) present a client certificate to a
    server that requires one (``--tls-client-ca``). Construction does not wait for a connection (see
    :meth:`wait_ready`). A broker may be shared between threads. It is a
    context manager: leaving the ``with`` block closes it.

    After ``os.fork()`` a broker used in the child starts afresh (new
    runtime, new connections); tickets stay with the process that acquired
    them.
    """

    __slots__ = ("_native",)

    def __init__(
        self,
        addrs: Union[str, Iterable[str]],
        token: Optional[str] = None,
        tls: str = "off",
        tls_client_cert: Optional[_PathLike] = None,
        tls_client_key: Optional[_PathLike] = None,
    ) -> None:
        self._native = _native.Broker(_addr_list(addrs), token, tls, tls_client_cert, tls_client_key)

    @classmethod
    def connect(cls, addrs: Union[str, Iterable[str]]) -> "TicketBroker":
        """A broker for one address, e.g. ``"127.0.0.1:5225"``, or several: a
        list, or one string with the addresses separated by commas, as
        ``TICKETING_ADDR`` holds them (no token, no TLS). Returns as soon as a request could be routed, or once every
        first connection attempt has settled (failed: at most the 5 s
        handshake limit; a refused address returns at once), whichever comes
        first; the broker is returned either way and keeps reconnecting in
        the background."""
        self = cls.__new__(cls)
        self._native = _native.Broker.connect(_addr_list(addrs))
        return self

    def wait_ready(self, timeout: Seconds) -> bool:
        """Waits up to ``timeout`` seconds for a ready connection (the leader
        preferred). Returns ``True`` if there is one."""
        return self._native.wait_ready(timeout)

    def acquire(self, key: str, wait: Seconds, lease: Seconds, budget: Seconds = 0) -> Optional[Ticket]:
        """Acquires the lock on ``key``.

        Waits in the server's FIFO queue up to ``wait`` seconds (0 = one
        immediate attempt). ``lease`` is how long the grant lives (1-250 s);
        ``budget`` is the least time the caller needs once granted (0 to
        ``lease``): a grant with less conservative time left is handed back
        and :class:`InsufficientTimeError` is raised.

        Returns a :class:`Ticket`, or ``None`` if the lock was not granted
        within ``wait``. Raises ``ValueError`` for bad arguments (nothing is
        sent), :class:`BusyError`, :class:`ForbiddenError` (this token may
        not use ``key``; its ``.key`` names it), :class:`IndeterminateError`
        (do NOT enter the critical section), :class:`UnavailableError`,
        :class:`ClosedError`, :class:`AuthFailedError`.

        Blocks with the GIL released; Ctrl-C raises ``KeyboardInterrupt``
        and cancels the acquire.
        """
        return self._native.acquire(key, wait, lease, budget)

    def lock(self, key: str, wait: Seconds, lease: Seconds, budget: Seconds = 0) -> "Lock":
        """The scoped form of :meth:`acquire`::

            with broker.lock("k", wait=5, lease=30) as ticket:
                ...

        Entering acquires (raising :class:`LockTimeout` when the lock was
        not granted within ``wait``, or any error of :meth:`acquire`);
        leaving releases the ticket.
        """
        return Lock(lambda: self.acquire(key, wait, lease, budget), f"lock {key!r}", wait)

    def acquire_shared(
        self, key: str, n: int, wait: Seconds, lease: Seconds, budget: Seconds = 0
    ) -> Optional[Ticket]:
        """Acquires one of ``n`` counted permits of ``key`` (a semaphore of
        ``n``; ``n`` is 1-65535).

        Granted while fewer than ``n`` counted holders hold ``key`` and no
        exclusive holder does, in FIFO order with every other request on the
        key. The ticket's ``slot`` is its permit index in ``0..n`` (the
        lowest free one), so a resource can be fenced per (key, slot); each
        grant has its own ``token``. Other arguments, the result and the
        errors as :meth:`acquire`; ``ValueError`` also for ``n`` out of
        range, ``TypeError`` for a non-int ``n``.
        """
        return self._native.acquire_shared(key, n, wait, lease, budget)

    def shared_lock(self, key: str, n: int, wait: Seconds, lease: Seconds, budget: Seconds = 0) -> "Lock":
        """The scoped form of :meth:`acquire_shared`::

            with broker.shared_lock("pool", 5, wait=5, lease=30) as ticket:
                ...  # ticket.slot is this holder's permit, 0..4

        Raises :class:`LockTimeout` when not granted within ``wait``;
        leaving releases the permit.
        """
        return Lock(lambda: self.acquire_shared(key, n, wait, lease, budget), f"shared lock {key!r} (n={n!r})", wait)

    def acquire_all(self, keys: Iterable[str], wait: Seconds, lease: Seconds, budget: Seconds = 0) -> Optional[Ticket]:
        """Acquires every key of ``keys`` (2-16 distinct keys, e.g. a list)
        exclusively and atomically: one :class:`Ticket` with ONE token for
        all of them (``ticket.keys``), granted when the request is first in
        the queue of every key and all are free; no deadlock, whatever the
        key order. ``release()`` frees every key.

        Other arguments, the result and the errors as :meth:`acquire`;
        ``ValueError`` also for fewer than 2 or more than 16 keys, a key
        given twice, or keys too long together for one request; a single
        ``str`` instead of an iterable of them raises ``TypeError``.
        """
        return self._native.acquire_all(_key_list(keys), wait, lease, budget)

    def lock_all(self, keys: Iterable[str], wait: Seconds, lease: Seconds, budget: Seconds = 0) -> "Lock":
        """The scoped form of :meth:`acquire_all`::

            with broker.lock_all(["acct:1", "acct:2"], wait=5, lease=30) as ticket:
                ...  # fence the writes of both keys with ticket.token

        Raises :class:`LockTimeout` when not granted within ``wait``;
        leaving releases every key.
        """
        key_list = _key_list(keys)
        return Lock(lambda: self.acquire_all(key_list, wait, lease, budget), f"locks {key_list!r}", wait)

    def read_lock(self, key: str, wait: Seconds, lease: Seconds, budget: Seconds = 0) -> "Lock":
        """The shared (read) side of the read/write lock ``key``, scoped::

            with broker.read_lock("doc:7", wait=5, lease=30) as ticket:
                ...

        Any number of readers hold ``key`` together; a writer
        (:meth:`write_lock`) holds it alone, and readers that arrive after a
        waiting writer queue behind it (writers do not starve). Raises
        :class:`LockTimeout` when not granted within ``wait``; other errors
        as :meth:`acquire`.
        """
        return Lock(lambda: self._native.read_lock(key, wait, lease, budget), f"read lock {key!r}", wait)

    def write_lock(self, key: str, wait: Seconds, lease: Seconds, budget: Seconds = 0) -> "Lock":
        """The exclusive (write) side of the read/write lock ``key``, scoped
        (see :meth:`read_lock`); the same grant as :meth:`lock`."""
        return Lock(lambda: self._native.write_lock(key, wait, lease, budget), f"write lock {key!r}", wait)

    def close(self) -> None:
        """Closes the broker: every live ticket is released best-effort,
        then the connections close. Later calls raise :class:`ClosedError`.
        Calling ``close()`` again does nothing."""
        self._native.close()

    def __enter__(self) -> "TicketBroker":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()


class Lock:
    """Context manager returned by :meth:`TicketBroker.lock` (and by
    ``shared_lock``, ``lock_all``, ``read_lock``, ``write_lock``): acquires
    on ``__enter__`` (returning the :class:`Ticket`), releases on
    ``__exit__``.

    If the body raised, that exception propagates even if the release
    fails. If the body completed and the release raises (e.g.
    :class:`ReleaseUnconfirmedError`), that error propagates. A release
    answered "not the holder" (the lease ran out during the body) is not an
    error: check ``ticket.expired`` and rely on the fencing token.
    """

    __slots__ = ("_acquire", "_what", "_wait", "_ticket")

    def __init__(self, acquire: Callable[[], Optional[Ticket]], what: str, wait: Seconds) -> None:
        self._acquire = acquire
        self._what = what
        self._wait = wait
        self._ticket: Optional[Ticket] = None

    def __enter__(self) -> Ticket:
        if self._ticket is not None:
            raise RuntimeError("this lock context is already entered; call the broker's method again")
        ticket = self._acquire()
        if ticket is None:
            raise LockTimeout(f"{self._what} not granted within wait={self._wait!r} s")
        self._ticket = ticket
        return ticket

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        ticket, self._ticket = self._ticket, None
        if ticket is None:
            return
        if exc is None:
            ticket.release()
            return
        try:
            ticket.release()
        except Exception as err:  # the body's exception wins; the lease ends the lock at the latest
            _note(exc, f"ticketing: releasing {self._what} also failed: {err!r}")


def _note(exc: BaseException, text: str) -> None:
    """Adds a note to ``exc`` where Python supports it (3.11+)."""
    add_note = getattr(exc, "add_note", None)
    if add_note is not None:
        add_note(text)
