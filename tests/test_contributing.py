"""CONTRIBUTING.md's "Add a patch", followed in a copy of the tree: a throwaway patch with an existing transform
is its TOML, one manifest line and one test; the suite names the rest (the demo's stand-in, the reference pages),
and then the tests that enumerate patches pass with it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PID = "verl-throwaway"
FILE = "verl/utils/throwaway.py"
STANDIN = f"patches/standins/verl/{FILE}"

PATCH = f'''id = "{PID}"
package = "verl"
devices = ["npu"]
why = "A throwaway patch that tests/test_contributing.py adds in a copy of the tree."
references = ["CONTRIBUTING.md, Add a patch"]
drop_when = "never: it exists only in that test's copy"

[[files]]
path = "{FILE}"

[transform]
name = "set-assignment"
target = "ENABLED"
original = "True"
value = "False"
'''

TEST = f'''"""The throwaway patch on the demo's stand-in."""

from ascendfix.patching import engine

from tests.stack import select


def test_the_throwaway_patch_turns_enabled_off_and_back(stack):
    path = stack.file("verl", "{FILE}")
    before = path.read_bytes()
    engine.apply(select(stack, only=("{PID}",)))
    assert b"ENABLED = False  # ascendfix: {PID}" in path.read_bytes()
    engine.revert(select(stack, only=("{PID}",)))
    assert path.read_bytes() == before
'''

STANDIN_TEST = "tests/test_demo.py::test_every_bundled_patch_file_has_a_demo_stand_in"
# What adding a patch can break: the tests built on the profile's patches, the demo and its stack, the docs.
AFFECTED = ["tests/test_throwaway_patch.py", "tests/test_reference.py", "tests/test_docs.py"]
AFFECTED += [f"tests/test_{name}.py" for name in ("demo", "cli", "engine", "manifest", "guide_conformance", "export")]
AFFECTED += [f"tests/test_{name}.py" for name in ("journal", "state_folder", "untrusted_state", "faults", "preflight")]
AFFECTED += ["tests/test_parsecache.py"]


SKIP = {".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis", ".benchmarks", "site"}


def _skip(folder: str, names: list[str]) -> set[str]:
    """What the copy leaves out: caches, and any virtual environment (the README's ``.venv`` in the checkout is
    3 GB with torch and Ray: copying it was most of this test's time in `.ci/run`)."""
    return {n for n in names if n in SKIP or Path(folder, n, "pyvenv.cfg").is_file()}


def _copy(dest: Path) -> Path:
    shutil.copytree(REPO, dest, ignore=_skip)
    return dest


def _run(tree: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run([sys.executable, *argv], cwd=tree, env=env, capture_output=True, text=True, timeout=1500)


@pytest.mark.slow
def test_add_a_patch_as_contributing_says():
    with tempfile.TemporaryDirectory(prefix="af-") as folder:  # a short path: `show` fits paths in 80 columns
        _add_a_patch(_copy(Path(folder) / "tree"))


def _add_a_patch(tree: Path) -> None:
    # 1. the patch file; 2. one manifest line; 3. one test
    (tree / "patches" / f"{PID}.toml").write_text(PATCH)
    manifest = tree / "manifests" / "verl-796871d.toml"
    text, last = manifest.read_text(), '    "verl-dapo-no-interleave",\n'  # the last of [devices.npu] patches
    assert text.count(last) == 1
    manifest.write_text(text.replace(last, f'{last}    "{PID}",\n'))
    (tree / "tests" / "test_throwaway_patch.py").write_text(TEST)

    # the suite names the stand-in to add, then the command that regenerates the reference pages
    # one worker (-n 0): the suite around this test already keeps the machine's cores busy
    missing = _run(tree, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", STANDIN_TEST)
    assert missing.returncode == 1 and f"add its demo stand-in, {STANDIN}" in missing.stdout, missing.stdout[-3000:]
    (tree / STANDIN).write_text("ENABLED = True\n")
    stale = _run(tree, "scripts/reference.py", "--check")
    assert stale.returncode == 1 and "profile.md" in stale.stderr and "python3 scripts/reference.py" in stale.stderr
    assert _run(tree, "scripts/reference.py").returncode == 0

    done = _run(
        tree, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "-m", "not slow and not upstream", *AFFECTED
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and " failed" not in done.stdout
