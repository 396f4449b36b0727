"""All or nothing across two roots, with a fault injected at every file-system call of an apply and a revert.

A kill is ``os._exit`` in a forked child at the Nth ``os.replace``, ``os.unlink`` or ``os.fsync``: no
``finally`` runs, exactly like kill -9 there. A full disk is ENOSPC from the Nth call that needs space on
(``os.replace``, ``os.fsync``, creating ``os.open``, ``os.mkdir``), and from every later one, rollback included,
until space returns. After either, the next command leaves both roots wholly before or wholly after, and a
revert then leaves exactly the upstream files: no journal, undo copy, backup folder or temp file.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest
from ascendfix.errors import AscendfixError
from ascendfix.patching import engine

from tests.stack import Stack, make_stack, select

KILL_AT = ("replace", "unlink", "fsync")
FULL_AT = ("replace", "fsync", "open", "mkdir")


def everything(stack) -> dict[str, bytes]:
    """Every file under both roots, state folders included, by path."""
    return {str(p): p.read_bytes() for root in stack.roots().values() for p in sorted(root.rglob("*")) if p.is_file()}


class Faults:
    """Wraps the os calls ``names``; ``on_call(name, n)`` runs before the nth call (counted over all of them).

    A wrapped fsync does not reach the disk: these tests kill processes, they do not cut the power.
    """

    def __init__(self, monkeypatch, names, on_call):
        self.calls = 0
        for name in names:
            real = getattr(os, name)
            monkeypatch.setattr(os, name, self._wrap(name, real, on_call))

    def _wrap(self, name, real, on_call):
        def call(*args, **kwargs):
            if name == "open" and not (args[1] if len(args) > 1 else kwargs.get("flags", 0)) & os.O_CREAT:
                return real(*args, **kwargs)
            self.calls += 1
            on_call(name, self.calls)
            return None if name == "fsync" else real(*args, **kwargs)

        return call


@pytest.fixture(autouse=True)
def no_disk_flush(monkeypatch):
    """The checks between faults run without flushing to disk (see :class:`Faults`)."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


def _run(op, stack):
    if op == "apply":
        engine.apply(select(stack))
    else:
        engine.revert(select(stack, device=None))


def _count(op, tmp_path, monkeypatch, names) -> int:
    stack = make_stack(tmp_path / f"count-{op}")
    if op == "revert":
        engine.apply(select(stack))
    with monkeypatch.context() as m:
        faults = Faults(m, names, lambda name, n: None)
        _run(op, stack)
    return faults.calls


def _template(tmp_path: Path, op: str) -> tuple[Stack, dict[str, bytes], dict[str, bytes]]:
    """The two roots before ``op`` (a revert's are applied first), and what upstream and before hold."""
    stack = make_stack(tmp_path / f"template-{op}")
    upstream = everything(stack)
    if op == "revert":
        engine.apply(select(stack))
    return stack, upstream, everything(stack)


def _copy(template: Stack, path: Path) -> Stack:
    shutil.copytree(template.verl.parent, path, symlinks=True)
    moved = {name: path / getattr(template, name).relative_to(template.verl.parent) for name in ("verl", "torch")}
    return Stack(moved["verl"], moved["torch"], template.profile)


def _rebased(files: dict[str, bytes], template: Stack, stack: Stack) -> dict[str, bytes]:
    old, new = str(template.verl.parent), str(stack.verl.parent)
    return {path.replace(old, new, 1): data for path, data in files.items()}


def _check_whole(stack, upstream, before, op, n):
    """After the next command: both roots wholly as before, or wholly done; then revert leaves upstream."""
    states = {s.state for s in engine.status(select(stack))}
    done = "applied" if op == "apply" else "not-applied"
    undone = "not-applied" if op == "apply" else "applied"
    assert states in ({done}, {undone}), f"{op}, fault at call {n}: roots disagree: {states}"
    if states == {undone}:
        assert everything(stack) == before, f"{op}, fault at call {n}: not exactly as before"
    engine.revert(select(stack, device=None))
    assert everything(stack) == upstream, f"{op}, fault at call {n}: something is left after revert"


@pytest.mark.slow
@pytest.mark.parametrize("op", ["apply", "revert"])
def test_killed_at_every_call_the_two_roots_end_the_same_way(tmp_path, monkeypatch, op):
    total = _count(op, tmp_path, monkeypatch, KILL_AT)
    assert total > 20  # the journal, undo copies, backups, five files, records, the commit marker
    template, upstream_t, before_t = _template(tmp_path, op)
    for n in range(1, total + 1):
        stack = _copy(template, tmp_path / f"kill-{n}")
        upstream, before = _rebased(upstream_t, template, stack), _rebased(before_t, template, stack)
        pid = os.fork()
        if pid == 0:  # the child dies at its nth call, running no cleanup at all
            try:
                with monkeypatch.context() as m:
                    Faults(m, KILL_AT, lambda name, k, n=n: os._exit(9) if k == n else None)
                    _run(op, stack)
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) in (0, 9)
        _check_whole(stack, upstream, before, op, n)


@pytest.mark.slow
@pytest.mark.parametrize("op", ["apply", "revert"])
def test_disk_full_from_any_call_on_is_one_line_and_the_next_command_finishes(tmp_path, monkeypatch, op):
    total = _count(op, tmp_path, monkeypatch, FULL_AT)
    template, upstream_t, before_t = _template(tmp_path, op)
    outcomes = set()
    for n in range(1, total + 1):
        stack = _copy(template, tmp_path / f"full-{n}")
        upstream, before = _rebased(upstream_t, template, stack), _rebased(before_t, template, stack)

        def full(name, k, n=n):
            if k >= n:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        with monkeypatch.context() as m:
            Faults(m, FULL_AT, full)
            try:
                _run(op, stack)
                outcomes.add("done")
            except AscendfixError as e:
                assert "\n" not in str(e) and "No space left on device" in str(e), str(e)
                assert e.exit_code == 1
                outcomes.add("kept" if "journal is kept" in str(e) else "rolled back")
        _check_whole(stack, upstream, before, op, n)  # space is back
    assert {"rolled back", "kept"} <= outcomes
