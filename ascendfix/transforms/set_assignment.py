"""Set the value of a module-level assignment."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ascendfix.transforms.base import Outcome, add_marker, code_of, drop_marker, has_marker, parse


@dataclass(frozen=True)
class SetAssignment:
    """Matches a module-level ``<target> = <original>`` statement and sets its value to ``value``.

    Only an exact ``original`` (as written) counts as a site: a different expression
    is a file this transform does not understand. The inverse restores ``original``.
    """

    target: str
    original: str
    value: str

    def _sites(self, module: cst.Module, patch_id: str):
        for index, stmt in enumerate(module.body):
            if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
                continue
            assign = stmt.body[0]
            if not (
                isinstance(assign, cst.Assign)
                and len(assign.targets) == 1
                and isinstance(assign.targets[0].target, cst.Name)
                and assign.targets[0].target.value == self.target
            ):
                continue
            written = code_of(assign.value)
            if written == self.original:
                yield index, stmt, assign, False
            elif written == self.value and has_marker(stmt.trailing_whitespace, patch_id):
                yield index, stmt, assign, True

    def _rewrite(self, source: bytes, patch_id: str, forward: bool) -> Outcome:
        module = parse(source)
        body = list(module.body)
        pending = done = 0
        for index, stmt, assign, is_done in list(self._sites(module, patch_id)):
            done += is_done
            pending += not is_done
            if forward and not is_done:
                new_assign = assign.with_changes(value=cst.parse_expression(self.value))
                body[index] = stmt.with_changes(
                    body=[new_assign], trailing_whitespace=add_marker(stmt.trailing_whitespace, patch_id)
                )
            elif not forward and is_done:
                new_assign = assign.with_changes(value=cst.parse_expression(self.original))
                body[index] = stmt.with_changes(
                    body=[new_assign], trailing_whitespace=drop_marker(stmt.trailing_whitespace, patch_id)
                )
        return Outcome(module.with_changes(body=body).bytes, pending, done)

    def apply(self, source: bytes, patch_id: str) -> Outcome:
        """Set every pending site; done sites are left as they are."""
        return self._rewrite(source, patch_id, forward=True)

    def revert(self, source: bytes, patch_id: str) -> Outcome:
        """Restore ``original`` at every site this patch marked."""
        return self._rewrite(source, patch_id, forward=False)
