"""faultfs' control socket: the Unix-socket server and the commands it
takes (powerloss, crash, thaw, fail, delay, status). The command reference
is in faultfs.py's module docstring ("Control:")."""

import errno
import logging
import os
import socket
import traceback

import trio

log = logging.getLogger("faultfs")

# The operations `fail OP ERRNO` can make fail (`all` is all of them).
FAULT_OPS = ("write", "fsync", "create", "mkdir", "rename", "truncate", "unlink", "rmdir")

POWER_LOSS_MODES = ("plain", "torn", "zero")


def failing(faults):
    """`OP:ERRNO,...` of the faults in force ("" when none)."""
    return ",".join("%s:%s" % (op, errno.errorcode.get(e, e)) for op, e in sorted(faults.items()))


def status(fs):
    dirty = [n for n in fs.nodes.values() if n.ov]
    return "ok dirty_bytes=%d fsyncs=%d writes=%d faults=%d dirty_files=%d failing=%s seed=%d" % (
        sum(n.ov.nbytes for n in dirty),
        fs.fsyncs,
        fs.writes,
        fs.fault_count,
        len(dirty),
        failing(fs.faults) or "none",
        fs.seed,
    )


def power_loss_mode(words):
    """The mode of `powerloss [torn|zero]` / `crash [torn|zero]` (`words`
    has at most 2 words), or None if the argument is not one."""
    mode = words[1] if len(words) == 2 else "plain"
    return mode if mode in POWER_LOSS_MODES else None


async def command(fs, line):
    """Runs one control command on the FaultFS `fs`; returns its answer."""
    words = line.split()
    try:
        if not words:
            return "error empty command"
        if words[0] in ("powerloss", "crash") and len(words) <= 2:
            mode = power_loss_mode(words)
            if mode is None:
                return "error %s takes no argument, torn or zero" % words[0]
            if words[0] == "crash":
                for o in FAULT_OPS:
                    fs.faults[o] = errno.EIO
                fs.frozen = True
            return await fs.power_loss(mode)
        if words[0] == "thaw" and len(words) == 1:
            fs.frozen = False
            fs.faults.clear()
            return "ok failing=none"
        if words[0] == "delay" and words[1:] == ["off"]:
            fs.fsync_delay = 0.0
            return "ok delay=0"
        if words[0] == "delay" and len(words) == 3 and words[1] == "fsync" and words[2].isdigit():
            fs.fsync_delay = int(words[2]) / 1000.0
            return "ok delay=%s" % words[2]
        if words[0] == "fail" and words[1:] == ["off"]:
            fs.faults.clear()
            return "ok failing=none"
        if words[0] == "fail" and len(words) == 3:
            op, name = words[1], words[2]
            if op != "all" and op not in FAULT_OPS:
                return "error unknown operation %s (one of %s, all)" % (op, ", ".join(FAULT_OPS))
            if name.isdigit():
                err = int(name)
            else:
                err = getattr(errno, name.upper(), None)
                if not isinstance(err, int) or not name.upper().startswith("E"):
                    return "error unknown errno %s" % name
            for o in FAULT_OPS if op == "all" else (op,):
                fs.faults[o] = err
            return "ok failing=" + failing(fs.faults)
        if words == ["status"]:
            return status(fs)
        return (
            "error unknown command %r (powerloss [torn|zero], crash [torn|zero], thaw, fail OP ERRNO, fail off, "
            "delay fsync MS, delay off, status)" % line.strip()
        )
    except Exception as exc:  # never kill the server over a command
        log.error("faultfs: command %r failed:\n%s", line, traceback.format_exc())
        return "error %s" % str(exc).replace("\n", " ")


async def serve_control(fs, path, task_status=trio.TASK_STATUS_IGNORED):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    await sock.bind(path)
    sock.listen(16)
    task_status.started()

    async def serve(conn):
        stream = trio.SocketStream(conn)
        pending = b""
        try:
            async with stream:
                while True:
                    data = await stream.receive_some(4096)
                    if data:
                        pending += data
                    lines = pending.split(b"\n")
                    pending = lines.pop()
                    if not data and pending.strip():
                        lines.append(pending)
                        pending = b""
                    for line in lines:
                        if line.strip():
                            answer = await command(fs, line.decode("utf-8", "replace"))
                            await stream.send_all(answer.encode() + b"\n")
                    if not data:
                        return
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass

    async with trio.open_nursery() as nursery:
        with sock:
            while True:
                conn, _ = await sock.accept()
                nursery.start_soon(serve, conn)

