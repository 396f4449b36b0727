"""Parse with libcst only the lines a transform changes, found first with Python's own parser.

libcst parses and regenerates a 70 KB module in well over 100 ms; CPython's ``ast`` reads it in a
few. A transform locates its candidate statements with :meth:`Source.read`'s ``ast``, parses just
their lines with :func:`parse_lines`, and puts the regenerated lines back with :func:`splice`.

A region's libcst tree must be the one the whole file would give for the same lines, so that a
transform's output is byte for byte what it is on the whole file. :meth:`Source.read` and
:func:`parse_lines` return ``None`` whenever that is in doubt (a BOM, another encoding, a lone CR,
a form feed, a backslash continuation at a region's edge, a region libcst will not parse, newline
conventions that differ): the caller then takes its whole-file path.
"""

from __future__ import annotations

import ast
import io
import tokenize
import warnings
from typing import TYPE_CHECKING

from ascendfix.tuples import NamedTuple

if TYPE_CHECKING:
    import libcst as cst

WRAPPER = "if 1:"  # the synthetic header an indented region is parsed under


class Source:
    """A file's bytes, its ``ast``, and where each physical line starts (lines numbered from 1, as in ``ast``)."""

    def __init__(self, source: bytes, tree: ast.Module):
        self.source = source
        self.tree = tree
        self.starts = [0]
        at = source.find(b"\n")
        while at != -1:
            self.starts.append(at + 1)
            at = source.find(b"\n", at + 1)
        if self.starts[-1] != len(source):
            self.starts.append(len(source))  # the last line has no newline
        # libcst's default newline: the first line's ending ("\n" when it has none)
        self.newline = "\r\n" if self.line(1).endswith(b"\r\n") else "\n"

    @classmethod
    def read(cls, source: bytes) -> Source | None:
        """The file with its ``ast``, or None when the region path must not be used for it."""
        if source.startswith(b"\xef\xbb\xbf") or b"\x0c" in source:
            return None
        if source.count(b"\r") != source.count(b"\r\n"):
            return None  # a lone CR ends a line for the parsers, not for these line numbers
        try:
            if tokenize.detect_encoding(io.BytesIO(source).readline)[0] != "utf-8":
                return None
            source.decode("utf-8")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # invalid escapes etc.: the whole-file path says nothing either
                tree = ast.parse(source)
        except Exception:  # SyntaxError, ValueError (NUL), RecursionError, MemoryError...: the whole-file path decides
            return None
        return cls(source, tree)

    @property
    def line_count(self) -> int:
        return len(self.starts) - 1

    def line(self, number: int) -> bytes:
        """Physical line ``number``, with its ending (empty past the end)."""
        if not 1 <= number <= self.line_count:
            return b""
        return self.source[self.starts[number - 1] : self.starts[number]]

    def lines(self, first: int, last: int) -> bytes:
        """Lines ``first`` to ``last`` (inclusive), with their endings."""
        return self.source[self.starts[first - 1] : self.starts[last]]

    def text(self, node: ast.stmt | ast.expr) -> bytes:
        """The bytes ``node`` spans (``ast`` columns are byte offsets)."""
        start = self.starts[node.lineno - 1] + node.col_offset
        last, column = node.end_lineno, node.end_col_offset
        assert last is not None and column is not None  # ast.parse sets both on every node it makes
        return self.source[start : self.starts[last - 1] + column]

    def starts_line(self, node: ast.stmt) -> bool:
        """Whether only indentation precedes ``node`` on its first line."""
        start = self.starts[node.lineno - 1]
        return self.source[start : start + node.col_offset].strip(b" \t") == b""

    def continues(self, number: int) -> bool:
        """Whether line ``number`` ends in a backslash (the next line continues it)."""
        return self.line(number).rstrip(b"\r\n").endswith(b"\\")

    def default_indent(self) -> str | None:
        """libcst's default indent for the whole file: its first INDENT token, else four spaces."""
        try:
            for token in tokenize.tokenize(io.BytesIO(self.source).readline):
                if token.type == tokenize.INDENT:
                    return token.string
        except Exception:
            return None
        return "    "


def first_line(node: ast.stmt) -> int:
    """The first line of a statement, its decorators included."""
    return min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])


def end_line(node: ast.stmt) -> int:
    """The last line of a statement (``ast.parse`` sets ``end_lineno`` on every statement it makes)."""
    return node.end_lineno or node.lineno


class Region(NamedTuple):
    """Lines ``first`` to ``last`` of a file as libcst's ``module``, parsed after the synthetic ``wrapper`` text."""

    first: int
    last: int
    module: cst.Module
    wrapper: str

    def code(self, module: cst.Module) -> bytes:
        """The region's new bytes: ``module`` (this region's module, edited) without the synthetic wrapper."""
        code = module.code
        if not code.startswith(self.wrapper):
            raise AssertionError("the edited region lost its synthetic header")
        return code[len(self.wrapper) :].encode("utf-8")


def parse_lines(source: Source, first: int, last: int) -> Region | None:
    """Lines ``first`` to ``last`` parsed with libcst as the whole file would parse them, or None when unsure.

    An indented run of statements is parsed under ``if 1:`` and the file's own newline, so every byte
    of it lands in the tree; a run at column 0 is parsed as it is. Blank lines and comments a region
    starts with belong to its first statement (libcst would make them the module's header).
    """
    import libcst as cst

    if source.continues(first - 1) or source.continues(last):
        return None
    text = source.lines(first, last).decode("utf-8")
    wrapper = WRAPPER + source.newline if text[:1] in (" ", "\t") else ""
    try:
        module = cst.parse_module(wrapper + text)
    except Exception:  # ParserSyntaxError, or anything else libcst may raise on a fragment
        return None
    if module.default_newline != source.newline:
        return None
    if first > 1 and module.header:
        head, *rest = module.body
        module = module.with_changes(
            header=[], body=[head.with_changes(leading_lines=[*module.header, *head.leading_lines]), *rest]
        )
    return Region(first, last, module, wrapper)


def splice(source: Source, replacements: list[tuple[Region, bytes]]) -> bytes:
    """The file with each region's lines replaced by the given bytes (regions must not overlap)."""
    out, at = [], 0
    for region, new in sorted(replacements, key=lambda r: r[0].first):
        start, end = source.starts[region.first - 1], source.starts[region.last]
        if start < at:
            raise AssertionError("overlapping regions")
        out += [source.source[at:start], new]
        at = end
    out.append(source.source[at:])
    return b"".join(out)
