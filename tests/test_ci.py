"""CI runs what the README tells a newcomer to run, and installs host tools only itself."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def commands(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_ci_ends_with_the_readmes_install_and_test_commands():
    readme = (REPO / "README.md").read_text()
    setup = readme.split("## Set up", 1)[1].split("\n## ", 1)[0]
    install = re.search(r"^    (python3 -m pip install -e '\.\[test\]')", setup, re.M).group(1)
    test = re.search(r"^    (python3 -m pytest -q)$", setup, re.M).group(1)
    ci = commands((REPO / ".ci" / "run").read_text())
    assert ci[-2:] == [install.replace("install -e", "install -q -e"), test]


def test_only_ci_installs_host_packages():
    ci = (REPO / ".ci" / "run").read_text()
    assert re.search(r"apt-get\s+install -y -qq buildah\s+debootstrap$", ci, re.M)
    for path in (REPO / "tests").glob("*.py"):
        if path.name != "test_ci.py":
            assert "apt-get" not in path.read_text(), path.name
