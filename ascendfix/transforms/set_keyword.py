"""Set a keyword argument on matching method calls."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from ascendfix.transforms.base import Outcome, code_of, mark_lines, marked_lines, node_lines, parse


@dataclass(frozen=True)
class SetKeyword:
    """Matches ``<x>.<method>(..., <when_keyword>=<...suffix>, ..., <keyword>=<original>)`` and sets ``value``.

    A call is a site when its ``when_keyword`` argument is a dotted name ending in one
    of ``when_suffix`` (``rollout.n``, ``rollout_n``, ...) at a name boundary, and its
    ``keyword`` argument is ``original`` (pending) or ``value`` on a marked line (done).
    The engine compares the number of sites with the patch's expected count, so a file
    with one site too many or too few is refused whole.
    """

    method: str
    keyword: str
    original: str
    value: str
    when_keyword: str
    when_suffix: list[str]

    def _selects(self, call: cst.Call) -> bool:
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == self.when_keyword:
                written = code_of(arg.value)
                return any(written == s or written.endswith("." + s) for s in self.when_suffix)
        return False

    def _sites(self, module: cst.Module) -> list[cst.Arg]:
        pattern = m.Call(func=m.Attribute(attr=m.Name(self.method)))
        args = []
        for call in m.findall(module, pattern):
            if self._selects(call):
                args += [a for a in call.args if a.keyword is not None and a.keyword.value == self.keyword]
        return args

    def _rewrite(self, source: bytes, patch_id: str, forward: bool) -> Outcome:
        module = parse(source)
        args = self._sites(module)
        lines = node_lines(module, args)
        marked = marked_lines(module, patch_id)
        pending = [a for a in args if code_of(a.value) == self.original]
        done = [a for a in args if code_of(a.value) == self.value and lines[id(a)][1] in marked]
        change, new = (pending, self.value) if forward else (done, self.original)
        if not change:
            return Outcome(source, len(pending), len(done))
        targets = {id(a) for a in change}

        class Replace(cst.CSTTransformer):
            def leave_Arg(self, original, updated):
                return updated.with_changes(value=cst.parse_expression(new)) if id(original) in targets else updated

        edited = module.visit(Replace())
        edited = mark_lines(edited, {lines[id(a)][1] for a in change}, patch_id, add=forward)
        return Outcome(edited.bytes, len(pending), len(done))

    def apply(self, source: bytes, patch_id: str) -> Outcome:
        """Set ``value`` at every pending site and mark each edited line."""
        return self._rewrite(source, patch_id, forward=True)

    def revert(self, source: bytes, patch_id: str) -> Outcome:
        """Restore ``original`` at every marked site and drop the markers."""
        return self._rewrite(source, patch_id, forward=False)
