"""The docs site builds with ``mkdocs build --strict``: no broken link or anchor, no page outside the nav."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    pytest.importorskip("mkdocs", reason="the docs need mkdocs: pip install mkdocs mkdocs-material (the test extra)")
    pytest.importorskip("material", reason="the docs need mkdocs-material (the test extra)")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    argv = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml"), "-d", str(site)]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)


def test_the_docs_build_strict(tmp_path):
    done = build(REPO, tmp_path / "site")
    assert done.returncode == 0, done.stderr[-4000:]
    assert (tmp_path / "site" / "index.html").is_file()


def append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


def test_an_orphan_page_or_a_broken_link_fails_the_build(tmp_path):
    """The strict build is what holds the site whole: the two faults it must catch, each in a copy."""
    for fault, expected in (
        (lambda docs: (docs / "orphan.md").write_text("# Orphan\n"), "orphan.md"),
        (lambda docs: append(docs / "index.md", "\n[gone](no-such-page.md)\n"), "no-such-page.md"),
        (lambda docs: append(docs / "index.md", "\n[gone](guide-steps.md#no-such-anchor)\n"), "#no-such-anchor"),
    ):
        root = tmp_path / f"copy{len(list(tmp_path.iterdir()))}"
        root.mkdir()
        shutil.copy(REPO / "mkdocs.yml", root)
        shutil.copytree(REPO / "docs", root / "docs")
        fault(root / "docs")
        done = build(root, root / "site")
        assert done.returncode != 0
        assert expected in done.stderr


def test_the_readme_is_a_front_page_without_measured_figures():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 150, "README.md is the front page: move the detail to docs/"
    figure = re.search(r"\d(?:[.,]\d+)?\s?(?:ms|µs|s|min|×|x|%|[MG]B/s)\b|\b[Mm]easured\b", readme)
    assert figure is None, f"README.md: {figure.group(0)!r}: measured figures go to benchmarks/results/"
