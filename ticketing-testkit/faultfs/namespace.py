"""faultfs's name space: directories and the operations that add, remove
or rename names (mixed into FaultFS)."""

import errno
import os
import stat as stat_m

import pyfuse3
from pyfuse3 import FUSEError

from nodes import handler


class Namespace:
    """Mixed into FaultFS: uses its nodes, paths, handles and faults."""

    @handler
    async def opendir(self, inode, ctx):
        node = self._node(inode)
        if not stat_m.S_ISDIR(self._stat(node).st_mode):
            raise FUSEError(errno.ENOTDIR)
        return inode

    @handler
    async def readdir(self, fh, start_id, token):
        node = self._node(fh)
        path = self._path(node)
        entries = []
        for name in os.listdir(path):
            child = os.path.join(path, name)
            try:
                st = os.lstat(child)
            except OSError:
                continue  # removed meanwhile
            entries.append((self._node_for(st, child), name, st))
        entries.sort(key=lambda e: e[0].ino)
        replying = True
        for child_node, name, st in entries:
            if replying and child_node.ino > start_id:
                if pyfuse3.readdir_reply(token, os.fsencode(name), self._entry(child_node, st), child_node.ino):
                    child_node.lookup += 1
                else:
                    replying = False
            self._maybe_drop(child_node)

    @handler
    async def releasedir(self, fh):
        pass

    @handler
    async def fsyncdir(self, fh, datasync):
        # Metadata is durable at once in this model: nothing to write.
        self.fsyncs += 1
        self._fault("fsync")

    @handler
    async def mkdir(self, parent_inode, name, mode, ctx):
        path = self._child(parent_inode, name)
        self._fault("mkdir")
        os.mkdir(path, mode & ~ctx.umask)
        return self._made(path, ctx)

    @handler
    async def rmdir(self, parent_inode, name, ctx):
        path = self._child(parent_inode, name)
        self._fault("rmdir")
        st = os.lstat(path)
        os.rmdir(path)
        self._unlinked(path, st)

    @handler
    async def unlink(self, parent_inode, name, ctx):
        path = self._child(parent_inode, name)
        self._fault("unlink")
        st = os.lstat(path)
        os.unlink(path)
        self._unlinked(path, st)

    @handler
    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        old = self._child(parent_inode_old, name_old)
        new = self._child(parent_inode_new, name_new)
        self._fault("rename")
        if flags & pyfuse3.RENAME_EXCHANGE:
            raise FUSEError(errno.EINVAL)
        st_old = os.lstat(old)
        try:
            st_new = os.lstat(new)
        except FileNotFoundError:
            st_new = None
        if st_new is not None and flags & pyfuse3.RENAME_NOREPLACE:
            raise FUSEError(errno.EEXIST)
        os.rename(old, new)
        if old == new:
            return
        if st_new is not None and (st_new.st_dev, st_new.st_ino) != (st_old.st_dev, st_old.st_ino):
            self._unlinked(new, st_new)
        moved = self.by_key.get((st_old.st_dev, st_old.st_ino))
        if stat_m.S_ISDIR(st_old.st_mode):
            prefix = old + "/"
            for node in self.nodes.values():
                if any(p == old or p.startswith(prefix) for p in node.paths):
                    node.paths = {new + p[len(old) :] if p == old or p.startswith(prefix) else p for p in node.paths}
        elif moved is not None:
            moved.paths.discard(old)
            moved.paths.add(new)

    @handler
    async def link(self, inode, new_parent_inode, new_name, ctx):
        node = self._node(inode)
        path = self._child(new_parent_inode, new_name)
        self._fault("create")
        os.link(self._path(node), path, follow_symlinks=False)
        node.paths.add(path)
        node.lookup += 1
        return self._entry(node, self._stat(node))

    @handler
    async def symlink(self, parent_inode, name, target, ctx):
        path = self._child(parent_inode, name)
        self._fault("create")
        os.symlink(os.fsdecode(target), path)
        return self._made(path, ctx)

    @handler
    async def mknod(self, parent_inode, name, mode, rdev, ctx):
        path = self._child(parent_inode, name)
        self._fault("create")
        os.mknod(path, mode & ~ctx.umask, rdev)
        return self._made(path, ctx)
