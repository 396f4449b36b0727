"""Set a keyword argument on matching method calls."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, cast

from ascendfix.transforms.base import Outcome, Transform, TransformError

if TYPE_CHECKING:
    import libcst as cst

    from ascendfix.transforms.regions import Region, Source


def _blocks(stmt: ast.stmt) -> Iterator[list[ast.stmt]]:
    """The statement lists of a compound statement (none for a simple one)."""
    for _, value in ast.iter_fields(stmt):
        if isinstance(value, list) and value:
            if isinstance(value[0], ast.stmt):
                yield value
            elif isinstance(value[0], (ast.excepthandler, ast.match_case)):
                yield from (clause.body for clause in value)


def _replaced_by(new: cst.CSTNode) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """An edit that puts ``new`` in place of its node."""
    return lambda _node: new


class SetKeyword(Transform):
    """Matches ``<x>.<method>(..., <when_keyword>=<..suffix>, ..., <keyword>=<original>)``; sets ``value``.

    A call is a site when its ``when_keyword`` argument is a dotted name ending in one
    of ``when_suffix`` (``rollout.n``, ``rollout_n``, ...) at a name boundary, and its
    ``keyword`` argument is ``original`` (pending) or ``value`` on a marked line (done).
    Only calls inside simple statements count. The engine compares the number of sites
    with the patch's expected count, so a file with one site too many or too few is
    refused whole.

    With ``marked`` false the form is a hand edit (the guide's 7.2): ``value`` written without a
    marker is a done site, a line carrying this patch's marker is not one, and no marker is written.
    """

    name = "set-keyword"

    def __init__(
        self,
        method: str,
        keyword: str,
        original: str,
        value: str,
        when_keyword: str,
        when_suffix: list[str],
        marked: bool = True,
    ):
        self.method, self.keyword, self.original, self.value = method, keyword, original, value
        self.when_keyword, self.when_suffix, self.marked = when_keyword, when_suffix, marked

    def _selects(self, call: cst.Call) -> bool:
        from ascendfix.transforms.cst_util import code_of

        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == self.when_keyword:
                written = code_of(arg.value)
                return any(written == s or written.endswith("." + s) for s in self.when_suffix)
        return False

    def _rewrite(self, source: bytes, patch_id: str, forward: bool) -> Outcome:
        from ascendfix.transforms import cst_util as u

        if self.method.encode() not in source:
            return Outcome(source, 0, 0)
        outcome = self._rewrite_regions(source, patch_id, forward)
        if outcome is not None:
            return outcome
        module, pending, done = self._edit(u.parse(source), patch_id, forward)
        return Outcome(module.bytes if module is not None else source, pending, done)

    def _rewrite_regions(self, source: bytes, patch_id: str, forward: bool) -> Outcome | None:
        """The outcome from the statements that hold ``.<method>(...)`` calls, parsed alone; None when unsure.

        A refusal is left to the whole-file path too, so that its message is the same (a line
        number in it counts the comment lines above the statement, which a region does not hold).
        """
        from ascendfix.transforms import regions

        lines = regions.Source.read(source)
        spans = self._statement_lines(lines) if lines is not None else None
        if lines is None or spans is None:
            return None
        parsed = []
        for first, last in spans:
            region = regions.parse_lines(lines, first, last)
            if region is None:
                return None
            parsed.append(region)
        pending = done = 0
        replacements: list[tuple[Region, bytes]] = []
        for region in parsed:
            try:
                module, region_pending, region_done = self._edit(region.module, patch_id, forward)
            except TransformError:
                return None
            pending += region_pending
            done += region_done
            if module is not None:
                replacements.append((region, region.code(module)))
        return Outcome(regions.splice(lines, replacements) if replacements else source, pending, done)

    def _statement_lines(self, source: Source) -> list[tuple[int, int]] | None:
        """The line ranges of the simple statements that hold a ``.<method>(...)`` call (overlapping
        and adjacent ranges of one block merged), or None when unsure: then the whole file is parsed.

        libcst counts a call only inside a ``SimpleStatementLine``: a simple statement of a block
        (with any statements ``;`` joins to it), not one on its compound statement's own line
        (``if x: obj.method(...)``), nor a call in a header or decorator.
        """
        method = self.method.encode()
        spans: list[tuple[int, int, int]] = []  # (first, last, id of the block)

        def calls_method(stmt: ast.stmt) -> bool:
            return method in source.text(stmt) and any(
                isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == self.method
                for n in ast.walk(stmt)
            )

        def visit(body: list[ast.stmt], is_block: bool | None) -> bool:
            """Collect the spans under ``body``; ``is_block`` None: a block libcst might read as a suite."""
            for at, stmt in enumerate(body):
                blocks = list(_blocks(stmt))
                if blocks:
                    for block in blocks:
                        is_indented = None if source.continues(block[0].lineno - 1) else source.starts_line(block[0])
                        if not visit(block, is_indented):
                            return False
                    continue
                if is_block is False or not calls_method(stmt):
                    continue  # no call, or a suite on its compound statement's line (libcst: not a site)
                start = end = at
                while start > 0 and body[start - 1].end_lineno == body[start].lineno:
                    start -= 1
                while end + 1 < len(body) and body[end + 1].lineno == body[end].end_lineno:
                    end += 1
                if is_block is None or not source.starts_line(body[start]):
                    return False
                spans.append((body[start].lineno, body[end].end_lineno or body[end].lineno, id(body)))
            return True

        if not visit(source.tree.body, True):
            return None
        merged: list[tuple[int, int, int]] = []
        for first, last, block in sorted(spans):
            if merged and (first <= merged[-1][1] or first == merged[-1][1] + 1 and block == merged[-1][2]):
                merged[-1] = (merged[-1][0], max(last, merged[-1][1]), merged[-1][2])
            else:
                merged.append((first, last, block))
        return [(first, last) for first, last, _ in merged]

    def _edit(self, module: cst.Module, patch_id: str, forward: bool) -> tuple[cst.Module | None, int, int]:
        """``(edited module or None when unchanged, pending, done)`` for a module or one region of one."""
        import libcst as cst

        from ascendfix.transforms import cst_util as u

        by_statement: dict[int, tuple[cst.SimpleStatementLine, list[cst.Arg]]] = {}
        above_statement: dict[int, tuple] = {}
        for node, above in u.walk(module):
            if not (
                isinstance(node, cst.Call)
                and isinstance(node.func, cst.Attribute)
                and node.func.attr.value == self.method
                and self._selects(node)
            ):
                continue
            depth = next(
                (i for i in range(len(above) - 1, -1, -1) if isinstance(above[i], cst.SimpleStatementLine)), None
            )
            if depth is None:
                continue
            stmt = cast("cst.SimpleStatementLine", above[depth])
            above_statement[id(stmt)] = above[:depth]
            args = [a for a in node.args if a.keyword is not None and a.keyword.value == self.keyword]
            by_statement.setdefault(id(stmt), (stmt, []))[1].extend(args)
        pending = done = 0
        edits: dict[int, Callable[[cst.CSTNode], cst.CSTNode]] = {}
        new_value = cst.parse_expression(self.value if forward else self.original)
        for stmt, args in by_statement.values():
            view = u.Statement(stmt)
            marked = view.marked_lines(patch_id)
            stmt_pending = [a for a in args if u.code_of(a.value) == self.original]
            stmt_done = [
                a for a in args if u.code_of(a.value) == self.value and (view.end_line(a) in marked) == self.marked
            ]
            pending += len(stmt_pending)
            done += len(stmt_done)
            change = stmt_pending if forward else stmt_done
            if change:
                values = {id(a): new_value for a in change}
                lines = {view.end_line(a) for a in change} if self.marked else set()
                edited = u.edit_statement(stmt, values, lines, patch_id, add=forward)
                edits[id(stmt)] = _replaced_by(edited)
        if not edits:
            return None, pending, done
        ancestors = {id(a) for sid in edits for a in above_statement[sid]}
        return u.edit(module, edits, ancestors), pending, done
