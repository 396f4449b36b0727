"""The schema helper: a TOML table read field by field, each error one line naming file and field.

Every loader of :mod:`~ascendfix.profile` (profiles, patches, rules) reads its TOML through
:class:`Table`, whose typed getters reject a wrong type, a missing field and a key nobody asked for.
"""

from __future__ import annotations

import stat
import sys
from pathlib import Path, PurePosixPath
from typing import Any, Literal, NoReturn, overload

from ascendfix.errors import UsageError
from ascendfix.profile import parsecache
from ascendfix.profile.device import DEVICES

# The shapes of names a profile spells, as plain string tests: every command validates its profile, and a compiled
# regular expression costs each command's start-up about 0.5 M instructions.
_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")
_ASCII_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")


def is_id(text: str) -> bool:
    """A patch's, rule's or variant's id: lowercase ASCII letters, digits and dashes, not starting with a dash."""
    return text[:1] not in ("", "-") and set(text) <= _ID_CHARS


def is_hex(text: str, shortest: int, longest: int) -> bool:
    """Lowercase hexadecimal digits, ``shortest`` to ``longest`` of them (a commit, a sha256)."""
    return shortest <= len(text) <= longest and not text.lstrip("0123456789abcdef")


def _is_word(part: str, first: bool = False) -> bool:
    """Letters, digits, ``_`` and ``-`` (a regular expression's ``[\\w-]+``); ``first``: starting with an ASCII
    letter or ``_``."""
    if not part or (first and part[0] not in _ASCII_LETTERS):
        return False
    return all(c.isalnum() or c in "_-" for c in part)


def is_override(text: str) -> bool:
    """A Hydra override: ``key.sub`` or ``key.sub=value`` (dotted words, the first starting with a letter; a value
    that starts with no space and holds no line break), after at most two ``+``."""
    key, equals, value = text.removeprefix("+").removeprefix("+").partition("=")
    if equals and (not value or value[0].isspace() or "\n" in value or "\r" in value):
        return False
    first, *rest = key.split(".")
    return bool(rest) and _is_word(first, first=True) and all(_is_word(part) for part in rest)


def is_command(text: str) -> bool:
    """A module (``a.b``) or a script path (``dir/x.py``): words joined by ``.`` or ``/``, the first starting with a
    letter."""
    first, *rest = text.replace("/", ".").split(".")
    return _is_word(first, first=True) and all(_is_word(part) for part in rest)


class Table:
    """A TOML table being validated: typed getters that name file and field on error."""

    def __init__(self, path: Path, data: Any, where: str):
        self.path, self.where = path, where
        if not isinstance(data, dict):
            self.fail(where or "(top level)", f"expected a table, got {type_name(data)}")
        self.data = data
        self.seen: set[str] = set()

    def fail(self, field: str, reason: str) -> NoReturn:
        """Stop with the one line that names the file, the field and what is wrong."""
        raise UsageError(f"{self.path}: {field}: {reason}")

    def field(self, key: str) -> str:
        """The dotted name of ``key`` in this table, as errors name it."""
        return f"{self.where}.{key}" if self.where else key

    def get(self, key: str, kind: type | tuple[type, ...], required: bool = True, default: Any = None) -> Any:
        """The value of ``key``, of one of the types ``kind`` (``default`` when it is absent and not required)."""
        self.seen.add(key)
        if key not in self.data:
            if required:
                self.fail(self.field(key), "missing required field")
            return default
        value = self.data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            names = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
            self.fail(self.field(key), f"expected {names}, got {type_name(value)}")
        return value

    @overload
    def text(self, key: str, required: Literal[True] = True) -> str: ...

    @overload
    def text(self, key: str, required: bool) -> str | None: ...

    def text(self, key: str, required: bool = True) -> str | None:
        """A non-empty string (None when it is absent and not required)."""
        value = self.get(key, str, required)
        if value is not None and not value.strip():
            self.fail(self.field(key), "must not be empty")
        return value

    def strings(self, key: str, required: bool = True, choices: tuple[str, ...] | None = None) -> tuple[str, ...]:
        """An array of strings (each one of ``choices`` when given); empty when absent and not required."""
        values = self.get(key, list, required, default=[])
        for i, value in enumerate(values):
            if not isinstance(value, str):
                self.fail(f"{self.field(key)}[{i}]", f"expected a string, got {type_name(value)}")
            if choices and value not in choices:
                self.fail(f"{self.field(key)}[{i}]", f"unknown value {value!r} (expected one of {', '.join(choices)})")
        return tuple(values)

    @overload
    def table(self, key: str, required: Literal[True] = True) -> Table: ...

    @overload
    def table(self, key: str, required: bool) -> Table | None: ...

    def table(self, key: str, required: bool = True) -> Table | None:
        """A sub-table (None when it is absent and not required)."""
        value = self.get(key, dict, required)
        return None if value is None else Table(self.path, value, self.field(key))

    def tables(self, key: str, required: bool = True) -> list[Table]:
        """An array of tables; empty when absent and not required."""
        values = self.get(key, list, required, default=[])
        return [Table(self.path, v, f"{self.field(key)}[{i}]") for i, v in enumerate(values)]

    def children(self) -> list[tuple[str, Table]]:
        """Each key of this table whose value is itself a table."""
        return [(key, Table(self.path, value, self.field(key))) for key, value in self.data.items()]

    def done(self) -> None:
        """Reject keys nobody asked for: a typo must not pass silently."""
        unknown = sorted(set(self.data) - self.seen)
        if unknown:
            allowed = ", ".join(sorted(self.seen))
            self.fail(self.field(unknown[0]), f"unknown key (allowed here: {allowed})")


