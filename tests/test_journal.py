"""The journal's one write transaction: all or nothing across roots and failures, no leftovers, schemas."""

from __future__ import annotations

import errno
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from ascendfix.patching import engine, tree
from ascendfix.patching.journal import SCHEMA, WriteError
from ascendfix.site import Site

from tests.stack import DEMO_PROFILE, make_stack, select


def listing(stack) -> dict[str, list[str]]:
    """Every file under both roots, the state folders left out."""
    found = {}
    for package, root in stack.roots().items():
        found[package] = sorted(
            str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and ".ascendfix" not in p.parts
        )
    return found


def _apply_killed_in_the_write_window(stack, op: str = "apply") -> int:
    """Run apply (or revert) in a child that SIGKILLs itself right after a temp file is written, before the
    rename: exactly the window in which a temp file exists in the upstream folder."""
    code = textwrap.dedent(
        f"""
        import os, signal, sys
        sys.path.insert(0, {os.getcwd()!r})
        from ascendfix.patching import engine
        from ascendfix.site import Site
        from tests.stack import DEMO_PROFILE
        from pathlib import Path
        real = os.replace
        def replace(src, dst, *a, **k):
            fd = k.get("dst_dir_fd")
            dst_path = os.path.join(os.readlink(f"/proc/self/fd/{{fd}}") if fd is not None else "", str(dst))
            if str(src).endswith(".ascendfix-tmp") and ".ascendfix/" not in dst_path and "device.py" in dst_path:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(src, dst, *a, **k)
        os.replace = replace
        roots = {{"verl": Path({str(stack.verl)!r}), "torch": Path({str(stack.torch)!r})}}
        sel = engine.select(Site(DEMO_PROFILE, "npu" if {op!r} == "apply" else None, roots=roots))
        getattr(engine, {op!r})(sel)
        """
    )
    return subprocess.run([sys.executable, "-c", code], timeout=120).returncode


@pytest.mark.parametrize("op", ["apply", "revert"])
def test_a_write_killed_in_its_temp_window_leaves_nothing_after_the_next_command(stack, op):
    original, names = stack.snapshot(), listing(stack)
    if op == "revert":
        engine.apply(select(stack))
    before = stack.snapshot()
    assert _apply_killed_in_the_write_window(stack, op) == -signal.SIGKILL
    temp = stack.verl / "verl/utils/.device.py.ascendfix-tmp"
    assert temp.is_file()  # the kill landed in the window
    statuses = engine.status(select(stack))  # the next command, whatever it is
    assert not temp.exists()
    assert listing(stack) == names  # exactly the upstream files
    assert stack.snapshot() == before  # rolled back to what was there
    assert {s.state for s in statuses} == {"not-applied" if op == "apply" else "applied"}
    engine.revert(select(stack, device=None))
    assert stack.snapshot() == original and listing(stack) == names


def test_older_random_temp_names_are_reported_then_removed_by_apply(stack):
    stray = stack.torch / "torch/distributed/checkpoint/.default_planner.py.okdfj3he.ascendfix-tmp"
    stray.write_bytes(b"half a file")
    unrelated = stack.torch / "torch/distributed/checkpoint/.default_planner.py.swp"
    unrelated.write_bytes(b"an editor's")
    seen = {s.id: s for s in engine.status(select(stack))}
    warning = seen["torch-global-plan-check"].warnings[0]
    assert str(stray) in warning and "the next apply or revert removes it" in warning
    engine.apply(select(stack))
    assert not stray.exists() and unrelated.exists()  # only ascendfix's own names


@pytest.mark.slow
def test_random_kills_during_apply_and_revert_leave_no_temp_files(tmp_path):
    rng = random.Random(99)
    for trial in range(10):
        stack = make_stack(tmp_path / f"t{trial}")
        names = listing(stack)
        op = "revert" if trial % 2 else "apply"
        if op == "revert":
            engine.apply(select(stack))
        code = (
            f"import sys; sys.path.insert(0, {os.getcwd()!r}); from ascendfix.patching import engine; "
            "from ascendfix.site import Site; from tests.stack import DEMO_PROFILE; from pathlib import Path; "
            f"roots={{'verl': Path({str(stack.verl)!r}), 'torch': Path({str(stack.torch)!r})}}; "
            f"engine.{op}(engine.select(Site(DEMO_PROFILE, {'None' if op == 'revert' else repr('npu')}, roots=roots)))"
        )
        child = subprocess.Popen([sys.executable, "-c", code])
        time.sleep(rng.uniform(0.2, 1.2))
        child.send_signal(signal.SIGKILL)
        child.wait()
        engine.status(select(stack))
        assert listing(stack) == names, f"trial {trial}"


