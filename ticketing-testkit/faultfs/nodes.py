"""faultfs's inode table entries (Node), open files (Handle), the error
wrapper every FUSE operation runs in (handler) and the flags of a backing
open (backing_flags)."""

import errno
import functools
import logging
import os
import traceback

import trio
from pyfuse3 import FUSEError

from overlay import Overlay

log = logging.getLogger("faultfs")


class Node:
    """One inode the kernel knows (or that still has dirty data)."""

    __slots__ = ("ino", "key", "paths", "lookup", "fhs", "ov", "mtime_ns")

    def __init__(self, ino, key, path):
        self.ino = ino
        self.key = key  # (st_dev, st_ino) of the backing file; None once orphaned
        self.paths = {path} if path is not None else set()
        self.lookup = 0
        self.fhs = set()
        self.ov = Overlay()
        self.mtime_ns = 0  # time of the last dirty write


class Handle:
    __slots__ = ("fd", "node")

    def __init__(self, fd, node):
        self.fd = fd
        self.node = node


def handler(fn):
    """Turns OSError into FUSEError and any other exception into EIO (an
    exception escaping a pyfuse3 handler would end the main loop)."""

    @functools.wraps(fn)
    async def wrapper(*args, **kwargs):
        try:
            return await fn(*args, **kwargs)
        except FUSEError:
            raise
        except OSError as exc:
            raise FUSEError(exc.errno or errno.EIO) from None
        except trio.Cancelled:
            raise
        except Exception:
            log.error("faultfs: %s failed:\n%s", fn.__name__, traceback.format_exc())
            raise FUSEError(errno.EIO) from None

    return wrapper


def backing_flags(flags):
    """The flags of the backing open: read-write (fsync of any descriptor
    writes the inode's dirty data), no O_APPEND (pwrite must honour the
    offset the kernel gives), no O_TRUNC/O_CREAT/O_EXCL (handled apart), no
    O_DIRECT (alignment) and no O_SYNC/O_DSYNC (the kernel follows each
    write through such a descriptor with an fsync request)."""
    strip = (
        os.O_ACCMODE
        | os.O_APPEND
        | os.O_TRUNC
        | os.O_CREAT
        | os.O_EXCL
        | os.O_NOCTTY
        | getattr(os, "O_DIRECT", 0)
        | os.O_SYNC
        | os.O_DSYNC
    )
    return (flags & ~strip) | os.O_RDWR | os.O_CLOEXEC
