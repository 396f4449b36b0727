"""Signs in a checkpoint's folder that its files are not one finished save: copies still running, stray mtimes.

- A partial copy: rsync writes each file as ``.NAME.XXXXXX`` beside it and renames it when done;
  ``*.tmp`` and ``*.partial`` are other copiers' (and torch's own ``.metadata.tmp`` before its rename).
  Any of them means a copy (or the save) is still running, or died: a problem.
- A ``.distcp`` whose modification time lies far outside the others': it may come from another save,
  which no check of the bytes can tell (each file is a well-formed save on its own): a warning.
"""

from __future__ import annotations

import os
import re
import statistics
from pathlib import Path

from ascendfix.checkpoint.report import Problem

_RSYNC_PARTIAL = re.compile(r"\.(?P<name>.+)\.[A-Za-z0-9]{6}")
_PARTIAL_SUFFIXES = (".tmp", ".partial")
FAR_SECONDS = 3600.0  # at least this far from the others' median
_SPREAD_FACTOR = 4  # and this many times the spread of the middle half of the files


def partial_copies(names: list[str]) -> list[Problem]:
    """A problem for each partial copy among the folder's ``names``."""
    problems = []
    for name in sorted(names):
        match = _RSYNC_PARTIAL.fullmatch(name)
        if match:
            detail = f"rsync's partial copy of {match['name']}: a copy is still running (or died)"
        elif name.endswith(_PARTIAL_SUFFIXES):
            detail = "a partial file: a copy is still running (or died), or the save did not finish"
        else:
            continue
        problems.append(Problem("partial-copy", "file", name, detail))
    return problems


def stray_mtimes(folder: Path, names: list[str]) -> list[Problem]:
    """A warning for each ``.distcp`` written far from the others' time (at least 4 files to compare)."""
    times = {}
    for name in names:
        if name.endswith(".distcp"):
            try:
                times[name] = os.lstat(folder / name).st_mtime
            except OSError:
                continue
    if len(times) < 4:
        return []
    ordered = sorted(times.values())
    quarter = len(ordered) // 4
    median = statistics.median(ordered)
    far = max(FAR_SECONDS, _SPREAD_FACTOR * (ordered[-1 - quarter] - ordered[quarter]))
    warnings = []
    for name in sorted(times):
        apart = times[name] - median
        if abs(apart) > far:
            when = "before" if apart < 0 else "after"
            detail = f"written {_hours(abs(apart))} {when} the others: it may come from another save"
            warnings.append(Problem("stray-mtime", "file", name, detail))
    return warnings


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"
