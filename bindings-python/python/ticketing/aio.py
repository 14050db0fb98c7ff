"""asyncio API of the Ticketing client, driven by the same Rust client as
the sync API (:mod:`ticketing`).

Example::

    import asyncio
    from ticketing import aio

    async def main() -> None:
        async with await aio.TicketBroker.connect("127.0.0.1:5225") as broker:
            async with broker.lock("stock:42", wait=5, lease=30) as ticket:
                ...  # fence your database write with ticket.token

    asyncio.run(main())

Every operation runs on the client's background runtime and completes an
asyncio future through ``loop.call_soon_threadsafe``; the event loop never
blocks. Cancelling a task that awaits :meth:`TicketBroker.acquire` cancels
the acquire (docs/client.md, Acquire step 7): not yet sent → nothing happens; possibly
sent → the client closes that connection, and a grant that still arrives is
released by the client.
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any, Awaitable, Callable, Iterable, Optional, Type, Union, cast

from . import Seconds, _addr_list, _key_list, _native, _note, _PathLike
from ._errors import LockTimeout

__all__ = ["TicketBroker", "Ticket", "Lock"]

_Done = Callable[[bool, Any], None]


#: The most a cancelled operation waits for the client to drop its future.
_DROP_WAIT = 2.0


def _resolve(fut: "asyncio.Future[Any]", ok: bool, value: Any) -> None:
    """Completes ``fut`` on its loop. ``(False, None)`` means the native task
    was dropped (cancelled). A value for a future that is already done is
    dropped (a late Ticket is then released best-effort when collected)."""
    if fut.done():
        return
    if ok:
        fut.set_result(value)
    elif value is None:
        fut.cancel()
    else:
        fut.set_exception(value)


async def _run(start: Callable[[_Done], _native.Pending]) -> Any:
    """Starts a native operation and awaits its result.

    Cancelling the awaiting task cancels the native operation (drops the
    Rust future: docs/client.md, Acquire step 7 for an acquire) and waits, bounded, until
    the future is gone, so the client has taken the cancel before the
    ``CancelledError`` propagates."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Any] = loop.create_future()

    def done(ok: bool, value: Any) -> None:  # runs on a client runtime thread
        try:
            loop.call_soon_threadsafe(_resolve, fut, ok, value)
        except RuntimeError:  # the loop is closed: nobody waits; drop the value
            pass

    pending = start(done)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        pending.cancel()
        await asyncio.wait((fut,), timeout=_DROP_WAIT)
        if fut.done() and not fut.cancelled():
            fut.exception()  # a result that raced the cancel is dropped; mark it retrieved
        raise
    except BaseException:
        pending.cancel()  # no-op when finished
        raise


class Ticket:
    """A granted lock (asyncio flavour): ``token``, ``key``, ``keys``,
    ``slot``, ``remaining()``, ``expired`` and ``await release()``.

    A ticket that is garbage-collected without ``release()`` is released
    best-effort in the background; so is every live ticket of a broker that
    is closed.
    """

    __slots__ = ("_native",)

    def __init__(self, native: _native.Ticket) -> None:
        self._native = native

    @property
    def token(self) -> int:
        """The fencing token: ``1 <= token < 2**63``, strictly increasing over
        all grants. Store it with your write; refuse lower tokens."""
        return self._native.token

    @property
    def key(self) -> str:
        """The key this ticket holds (the first of a multi-key grant)."""
        return self._native.key

    @property
    def keys(self) -> tuple[str, ...]:
        """Every key this ticket holds: one, or all of an
        :meth:`TicketBroker.acquire_all` grant in the order asked for."""
        return self._native.keys

    @property
    def slot(self) -> Optional[int]:
        """The permit index in ``0..n`` of a counted grant
        (:meth:`TicketBroker.acquire_shared`, ``read_lock``); ``None`` for an
        exclusive one."""
        return self._native.slot

    def remaining(self) -> float:
        """Seconds left until the conservative lease deadline (never
        negative)."""
        return self._native.remaining()

    @property
    def expired(self) -> bool:
        """True once the conservative deadline has passed."""
        return self._native.expired

    async def release(self) -> bool:
        """Releases exactly this grant (every key of a multi-key grant):
        ``True`` when released, ``False`` when this ticket no longer held the
        lock (for several keys: any of them). Raises
        :class:`~ticketing.ReleaseUnconfirmedError` without a final answer
        within 5 s, :class:`~ticketing.ForbiddenError` when the server
        answered that this token may no longer use the key (final). A second
        call returns the first definite result."""
        return cast(bool, await _run(self._native.release_start))

    def __repr__(self) -> str:
        return "aio." + repr(self._native)


