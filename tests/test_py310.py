"""The container runs Python 3.10: keep the package honest for it (ruff py310 rules, mypy, vermin)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_ruff_clean_for_py310():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_clean_over_the_whole_package():
    # which files: [tool.mypy] in pyproject.toml (the whole package, as the pre-commit hook checks it)
    result = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_vermin_says_3_10_is_enough():
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, vermin; sys.exit(vermin.main())",
            "--target=3.10-",
            "--no-tips",
            "--violations",
            "--eval-annotations",
            "ascendfix",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_core_imports_no_heavy_framework():
    code = (
        "import sys, ascendfix.cli, ascendfix.patching.engine, ascendfix.profile.manifest;"
        "bad = {'torch', 'torch_npu', 'tensordict', 'ray'} & set(sys.modules);"
        "print(sorted(bad)); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
