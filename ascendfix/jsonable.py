"""One way to turn ascendfix's records into JSON data: every ``--json`` answer and run.json go through it;
and one way to read JSON from a file ascendfix did not just write (:func:`loads`, nesting bounded).

:func:`jsonable` knows the shapes the package builds its results from — an object's own
``to_json()`` (a JSON contract), NamedTuples, dataclasses, Names (:mod:`~ascendfix.states`), paths, sets, sequences and
mappings — and refuses anything else, so nothing reaches a JSON file as a Python repr.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

MAX_DEPTH = 64  # no JSON file ascendfix reads nests past a dozen levels


def loads(data: str | bytes, depth: int = MAX_DEPTH) -> Any:
    """``json.loads(data)``, refusing (ValueError, one line) a document nested more than ``depth`` deep, however
    deep: a hostile file's nesting is one line, never a RecursionError and never a deep walk by the caller."""
    import json

    try:
        value = json.loads(data)
    except RecursionError:
        raise ValueError(f"nested more than {depth} deep") from None
    level, nodes = 0, [value]
    while nodes := [n for n in nodes if isinstance(n, (dict, list))]:  # the containers of one level
        level += 1
        if level > depth:
            raise ValueError(f"nested more than {depth} deep")
        nodes = [v for n in nodes for v in (n.values() if isinstance(n, dict) else n)]
    return value


def jsonable(obj: Any) -> Any:
    """``obj`` as plain JSON data (dicts, lists, strings, numbers, booleans, None); a TypeError for
    a value that has no JSON form."""
    if obj is None or isinstance(obj, (bool, int, float)):
        return obj
    if isinstance(obj, str):
        return str(obj)  # a Name (ascendfix.states) as its plain spelling
    if callable(getattr(obj, "to_json", None)):
        return jsonable(obj.to_json())
    if isinstance(obj, tuple) and hasattr(obj, "_asdict"):
        return {key: jsonable(value) for key, value in obj._asdict().items()}
    if hasattr(type(obj), "__dataclass_fields__") and not isinstance(obj, type):
        import dataclasses  # only for a dataclass: every command's start pays for what it imports

        return {f.name: jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, PurePath):
        return str(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(jsonable(value) for value in obj)
    if isinstance(obj, (list, tuple)):
        return [jsonable(value) for value in obj]
    if isinstance(obj, Mapping):
        return {_key(key): jsonable(value) for key, value in obj.items()}
    raise TypeError(f"{type(obj).__name__} has no JSON form")


def _key(key: Any) -> Any:
    """A mapping's key as JSON takes it: a string (a Name by its spelling) or number."""
    if isinstance(key, str):
        return str(key)
    if key is None or isinstance(key, (int, float, bool)):
        return key
    raise TypeError(f"a {type(key).__name__} key has no JSON form")