class TicketBroker:
    """asyncio connection pool and router to a Ticketing service; the same
    arguments as :class:`ticketing.TicketBroker`. An async context manager:
    leaving ``async with`` closes it. Use it from any number of tasks (and
    event loops)."""

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
    async def connect(cls, addrs: Union[str, Iterable[str]]) -> "TicketBroker":
        """A broker for one address, e.g. ``"127.0.0.1:5225"``, or several (a
        list, or one comma-separated string, as ``TICKETING_ADDR`` holds them)."""
        native = await _run(lambda done: _native.Broker.connect_start(_addr_list(addrs), done))
        self = cls.__new__(cls)
        self._native = native
        return self

    async def wait_ready(self, timeout: Seconds) -> bool:
        """Waits up to ``timeout`` seconds for a ready connection; ``True``
        if there is one."""
        return cast(bool, await _run(lambda done: self._native.wait_ready_start(timeout, done)))

    async def acquire(self, key: str, wait: Seconds, lease: Seconds, budget: Seconds = 0) -> Optional[Ticket]:
        """Acquires ``key``: a :class:`Ticket`, or ``None`` when not granted
        within ``wait`` seconds. Same arguments and errors as
        :meth:`ticketing.TicketBroker.acquire`. Cancelling the awaiting task
        cancels the acquire."""
        got = await _run(lambda done: self._native.acquire_start(key, wait, lease, budget, done))
        return None if got is None else Ticket(got)

    def lock(self, key: str, wait: Seconds, lease: Seconds, budget: Seconds = 0) -> "Lock":
        """The scoped form: ``async with broker.lock(key, wait=5, lease=30)
        as ticket:`` acquires (raising :class:`~ticketing.LockTimeout` when
        not granted within ``wait``) and releases on exit."""
        return Lock(lambda: self.acquire(key, wait, lease, budget), f"lock {key!r}", wait)

    async def acquire_shared(
        self, key: str, n: int, wait: Seconds, lease: Seconds, budget: Seconds = 0
    ) -> Optional[Ticket]:
        """One of ``n`` counted permits of ``key``: a :class:`Ticket` with its
        ``slot``, or ``None`` when not granted within ``wait``. Same
        arguments and errors as :meth:`ticketing.TicketBroker.acquire_shared`.
        Cancelling the awaiting task cancels the acquire."""
        got = await _run(lambda done: self._native.acquire_shared_start(key, n, wait, lease, budget, done))
        return None if got is None else Ticket(got)

    def shared_lock(self, key: str, n: int, wait: Seconds, lease: Seconds, budget: Seconds = 0) -> "Lock":
        """The scoped form of :meth:`acquire_shared`: ``async with
        broker.shared_lock(key, 5, wait=5, lease=30) as ticket:`` (raising
        :class:`~ticketing.LockTimeout` when not granted within ``wait``)."""
        return Lock(lambda: self.acquire_shared(key, n, wait, lease, budget), f"shared lock {key!r} (n={n!r})", wait)

    async def acquire_all(
        self, keys: Iterable[str], wait: Seconds, lease: Seconds, budget: Seconds = 0
    ) -> Optional[Ticket]:
        """Every key of ``keys`` (2-16 distinct keys) at once: one
        :class:`Ticket`, one token, or ``None`` when not granted within
        ``wait``. Same arguments and errors as
        :meth:`ticketing.TicketBroker.acquire_all`. Cancelling the awaiting
        task cancels the acquire."""
        key_list = _key_list(keys)
        got = await _run(lambda done: self._native.acquire_all_start(key_list, wait, lease, budget, done))
        return None if got is None else Ticket(got)

    def lock_all(self, keys: Iterable[str], wait: Seconds, lease: Seconds, budget: Seconds = 0) -> "Lock":
        """The scoped form of :meth:`acquire_all`: ``async with
        broker.lock_all(["a", "b"], wait=5, lease=30) as ticket:``; leaving
        releases every key."""
        key_list = _key_list(keys)
        return Lock(lambda: self.acquire_all(key_list, wait, lease, budget), f"locks {key_list!r}", wait)

    def read_lock(self, key: str, wait: Seconds, lease: Seconds, budget: Seconds = 0) -> "Lock":
        """The shared (read) side of the read/write lock ``key``, scoped:
        ``async with broker.read_lock(key, wait=5, lease=30) as ticket:``
        (see :meth:`ticketing.TicketBroker.read_lock`)."""
        return Lock(lambda: self._acquire_with(self._native.read_lock_start, key, wait, lease, budget),
                    f"read lock {key!r}", wait)

    def write_lock(self, key: str, wait: Seconds, lease: Seconds, budget: Seconds = 0) -> "Lock":
        """The exclusive (write) side of the read/write lock ``key``, scoped
        (see :meth:`read_lock`)."""
        return Lock(lambda: self._acquire_with(self._native.write_lock_start, key, wait, lease, budget),
                    f"write lock {key!r}", wait)

    async def _acquire_with(
        self,
        start: Callable[[str, Seconds, Seconds, Seconds, _Done], _native.Pending],
        key: str,
        wait: Seconds,
        lease: Seconds,
        budget: Seconds,
    ) -> Optional[Ticket]:
        got = await _run(lambda done: start(key, wait, lease, budget, done))
        return None if got is None else Ticket(got)

    async def close(self) -> None:
        """Closes the broker: live tickets are released best-effort, then
        the connections close; later calls raise
        :class:`~ticketing.ClosedError`."""
        await _run(self._native.close_start)

    async def __aenter__(self) -> "TicketBroker":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.close()


class Lock:
    """Async context manager returned by :meth:`TicketBroker.lock` (and by
    ``shared_lock``, ``lock_all``, ``read_lock``, ``write_lock``): acquires
    on entry, releases on exit; the same exception rules as
    :class:`ticketing.Lock`."""

    __slots__ = ("_acquire", "_what", "_wait", "_ticket")

    def __init__(self, acquire: Callable[[], Awaitable[Optional[Ticket]]], what: str, wait: Seconds) -> None:
        self._acquire = acquire
        self._what = what
        self._wait = wait
        self._ticket: Optional[Ticket] = None

    async def __aenter__(self) -> Ticket:
        if self._ticket is not None:
            raise RuntimeError("this lock context is already entered; call the broker's method again")
        ticket = await self._acquire()
        if ticket is None:
            raise LockTimeout(f"{self._what} not granted within wait={self._wait!r} s")
        self._ticket = ticket
        return ticket

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        ticket, self._ticket = self._ticket, None
        if ticket is None:
            return
        if exc is None:
            await ticket.release()
            return
        try:
            await ticket.release()
        except Exception as err:  # the body's exception wins
            _note(exc, f"ticketing: releasing {self._what} also failed: {err!r}")
