#!/usr/bin/python3
"""Self-test of faultfs: mounts it on temporary directories and checks its
semantics with real file operations through the mount.

    /usr/bin/python3 selftest.py [--keep]

Prints `PASS name` / `FAIL name: why` per check and, last,
`faultfs: N passed, M failed`; exits non-zero on a failure or when faultfs
cannot be mounted. Always unmounts and removes its temporary directories
(--keep leaves them, for a post-mortem). Every wait is bounded: the mount
must appear within 20 s, a control command must answer within 30 s, and a
watchdog kills faultfs (so that blocked file operations fail instead of
hanging) if the whole run takes longer than 300 s.
"""

import errno
import fcntl
import os
import re
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
FAULTFS = os.path.join(HERE, "faultfs.py")
PYTHON = "/usr/bin/python3"
MOUNT_TIMEOUT = 20.0
COMMAND_TIMEOUT = 30.0
WATCHDOG = 300.0


class Rig:
    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="faultfs-selftest-")
        self.backing = os.path.join(self.tmp, "backing")
        self.mnt = os.path.join(self.tmp, "mnt")
        self.sock = os.path.join(self.tmp, "ctl.sock")
        self.log = os.path.join(self.tmp, "faultfs.log")
        os.mkdir(self.backing)
        os.mkdir(self.mnt)
        self.proc = None
        self.mounted = False

    def start(self):
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [PYTHON, FAULTFS, self.backing, self.mnt, self.sock, "--seed", "42", "--exit-with-parent"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
            )
        deadline = time.monotonic() + MOUNT_TIMEOUT
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        out = b""
        try:
            while b"\n" not in out:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(
                        "faultfs did not print `faultfs: mounted` within %.0f s; its log:\n%s"
                        % (MOUNT_TIMEOUT, self.log_text())
                    )
                if sel.select(timeout=min(left, 0.5)):
                    chunk = os.read(self.proc.stdout.fileno(), 4096)
                    if not chunk:
                        self.proc.wait(timeout=5)
                        raise RuntimeError(
                            "faultfs exited (status %s) before mounting; its log:\n%s"
                            % (self.proc.returncode, self.log_text())
                        )
                    out += chunk
        finally:
            sel.close()
        line = out.split(b"\n")[0].decode()
        if not line.startswith("faultfs: mounted"):
            raise RuntimeError("unexpected first line %r; log:\n%s" % (line, self.log_text()))
        self.mounted = True

    def log_text(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return "(no log)"

    def command(self, line):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(COMMAND_TIMEOUT)
            s.connect(self.sock)
            s.sendall(line.encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        return data.decode().strip()

    def ok(self, line):
        answer = self.command(line)
        if not answer.startswith("ok"):
            raise AssertionError("%r answered %r" % (line, answer))
        return answer

    def path(self, *names):
        return os.path.join(self.mnt, *names)

    def is_mountpoint(self):
        try:
            return os.path.ismount(self.mnt)
        except OSError:
            return True  # a dead FUSE mount: stat fails with ENOTCONN

    def stop(self, keep=False):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # faultfs unmounts on SIGTERM
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.is_mountpoint():
            for cmd in (["fusermount3", "-u", self.mnt], ["fusermount3", "-u", "-z", self.mnt], ["umount", "-l", self.mnt]):
                try:
                    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10)
                except (OSError, subprocess.TimeoutExpired):
                    continue
                if not self.is_mountpoint():
                    break
        if self.proc is not None and self.proc.stdout:
            self.proc.stdout.close()
        if keep:
            print("kept %s" % self.tmp)
        elif not self.is_mountpoint():
            shutil.rmtree(self.tmp, ignore_errors=True)
        else:
            print("faultfs: %s is still mounted; left %s in place" % (self.mnt, self.tmp))


def write_file(path, data, sync=None, flags=0):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | flags, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync == "fsync":
            os.fsync(fd)
        elif sync == "fdatasync":
            os.fdatasync(fd)
    finally:
        os.close(fd)


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def expect_errno(err, fn, *args):
    try:
        fn(*args)
    except OSError as exc:
        expect(exc.errno == err, "expected %s, got %r" % (errno.errorcode[err], exc))
        return
    raise AssertionError("expected %s, the call succeeded" % errno.errorcode[err])


def short(b):
    return "%d bytes %r..." % (len(b), b[:16])


# ----- the checks -----------------------------------------------------------


def check_fsynced_survives(r):
    write_file(r.path("fsynced"), b"durable" * 100, sync="fsync")
    write_file(r.path("fdatasynced"), b"also durable", sync="fdatasync")
    r.ok("powerloss")
    expect(read_file(r.path("fsynced")) == b"durable" * 100, "fsynced data changed")
    expect(read_file(r.path("fdatasynced")) == b"also durable", "fdatasynced data changed")


def check_unsynced_lost(r):
    write_file(r.path("unsynced"), b"x" * 5000)
    write_file(r.path("half"), b"kept", sync="fsync")
    write_file(r.path("half"), b"-lost", flags=os.O_APPEND)
    expect(read_file(r.path("unsynced")) == b"x" * 5000, "unsynced data not visible before the power loss")
    expect(os.stat(r.path("unsynced")).st_size == 5000, "size of unsynced data not visible before the power loss")
    expect(read_file(r.path("half")) == b"kept-lost", "appended data not visible before the power loss")
    status = r.ok("status")
    m = re.search(r"dirty_bytes=(\d+)", status)
    expect(m and int(m.group(1)) == 5005, "status before the power loss: %s" % status)
    answer = r.ok("powerloss")
    expect("lost_bytes=5005 files=2" in answer, "answer %r" % answer)
    expect(os.path.exists(r.path("unsynced")), "the created file vanished (metadata is durable at once)")
    expect(read_file(r.path("unsynced")) == b"", "unsynced data survived: %s" % short(read_file(r.path("unsynced"))))
    expect(read_file(r.path("half")) == b"kept", "got %r" % read_file(r.path("half")))
    expect(os.stat(r.path("half")).st_size == 4, "size after the power loss")


def check_rename_fsynced_survives(r):
    write_file(r.path("data.tmp"), b"snapshot v2", sync="fsync")
    os.rename(r.path("data.tmp"), r.path("data"))
    r.ok("powerloss")
    expect(not os.path.exists(r.path("data.tmp")), "the old name survived")
    expect(read_file(r.path("data")) == b"snapshot v2", "renamed file: %r" % read_file(r.path("data")))


def check_rename_keeps_dirty_data(r):
    os.mkdir(r.path("dir1"))
    write_file(r.path("dir1", "f"), b"dirty then renamed")
    os.rename(r.path("dir1", "f"), r.path("dir1", "g"))
    os.rename(r.path("dir1"), r.path("dir2"))
    expect(read_file(r.path("dir2", "g")) == b"dirty then renamed", "dirty data lost by the renames")
    fd = os.open(r.path("dir2", "g"), os.O_RDONLY)  # fsync through a read-only descriptor
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    r.ok("powerloss")
    expect(read_file(r.path("dir2", "g")) == b"dirty then renamed", "got %r" % read_file(r.path("dir2", "g")))


def check_truncate_keeps_overlay_consistent(r):
    write_file(r.path("trunc"), b"0123456789", sync="fsync")
    fd = os.open(r.path("trunc"), os.O_RDWR)
    try:
        os.pwrite(fd, b"abcdefghij" * 10, 5)  # dirty [5, 105)
        os.ftruncate(fd, 20)  # durable at once; dirty cut to [5, 20)
        expect(os.pread(fd, 100, 0) == b"01234abcdefghijabcde", "after truncate: %r" % os.pread(fd, 100, 0))
        os.ftruncate(fd, 30)  # grows with zeros
        expect(os.pread(fd, 100, 0) == b"01234abcdefghijabcde" + bytes(10), "after growing")
    finally:
        os.close(fd)
    r.ok("powerloss")
    expect(read_file(r.path("trunc")) == b"0123456789" + bytes(20), "got %r" % read_file(r.path("trunc")))


def check_open_o_trunc(r):
    p = r.path("rewritten")
    write_file(p, b"old content, fsynced", sync="fsync")
    with open(p, "r+b") as f:
        f.write(b"dirty")
    with open(p, "wb") as f:  # O_TRUNC: metadata, durable at once
        f.write(b"new")
    expect(read_file(p) == b"new", "after O_TRUNC and a write: %r" % read_file(p))
    r.ok("fail truncate EROFS")
    try:
        expect_errno(errno.EROFS, os.open, p, os.O_WRONLY | os.O_TRUNC)
    finally:
        r.ok("fail off")
    r.ok("powerloss")
    # The classic: truncate, write, no fsync, crash -> an empty file.
    expect(read_file(p) == b"", "got %r" % read_file(p))


def check_overwrite_lost(r):
    write_file(r.path("over"), b"A" * 100, sync="fsync")
    fd = os.open(r.path("over"), os.O_RDWR)
    try:
        os.pwrite(fd, b"B" * 10, 10)
        os.pwrite(fd, b"C" * 10, 50)
        os.pwrite(fd, b"D" * 35, 15)  # merges the two extents
        expect(os.pread(fd, 200, 0) == b"A" * 10 + b"B" * 5 + b"D" * 35 + b"C" * 10 + b"A" * 40, "merged overlay")
    finally:
        os.close(fd)
    r.ok("powerloss")
    expect(read_file(r.path("over")) == b"A" * 100, "got %r" % read_file(r.path("over")))


def check_powerloss_torn(r):
    write_file(r.path("torn"), b"A" * 100, sync="fsync")
    write_file(r.path("torn"), b"B" * 1000, flags=os.O_APPEND)
    answer = r.ok("powerloss torn")
    m = re.search(r"torn: tail of 1000 bytes at 100, kept (\d+)", answer)
    expect(m, "answer %r" % answer)
    k = int(m.group(1))
    expect(0 < k < 1000, "kept %d bytes: not a strict, non-empty prefix" % k)
    expect(read_file(r.path("torn")) == b"A" * 100 + b"B" * k, "got %s" % short(read_file(r.path("torn"))))


def check_powerloss_zero(r):
    write_file(r.path("zero"), b"A" * 100, sync="fsync")
    write_file(r.path("zero"), b"B" * 50, flags=os.O_APPEND)
    answer = r.ok("powerloss zero")
    expect("zero: size 100 -> 150, 50 zero bytes" in answer, "answer %r" % answer)
    expect(read_file(r.path("zero")) == b"A" * 100 + bytes(50), "got %r" % read_file(r.path("zero")))


def check_fsync_eio_drops_data(r):
    p = r.path("eio")
    write_file(p, b"base", sync="fsync")
    fd = os.open(p, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, b"-never-durable")
        r.ok("fail fsync EIO")
        expect_errno(errno.EIO, os.fsync, fd)
        os.fsync(fd)  # the retry "succeeds": the pages were marked clean
        os.fdatasync(fd)
    finally:
        os.close(fd)
    r.ok("fail off")
    expect(read_file(p) == b"base", "after the failed fsync the data is still there: %r" % read_file(p))
    r.ok("powerloss")
    expect(read_file(p) == b"base", "got %r" % read_file(p))
    status = r.ok("status")
    expect(not re.search(r"faults=0\b", status), "status counts no fault: %s" % status)


def check_write_enospc(r):
    p = r.path("enospc")
    fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        r.ok("fail write ENOSPC")
        expect_errno(errno.ENOSPC, os.write, fd, b"no room")
        r.ok("fail off")
        expect(os.write(fd, b"room") == 4, "short write")
        os.fsync(fd)
    finally:
        os.close(fd)
    r.ok("powerloss")
    expect(read_file(p) == b"room", "got %r" % read_file(p))


def check_fail_all_erofs(r):
    write_file(r.path("ro"), b"x", sync="fsync")
    r.ok("fail all EROFS")
    try:
        expect_errno(errno.EROFS, os.open, r.path("new"), os.O_WRONLY | os.O_CREAT, 0o644)
        expect_errno(errno.EROFS, os.mkdir, r.path("newdir"))
        expect_errno(errno.EROFS, os.rename, r.path("ro"), r.path("ro2"))
        expect_errno(errno.EROFS, os.truncate, r.path("ro"), 0)
        expect_errno(errno.EROFS, os.unlink, r.path("ro"))
        fd = os.open(r.path("ro"), os.O_WRONLY)
        try:
            expect_errno(errno.EROFS, os.write, fd, b"y")
        finally:
            os.close(fd)
    finally:
        r.ok("fail off")
    expect(read_file(r.path("ro")) == b"x", "content changed")
    write_file(r.path("new"), b"works again", sync="fsync")
    expect(read_file(r.path("new")) == b"works again", "fail off did not restore")


def check_crash_and_slow_fsync(r):
    """`crash`: the power is off for a process still running: a write after
    it, and an fsync even of a file with nothing dirty, fail; what was not
    fsynced is lost; `thaw` restores. `delay fsync`: a power cut during a
    slow fsync persists nothing of it."""
    p = r.path("crash")
    write_file(p, b"durable", sync="fsync")
    fd = os.open(p, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, b"-lost")
        answer = r.ok("crash")
        expect("lost_bytes=5" in answer, "answer %r" % answer)
        expect_errno(errno.EIO, os.fsync, fd)
        expect_errno(errno.EIO, os.write, fd, b"-after")
    finally:
        os.close(fd)
    r.ok("thaw")
    expect(read_file(p) == b"durable", "got %r" % read_file(p))
    # A slow fsync cut by a crash persists nothing; the process hears EIO.
    r.ok("delay fsync 400")
    fd = os.open(p, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, b"-in-flight")
        fsyncs = lambda: int(re.search(r"fsyncs=(\d+)", r.ok("status")).group(1))
        before = fsyncs()
        done = []
        t = threading.Thread(target=lambda: done.append(catch_errno(os.fsync, fd)))
        t.start()
        end = time.monotonic() + 5
        while fsyncs() == before and time.monotonic() < end:
            pass  # until faultfs has the fsync (it takes 400 ms)
        r.ok("crash")
        t.join(timeout=10)
        expect(done == [errno.EIO], "the fsync in flight across the cut: %r" % done)
    finally:
        os.close(fd)
        r.ok("thaw")
        r.ok("delay off")
    expect(read_file(p) == b"durable", "got %r" % read_file(p))


def catch_errno(fn, *args):
    try:
        fn(*args)
        return 0
    except OSError as e:
        return e.errno


def check_bad_commands(r):
    for line in ("fail write EWHAT", "fail nothing EIO", "powerloss sideways", "hello"):
        answer = r.command(line)
        expect(answer.startswith("error"), "%r answered %r" % (line, answer))


def check_flock_exclusive(r):
    p = r.path("ticketing.lock")
    code = (
        "import fcntl, os, sys\n"
        "fd = os.open(sys.argv[1], os.O_RDWR)\n"
        "try:\n"
        "    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "except BlockingIOError:\n"
        "    sys.exit(3)\n"
    )
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        res = subprocess.run([sys.executable, "-c", code, p], timeout=20)
        expect(res.returncode == 3, "a second process got the flock (exit %d)" % res.returncode)
    finally:
        os.close(fd)
    res = subprocess.run([sys.executable, "-c", code, p], timeout=20)
    expect(res.returncode == 0, "the flock was not released (exit %d)" % res.returncode)


def check_unlinked_open_file(r):
    p = r.path("gone")
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"still readable")
        os.unlink(p)
        expect(os.pread(fd, 100, 0) == b"still readable", "unlinked open file lost its data")
        os.fsync(fd)
        write_file(p, b"a new file", sync="fsync")  # may reuse the backing inode number
        expect(read_file(p) == b"a new file", "new file under the old name: %r" % read_file(p))
    finally:
        os.close(fd)


