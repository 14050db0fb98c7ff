#!/usr/bin/python3
"""faultfs: a FUSE passthrough that simulates power loss and disk faults.

Usage:

    /usr/bin/python3 faultfs.py BACKING_DIR MOUNTPOINT CONTROL_SOCKET
        [--seed N] [--exit-with-parent] [--debug]

MOUNTPOINT shows the files of BACKING_DIR. BACKING_DIR plays the disk: what
is in it is what survives a power cut. Needs Debian's python3-pyfuse3
(`apt-get install fuse3 python3-pyfuse3`), which only Debian's interpreter
/usr/bin/python3 imports, and /dev/fuse. See README.md next to this file.

The model (closest to ext4 with data=ordered, LazyFS's default):

- File data written through the mount is "dirty" (like the page cache): it
  is kept in memory here, per inode, and is visible at once to reads and to
  the size getattr reports; it reaches BACKING_DIR only when that file is
  fsync'ed or fdatasync'ed (then the backing file is written and
  os.fsync'ed / os.fdatasync'ed); a write through a descriptor opened with
  O_SYNC / O_DSYNC is durable too (the kernel follows it with an fsync).
  sync(2) and syncfs(2) do not reach a FUSE file system: they do not
  persist dirty data here. Closing a file does not either.
- Metadata operations (create, mkdir, rename, unlink, rmdir, truncate and
  O_TRUNC, chmod, ...) are applied to BACKING_DIR at once: they are durable
  at once, as with a journal that commits every metadata change at once. A
  rename of a written-but-unsynced file keeps its dirty data with it (the
  data belongs to the inode, not to the name). A truncate applies to the
  backing file at once and cuts the dirty data at the new size.
- Dirty data is stored per inode as a sorted list of non-overlapping,
  non-adjacent extents (offset, bytearray); a write merges into them (an
  append to the last extent is an amortised O(len) bytearray extend), an
  fsync writes each extent with os.pwrite and empties the list. No work
  proportional to the file size happens per write.
- No reordering between files: each fsync persists exactly that file's
  dirty data, and a power loss drops all dirty data of every file.

Control: one command per line on the Unix socket CONTROL_SOCKET, one answer
line each, `ok ...` or `error ...`:

    powerloss        drop every dirty byte of every file (unsynced writes are
                     lost). The caller kills the processes using the mount
                     first, as a power cut would: a process that keeps
                     running would see its files change under it.
                     -> ok lost_bytes=N files=M
    powerloss torn   like powerloss, but for each file with dirty data a
                     seeded-random strict prefix (1..len-1 bytes, 0 for a
                     1-byte tail) of its last dirty extent (its tail: the
                     last write) reaches the disk.
    powerloss zero   like powerloss, but the size the file's last dirty
                     extent gave it reaches the disk and its data does not:
                     the bytes past the old durable size read as zeros
                     (what ext4/XFS can show after a crash). Overwrites of
                     already durable bytes are lost (the old bytes stay).
    fail OP ERRNO    from now on, OP fails with ERRNO (a name such as EIO,
                     ENOSPC, EROFS, EDQUOT, or a number). OP is write, fsync,
                     create, mkdir, rename, truncate, unlink, rmdir or all
                     (all of these). Faults accumulate until `fail off`.
                     A failing fsync of a file with dirty data DROPS that
                     data (Linux marks the pages clean after a failed
                     writeback: the data is gone, and a retried fsync
                     "succeeds" since nothing is dirty any more); an fsync of
                     a file with nothing dirty succeeds; an fsync of a
                     directory fails.
    fail off         no more faults.
    delay fsync MS   from now on, each fsync of a file with dirty data takes
                     MS milliseconds more (a slow disk: other operations go
                     on meanwhile). A power loss during that time persists
                     nothing of what the fsync was writing (it fails with EIO
                     for a process that is still there). -> ok delay=MS
    delay off        fsyncs at full speed again.
    crash [torn|zero]
                     a power cut at this instant, with the processes still
                     running: every operation that would change the disk
                     fails with EIO from now on (as `fail all EIO`), and so
                     does every fsync, even of a file with nothing dirty (no
                     process may hear that anything reached the disk after
                     the cut); an fsync in flight persists nothing; then
                     `powerloss [torn|zero]`.
                     Kill the processes, then `thaw`. Use it rather than
                     `powerloss` when a process may be inside an fsync: a
                     killed process is reaped only once its fsync returns,
                     which then has reached the disk.
    thaw             as `fail off`, after a crash.
    status           -> ok dirty_bytes=N fsyncs=N writes=N faults=N
                        dirty_files=N failing=OP:ERRNO,...|none seed=N

Locks: pyfuse3 implements neither flock nor POSIX locks, so the kernel
handles flock(2) and fcntl locks locally on the mount (FUSE's fallback when
the file system does not claim them): they work between the processes that
use this one mount (a second server on the same data dir is refused), not
across mounts of the same BACKING_DIR. fallocate(2) is not supported by
pyfuse3: it fails with EOPNOTSUPP (glibc's posix_fallocate then writes
zeros, which are dirty data). mmap works through the kernel's page cache:
dirty mapped pages arrive here as writes, and msync(MS_SYNC) is an fsync.
O_DIRECT writes are treated as dirty data too (they would sit in the disk's
volatile cache until a flush).

The mount prints `faultfs: mounted MOUNTPOINT` on stdout once it is ready.
SIGTERM or SIGINT unmounts it and removes the socket; so does an unmount
(fusermount3 -u MOUNTPOINT); --exit-with-parent does the same when the
process that started it exits.

Code: this file has the FUSE operations on inodes and files (FaultFS) and
main(); namespace.py the directory and name operations; nodes.py the inode
and handle entries and the error wrapper; power.py the power loss;
overlay.py the dirty-data extents (Overlay); control.py the control socket
and its commands. faultfs.py is the one to run.
"""

