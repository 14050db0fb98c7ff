"""Type stubs of the native module ``ticketing._native`` (private: use
``ticketing`` and ``ticketing.aio``)."""

import os
from typing import Any, Callable, Optional, Union, final

__version__: str
__all__ = ["Broker", "Pending", "Ticket", "__version__", "_close_gate"]

_Seconds = Union[int, float]
_Done = Callable[[bool, Any], None]

@final
class Pending:
    """A client operation running for an asyncio caller."""

    def cancel(self) -> None:
        """Cancels the operation if still running: drops the client future,
        then calls the callback with ``(False, None)``."""
    def done(self) -> bool:
        """True once the operation finished or was cancelled."""

@final
class Ticket:
    """A granted lock: the fencing ``token``, the ``key`` (``keys`` for a
    multi-key grant), the ``slot`` of a counted grant, the time left of the
    conservative lease, and ``release()``.

    A ticket that is garbage-collected without ``release()`` is released
    best-effort in the background; so is every live ticket of a closed
    broker. Tickets stay with the process that acquired them.
    """

    @property
    def token(self) -> int:
        """The fencing token: ``1 <= token < 2**63``, strictly increasing."""
    @property
    def key(self) -> str:
        """The key this ticket holds."""
    @property
    def keys(self) -> tuple[str, ...]:
        """Every key this ticket holds (one, or all of a multi-key grant)."""
    @property
    def slot(self) -> Optional[int]:
        """The permit index of a counted grant; None for an exclusive one."""
    @property
    def expired(self) -> bool:
        """True once the conservative deadline has passed."""
    def remaining(self) -> float:
        """Seconds left until the conservative lease deadline (never negative)."""
    def release(self) -> bool:
        """Releases this grant: True if released, False if no longer the
        holder; ReleaseUnconfirmedError without an answer within 5 s;
        ForbiddenError (final) when the token may no longer use the key."""
    def release_start(self, done: _Done) -> Pending:
        """asyncio form of ``release()``."""

@final
class Broker:
    """Native connection pool and router (wrapped by ``ticketing.TicketBroker``)."""

    def __new__(
        cls,
        addrs: list[str],
        token: Optional[str] = None,
        tls: str = "off",
        tls_client_cert: Optional[Union[str, os.PathLike[str]]] = None,
        tls_client_key: Optional[Union[str, os.PathLike[str]]] = None,
    ) -> Broker: ...
    @staticmethod
    def connect(addrs: list[str]) -> Broker:
        """A broker for ``addrs`` (each may hold several, comma-separated)."""
    @staticmethod
    def connect_start(addrs: list[str], done: _Done) -> Pending:
        """asyncio form of ``connect``."""
    def wait_ready(self, timeout: _Seconds) -> bool:
        """Waits up to ``timeout`` seconds for a ready connection."""
    def wait_ready_start(self, timeout: _Seconds, done: _Done) -> Pending:
        """asyncio form of ``wait_ready``."""
    def acquire(self, key: str, wait: _Seconds, lease: _Seconds, budget: _Seconds) -> Optional[Ticket]:
        """Acquires ``key``: a Ticket, or None when not granted within ``wait``."""
    def acquire_start(self, key: str, wait: _Seconds, lease: _Seconds, budget: _Seconds, done: _Done) -> Pending:
        """asyncio form of ``acquire``."""
    def acquire_shared(
        self, key: str, n: int, wait: _Seconds, lease: _Seconds, budget: _Seconds
    ) -> Optional[Ticket]:
        """Acquires one of ``n`` counted permits of ``key``."""
    def acquire_shared_start(
        self, key: str, n: int, wait: _Seconds, lease: _Seconds, budget: _Seconds, done: _Done
    ) -> Pending:
        """asyncio form of ``acquire_shared``."""
    def acquire_all(self, keys: list[str], wait: _Seconds, lease: _Seconds, budget: _Seconds) -> Optional[Ticket]:
        """Acquires every key of ``keys`` at once: one Ticket, one token."""
    def acquire_all_start(
        self, keys: list[str], wait: _Seconds, lease: _Seconds, budget: _Seconds, done: _Done
    ) -> Pending:
        """asyncio form of ``acquire_all``."""
    def read_lock(self, key: str, wait: _Seconds, lease: _Seconds, budget: _Seconds) -> Optional[Ticket]:
        """Acquires the shared (read) side of the read/write lock ``key``."""
    def read_lock_start(self, key: str, wait: _Seconds, lease: _Seconds, budget: _Seconds, done: _Done) -> Pending:
        """asyncio form of ``read_lock``."""
    def write_lock(self, key: str, wait: _Seconds, lease: _Seconds, budget: _Seconds) -> Optional[Ticket]:
        """Acquires the exclusive (write) side of the read/write lock ``key``."""
    def write_lock_start(self, key: str, wait: _Seconds, lease: _Seconds, budget: _Seconds, done: _Done) -> Pending:
        """asyncio form of ``write_lock``."""
    def close(self) -> None:
        """Closes the broker (best-effort releases of live tickets first)."""
    def close_start(self, done: _Done) -> Pending:
        """asyncio form of ``close``."""

def _close_gate() -> None:
    """``atexit`` hook: after it, no client thread calls into Python."""