def check_append_fdatasync_rate(r):
    p = r.path("wal")
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    n = 0
    start = time.monotonic()
    try:
        while time.monotonic() - start < 2.0:
            os.write(fd, b"r" * 128)
            os.fdatasync(fd)
            n += 1
    finally:
        os.close(fd)
    rate = n / (time.monotonic() - start)
    r.ok("powerloss")
    expect(os.stat(p).st_size == n * 128, "lost synced appends: %d != %d" % (os.stat(p).st_size, n * 128))
    return "%d append+fdatasync/s" % rate


CHECKS = [
    ("fsynced_data_survives_powerloss", check_fsynced_survives),
    ("unsynced_data_lost_on_powerloss", check_unsynced_lost),
    ("rename_of_fsynced_file_survives", check_rename_fsynced_survives),
    ("rename_keeps_dirty_data_with_the_inode", check_rename_keeps_dirty_data),
    ("truncate_keeps_overlay_consistent", check_truncate_keeps_overlay_consistent),
    ("unsynced_overwrite_lost", check_overwrite_lost),
    ("open_o_trunc_is_metadata", check_open_o_trunc),
    ("powerloss_torn_keeps_a_strict_prefix", check_powerloss_torn),
    ("powerloss_zero_gives_zeros", check_powerloss_zero),
    ("fsync_eio_drops_the_data", check_fsync_eio_drops_data),
    ("write_enospc", check_write_enospc),
    ("fail_all_erofs_and_fail_off", check_fail_all_erofs),
    ("crash_and_slow_fsync", check_crash_and_slow_fsync),
    ("bad_commands_answer_error", check_bad_commands),
    ("flock_is_exclusive", check_flock_exclusive),
    ("unlinked_open_file", check_unlinked_open_file),
    ("append_fdatasync_rate", check_append_fdatasync_rate),
]


