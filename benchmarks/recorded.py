"""Every benchmark's printed figures, kept where the docs can point at them: ``benchmarks/results/<name>.md``.

:func:`recorded` runs a benchmark's ``main`` with its standard output copied into that file, under a
header that says when (UTC date and time), where (cores, load, Python, platform) and with which
arguments it ran. A run replaces the file: commit it with the change it measures. The docs keep the
targets and the reasoning, and cite these files for the figures.
"""

from __future__ import annotations

import contextlib
import io
import os
import platform
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


class _Tee(io.TextIOBase):
    """Writes to the terminal and keeps a copy."""

    def __init__(self, terminal):
        self.terminal, self.copy = terminal, io.StringIO()

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.terminal.write(text)

    def flush(self) -> None:
        self.terminal.flush()


def header(script: str, argv: list[str]) -> str:
    """The results file's first lines: the benchmark, its date, the machine and the command."""
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "unknown"
    return (
        f"# {Path(script).stem}: measured {now}\n\n"
        f"- command: `python benchmarks/{Path(script).name}{''.join(' ' + a for a in argv)}`\n"
        f"- machine: {os.cpu_count()} cores, load average {load} at the start, {platform.machine()} "
        f"{platform.system()}, Python {platform.python_version()}\n\n"
    )


def recorded(script: str, main: Callable[[], object]) -> None:
    """Run ``main`` with its output also written to ``results/<script's name>.md`` (when it finishes)."""
    tee = _Tee(sys.stdout)
    top = header(script, sys.argv[1:])
    with contextlib.redirect_stdout(tee):
        main()
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{Path(script).stem}.md"
    path.write_text(top + "```\n" + tee.copy.getvalue().rstrip("\n") + "\n```\n")
    print(f"(written to {path.relative_to(RESULTS.parent.parent)})")
