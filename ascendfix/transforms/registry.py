"""Transform names as patch files spell them, and parameter checking."""

from __future__ import annotations

import ast
import inspect
import typing
from typing import Any

from ascendfix.transforms.base import Transform
from ascendfix.transforms.comment_out import CommentOutAssignment
from ascendfix.transforms.fast_overlap import FastOverlapScan
from ascendfix.transforms.return_early import ReturnEarly
from ascendfix.transforms.set_assignment import SetAssignment
from ascendfix.transforms.set_keyword import SetKeyword

TRANSFORMS: dict[str, type[Transform]] = {
    t.name: t for t in (SetAssignment, ReturnEarly, SetKeyword, FastOverlapScan, CommentOutAssignment)
}


def names() -> list[str]:
    """Every transform name a patch file may use."""
    return sorted(TRANSFORMS)


def get(name: str) -> type[Transform] | None:
    """The transform class called ``name``, or None."""
    return TRANSFORMS.get(name)


def check_params(cls: type[Transform], params: dict[str, Any]) -> tuple[str, str] | None:
    """``(parameter, problem)`` for the first parameter that does not fit ``cls``, else None."""
    fields, hints = _parameters(cls)
    for key in params:
        if key not in fields:
            return key, f"unknown parameter (expected: {', '.join(fields)})"
    for key, field in fields.items():
        if key not in params:
            if field.default is inspect.Parameter.empty:
                return key, "missing required parameter"
            continue
        value, hint = params[key], hints[key]
        if typing.get_origin(hint) is list:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value) or not value:
                return key, "expected a non-empty array of strings"
        elif not isinstance(value, hint) or isinstance(value, bool) and hint is not bool:
            return key, f"expected {hint.__name__}"
        elif key in CODE_PARAMS and not _is_expression(value):
            return key, f"{value!r} is not a Python expression"
    return None


_PARAMETERS: dict[type[Transform], tuple[dict[str, inspect.Parameter], dict[str, Any]]] = {}


def _parameters(cls: type[Transform]) -> tuple[dict[str, inspect.Parameter], dict[str, Any]]:
    """``cls``'s constructor parameters and their type hints, read once per class (a profile has a variant
    per patch and hand edit, most of them of the same few transforms)."""
    if cls not in _PARAMETERS:
        _PARAMETERS[cls] = dict(inspect.signature(cls).parameters), typing.get_type_hints(cls.__init__)
    return _PARAMETERS[cls]


# Parameters whose value is Python source the transform writes into (or matches in) a file.
CODE_PARAMS = ("original", "value")
# Parameters that name a file the transform reads (relative to the patch file naming it; base.MAX_FILE_BYTES at most).
FILE_PARAMS = ("template",)


def _is_expression(text: str) -> bool:
    try:
        ast.parse(text, mode="eval")
    except SyntaxError:
        return False
    return True


def build(name: str, params: dict[str, Any]) -> Transform:
    """An instance of the transform ``name`` with ``params`` (already checked)."""
    return TRANSFORMS[name](**params)
