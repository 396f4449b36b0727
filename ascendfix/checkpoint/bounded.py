"""Run the check in a bounded child: a memory limit and, for every step, a time limit.

A checkpoint's ``.metadata`` runs to megabytes, too large to pre-scan in Python within the check's
time (:mod:`ascendfix.checkpoint.prescan` takes the small pickles), and the C unpickler trusts its
sizes: a corrupt or hostile file can take all memory or overflow the C stack. So the whole check
runs in a child with ``RLIMIT_AS`` lowered; it tells the parent which file it reads (:func:`note`
for a pickle, :func:`step` for any other step) and sends its answer as JSON. Every step has
:data:`STEP_SECONDS` from its note, and a step that reads a large file renews it as it reads
(:func:`progress`). A child killed by a signal, out of memory, or over its step's time, is reported
as that file being unreadable, with one line; the parent never loads the hostile bytes itself.

A process of one OS thread (the CLI) forks the child: no new interpreter, nothing re-imported. A
process of more threads (a Ray worker, a process with gRPC's or torch's threads) is never forked (a
lock another thread held stays held in the child, and their libraries' fork handlers run): it starts
a fresh interpreter instead, which reads the function and its JSON arguments from its stdin and
speaks the same notes and answer over the same kind of pipe.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import resource
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ascendfix.errors import AscendfixError
from ascendfix.tuples import NamedTuple

MEMORY = 4 << 30  # a check's memory, whatever its files: a 235B save's 6 MB .metadata takes about 120 MB
STEP_SECONDS = 120.0  # the most one step may take (a 235B save's 6 MB .metadata loads in 0.1 s)
_channel: int | None = None  # the pipe to the parent, inside the child
_ROOT = str(Path(__file__).resolve().parents[2])  # the folder holding the ascendfix package
_BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from ascendfix.checkpoint import bounded; bounded._serve_spec()"


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


def inside() -> bool:
    """Whether this process is a bounded child (its memory and each step's time are limited)."""
    return _channel is not None


def note(subject: str) -> None:
    """Inside the child: the pickle now read (``subject``: its file), with :data:`STEP_SECONDS` to load."""
    _say(b"P", subject)


def step(subject: str) -> None:
    """Inside the child: the file now checked (after any pickle), with :data:`STEP_SECONDS` to check."""
    _say(b"S", subject)


def progress() -> None:
    """Inside the child: the step is reading on (a block of a large file): its time starts again."""
    _say(b"A", "")


def _say(kind: bytes, subject: str) -> None:
    if _channel is not None:  # one short write: whole, even from threads
        os.write(_channel, kind + subject.replace("\n", "?").encode("utf-8", "replace")[:1000] + b"\n")


class _Child(NamedTuple):
    """A started child: stop it, and wait for its exit code (a signal's as its negative, as subprocess's)."""

    kill: Callable[[], None]
    wait: Callable[[], int]


def run(work: Callable[..., dict], args: list, memory_bytes: int, first: str) -> dict:
    """``work(*args)`` in a child allowed ``memory_bytes`` more address space; its answer. ``work`` is a
    module-level function and ``args`` JSON values, so that a fresh interpreter can run it too (this
    process has more than one thread). Raises :class:`Died` (naming the file it read, ``first`` before
    it said) or :class:`Failed` (an error it raised)."""
    read_end, write_end = os.pipe()
    try:
        try:
            if _threads() == 1:
                child = _fork(lambda: work(*args), memory_bytes, read_end, write_end)
            else:
                child = _spawn(work, args, memory_bytes, write_end)
        finally:
            os.close(write_end)
        return _answer(child, read_end, first)
    finally:
        os.close(read_end)


def _threads() -> int:
    """This process's OS threads (``/proc/self/status``); 0 when that cannot be read (then it never forks)."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Threads:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _fork(work: Callable[[], dict], memory: int, read_end: int, write_end: int) -> _Child:
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)
        _serve(work, memory, write_end)
    return _Child(lambda: os.kill(pid, signal.SIGKILL), lambda: os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))


def _spawn(work: Callable[..., dict], args: list, memory: int, write_end: int) -> _Child:
    spec = {"module": work.__module__, "function": work.__qualname__, "args": args, "memory": memory}
    process = subprocess.Popen(
        [sys.executable, "-c", _BOOT, _ROOT, str(write_end)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        pass_fds=(write_end,),
    )
    stdin = process.stdin
    assert stdin is not None
    try:
        with stdin:
            stdin.write(json.dumps(spec).encode())
    except BrokenPipeError:
        pass  # it died before it read its work: its exit says how
    return _Child(process.kill, process.wait)


def _serve_spec() -> None:
    """Inside a fresh interpreter (``_BOOT``): the work named on stdin, its answer on the pipe of ``argv[2]``."""
    spec = json.load(sys.stdin)

    def work() -> dict:
        function = getattr(importlib.import_module(spec["module"]), spec["function"])
        return function(*spec["args"])

    _serve(work, spec["memory"], int(sys.argv[2]))


def _serve(work: Callable[[], dict], memory: int, channel: int) -> None:
    """Inside the child: ``work()`` under the memory limit, its answer (or error) on ``channel``; never returns."""
    global _channel
    _channel = channel
    gc.disable()  # the child frees nothing (it exits at once): a collection's pass over its records is waste
    code = 0
    try:
        _limit_memory(memory)
        answer = b"=" + json.dumps(work()).encode()
    except AscendfixError as e:
        answer, code = b"!" + json.dumps([str(e), e.exit_code]).encode(), 0
    except MemoryError:
        answer, code = b"", 3
    except BaseException as e:  # noqa: BLE001 - any other failure is the file's, reported by the parent
        answer, code = b"X" + f"{type(e).__name__}: {str(e)[:200]}".encode("utf-8", "replace"), 4
    try:
        os.write(channel, b"\n" + answer + b"\n")
    finally:
        os._exit(code)  # no clean-up: the parent owns everything, and the child's objects need no freeing


def _limit_memory(extra: int) -> None:
    with open("/proc/self/statm") as f:
        used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    wanted = used + extra
    if hard != resource.RLIM_INFINITY:
        wanted = min(wanted, hard)
    if soft == resource.RLIM_INFINITY or wanted < soft:
        resource.setrlimit(resource.RLIMIT_AS, (wanted, hard))


def _answer(child: _Child, fd: int, subject: str) -> dict:
    """Read the child's notes and answer; the subject of the last note names a death."""
    buffer, pickle, deadline = b"", True, time.monotonic() + STEP_SECONDS
    while True:
        if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
            child.kill()
            child.wait()
            what = "its pickle took more than {:.0f} s to read" if pickle else "checking it took more than {:.0f} s"
            raise Died(subject, f"{what.format(STEP_SECONDS)}: stopped (a hostile file?)")
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line[:1] in (b"P", b"S", b"A"):
                deadline = time.monotonic() + STEP_SECONDS
                if line[:1] != b"A":
                    subject, pickle = line[1:].decode("utf-8", "replace"), line[:1] == b"P"
            elif line[:1] in (b"=", b"!", b"X"):
                buffer = line + b"\n" + buffer
                return _final(child, fd, buffer, subject)
    return _final(child, fd, buffer, subject)


def _final(child: _Child, fd: int, buffer: bytes, subject: str) -> dict:
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        buffer += chunk
    code = child.wait()
    line = buffer.strip()
    if line.startswith(b"="):
        return json.loads(line[1:])
    if line.startswith(b"!"):
        message, exit_code = json.loads(line[1:])
        raise Failed(message, exit_code)
    if code == -signal.SIGBUS:  # a mapped file cut shorter under its reader
        raise Died(subject, "a file was cut shorter while it was read (SIGBUS): did the files change?")
    if code < 0:
        name = signal.Signals(-code).name
        raise Died(subject, f"reading it killed its reader ({name}): a corrupt or hostile pickle")
    if line.startswith(b"X"):
        raise Died(subject, f"reading it failed ({line[1:].decode('utf-8', 'replace')})")
    raise Died(subject, "reading it took more memory than a checkpoint's may: a corrupt or hostile pickle")
