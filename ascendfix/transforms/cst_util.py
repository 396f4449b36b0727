"""libcst helpers shared by the transforms: parsing, fast walks, and the ``# ascendfix: <id>`` markers."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable, Iterator
from typing import TypeVar, cast

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ascendfix.transforms.base import TransformError, marker

_Node = TypeVar("_Node", bound=cst.CSTNode)
Statements = cst.SimpleStatementLine | cst.BaseCompoundStatement  # what a module's or a block's body holds


def parse(source: bytes) -> cst.Module:
    """Parse a Python file's bytes (BOM, CRLF and tabs kept), or raise TransformError."""
    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError as e:
        try:  # Python's own line and words where it has them (libcst says "line 1, column 0" of a TabError)
            compile(source, "<file>", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
        except SyntaxError as py:
            raise TransformError(f"not valid Python (line {py.lineno}: {py.msg})") from None
        except ValueError:
            pass
        raise TransformError(f"not valid Python (line {e.raw_line}, column {e.raw_column})") from None
    except (UnicodeDecodeError, LookupError, SyntaxError) as e:
        raise TransformError(f"cannot decode: {e}") from None


_FIELDS: dict[type, tuple[str, ...]] = {}


def _children(node: cst.CSTNode) -> list[cst.CSTNode]:
    names = _FIELDS.get(type(node))
    if names is None:
        names = _FIELDS[type(node)] = tuple(f.name for f in dataclasses.fields(node))
    children = []
    for name in names:
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode):
            children.append(value)
        elif isinstance(value, (list, tuple)):
            children.extend(v for v in value if isinstance(v, cst.CSTNode))
    return children


def walk(node: cst.CSTNode, ancestors: tuple[cst.CSTNode, ...] = ()) -> Iterator[tuple[cst.CSTNode, tuple]]:
    """Every node below ``node`` (pre-order) with its ancestors; a plain walk, much faster than a visitor."""
    stack = [(node, ancestors)]
    while stack:
        current, above = stack.pop()
        yield current, above
        below = (*above, current)
        stack.extend((child, below) for child in reversed(_children(current)))


def rebuild(node: cst.CSTNode, edits: dict[int, Callable], ancestors: set[int]) -> cst.CSTNode:
    """``node`` with ``edits[id(n)](n)`` applied to each edited node ``n``, children first.

    Only nodes in ``ancestors`` (ids of the edited nodes' ancestors) are descended into, so
    the cost is the depth of the edits, not the size of the module.
    """
    if id(node) in ancestors:
        changes: dict[str, object] = {}
        for f in dataclasses.fields(node):
            value = getattr(node, f.name)
            if isinstance(value, cst.CSTNode):
                new = rebuild(value, edits, ancestors)
                if new is not value:
                    changes[f.name] = new
            elif isinstance(value, (list, tuple)):
                items = [rebuild(v, edits, ancestors) if isinstance(v, cst.CSTNode) else v for v in value]
                if any(a is not b for a, b in zip(items, value, strict=True)):
                    changes[f.name] = type(value)(items)
        rebuilt = node.with_changes(**changes) if changes else node
    else:
        rebuilt = node
    return edits[id(node)](rebuilt) if id(node) in edits else rebuilt


def edit(root: _Node, edits: dict[int, Callable], ancestors: set[int] | None = None) -> _Node:
    """``root`` with each edit applied (see :func:`rebuild`); pass ``ancestors`` if already known.
    An edit keeps its node's kind, so the root comes back as the kind it went in."""
    if ancestors is None:
        ancestors = {id(a) for node, above in walk(root) if id(node) in edits for a in above}
    return cast(_Node, rebuild(root, edits, ancestors))


def code_of(node: cst.CSTNode) -> str:
    """The source text of a node, as written."""
    return cst.Module(body=[]).code_for_node(node)


def has_marker(ws: cst.TrailingWhitespace, patch_id: str) -> bool:
    """Whether this line ending carries ``patch_id``'s marker."""
    return ws.comment is not None and ws.comment.value.endswith(marker(patch_id))


def add_marker(ws: cst.TrailingWhitespace, patch_id: str) -> cst.TrailingWhitespace:
    """The same line ending with the marker appended (after any comment or trailing spaces already there)."""
    if has_marker(ws, patch_id):
        return ws
    if ws.comment is None:
        spaces = cst.SimpleWhitespace(ws.whitespace.value + "  ")
        return ws.with_changes(whitespace=spaces, comment=cst.Comment(marker(patch_id)))
    return ws.with_changes(comment=cst.Comment(f"{ws.comment.value}  {marker(patch_id)}"))


def drop_marker(ws: cst.TrailingWhitespace, patch_id: str) -> cst.TrailingWhitespace:
    """The inverse of :func:`add_marker`, byte for byte."""
    if ws.comment is None or not has_marker(ws, patch_id):
        return ws
    value = ws.comment.value
    if value == marker(patch_id):
        return ws.with_changes(whitespace=cst.SimpleWhitespace(ws.whitespace.value[:-2]), comment=None)
    return ws.with_changes(comment=cst.Comment(value[: -len(marker(patch_id))].removesuffix("  ")))


class Statement:
    """One statement seen on its own, with line numbers relative to its first line.

    Resolving positions over a whole module costs a full codegen; over one statement it
    is nearly free, and a site's line (where its marker goes) is local to its statement.
    """

    def __init__(self, stmt: Statements):
        self.stmt = stmt
        self.module = cst.Module(body=[stmt])
        self.positions = MetadataWrapper(self.module, unsafe_skip_copy=True).resolve(PositionProvider)

    def end_line(self, node: cst.CSTNode) -> int:
        """The line on which ``node`` ends."""
        return self.positions[node].end.line

    def marked_lines(self, patch_id: str) -> set[int]:
        """Lines whose ending carries ``patch_id``'s marker."""
        return {
            self.positions[n].start.line
            for n in self.positions
            if isinstance(n, cst.TrailingWhitespace) and has_marker(n, patch_id)
        }

    def line_endings(self) -> dict[int, cst.TrailingWhitespace]:
        """The line ending node of each line that has one (backslash continuations have none)."""
        endings: dict[int, cst.TrailingWhitespace] = {}
        for n, where in self.positions.items():
            if isinstance(n, cst.TrailingWhitespace):
                endings.setdefault(where.start.line, n)
        return endings


def edit_statement(
    stmt: Statements, values: dict[int, cst.BaseExpression], lines: set[int], patch_id: str, add: bool
) -> Statements:
    """``stmt`` with each Arg/Assign value (by node id) replaced and the marker added/dropped on ``lines``."""
    view = Statement(stmt)
    endings = view.line_endings()
    missing = lines - set(endings)
    if missing:
        raise TransformError(f"cannot place the marker on line {min(missing)} of a statement (backslash continuation)")
    edits: dict[int, Callable] = {}
    for line in lines:
        edits[id(endings[line])] = (
            (lambda ws: add_marker(ws, patch_id)) if add else (lambda ws: drop_marker(ws, patch_id))
        )
    for node_id, value in values.items():
        edits[node_id] = lambda node, value=value: node.with_changes(value=value)
    return edit(stmt, edits)