def main():
    keep = "--keep" in sys.argv[1:]
    if not os.path.exists("/dev/fuse"):
        print("FAIL setup: /dev/fuse does not exist")
        print("faultfs: 0 passed, 1 failed")
        return 1
    r = Rig()
    passed = failed = 0

    def watchdog():
        print("faultfs: the self-test took more than %.0f s: killing faultfs" % WATCHDOG, flush=True)
        if r.proc is not None:
            r.proc.kill()
        subprocess.run(["umount", "-l", r.mnt], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    timer = threading.Timer(WATCHDOG, watchdog)
    timer.daemon = True
    timer.start()
    try:
        try:
            r.start()
        except Exception as exc:
            print("FAIL mount: %s" % exc)
            failed += 1
        else:
            for name, fn in CHECKS:
                try:
                    note = fn(r)
                except Exception as exc:
                    failed += 1
                    detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
                    print("FAIL %s: %s" % (name, detail), flush=True)
                    if r.proc.poll() is None:
                        r.command("fail off")
                else:
                    passed += 1
                    print("PASS %s%s" % (name, " (%s)" % note if note else ""), flush=True)
            if r.proc.poll() is not None:
                failed += 1
                print("FAIL faultfs_still_running: exited with %s; log:\n%s" % (r.proc.returncode, r.log_text()))
    finally:
        timer.cancel()
        r.stop(keep)
    print("faultfs: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