def test_a_disk_full_write_under_the_second_root_rolls_back_both_roots(stack, monkeypatch):
    before = stack.snapshot()
    real = tree.Tree.write

    def full(self, rel, data, mode=None, check=None):
        if rel == "torch/distributed/checkpoint/default_planner.py":  # torch's, after verl's files
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, rel, data, mode, check)

    monkeypatch.setattr(tree.Tree, "write", full)
    with pytest.raises(WriteError) as refused:
        engine.apply(select(stack))
    message = str(refused.value)
    assert "default_planner.py" in message and "No space left on device" in message
    assert "rolled back, nothing was changed" in message and "\n" not in message
    assert message.startswith(f"apply failed writing {stack.torch}/torch/distributed/checkpoint/default_planner.py")
    monkeypatch.setattr(tree.Tree, "write", real)
    assert stack.snapshot() == before
    assert {s.state for s in engine.status(select(stack))} == {"not-applied"}
    assert not (stack.verl / ".ascendfix").exists() and not (stack.torch / ".ascendfix").exists()


def failed_apply(ascendfix_cli, stack, preexec_fn=None) -> str:
    """Run `ascendfix apply` expecting a failed write: exit 1, one error line, nothing changed; return the line."""
    before = stack.snapshot()
    result = ascendfix_cli("apply", "--device", "npu", *stack.root_args(), preexec_fn=preexec_fn, timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    line = result.stderr.strip()
    assert "\n" not in line and line.startswith("error: apply failed writing")
    assert stack.snapshot() == before
    assert not (stack.verl / ".ascendfix").exists() and not (stack.torch / ".ascendfix").exists()
    assert not [p for root in stack.roots().values() for p in root.rglob("*ascendfix-tmp")]
    return line


def test_a_file_size_limit_fails_the_cli_with_one_line_and_rolls_back(stack, ascendfix_cli):
    big = stack.torch / "torch/distributed/checkpoint/default_planner.py"
    big.write_bytes(big.read_bytes() + b"#" * 4000 + b"\n")  # larger than the limit once patched

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (3000, 3000))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write over the limit fails with EFBIG instead

    line = failed_apply(ascendfix_cli, stack, limit)
    assert "default_planner.py" in line and "File too large" in line


