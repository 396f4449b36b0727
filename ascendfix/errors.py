"""Errors that reach the user as one clear line, never as a traceback, and the exit-code table.

The hierarchy (every error the core raises on purpose)::

    AscendfixError                      one line; exit 1 unless a subclass says otherwise
    ├── UsageError                      bad input: a file, field or flag the user must fix (exit 2)
    ├── cli.base.Unwritten              stdout refused the answer (a full disk, exit 2)
    ├── RefusedError                    the engine would not act on what it found (exit 1)
    │   ├── fsutil.Escape               a path leaves its root or passes through a link
    │   │   └── patching.tree.TooLarge  a file over the size its reader accepts
    │   ├── patching.journal.WriteError a write failed (disk full, read-only, changed meanwhile)
    │   └── patching.journal.Unseen     whether a transaction committed cannot be read (exit 2)
    ├── checkpoint.bounded.Died         a checkpoint reader's child died or was stopped
    ├── checkpoint.bounded.Failed       the child raised one of these (its own exit code)
    ├── checkpoint.layout.Malformed     a readable pickle that holds no checkpoint metadata
    ├── checkpoint.pickles.UnsafePickle a pickle names something outside the allow-list
    └── checkpoint.prescan.Unreadable   a checkpoint's pickle is malformed or not a pickle

(``docs/reference/exit-codes.md`` lists the same, drawn from the classes by ``scripts/reference.py``.)

Every command's result carries ``ok``; its exit code is :data:`OK` when ``ok``, else :data:`FINDING`
(``ascendfix/cli/base.py``'s ``render`` decides it, in one place), and its ``--json`` object starts
with ``"schema": SCHEMA`` and ``"ok"``. An error's ``--json`` object is :func:`error_object`.

Anything else that reaches the command line is a bug: one line, the traceback in a crash log
under the cache folder, exit 3 (:data:`INTERNAL`).
"""

from __future__ import annotations

# The exit codes every command shares (the docs' reference lists this table).
OK = 0  # done, nothing found
FINDING = 1  # done, and a problem was found (a failed check, a refusal, a named failure)
BAD_INPUT = 2  # the input is unusable: one line names the file, field or flag and what to do
INTERNAL = 3  # a bug in ascendfix: one line, the traceback in a crash log
EXIT_CODES = {
    OK: "done, nothing found",
    FINDING: "a finding: a failed check, a refusal, a named failure",
    BAD_INPUT: "bad input: one line names the file, field or flag and what to do",
    INTERNAL: "an internal error (a bug): one line, the traceback in a crash log under the cache folder",
}
SCHEMA = 1  # the version of every --json object's shape


class AscendfixError(Exception):
    """Base class: `str(error)` is the one line the user sees; `exit_code` is the process status."""

    exit_code = FINDING


class UsageError(AscendfixError):
    """Bad input: an unknown profile, a malformed manifest or patch file, a wrong flag value (exit 2)."""

    exit_code = BAD_INPUT


class RefusedError(AscendfixError):
    """The engine would not act: a target file is missing, unparsable or does not match (exit 1)."""

    exit_code = FINDING


def error_object(message: str, exit_code: int) -> dict[str, object]:
    """The ``--json`` answer of a command that ended in an error."""
    return {"schema": SCHEMA, "ok": False, "error": message, "exit_code": exit_code}


def is_error_object(data: object) -> bool:
    """Whether ``data`` is :func:`error_object`'s answer (or an older ascendfix's ``{"error", "exit_code"}``)."""
    return isinstance(data, dict) and {"error", "exit_code"} <= set(data) <= {"schema", "ok", "error", "exit_code"}
