"""Run the check in a forked child with a memory limit and, while it reads a pickle, a time limit.

A checkpoint's ``.metadata`` runs to megabytes, too large to pre-scan in Python within the check's
time (:mod:`ascendfix.checkpoint.prescan` takes the small pickles), and the C unpickler trusts its
sizes: a corrupt or hostile file can take all memory or overflow the C stack. So the whole check
runs in a child (``fork``: no new interpreter, nothing re-imported) with ``RLIMIT_AS`` lowered; it
tells the parent which file it reads (:func:`note`) and sends its answer as JSON. A child killed by
a signal, out of memory, or over the time a pickle may take, is reported as that file being
unreadable, with one line; the parent never loads the hostile bytes itself.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import select
import signal
import time
from collections.abc import Callable

from ascendfix.errors import AscendfixError

PICKLE_SECONDS = 120.0  # the most one pickle may take to load (a 235B save's 6 MB: 0.1 s)
_channel: int | None = None  # the pipe to the parent, inside the child


class Died(AscendfixError):
    """The child died or was stopped while reading ``subject``."""

    def __init__(self, subject: str, detail: str):
        super().__init__(detail)
        self.subject, self.detail = subject, detail


class Failed(AscendfixError):
    """The child raised one of ascendfix's errors: ``message``, exit code ``exit_code``."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


def note(subject: str | None) -> None:
    """Inside the child: the file now read (a pickle: timed), or None when what follows only reads bytes."""
    if _channel is not None:
        line = b"I" if subject is None else b"P" + subject.replace("\n", "?").encode("utf-8", "replace")
        os.write(_channel, line + b"\n")


def run(work: Callable[[], dict], memory_bytes: int, first: str) -> dict:
    """``work()`` in a child allowed ``memory_bytes`` more address space; its answer. Raises :class:`Died`
    (naming the file it read, ``first`` before it said) or :class:`Failed` (an error it raised)."""
    global _channel
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)
        _channel = write_end
        gc.disable()  # the child frees nothing (it exits at once): a collection's pass over its records is waste
        code = 0
        try:
            _limit_memory(memory_bytes)
            answer = b"=" + json.dumps(work()).encode()
        except AscendfixError as e:
            answer, code = b"!" + json.dumps([str(e), e.exit_code]).encode(), 0
        except MemoryError:
            answer, code = b"", 3
        except BaseException as e:  # noqa: BLE001 - any other failure is the file's, reported by the parent
            answer, code = b"X" + f"{type(e).__name__}: {str(e)[:200]}".encode("utf-8", "replace"), 4
        try:
            os.write(write_end, b"\n" + answer + b"\n")
        finally:
            os._exit(code)  # no clean-up: the parent owns everything, and the child's objects need no freeing
    os.close(write_end)
    try:
        return _answer(pid, read_end, first)
    finally:
        os.close(read_end)


def _limit_memory(extra: int) -> None:
    with open("/proc/self/statm") as f:
        used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    wanted = used + extra
    if hard != resource.RLIM_INFINITY:
        wanted = min(wanted, hard)
    if soft == resource.RLIM_INFINITY or wanted < soft:
        resource.setrlimit(resource.RLIMIT_AS, (wanted, hard))


def _answer(pid: int, fd: int, subject: str) -> dict:
    """Read the child's notes and answer; the subject of the last note names a death."""
    buffer, timed, deadline = b"", True, time.monotonic() + PICKLE_SECONDS
    while True:
        wait = max(0.0, deadline - time.monotonic()) if timed else None
        if not select.select([fd], [], [], wait)[0]:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise Died(subject, f"its pickle took more than {PICKLE_SECONDS:.0f} s to read: stopped (a hostile file?)")
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.startswith(b"P"):
                subject, timed, deadline = line[1:].decode(), True, time.monotonic() + PICKLE_SECONDS
            elif line == b"I":
                timed = False
            elif line[:1] in (b"=", b"!", b"X"):
                buffer = line + b"\n" + buffer
                return _final(pid, fd, buffer, subject)
    return _final(pid, fd, buffer, subject)


def _final(pid: int, fd: int, buffer: bytes, subject: str) -> dict:
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        buffer += chunk
    _, status = os.waitpid(pid, 0)
    line = buffer.strip()
    if line.startswith(b"="):
        return json.loads(line[1:])
    if line.startswith(b"!"):
        message, code = json.loads(line[1:])
        raise Failed(message, code)
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        raise Died(subject, f"reading it killed its reader ({name}): a corrupt or hostile pickle")
    if line.startswith(b"X"):
        raise Died(subject, f"reading it failed ({line[1:].decode('utf-8', 'replace')})")
    raise Died(subject, "reading it took more memory than a checkpoint's may: a corrupt or hostile pickle")
