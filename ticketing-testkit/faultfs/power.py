"""faultfs's power loss (the `powerloss` and `crash` commands): every byte
not fsynced is dropped, optionally leaving a torn or zero-filled tail."""

import os
import urllib.parse

from overlay import Overlay, pwrite_all


class PowerLoss:
    """Mixed into FaultFS: uses its nodes, handles, paths, rng and
    invalidation."""

    def _label(self, node):
        if node.paths:
            rel = os.path.relpath(self._path(node), self.backing)
        else:
            rel = "(unlinked inode %d)" % node.ino
        return urllib.parse.quote(rel, safe="/()")

    def _writable_fd(self, node):
        """A descriptor to write the node's backing file and whether to
        close it afterwards; (None, False) for an unlinked, closed file."""
        for fh in node.fhs:
            return self.handles[fh].fd, False
        if node.paths:
            return os.open(self._path(node), os.O_WRONLY | os.O_CLOEXEC), True
        return None, False

    async def power_loss(self, mode):
        self.power_gen += 1
        dirty = [n for n in self.nodes.values() if n.ov]
        dirty.sort(key=lambda n: (self._label(n), n.ino))
        lost = kept = 0
        notes = []
        for node in dirty:
            ov = node.ov
            total = ov.nbytes
            lost += total
            if mode != "plain" and node.key is not None:
                start, tail = ov.extents()[-1]
                fd, close = self._writable_fd(node)
                if fd is not None:
                    try:
                        if mode == "torn":
                            k = self.rng.randrange(1, len(tail)) if len(tail) > 1 else 0
                            pwrite_all(fd, tail[:k], start)
                            kept += k
                            lost -= k
                            notes.append(
                                "%s: tail of %d bytes at %d, kept %d" % (self._label(node), len(tail), start, k)
                            )
                        else:
                            durable = os.fstat(fd).st_size
                            end = start + len(tail)
                            if end > durable:
                                os.ftruncate(fd, end)
                                notes.append(
                                    "%s: size %d -> %d, %d zero bytes" % (self._label(node), durable, end, end - durable)
                                )
                            else:
                                notes.append("%s: tail within the durable size %d, unchanged" % (self._label(node), durable))
                        os.fsync(fd)
                    finally:
                        if close:
                            os.close(fd)
            node.ov = Overlay()
            node.mtime_ns = 0
        await self._invalidate(dirty)
        for node in dirty:
            self._maybe_drop(node)
        answer = "ok lost_bytes=%d files=%d" % (lost, len(dirty))
        if mode == "torn":
            answer += " kept_bytes=%d" % kept
        if notes:
            answer += "; " + "; ".join(notes)
        return answer
