"""A package root's files, reached without following a symbolic link below it; atomic writes; root locks.

Every path below a :class:`Tree`'s root is relative, has no ``..``, and is reached one component
at a time from the root's descriptor with ``O_NOFOLLOW``: a symbolic link anywhere below the root
is refused (:class:`~ascendfix.fsutil.Escape`), never followed. The root itself is trusted (the
caller chose it). The journal is the one user: every write of a patched file or a state file goes
through here, inside its transaction.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from ascendfix.fsutil import Escape, check_rel

TEMP_SUFFIX = ".ascendfix-tmp"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_TAG_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")


class TooLarge(Escape):
    """A file over the size its reader accepts."""


class Tree:
    """The files below ``root``, reached without following any symbolic link below it."""

    def __init__(self, root: Path):
        self.root = root

    def _open_dir(self, parts: list[str], create: bool = False) -> int:
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for i, part in enumerate(parts):
                try:
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o755, dir_fd=fd)
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise Escape(*self._not_plain(fd, part, "/".join(parts[: i + 1]), "a folder")) from None
                    raise
                os.close(fd)
                fd = nfd
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _not_plain(self, dir_fd: int, name: str, rel: str, what: str) -> tuple[str, str]:
        """Why ``rel`` (a link, or not ``what``) is refused, and what to do about it."""
        path = self.root / rel
        try:
            target = os.readlink(name, dir_fd=dir_fd)
        except OSError:
            return f"{path} is not {what}", ""
        real = os.path.normpath(path.parent / target)  # a relative link is relative to its folder
        if what == "a folder":
            fix = f"put the folder in place of the link (rm {path} && cp -a {real} {path}), or --root one without links"
        else:
            fix = f"cp --remove-destination {real} {path}  # the file itself in place of the link"
        return f"{path} is a symbolic link (to {target}); refusing to follow it", fix

    @contextlib.contextmanager
    def _parent(self, rel: str, create: bool = False) -> Iterator[tuple[int, str]]:
        parts = check_rel(rel).split("/")
        fd = self._open_dir(parts[:-1], create)
        try:
            yield fd, parts[-1]
        finally:
            os.close(fd)

    def info(self, rel: str) -> os.stat_result | None:
        """The ``lstat`` of ``rel`` itself, or None when nothing is there (its folders are reached without
        following any link)."""
        try:
            with self._parent(rel) as (fd, name):
                return os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def kind(self, rel: str) -> str | None:
        """What is at ``rel`` itself: "file", "folder", "link", "other", or None (its folders are reached
        without following any link)."""
        info = self.info(rel)
        if info is None:
            return None
        mode = info.st_mode
        if stat.S_ISLNK(mode):
            return "link"
        return "file" if stat.S_ISREG(mode) else "folder" if stat.S_ISDIR(mode) else "other"

    def is_link(self, rel: str) -> bool:
        """``rel`` itself is a symbolic link."""
        return self.kind(rel) == "link"

    def exists(self, rel: str) -> bool:
        """Something (a file, a folder, a link) is at ``rel``."""
        return self.kind(rel) is not None

    def read(self, rel: str, limit: int | None = None) -> bytes:
        """The bytes of the regular file ``rel`` (FileNotFoundError when absent; :class:`Escape` when it is a
        link or not a regular file; :class:`TooLarge` past ``limit`` bytes)."""
        with self._parent(rel) as (dfd, name):
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
            except OSError as e:
                if e.errno == errno.ELOOP:
                    raise Escape(*self._not_plain(dfd, name, rel, "a regular file")) from None
                raise
            info = os.fstat(fd)  # before a file object: one refuses a folder with a bare errno
            if not stat.S_ISREG(info.st_mode):
                os.close(fd)
                what = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file"
                raise Escape(f"{self.root / rel} is {what}, where ascendfix reads a file")
            with os.fdopen(fd, "rb") as f:
                if limit is not None and info.st_size > limit:
                    raise TooLarge(f"{self.root / rel} is {info.st_size:,} bytes, over the {limit:,} this reads")
                return f.read()

    def write(self, rel: str, data: bytes, mode: int | None = None, check: Callable[[], None] | None = None) -> None:
        """Replace ``rel`` with ``data`` atomically: a fresh temp file beside it (``O_EXCL|O_NOFOLLOW``), fsync,
        rename, folder fsync. Missing folders are made. ``mode`` defaults to the replaced file's, else 0o644.
        The replaced file's owner and group are kept (where this user may set them).
        ``check`` runs right before the rename (a raise there leaves the file as it was)."""
        with self._parent(rel, create=True) as (dfd, name):
            try:
                replaced = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                replaced = None
            if mode is None:
                mode = replaced.st_mode & 0o7777 if replaced is not None else 0o644
            tmp = f".{name}{TEMP_SUFFIX}"
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=dfd)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dfd)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    if replaced is not None and (replaced.st_uid, replaced.st_gid) != (os.geteuid(), os.getegid()):
                        with contextlib.suppress(PermissionError):  # only root may give a file away
                            os.fchown(f.fileno(), replaced.st_uid, replaced.st_gid)
                    os.fchmod(f.fileno(), mode)
                    os.fsync(f.fileno())
                if check is not None:
                    check()
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp, dir_fd=dfd)
                raise
            os.fsync(dfd)

    def unlink(self, rel: str) -> bool:
        """Remove the file (or link) ``rel``; False when it was not there."""
        try:
            with self._parent(rel) as (fd, name):
                os.unlink(name, dir_fd=fd)
                return True
        except FileNotFoundError:
            return False

    def listdir(self, rel: str = "") -> list[str]:
        """The names in the folder ``rel`` ("" is the root); [] when it is absent."""
        try:
            fd = self._open_dir(check_rel(rel).split("/") if rel else [])
        except FileNotFoundError:
            return []
        try:
            return os.listdir(fd)
        finally:
            os.close(fd)

    def remove_tree(self, rel: str) -> None:
        """Remove the folder ``rel`` and everything in it, following no link (a link is removed, not entered)."""
        try:
            with self._parent(rel) as (fd, name):
                _remove_entry(fd, name)
        except FileNotFoundError:
            pass

    def prune(self, rel: str, stop: str) -> None:
        """Remove the empty folders above the file ``rel``, up to (not including) the folder ``stop``."""
        parts = check_rel(rel).split("/")[:-1]
        keep = len(check_rel(stop).split("/"))
        while len(parts) > keep:
            try:
                with self._parent("/".join(parts)) as (fd, name):
                    os.rmdir(name, dir_fd=fd)
            except OSError:
                return
            parts.pop()

    def leftover_temps(self, rel: str) -> list[str]:
        """ascendfix's own temp files for ``rel`` left by a killed write (today's name, and older random ones)."""
        folder, _, name = check_rel(rel).rpartition("/")
        prefix = f".{name}"
        found = []
        with contextlib.suppress(OSError, Escape):
            for n in self.listdir(folder):
                tag = n[len(prefix) : -len(TEMP_SUFFIX)]
                if n.startswith(prefix) and n.endswith(TEMP_SUFFIX) and _is_temp_tag(tag):
                    found.append(f"{folder}/{n}" if folder else n)
        return sorted(found)

    def remove_temps(self, rel: str) -> list[str]:
        """Remove the leftovers :meth:`leftover_temps` finds; returns what was removed."""
        return [tmp for tmp in self.leftover_temps(rel) if self.unlink(tmp)]

    def drop_bytecode(self, rel: str) -> None:
        """Remove the cached bytecode of the module ``rel`` (pip compiles with timestamp checks; an
        unchecked-hash .pyc would keep running the old code)."""
        folder, _, name = rel.rpartition("/")
        cache = f"{folder}/__pycache__" if folder else "__pycache__"
        stem = name.rsplit(".", 1)[0]
        with contextlib.suppress(Escape, OSError):
            for n in self.listdir(cache):
                if n.startswith(f"{stem}.") and n.endswith(".pyc"):
                    self.unlink(f"{cache}/{n}")


def _remove_entry(dir_fd: int, name: str) -> None:
    info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return
    fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    try:
        for child in os.listdir(fd):
            _remove_entry(fd, child)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dir_fd)


def _is_temp_tag(tag: str) -> bool:
    """Nothing (today's fixed name), or the ``.xxxxxxxx`` random tag of older releases."""
    return tag == "" or (len(tag) == 9 and tag[0] == "." and all(c in _TAG_CHARS for c in tag[1:]))


def lock_holder(folder: Path) -> int | None:
    """The pid holding a flock on ``folder``, as /proc/locks tells (None when it cannot say)."""
    try:
        info = os.stat(folder)
        wanted = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
        with open("/proc/locks") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == wanted:
                    return int(fields[4])
    except (OSError, ValueError):
        return None
    return None


_HELD: set[tuple[int, int]] = set()  # (st_dev, st_ino) of the folders this process holds locked


@contextlib.contextmanager
def locked(folders: list[Path], on_wait: Callable[[Path, int | None], None] | None = None) -> Iterator[None]:
    """Hold an exclusive flock on each distinct folder (by device and inode, in a fixed order, so concurrent
    runs cannot deadlock).

    The lock is taken on the folder itself, so it leaves no file behind. When another process
    holds one, ``on_wait(folder, its pid or None)`` is called before waiting (Ctrl-C interrupts the wait).
    A folder this process already holds is a bug (RuntimeError), never a wait: it would wait on itself.
    """
    fds: list[tuple[int, tuple[int, int]]] = []
    try:
        for folder, key in _distinct(folders):
            if key in _HELD:
                raise RuntimeError(f"this process already holds the lock on {folder}: a second lock would wait forever")
            fd = os.open(folder, os.O_RDONLY)
            fds.append((fd, key))
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = lock_holder(folder)
                if holder == os.getpid():
                    raise RuntimeError(f"this process already holds the lock on {folder}") from None
                if on_wait is not None:
                    on_wait(folder, holder)
                fcntl.flock(fd, fcntl.LOCK_EX)
            _HELD.add(key)
        yield
    finally:
        for fd, key in reversed(fds):
            _HELD.discard(key)
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def _distinct(folders: list[Path]) -> list[tuple[Path, tuple[int, int]]]:
    """Each distinct folder once (the first name it was given by), with its (st_dev, st_ino), in inode order."""
    found: dict[tuple[int, int], Path] = {}
    for folder in folders:
        info = os.stat(folder)
        found.setdefault((info.st_dev, info.st_ino), folder)
    return [(folder, key) for key, folder in sorted(found.items())]