_TYPE_NAMES = {str: "a string", int: "an integer", bool: "true or false", list: "an array", dict: "a table"}


def type_name(value: Any) -> str:
    """How an error names the TOML type of ``value`` ("a string", "an array", …)."""
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def read_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file (the same bytes once: :mod:`~ascendfix.profile.parsecache`); failure: one UsageError line."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory, expected a .toml file") from None
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {e.strerror}") from None
    return parsecache.parsed(data, lambda data: _parse_toml(path, data))


def _parse_toml(path: Path, data: bytes) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib  # novermin (guarded: Python 3.10 reads tomli, the same parser)
    else:  # pragma: no cover - exercised on the container's Python 3.10
        import tomli as tomllib
    try:
        parsed = tomllib.loads(data.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: not valid TOML: {e}") from None
    except RecursionError:
        parsed = None
    if parsed is None or _deeper_than(parsed, MAX_NESTING):
        raise UsageError(f"{path}: arrays or tables nested deeper than {MAX_NESTING} levels; no profile needs that")
    return parsed


MAX_NESTING = 32  # of arrays and tables in a TOML file (every later step walks them recursively)


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` (parsed TOML) nests arrays and tables more than ``limit`` deep (walked without recursion)."""
    todo = [(value, 1)]
    while todo:
        node, depth = todo.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                if depth >= limit:
                    return True
                todo.append((child, depth + 1))
    return False


def check_relative_path(table: Table, field: str, value: str, within: str = "its package root") -> str:
    """A relative path (to a package's root, or ``within`` another folder): no absolute paths, no '..',
    forward slashes, no control characters."""
    pure = PurePosixPath(value)
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        table.fail(field, f"path {value!r} holds a control character")
    if not value or pure.is_absolute() or "\\" in value or ".." in pure.parts or value.startswith("~"):
        table.fail(field, f"path {value!r} must stay inside {within} (relative, no '..')")
    return str(pure)


def contained_file(table: Table, field: str, value: str, folder: Path, limit: int) -> str:
    """The real path of ``value``, a file beside the patch file: relative to ``folder`` and inside it
    (a symlink too), a regular file of at most ``limit`` bytes."""
    rel = check_relative_path(table, field, value, within="the patch folder")
    home = folder.resolve()
    try:
        real = (home / rel).resolve()
        st = real.stat()
    except OSError as e:
        table.fail(field, f"{value!r}: {e.strerror} (looked in {home})")
    if not real.is_relative_to(home):
        table.fail(field, f"{value!r} leads to {real}, outside the patch folder {home}")
    if not stat.S_ISREG(st.st_mode):
        table.fail(field, f"{value!r} is not a regular file")
    if st.st_size > limit:
        table.fail(field, f"{value!r} is {st.st_size} bytes, over the {limit}-byte limit")
    return str(real)


def devices_field(t: Table) -> tuple[str, ...]:
    """A table's optional ``devices`` (known device names), every device when absent."""
    return t.strings("devices", required=False, choices=DEVICES) or DEVICES