import argparse
import errno
import logging
import os
import random
import signal
import stat as stat_m
import sys
import time
import traceback

try:
    import pyfuse3
    import trio
    from pyfuse3 import FUSEError
except ImportError as exc:  # pragma: no cover - depends on the machine
    sys.stderr.write(
        "faultfs: cannot import pyfuse3/trio (%s): install them with "
        "`apt-get install fuse3 python3-pyfuse3` and run faultfs with "
        "Debian's /usr/bin/python3\n" % exc
    )
    sys.exit(2)

import control
from overlay import Overlay, pwrite_all

log = logging.getLogger("faultfs")

# Seconds the kernel may cache names and attributes. Everything that changes
# them behind the kernel's back (a power loss, a failed fsync) invalidates
# the affected inodes explicitly.
TIMEOUT = 1.0


from nodes import Handle, Node, backing_flags, handler
from namespace import Namespace
from power import PowerLoss


class FaultFS(PowerLoss, Namespace, pyfuse3.Operations):
    supports_dot_lookup = True
    enable_writeback_cache = False

    def __init__(self, backing, seed):
        super().__init__()
        self.backing = os.path.realpath(backing)
        self.seed = seed
        self.rng = random.Random(seed)
        st = os.lstat(self.backing)
        root = Node(pyfuse3.ROOT_INODE, (st.st_dev, st.st_ino), self.backing)
        root.lookup = 1
        self.nodes = {root.ino: root}
        self.by_key = {root.key: root}
        self.handles = {}
        self.next_ino = pyfuse3.ROOT_INODE + 1
        self.next_fh = 1
        self.faults = {}  # op -> errno
        self.fsync_delay = 0.0  # seconds each fsync of dirty data takes (`delay fsync MS`)
        self.power_gen = 0  # power losses so far (an fsync in flight across one persists nothing)
        self.frozen = False  # after `crash`, until `thaw`: the power is off, no fsync succeeds
        self.fsyncs = 0
        self.writes = 0
        self.fault_count = 0

    # ----- bookkeeping -----------------------------------------------------

    def _node(self, ino):
        node = self.nodes.get(ino)
        if node is None:
            raise FUSEError(errno.ENOENT)
        return node

    def _path(self, node):
        for p in node.paths:
            return p
        raise FUSEError(errno.ENOENT)

    def _child(self, parent_ino, name):
        name = os.fsdecode(name)
        if "/" in name:
            raise FUSEError(errno.EINVAL)
        return os.path.join(self._path(self._node(parent_ino)), name)

    def _node_for(self, st, path):
        key = (st.st_dev, st.st_ino)
        node = self.by_key.get(key)
        if node is None:
            node = Node(self.next_ino, key, path)
            self.next_ino += 1
            self.nodes[node.ino] = node
            self.by_key[key] = node
        elif path is not None:
            node.paths.add(path)
        return node

    def _maybe_drop(self, node):
        """Forgets a node nobody needs: not known to the kernel, not open,
        and either clean or orphaned (its data can never be read again)."""
        if node.ino == pyfuse3.ROOT_INODE or node.lookup > 0 or node.fhs:
            return
        if node.ov and node.key is not None:
            return  # dirty data of a living file stays, like the page cache
        self.nodes.pop(node.ino, None)
        if node.key is not None and self.by_key.get(node.key) is node:
            del self.by_key[node.key]

    def _orphan(self, node):
        """The node's last name is gone: a new file with the same backing
        inode number must get a new node."""
        if node.key is not None and self.by_key.get(node.key) is node:
            del self.by_key[node.key]
        node.key = None
        if not node.fhs:
            node.ov = Overlay()
        self._maybe_drop(node)

    def _unlinked(self, path, st):
        node = self.by_key.get((st.st_dev, st.st_ino))
        if node is None:
            return
        node.paths.discard(path)
        if not node.paths and (stat_m.S_ISDIR(st.st_mode) or st.st_nlink <= 1):
            self._orphan(node)

    def _stat(self, node):
        for fh in node.fhs:
            return os.fstat(self.handles[fh].fd)
        return os.lstat(self._path(node))

    def _entry(self, node, st):
        e = pyfuse3.EntryAttributes()
        e.st_ino = node.ino
        e.generation = 0
        e.entry_timeout = TIMEOUT
        e.attr_timeout = TIMEOUT
        e.st_mode = st.st_mode
        e.st_nlink = st.st_nlink
        e.st_uid = st.st_uid
        e.st_gid = st.st_gid
        e.st_rdev = st.st_rdev
        size = st.st_size
        mtime = st.st_mtime_ns
        if node.ov:
            size = max(size, node.ov.end())
            mtime = max(mtime, node.mtime_ns)
        e.st_size = size
        e.st_blksize = st.st_blksize
        e.st_blocks = max(st.st_blocks, (size + 511) // 512)
        e.st_atime_ns = st.st_atime_ns
        e.st_mtime_ns = mtime
        e.st_ctime_ns = max(st.st_ctime_ns, mtime)
        return e

    def _lookup_path(self, path):
        """The entry of `path`, counted as one lookup by the kernel."""
        st = os.lstat(path)
        node = self._node_for(st, path)
        node.lookup += 1
        return self._entry(node, st)

    def _made(self, path, ctx):
        """The entry of what mkdir, symlink or mknod just made at `path`,
        given to the caller's uid/gid where possible."""
        try:
            os.chown(path, ctx.uid, ctx.gid, follow_symlinks=False)
        except OSError:
            pass
        return self._lookup_path(path)

    def _fault(self, op):
        err = self.faults.get(op)
        if err is not None:
            self.fault_count += 1
            raise FUSEError(err)

    def _new_handle(self, fd, node):
        fh = self.next_fh
        self.next_fh += 1
        self.handles[fh] = Handle(fd, node)
        node.fhs.add(fh)
        return fh

    def _open_backing(self, path, flags, mode=0o666, extra=0):
        try:
            return os.open(path, backing_flags(flags) | extra, mode)
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ETXTBSY):
                raise
        # Not writable: open with the access mode asked for.
        return os.open(path, (backing_flags(flags) & ~os.O_ACCMODE) | (flags & os.O_ACCMODE) | extra, mode)

    async def _invalidate(self, nodes):
        inos = [n.ino for n in nodes if n.lookup > 0 or n.fhs]
        if not inos:
            return

        def run():
            for ino in inos:
                try:
                    pyfuse3.invalidate_inode(ino, False)
                except OSError:
                    pass  # the kernel no longer knows it

        # In a thread: the kernel may wait for a page lock held by a request
        # that this event loop has to answer.
        await trio.to_thread.run_sync(run)

    async def _sync(self, node, fd, datasync):
        """fsync/fdatasync of one inode: its dirty data reaches the disk."""
        self.fsyncs += 1
        if self.frozen:
            # The power is off: nothing reaches the disk, and no process
            # hears that it did (not even for a file with nothing dirty).
            node.ov = Overlay()
            raise FUSEError(errno.EIO)
        err = self.faults.get("fsync")
        if err is not None:
            if node.ov:
                # A failed writeback: the pages are marked clean, the data
                # is gone; the next fsync finds nothing to write.
                self.fault_count += 1
                node.ov = Overlay()
                node.mtime_ns = 0
                await self._invalidate([node])
                raise FUSEError(err)
            return
        if self.fsync_delay > 0 and node.ov:
            # A slow disk: the fsync takes this long, and a power loss in
            # the meantime takes everything it was writing.
            gen = self.power_gen
            await trio.sleep(self.fsync_delay)
            if self.power_gen != gen:
                raise FUSEError(errno.EIO)
        ov = node.ov
        if ov:
            for start, buf in ov.extents():
                pwrite_all(fd, buf, start)
            # Writes that arrive during the fdatasync below are dirty again.
            node.ov = Overlay()
        await trio.to_thread.run_sync(os.fdatasync if datasync else os.fsync, fd)

    # ----- FUSE operations -------------------------------------------------

    @handler
    async def lookup(self, parent_inode, name, ctx=None):
        parent = self._node(parent_inode)
        if name == b".":
            path = self._path(parent)
        elif name == b"..":
            path = self._path(parent)
            if parent.ino != pyfuse3.ROOT_INODE:
                path = os.path.dirname(path)
        else:
            path = self._child(parent_inode, name)
        return self._lookup_path(path)

    async def forget(self, inode_list):
        for ino, nlookup in inode_list:
            node = self.nodes.get(ino)
            if node is None:
                continue
            node.lookup = max(0, node.lookup - nlookup)
            self._maybe_drop(node)

    @handler
    async def getattr(self, inode, ctx=None):
        node = self._node(inode)
        return self._entry(node, self._stat(node))

    @handler
    async def setattr(self, inode, attr, fields, fh, ctx):
        node = self._node(inode)
        h = self.handles.get(fh) if fh is not None else None
        target = h.fd if h is not None else self._path(node)
        if fields.update_size:
            self._fault("truncate")
            if h is not None:
                os.ftruncate(h.fd, attr.st_size)
            else:
                os.truncate(target, attr.st_size)
            node.ov.truncate(attr.st_size)
        if fields.update_mode:
            if h is not None:
                os.fchmod(h.fd, stat_m.S_IMODE(attr.st_mode))
            else:
                os.chmod(target, stat_m.S_IMODE(attr.st_mode), follow_symlinks=False)
        if fields.update_uid or fields.update_gid:
            uid = attr.st_uid if fields.update_uid else -1
            gid = attr.st_gid if fields.update_gid else -1
            if h is not None:
                os.fchown(h.fd, uid, gid)
            else:
                os.chown(target, uid, gid, follow_symlinks=False)
        if fields.update_atime or fields.update_mtime:
            old = self._stat(node)
            atime = attr.st_atime_ns if fields.update_atime else old.st_atime_ns
            mtime = attr.st_mtime_ns if fields.update_mtime else old.st_mtime_ns
            if h is not None:
                os.utime(h.fd, ns=(atime, mtime))
            else:
                os.utime(target, ns=(atime, mtime), follow_symlinks=False)
            if fields.update_mtime:
                node.mtime_ns = 0
        return self._entry(node, self._stat(node))

    @handler
    async def readlink(self, inode, ctx):
        return os.fsencode(os.readlink(self._path(self._node(inode))))

    @handler
    async def statfs(self, ctx):
        sv = os.statvfs(self.backing)
        out = pyfuse3.StatvfsData()
        for attr in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_favail", "f_namemax"):
            setattr(out, attr, getattr(sv, attr))
        return out

    @handler
    async def access(self, inode, mode, ctx):
        return True  # default_permissions: the kernel checks

    @handler
    async def open(self, inode, flags, ctx):
        node = self._node(inode)
        if node.paths:
            path = self._path(node)
        elif node.fhs:  # unlinked but open: reopen through the open one
            path = "/proc/self/fd/%d" % self.handles[next(iter(node.fhs))].fd
        else:
            raise FUSEError(errno.ENOENT)
        if flags & os.O_TRUNC:  # libfuse3 asks for atomic O_TRUNC: it comes here
            self._fault("truncate")
        fd = self._open_backing(path, flags)
        if flags & os.O_TRUNC:
            try:
                os.ftruncate(fd, 0)
            except BaseException:
                os.close(fd)
                raise
            node.ov.truncate(0)
        return pyfuse3.FileInfo(fh=self._new_handle(fd, node), keep_cache=False)

    @handler
    async def create(self, parent_inode, name, mode, flags, ctx):
        path = self._child(parent_inode, name)
        self._fault("create")
        fd = self._open_backing(path, flags, mode & ~ctx.umask, os.O_CREAT | (flags & os.O_EXCL))
        try:
            st = os.fstat(fd)
            if flags & os.O_TRUNC:
                os.ftruncate(fd, 0)
                st = os.fstat(fd)
            try:
                os.fchown(fd, ctx.uid, ctx.gid)
            except OSError:
                pass
        except BaseException:
            os.close(fd)
            raise
        node = self._node_for(st, path)
        if flags & os.O_TRUNC:
            node.ov.truncate(0)
        node.lookup += 1
        fh = self._new_handle(fd, node)
        return (pyfuse3.FileInfo(fh=fh, keep_cache=False), self._entry(node, st))

    @handler
    async def read(self, fh, off, size):
        h = self.handles[fh]
        ov = h.node.ov
        if not ov:
            return os.pread(h.fd, size, off)
        logical = max(os.fstat(h.fd).st_size, ov.end())
        if off >= logical:
            return b""
        n = min(size, logical - off)
        data = os.pread(h.fd, n, off)
        buf = bytearray(n)
        buf[: len(data)] = data
        ov.apply(buf, off)
        return bytes(buf)

    @handler
    async def write(self, fh, off, buf):
        h = self.handles[fh]
        self._fault("write")
        node = h.node
        node.ov.write(off, buf)
        node.mtime_ns = time.time_ns()
        self.writes += 1
        return len(buf)

    @handler
    async def flush(self, fh):
        pass  # close(2) does not write back

    @handler
    async def fsync(self, fh, datasync):
        h = self.handles[fh]
        await self._sync(h.node, h.fd, datasync)

    @handler
    async def release(self, fh):
        h = self.handles.pop(fh, None)
        if h is None:
            return
        h.node.fhs.discard(fh)
        os.close(h.fd)
        if h.node.key is None and not h.node.fhs:
            h.node.ov = Overlay()  # unlinked and closed: its data is gone
        self._maybe_drop(h.node)