def test_state_folder_ignores_itself_in_a_git_checkout(stack):
    subprocess.run(["git", "init", "-q", str(stack.verl)], check=True)
    subprocess.run(["git", "-C", str(stack.verl), "add", "-A"], check=True)
    engine.apply(select(stack))
    listed = subprocess.run(
        ["git", "-C", str(stack.verl), "status", "--porcelain", "--untracked-files=all"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert ".ascendfix" not in listed
    assert "AM verl/utils/device.py" in listed  # staged as upstream, modified by the patch


def test_state_files_carry_their_schema_and_an_older_folder_is_read(stack):
    engine.apply(select(stack))
    state = stack.verl / ".ascendfix" / "state.json"
    data = json.loads(state.read_text())
    assert data["schema"] == SCHEMA
    del data["schema"]  # as ascendfix wrote it before schemas
    state.write_text(json.dumps(data))
    assert {s.state for s in engine.status(select(stack))} == {"applied"}
    engine.revert(select(stack, device=None))
    assert not (stack.verl / ".ascendfix").exists()


def test_a_newer_state_folder_is_refused_with_what_to_do(stack, ascendfix_cli):
    engine.apply(select(stack))
    state = stack.verl / ".ascendfix" / "state.json"
    data = json.loads(state.read_text())
    data["schema"] = SCHEMA + 1
    state.write_text(json.dumps(data))
    before = stack.snapshot()
    result = ascendfix_cli("revert", *stack.root_args(), timeout=120)
    assert result.returncode == 1
    assert f"schema {SCHEMA + 1}" in result.stderr and "upgrade ascendfix" in result.stderr
    assert stack.snapshot() == before


def test_doctor_integrity_reports_a_leftover_temp_file_and_apply_removes_it(stack):
    from ascendfix.doctor import pyenv
    from ascendfix.doctor.context import Context

    assert _apply_killed_in_the_write_window(stack) == -signal.SIGKILL
    shutil.rmtree(stack.verl / ".ascendfix")  # the journal lost too: only the temp file tells
    temp = stack.verl / "verl/utils/.device.py.ascendfix-tmp"
    ctx = Context(Site(DEMO_PROFILE, "npu", roots=stack.roots(), environ={}), "test")
    finding = pyenv.check_integrity(ctx)
    assert finding.status == "warn"
    assert finding.messages[0] == f"{temp}: left by a killed ascendfix write; the next apply or revert removes it"
    engine.apply(select(stack))
    assert not temp.exists()
    assert (
        pyenv.check_integrity(Context(Site(DEMO_PROFILE, "npu", roots=stack.roots(), environ={}), "test")).status
        != "warn"
    )


@pytest.fixture
def tiny_disk(tmp_path):
    """A 256 KiB tmpfs, where this machine lets us mount one."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (the injected-ENOSPC test covers the same path)")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_real_full_disk_under_one_root_leaves_both_roots_as_they_were(tmp_path, tiny_disk, ascendfix_cli):
    stack = make_stack(tmp_path / "stack")
    torch = tiny_disk / "site-packages"
    shutil.copytree(stack.torch, torch)
    stack.torch = torch
    filler = tiny_disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:  # take every free block
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    assert "No space left on device" in failed_apply(ascendfix_cli, stack)


def test_an_immutable_upstream_file_fails_the_apply_in_one_line_and_changes_nothing(stack, ascendfix_cli):
    planner = stack.file("torch", "torch/distributed/checkpoint/default_planner.py")
    if subprocess.run(["chattr", "+i", str(planner)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here")
    try:
        line = failed_apply(ascendfix_cli, stack)
        assert line.startswith(f"error: apply failed writing {planner}") and "Operation not permitted" in line
        assert "rolled back, nothing was changed" in line
    finally:
        subprocess.run(["chattr", "-i", str(planner)], check=False)


def test_leftover_temps_are_only_ascendfix_own_names(tmp_path):
    target = tmp_path / "device.py"
    ours = [".device.py.ascendfix-tmp", ".device.py.okdfj3he.ascendfix-tmp"]
    others = [
        ".device.py.short.ascendfix-tmp",  # not an 8-character tag
        ".device.py.OKDFJ3HE.ascendfix-tmp",  # not a tag mkstemp wrote
        ".device.pyc.ascendfix-tmp",  # another file's temp
        ".other.py.ascendfix-tmp",
        "device.py.ascendfix-tmp",
    ]
    for name in ours + others:
        (tmp_path / name).write_text("x")
    assert tree.Tree(tmp_path).leftover_temps(target.name) == sorted(ours)


def test_a_commit_marker_outlives_a_root_the_next_command_cannot_see(stack, monkeypatch):
    """Killed after its commit marker: a command that sees only the first root finishes it forward, but keeps the
    marker while another listed root is not seen; that root is then finished forward too, not rolled back."""
    from ascendfix.patching import journal

    def killed(self, journal_):
        raise KeyboardInterrupt  # as kill -9 right after the marker: every root still journals

    monkeypatch.setattr(journal.Store, "finish", killed)
    with pytest.raises(KeyboardInterrupt):
        engine.apply(select(stack))
    monkeypatch.undo()
    first, other = sorted([stack.torch, stack.verl])
    assert (first / ".ascendfix" / "commit.json").exists() and (other / ".ascendfix" / "journal.json").exists()
    patched_device = {p: p.read_bytes() for p in other.rglob("*.py") if ".ascendfix" not in p.parts}
    hidden = other.with_name(other.name + ".away")
    other.rename(hidden)  # not mounted while the next command runs
    with journal.reading([first], engine.restorer(DEMO_PROFILE)):
        pass
    assert (first / ".ascendfix" / "commit.json").exists()  # the other root was not seen without the journal
    hidden.rename(other)
    engine.status(select(stack))
    assert {p: p.read_bytes() for p in other.rglob("*.py") if ".ascendfix" not in p.parts} == patched_device
    assert {s.state for s in engine.status(select(stack))} <= {"applied", "not-applicable"}
    assert not (first / ".ascendfix" / "commit.json").exists()  # every root seen without it: dropped


def _killed(stack, after: str = "mark_committed") -> None:
    """Apply in a forked child that dies (no cleanup at all, as kill -9) right after ``journal.Store.<after>``
    returns: right after its commit marker, or (``save_records``) after a root's files, before any marker."""
    from ascendfix.patching import journal

    pid = os.fork()
    if pid == 0:
        try:
            name = {"save_records": "_save_records"}.get(after, after)
            real = getattr(journal.Store, name)

            def then_die(self, *args):
                real(self, *args)
                os._exit(9)

            setattr(journal.Store, name, then_die)
            engine.apply(select(stack))
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 9


def _files(root) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _two_roots(tmp_path, order: str):
    """The demo stack with its torch root sorting first (as site-packages before a checkout), or verl."""
    stack = make_stack(tmp_path / "s")
    if order == "verl-first":
        stack.verl = stack.verl.rename(stack.verl.with_name("a-verl-checkout"))
    first, other = sorted([stack.torch, stack.verl])
    assert first == (stack.torch if order == "torch-first" else stack.verl)
    return stack, first, other


@pytest.mark.parametrize("order", ["torch-first", "verl-first"])
@pytest.mark.parametrize("hidden", ["marker-root-absent", "marker-root-another-image", "other-root-absent"])
def test_a_committed_apply_is_never_split_by_a_root_missing_at_recovery(tmp_path, ascendfix_cli, order, hidden):
    """Killed right after its commit marker, then the next command runs with one root not mounted: a marker root
    that is absent, or a folder holding neither its marker nor its journal (another image's site-packages), is
    never read as "not committed": every journal kept, one line naming the root to mount, exit 2. A missing other
    root keeps the marker and refuses a new write. Once both are back, both are finished forward."""
    from ascendfix.patching import journal

    stack, first, other = _two_roots(tmp_path, order)
    upstream = {p: _files(p) for p in stack.roots().values()}
    _killed(stack)
    assert (first / ".ascendfix/commit.json").is_file() and (other / ".ascendfix/journal.json").is_file()
    killed = {p: _files(p) for p in (first, other)}
    restore = engine.restorer(DEMO_PROFILE)
    gone = other if hidden == "other-root-absent" else first
    away = gone.rename(gone.with_name(gone.name + ".away"))  # not mounted while the next command runs
    if hidden == "marker-root-absent":
        with pytest.raises(journal.Unseen) as refused, journal.reading([other], restore):
            pass
        line = str(refused.value)
        assert refused.value.exit_code == 2 and f"mount the {first} " in line and "No such file" in line
        assert line.startswith(f"{other / '.ascendfix/journal.json'}: ") and "\n" not in line
        assert _files(other) == killed[other]  # nothing rolled back, every journal kept
    elif hidden == "marker-root-another-image":
        first.mkdir()  # the path is there, but not the folder the apply wrote
        result = ascendfix_cli("status", "--device", "npu", *stack.root_args(), timeout=120)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        line = result.stderr.strip()
        assert "\n" not in line and f"mount the {first} " in line and str(other / ".ascendfix/journal.json") in line
        assert "holds neither its commit marker nor its journal" in line
        assert _files(other) == killed[other] and _files(first) == {}
        first.rmdir()
    else:
        with journal.reading([first], restore):
            pass
        assert (first / ".ascendfix/commit.json").is_file()  # kept while the other root is not seen
        assert not (first / ".ascendfix/journal.json").exists()  # finished forward
        # a new write would overwrite the marker
        with pytest.raises(journal.Unseen) as refused, journal.session([first], {}, restore):
            pass
        assert f"until ascendfix sees {other}" in str(refused.value)
    away.rename(gone)
    assert {s.state for s in engine.status(select(stack))} == {"applied"}
    for root in (first, other):
        assert not (root / ".ascendfix/journal.json").exists() and not (root / ".ascendfix/commit.json").exists()
    engine.revert(select(stack, device=None))
    assert {p: _files(p) for p in stack.roots().values()} == upstream


@pytest.mark.parametrize("order", ["torch-first", "verl-first"])
def test_an_uncommitted_apply_rolls_back_every_root_and_its_first_root_last(tmp_path, order):
    """Killed before its marker, the next command sees only the first root: it is rolled back but keeps its
    journal (so the other root, when back, reads "journaled, no marker" there, never nothing); both back: both
    rolled back and nothing left."""
    from ascendfix.patching import journal

    stack, first, other = _two_roots(tmp_path, order)
    upstream = {p: _files(p) for p in stack.roots().values()}
    _killed(stack, "save_records")  # the first root's records saved: its files are written, no marker yet
    assert not (first / ".ascendfix/commit.json").exists() and (other / ".ascendfix/journal.json").is_file()
    away = other.rename(other.with_name(other.name + ".away"))
    with journal.reading([first], engine.restorer(DEMO_PROFILE)) as notes:
        pass
    assert any("rolled back an interrupted apply" in n for n in notes)
    assert (first / ".ascendfix/journal.json").is_file()  # kept until the other root is seen
    away.rename(other)
    assert {s.state for s in engine.status(select(stack))} == {"not-applied"}
    assert {p: _files(p) for p in stack.roots().values()} == upstream  # no journal, undo copy or backup left


def test_an_unreadable_commit_marker_is_refused_not_read_as_none(stack):
    """A marker that cannot be read decides nothing: the journals stay and the next command refuses."""
    from ascendfix.patching import journal

    _killed(stack)
    first, other = sorted([stack.torch, stack.verl])
    (first / ".ascendfix/commit.json").write_text("{not json")
    killed = {p: _files(p) for p in (first, other)}
    with pytest.raises(journal.Unseen) as refused:
        engine.status(select(stack))
    assert "commit.json: unreadable" in str(refused.value) and refused.value.exit_code == 2
    assert {p: _files(p) for p in (first, other)} == killed
