"""Signs in a checkpoint's folder that its files are not one finished save: copies still running, stray mtimes.

- A partial copy: rsync writes each file as ``.NAME.XXXXXX`` beside it and renames it when done;
  ``*.tmp`` and ``*.partial`` are other copiers' (and torch's own ``.metadata.tmp`` before its rename).
  Any of them means a copy (or the save) is still running, or died: a problem.
- A data file or ``common.pt`` more than an hour older than the save's ``.metadata`` or ``metadata.json``,
  which are written last: it comes from another save (a copy that keeps mtimes, ``cp -p`` or rsync, keeps
  that), which no check of the bytes can tell (each file is a well-formed save on its own), and torch's
  ``dcp.load`` and megatron's ``load`` take it silently: a problem, at any file count.
- A ``.distcp`` whose modification time lies far outside the others': it may come from another save: a warning.
- A ``.distcp`` no storage entry names (``__1_0 (copy).distcp``): not part of the save, which torch never
  reads: a warning naming it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Set
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


_LAST = (".metadata", "metadata.json")  # written when every data file is: the save's own time
_DATA = ("common.pt",)


def _mtimes(folder: Path, names: list[str]) -> dict[str, float]:
    times = {}
    for name in names:
        try:
            times[name] = os.lstat(folder / name).st_mtime
        except OSError:
            continue
    return times


def mixed_save(folder: Path, names: list[str]) -> list[Problem]:
    """A problem for each data file, ``common.pt`` or metadata file more than an hour older than the newest of the
    save's ``.metadata`` and ``metadata.json``: a file of another save."""
    times = _mtimes(folder, [n for n in names if n.endswith(".distcp") or n in _DATA or n in _LAST])
    last = [(times[n], n) for n in _LAST if n in times]
    if not last:
        return []
    newest, written = max(last)
    problems = []
    for name in sorted(times):
        apart = newest - times[name]
        if apart > FAR_SECONDS:
            detail = (
                f"written {_hours(apart)} before {written} (the save's last file): a file of another save, which "
                "torch and megatron load silently; copy this save's own (or the folder was copied without keeping "
                "mtimes: cp -p and rsync -a keep them)"
            )
            problems.append(Problem("mixed-save", "file", name, detail))
    return problems


def extra_files(names: list[str], named: set[str]) -> list[Problem]:
    """A warning for each ``.distcp`` in the folder that no storage entry names: not part of the save."""
    return [
        Problem("extra-file", "file", name, "no storage entry names it: not part of this save (torch never reads it)")
        for name in sorted(names)
        if name.endswith(".distcp") and name not in named
    ]


def stray_mtimes(folder: Path, names: list[str], skip: Set[str] = frozenset()) -> list[Problem]:
    """A warning for each ``.distcp`` written far from the others' time (at least 4 files to compare), but those in
    ``skip`` (already named)."""
    times = _mtimes(folder, [n for n in names if n.endswith(".distcp")])
    if len(times) < 4:
        return []
    ordered = sorted(times.values())
    quarter = len(ordered) // 4
    median = (ordered[(len(ordered) - 1) // 2] + ordered[len(ordered) // 2]) / 2
    far = max(FAR_SECONDS, _SPREAD_FACTOR * (ordered[-1 - quarter] - ordered[quarter]))
    warnings = []
    for name in sorted(times):
        apart = times[name] - median
        if abs(apart) > far and name not in skip:
            when = "before" if apart < 0 else "after"
            detail = f"written {_hours(abs(apart))} {when} the others: it may come from another save"
            warnings.append(Problem("stray-mtime", "file", name, detail))
    return warnings


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"
