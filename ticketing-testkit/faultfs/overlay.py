"""faultfs' dirty data: the in-memory extents of one inode (the Overlay
class, see "Dirty data is stored per inode" in faultfs.py's docstring) and
pwrite_all, which writes them to a backing file."""

import os
from bisect import bisect_left, bisect_right


class Overlay:
    """The dirty data of one inode: sorted, non-overlapping, non-adjacent
    extents. `starts[i]` is the offset of `bufs[i]`."""

    __slots__ = ("starts", "bufs", "nbytes")

    def __init__(self):
        self.starts = []
        self.bufs = []
        self.nbytes = 0

    def __bool__(self):
        return bool(self.starts)

    def end(self):
        """One past the last dirty byte (0 when clean)."""
        if not self.starts:
            return 0
        return self.starts[-1] + len(self.bufs[-1])

    def extents(self):
        return list(zip(self.starts, self.bufs))

    def write(self, off, data):
        n = len(data)
        if n == 0:
            return
        end = off + n
        starts, bufs = self.starts, self.bufs
        # Fast path: an append to (or an overwrite inside) the last extent.
        if starts:
            ls = starts[-1]
            lb = bufs[-1]
            if ls <= off <= ls + len(lb):
                old = len(lb)
                lb[off - ls : off - ls + n] = data
                self.nbytes += len(lb) - old
                return
        # The first extent that overlaps or touches [off, end) ...
        i = bisect_right(starts, off) - 1
        first = i if i >= 0 and starts[i] + len(bufs[i]) >= off else i + 1
        # ... and the last one.
        last = bisect_right(starts, end) - 1
        if last < first:
            starts.insert(first, off)
            bufs.insert(first, bytearray(data))
            self.nbytes += n
            return
        if first == last and starts[first] <= off:
            buf = bufs[first]
            old = len(buf)
            rel = off - starts[first]
            buf[rel : rel + n] = data
            self.nbytes += len(buf) - old
            return
        new_start = min(starts[first], off)
        new_end = max(starts[last] + len(bufs[last]), end)
        merged = bytearray(new_end - new_start)
        old = 0
        for k in range(first, last + 1):
            s = starts[k] - new_start
            merged[s : s + len(bufs[k])] = bufs[k]
            old += len(bufs[k])
        merged[off - new_start : off - new_start + n] = data
        starts[first : last + 1] = [new_start]
        bufs[first : last + 1] = [merged]
        self.nbytes += len(merged) - old

    def truncate(self, size):
        """Drops every dirty byte at or past `size`."""
        starts, bufs = self.starts, self.bufs
        i = bisect_left(starts, size)
        for b in bufs[i:]:
            self.nbytes -= len(b)
        del starts[i:]
        del bufs[i:]
        if starts:
            over = starts[-1] + len(bufs[-1]) - size
            if over > 0:
                del bufs[-1][len(bufs[-1]) - over :]
                self.nbytes -= over

    def apply(self, buf, off):
        """Copies the dirty bytes within [off, off + len(buf)) into `buf`."""
        starts, bufs = self.starts, self.bufs
        end = off + len(buf)
        i = max(bisect_right(starts, off) - 1, 0)
        while i < len(starts) and starts[i] < end:
            s = starts[i]
            b = bufs[i]
            e = s + len(b)
            if e > off:
                lo = max(s, off)
                hi = min(e, end)
                buf[lo - off : hi - off] = memoryview(b)[lo - s : hi - s]
            i += 1


def pwrite_all(fd, data, off):
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, off)
        view = view[n:]
        off += n

