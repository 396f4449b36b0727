"""Make a function return right after its docstring."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from ascendfix.transforms.base import Outcome, TransformError, code_of, has_marker, marker, parse


def _return_value(func: cst.FunctionDef, module: cst.Module) -> str:
    """The value that keeps every caller on its success path, from the annotation and the callers.

    ``None`` (bare ``return``) when the function returns no value; ``True`` for ``-> bool``
    whose callers test ``not f(...)``; ``[]`` for ``-> list[str]`` whose callers bind the
    result to a name (torch >= 2.12: an empty error list). Anything else is a refusal.
    """
    name = func.name.value
    annotation = code_of(func.returns.annotation).replace(" ", "") if func.returns else None
    returns_values = bool(m.findall(func.body, m.Return(value=m.DoesNotMatch(None))))
    calls = m.findall(module, m.Call(func=m.Name(name)))
    negated = m.findall(module, m.UnaryOperation(operator=m.Not(), expression=m.Call(func=m.Name(name))))
    assigned = m.findall(module, m.Assign(value=m.Call(func=m.Name(name))))
    if annotation in (None, "None") and not returns_values:
        return "None"
    if annotation == "bool" and calls and len(negated) == len(calls):
        return "True"
    if annotation in ("list[str]", "List[str]") and calls and len(assigned) == len(calls):
        return "[]"
    callers = f"{len(calls)} caller(s) in this file"
    raise TransformError(f"cannot tell what {name}() must return (annotation {annotation!r}, {callers})")


def _docstring_count(body: cst.IndentedBlock) -> int:
    first = body.body[0] if body.body else None
    is_doc = m.matches(first, m.SimpleStatementLine(body=[m.Expr(m.SimpleString() | m.ConcatenatedString())]))
    return 1 if is_doc else 0


@dataclass(frozen=True)
class ReturnEarly:
    """Matches the module-level ``def <function>`` and inserts ``return <value>`` after its docstring.

    The value comes from the function's return annotation, cross-checked against its
    callers in the same file (see ``_return_value``). The rest of the body stays in
    place, unreachable, so the inverse is a plain removal of the inserted line.
    """

    function: str

    def _find(self, module: cst.Module) -> tuple[int, cst.FunctionDef] | None:
        for index, stmt in enumerate(module.body):
            if isinstance(stmt, cst.FunctionDef) and stmt.name.value == self.function:
                return index, stmt
        return None

    @staticmethod
    def _is_ours(stmt: cst.BaseStatement | None, patch_id: str) -> bool:
        return (
            isinstance(stmt, cst.SimpleStatementLine)
            and isinstance(stmt.body[0], cst.Return)
            and has_marker(stmt.trailing_whitespace, patch_id)
        )

    def _rewrite(self, source: bytes, patch_id: str, forward: bool) -> Outcome:
        module = parse(source)
        found = self._find(module)
        if found is None or not isinstance(found[1].body, cst.IndentedBlock):
            return Outcome(source, 0, 0)
        index, func = found
        at = _docstring_count(func.body)
        statements = list(func.body.body)
        is_done = self._is_ours(statements[at] if at < len(statements) else None, patch_id)
        if forward and not is_done:
            value = _return_value(func, module)
            ret = cst.Return(value=None if value == "None" else cst.parse_expression(value))
            statements.insert(
                at,
                cst.SimpleStatementLine(
                    body=[ret],
                    trailing_whitespace=cst.TrailingWhitespace(
                        whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment(marker(patch_id))
                    ),
                ),
            )
        elif not forward and is_done:
            del statements[at]
        else:
            return Outcome(source, int(not is_done), int(is_done))
        new_func = func.with_changes(body=func.body.with_changes(body=statements))
        body = list(module.body)
        body[index] = new_func
        return Outcome(module.with_changes(body=body).bytes, int(not is_done), int(is_done))

    def apply(self, source: bytes, patch_id: str) -> Outcome:
        """Insert the early return unless it is already there."""
        return self._rewrite(source, patch_id, forward=True)

    def revert(self, source: bytes, patch_id: str) -> Outcome:
        """Remove the early return this patch inserted."""
        return self._rewrite(source, patch_id, forward=False)