async def watch_signals():
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            log.info("faultfs: signal, unmounting")
            pyfuse3.terminate()
            return


async def watch_parent(ppid):
    while os.getppid() == ppid:
        await trio.sleep(0.5)
    log.info("faultfs: the parent exited, unmounting")
    pyfuse3.terminate()


async def run(fs, args):
    async with trio.open_nursery() as nursery:
        await nursery.start(control.serve_control, fs, args.control_socket)
        nursery.start_soon(watch_signals)
        if args.exit_with_parent:
            nursery.start_soon(watch_parent, os.getppid())
        sys.stdout.write("faultfs: mounted %s\n" % args.mountpoint)
        sys.stdout.flush()
        await pyfuse3.main()
        nursery.cancel_scope.cancel()


def main():
    parser = argparse.ArgumentParser(description="A FUSE passthrough that simulates power loss and disk faults.")
    parser.add_argument("backing_dir")
    parser.add_argument("mountpoint")
    parser.add_argument("control_socket")
    parser.add_argument("--seed", type=int, default=None, help="seed of `powerloss torn` (default: random, logged)")
    parser.add_argument("--exit-with-parent", action="store_true", help="unmount and exit when the parent process exits")
    parser.add_argument("--debug", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.DEBUG if args.debug else logging.WARNING, format="%(message)s")

    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    sys.stderr.write("faultfs: seed %d (--seed %d repeats it)\n" % (seed, seed))
    for d in (args.backing_dir, args.mountpoint):
        if not os.path.isdir(d):
            sys.stderr.write("faultfs: %s is not a directory\n" % d)
            return 1
    args.mountpoint = os.path.abspath(args.mountpoint)
    args.control_socket = os.path.abspath(args.control_socket)

    fs = FaultFS(args.backing_dir, seed)
    options = set(pyfuse3.default_options)
    options.add("fsname=faultfs")
    options.add("subtype=faultfs")
    if os.geteuid() == 0:
        options.add("allow_other")
    try:
        pyfuse3.init(fs, args.mountpoint, options)
    except Exception as exc:
        sys.stderr.write("faultfs: cannot mount %s: %s\n" % (args.mountpoint, exc))
        return 1
    code = 0
    try:
        trio.run(run, fs, args)
    except BaseException:
        sys.stderr.write("faultfs: main loop failed:\n%s" % traceback.format_exc())
        code = 1
    finally:
        pyfuse3.close(unmount=True)
        try:
            os.unlink(args.control_socket)
        except OSError:
            pass
    return code


if __name__ == "__main__":
    sys.exit(main())
