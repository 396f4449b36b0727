"""CI runs what the README tells a newcomer to run, and installs host tools only itself."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def commands(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_ci_ends_with_the_readmes_demo_and_test_commands():
    readme = (REPO / "README.md").read_text()
    setup = readme.split("## Set up", 1)[1].split("\n## ", 1)[0]
    shown = [line[4:] for line in setup.splitlines() if line.startswith("    ")]
    assert len(shown) == 2, "README.md's Set up shows two commands: the demo's and the tests'"
    demo, test = shown
    assert demo.endswith("&& ascendfix demo") and test.endswith("&& python -m pytest -q")
    assert "install -q -e ." in demo and "install -q -e '.[test]'" in test
    ci = commands((REPO / ".ci" / "run").read_text())
    assert ci[-2:] == [demo, test]


def test_only_ci_installs_host_packages():
    ci = (REPO / ".ci" / "run").read_text()
    assert re.search(r"apt-get\s+install -y -qq buildah\s+debootstrap$", ci, re.M)
    for path in (REPO / "tests").glob("*.py"):
        if path.name != "test_ci.py":
            assert "apt-get" not in path.read_text(), path.name
