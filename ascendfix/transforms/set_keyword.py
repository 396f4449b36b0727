"""Set a keyword argument on matching method calls."""

from __future__ import annotations

from dataclasses import dataclass

from ascendfix.transforms.base import Outcome, Transform


@dataclass(frozen=True)
class SetKeyword(Transform):
    """Matches ``<x>.<method>(..., <when_keyword>=<..suffix>, ..., <keyword>=<original>)``; sets ``value``.

    A call is a site when its ``when_keyword`` argument is a dotted name ending in one
    of ``when_suffix`` (``rollout.n``, ``rollout_n``, ...) at a name boundary, and its
    ``keyword`` argument is ``original`` (pending) or ``value`` on a marked line (done).
    Only calls inside simple statements count. The engine compares the number of sites
    with the patch's expected count, so a file with one site too many or too few is
    refused whole.
    """

    name = "set-keyword"

    method: str
    keyword: str
    original: str
    value: str
    when_keyword: str
    when_suffix: list[str]

    def _selects(self, call) -> bool:
        from ascendfix.transforms.cst_util import code_of

        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == self.when_keyword:
                written = code_of(arg.value)
                return any(written == s or written.endswith("." + s) for s in self.when_suffix)
        return False

    def _rewrite(self, source: bytes, patch_id: str, forward: bool) -> Outcome:
        import libcst as cst

        from ascendfix.transforms import cst_util as u

        if self.method.encode() not in source:
            return Outcome(source, 0, 0)
        module = u.parse(source)
        by_statement: dict[int, tuple[cst.CSTNode, list[cst.Arg]]] = {}
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
            stmt = above[depth]
            above_statement[id(stmt)] = above[:depth]
            args = [a for a in node.args if a.keyword is not None and a.keyword.value == self.keyword]
            by_statement.setdefault(id(stmt), (stmt, []))[1].extend(args)
        pending = done = 0
        edits = {}
        new_value = cst.parse_expression(self.value if forward else self.original)
        for stmt, args in by_statement.values():
            view = u.Statement(stmt)
            marked = view.marked_lines(patch_id)
            stmt_pending = [a for a in args if u.code_of(a.value) == self.original]
            stmt_done = [a for a in args if u.code_of(a.value) == self.value and view.end_line(a) in marked]
            pending += len(stmt_pending)
            done += len(stmt_done)
            change = stmt_pending if forward else stmt_done
            if change:
                values = {id(a): new_value for a in change}
                lines = {view.end_line(a) for a in change}
                edited = u.edit_statement(stmt, values, lines, patch_id, add=forward)
                edits[id(stmt)] = lambda _node, edited=edited: edited
        if not edits:
            return Outcome(source, pending, done)
        ancestors = {id(a) for sid in edits for a in above_statement[sid]}
        return Outcome(u.edit(module, edits, ancestors).bytes, pending, done)
