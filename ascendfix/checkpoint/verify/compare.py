"""Both sides' bytes streamed through two windows per reading thread and compared directly (no hashing).

Each window maps :data:`WINDOW` bytes of one file (a private, copy-on-write ``mmap`` that is never
written: the page cache's own pages, no copy; reading the same bytes with ``preadv`` into a reused
buffer ran about 1.2x slower, measured by ``benchmarks/ckpt_verify.py``), bounded by the file's size
as opened; a run of bytes is compared :data:`BLOCK` bytes at a time, and :func:`shares` cuts the runs
among :data:`READERS` threads. Blocks are compared with the C library's ``memcmp`` (a memoryview's own
``==`` compares item by item: 8-byte words ran 3-4x slower than ``memcmp``), as 8-byte words where no
C library answers, and a differing block is searched by halves for its first and last differing byte.
A file cut shorter while it is mapped stops the reader with SIGBUS: the bounded child's death, reported
as that file unreadable.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ascendfix.checkpoint import bounded

BLOCK = 1 << 20  # compared at a time: 16 MiB blocks ran 1.5-2x slower (two blocks that fit the CPU's caches)
WINDOW = 16 << 20  # mapped at a time: 4-64 MiB ran alike, 256 MiB slower; 4 windows stay far below the memory cap
READERS = min(4, os.cpu_count() or 1)  # threads that read and compare at once


def shares(items: list, size: Callable[[Any], int], count: int) -> list[list]:
    """``items`` cut, in their order, into at most ``count`` runs of about equal total ``size``."""
    total = sum(map(size, items))
    found: list[list] = []
    done = 0
    for item in items:
        if not found or (done >= total * len(found) / count and len(found) < count):
            found.append([])
        found[-1].append(item)
        done += size(item)
    return found


class Files:
    """Open regular files of one folder (no link followed), each opened once, with its size as opened."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.opened: dict[str, tuple[int, int]] = {}  # name: (fd, size)

    def open(self, name: str) -> tuple[int, int]:
        """``name``'s descriptor and size; OSError when it is not a regular file."""
        found = self.opened.get(name)
        if found is None:
            fd = os.open(self.folder / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                os.close(fd)
                raise OSError(errno.EINVAL, "not a regular file", str(self.folder / name))
            found = self.opened[name] = (fd, info.st_size)
        return found

    def close(self) -> None:
        for fd, _ in self.opened.values():
            os.close(fd)
        self.opened.clear()


class Window:
    """One file's bytes ``[at, at + filled)``, mapped (see the module doc)."""

    def __init__(self, files: Files, size: int = WINDOW):
        self.files = files
        self.size = size
        self.file, self.at, self.filled = "", 0, 0
        self.buffer: mmap.mmap | None = None
        self.view = memoryview(b"")

    def get(self, file: str, start: int, length: int) -> memoryview:
        """``length`` (at most :data:`BLOCK`) bytes of ``file`` from ``start``: from the window when it holds them,
        else mapped anew (from ``start``, rounded down to a page, as much as fits); shorter when the file ends
        first."""
        if file != self.file or start < self.at or start + length > self.at + self.filled:
            self._map(file, start)
        base = start - self.at
        return self.view[base : base + max(0, min(length, self.filled - base))]

    def _map(self, file: str, start: int) -> None:
        bounded.progress()  # reading on: a bounded child's step has its time again
        self.close()
        fd, size = self.files.open(file)
        at = start - start % mmap.ALLOCATIONGRANULARITY
        filled = max(0, min(self.size, size - at))
        self.file, self.at, self.filled = file, at, filled
        if filled:
            self.buffer = mmap.mmap(fd, filled, access=mmap.ACCESS_COPY, offset=at)
            self.view = memoryview(self.buffer)

    def close(self) -> None:
        """Unmap the window now, unless a caller still holds a view of it (then when that view goes)."""
        self.view.release()
        self.view = memoryview(b"")
        if self.buffer is not None:
            try:
                self.buffer.close()
            except BufferError:
                pass
            self.buffer = None
        self.file, self.at, self.filled = "", 0, 0


def _libc_memcmp():
    """The C library's ``memcmp``, or None where there is none to load."""
    try:
        found = ctypes.CDLL(None).memcmp
    except (OSError, AttributeError):
        return None
    found.restype = ctypes.c_int
    found.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
    return found


_MEMCMP = _libc_memcmp()


def _address(view: memoryview) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


def same(a: memoryview, b: memoryview) -> bool:
    """Whether two equally long byte views are equal: ``memcmp`` over writable views (the windows' are), else
    compared as 8-byte words where they can be."""
    n = len(a)
    if n and _MEMCMP is not None and not a.readonly and not b.readonly:
        return _MEMCMP(_address(a), _address(b), n) == 0
    words = n - n % 8
    if words and a[:words].cast("Q") != b[:words].cast("Q"):
        return False
    return a[words:].tobytes() == b[words:].tobytes()


def first_difference(a: memoryview, b: memoryview) -> int:
    """The position of the first differing byte of two unequal, equally long views."""
    lo, hi = 0, len(a)
    while hi - lo > 64:
        mid = (lo + hi) // 2
        if same(a[lo:mid], b[lo:mid]):
            lo = mid
        else:
            hi = mid
    return next(i for i in range(lo, hi) if a[i] != b[i])


def last_difference(a: memoryview, b: memoryview) -> int:
    """The position of the last differing byte of two unequal, equally long views."""
    lo, hi = 0, len(a)
    while hi - lo > 64:
        mid = (lo + hi) // 2
        if same(a[mid:hi], b[mid:hi]):
            hi = mid
        else:
            lo = mid
    return next(i for i in range(hi - 1, lo - 1, -1) if a[i] != b[i])


def equal_pieces(folder_a: Path, pieces_a: list, folder_b: Path, pieces_b: list) -> bool:
    """Whether the bytes of ``pieces_a`` (in ``folder_a``) and ``pieces_b``, each read in order, are equal."""
    if sum(p.length for p in pieces_a) != sum(p.length for p in pieces_b):
        return False
    files_a, files_b = Files(folder_a), Files(folder_b)
    window_a, window_b = Window(files_a), Window(files_b)
    try:
        ia = ib = done_a = done_b = 0
        while ia < len(pieces_a) and ib < len(pieces_b):
            pa, pb = pieces_a[ia], pieces_b[ib]
            n = min(BLOCK, pa.length - done_a, pb.length - done_b)
            if n:
                a = window_a.get(pa.file, pa.start + done_a, n)
                b = window_b.get(pb.file, pb.start + done_b, n)
                if len(a) != n or len(b) != n or not same(a, b):
                    return False
            done_a, done_b = done_a + n, done_b + n
            if done_a == pa.length:
                ia, done_a = ia + 1, 0
            if done_b == pb.length:
                ib, done_b = ib + 1, 0
        return True
    except OSError:
        return False
    finally:
        for closing in (window_a, window_b, files_a, files_b):
            closing.close()
