"""Errors that reach the user as one clear line, never as a traceback."""

from __future__ import annotations


class AscendfixError(Exception):
    """Base class: `str(error)` is the one line the user sees; `exit_code` is the process status."""

    exit_code = 1


class UsageError(AscendfixError):
    """Bad input: an unknown profile, a malformed manifest or patch file, a wrong flag value (exit 2)."""

    exit_code = 2


class RefusedError(AscendfixError):
    """The engine would not act: a target file is missing, unparsable or does not match (exit 1)."""

    exit_code = 1
