"""What every transform shares: the result type, parsing, and the ``# ascendfix: <id>`` markers."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

MARKER_PREFIX = "# ascendfix: "


class TransformError(Exception):
    """The file is not one this transform understands (unparsable, unexpected shape)."""


@dataclass(frozen=True)
class Outcome:
    """What a transform found and produced for one file.

    ``pending`` counts sites still in their original form, ``done`` sites already
    carrying this patch's marker. ``code`` is the transformed source (for ``apply``:
    every pending site done; for ``revert``: every done site restored).
    """

    code: bytes
    pending: int
    done: int


def marker(patch_id: str) -> str:
    """The trailing comment that says a line was written by ``patch_id``."""
    return f"{MARKER_PREFIX}{patch_id}"


def parse(source: bytes) -> cst.Module:
    """Parse a Python file's bytes (BOM, CRLF and tabs kept), or raise TransformError."""
    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError as e:
        raise TransformError(f"not valid Python (line {e.raw_line}, column {e.raw_column})") from None
    except (UnicodeDecodeError, LookupError) as e:
        raise TransformError(f"cannot decode: {e}") from None


def has_marker(ws: cst.TrailingWhitespace, patch_id: str) -> bool:
    """Whether this line ending carries ``patch_id``'s marker."""
    return ws.comment is not None and ws.comment.value.endswith(marker(patch_id))


def add_marker(ws: cst.TrailingWhitespace, patch_id: str) -> cst.TrailingWhitespace:
    """The same line ending with the marker appended (after any comment already there)."""
    if has_marker(ws, patch_id):
        return ws
    if ws.comment is None:
        return ws.with_changes(whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment(marker(patch_id)))
    return ws.with_changes(comment=cst.Comment(f"{ws.comment.value}  {marker(patch_id)}"))


def drop_marker(ws: cst.TrailingWhitespace, patch_id: str) -> cst.TrailingWhitespace:
    """The inverse of :func:`add_marker`, byte for byte."""
    if not has_marker(ws, patch_id):
        return ws
    value = ws.comment.value
    if value == marker(patch_id):
        return ws.with_changes(whitespace=cst.SimpleWhitespace(""), comment=None)
    return ws.with_changes(comment=cst.Comment(value[: -len(marker(patch_id))].removesuffix("  ")))


class _LineMarker(cst.CSTTransformer):
    """Adds or drops the marker on the line endings of the given lines."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, lines: set[int], patch_id: str, add: bool):
        super().__init__()
        self.lines, self.patch_id, self.add = lines, patch_id, add
        self.marked: set[int] = set()

    def leave_TrailingWhitespace(self, original, updated):
        line = self.get_metadata(PositionProvider, original).start.line
        if line not in self.lines or line in self.marked:
            return updated
        self.marked.add(line)
        return add_marker(updated, self.patch_id) if self.add else drop_marker(updated, self.patch_id)


def mark_lines(module: cst.Module, lines: set[int], patch_id: str, add: bool = True) -> cst.Module:
    """Add (or drop) ``patch_id``'s marker at the end of each of ``lines``.

    Raises TransformError when a line has no line ending libcst can carry a comment
    on (a backslash continuation): the edit could not be marked, so it is not made.
    """
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    visitor = _LineMarker(lines, patch_id, add)
    result = wrapper.visit(visitor)
    missing = lines - visitor.marked
    if missing:
        raise TransformError(f"cannot place the marker on line {min(missing)}")
    return result


def marked_lines(module: cst.Module, patch_id: str) -> set[int]:
    """The lines whose ending carries ``patch_id``'s marker."""
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    return {
        positions[node].start.line
        for node in positions
        if isinstance(node, cst.TrailingWhitespace) and has_marker(node, patch_id)
    }


def node_lines(module: cst.Module, nodes: list[cst.CSTNode]) -> dict[int, tuple[int, int]]:
    """``id(node) -> (first line, last line)`` for each node, positions resolved once."""
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    wanted = {id(n) for n in nodes}
    return {id(n): (r.start.line, r.end.line) for n, r in positions.items() if id(n) in wanted}


def code_of(node: cst.CSTNode) -> str:
    """The source text of an expression node, as written."""
    return cst.Module(body=[]).code_for_node(node)
