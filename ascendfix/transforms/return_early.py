"""Make a function return right after its docstring."""

from __future__ import annotations

from ascendfix.transforms.base import Outcome, Transform, TransformError, marker


def _return_value(func, module) -> str:
    """The value that keeps every caller on its success path, from the annotation and the callers.

    ``None`` (bare ``return``) when the function returns no value; ``True`` for ``-> bool``
    whose callers all test ``not f(...)``; ``[]`` for ``-> list[str]`` whose callers all
    bind the result to a name (torch >= 2.12: an empty error list). Anything else: refuse.
    """
    import libcst as cst

    from ascendfix.transforms.cst_util import code_of, walk

    name = func.name.value
    annotation = code_of(func.returns.annotation).replace(" ", "") if func.returns else None
    returns_values = any(isinstance(n, cst.Return) and n.value is not None for n, _ in walk(func.body))
    calls = negated = assigned = 0
    for node, above in walk(module):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == name:
            calls += 1
            parent = above[-1]
            negated += isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator, cst.Not)
            assigned += isinstance(parent, cst.Assign)
    if annotation in (None, "None") and not returns_values:
        return "None"
    if annotation == "bool" and calls and negated == calls:
        return "True"
    if annotation in ("list[str]", "List[str]") and calls and assigned == calls:
        return "[]"
    raise TransformError(
        f"cannot tell what {name}() must return (annotation {annotation!r}, {calls} caller(s) in this file)"
    )


def _written(ret) -> str:
    """The value a ``return`` statement returns, as ``_return_value`` spells it (``None`` for a bare one)."""
    from ascendfix.transforms.cst_util import code_of

    return "None" if ret.value is None else code_of(ret.value)


class ReturnEarly(Transform):
    """Matches the module-level ``def <function>`` and inserts ``return <value>`` after its docstring.

    The value comes from the function's return annotation, cross-checked against its
    callers in the same file (see ``_return_value``). The rest of the body stays in
    place, unreachable, so the inverse is a plain removal of the inserted line.

    With ``marked`` false the form is a hand edit (the guide's 6.1 and 6.2): an unmarked ``return
    <value>`` is the done site and none is marked; ``before_docstring`` puts it first in the body,
    above the docstring, where a hand edit may put it too.
    """

    name = "return-early"

    def __init__(self, function: str, marked: bool = True, before_docstring: bool = False):
        self.function, self.marked, self.before_docstring = function, marked, before_docstring

    def _rewrite(self, source: bytes, patch_id: str, forward: bool) -> Outcome:
        import libcst as cst

        from ascendfix.transforms import cst_util as u

        module = u.parse(source)
        found = [
            (i, s)
            for i, s in enumerate(module.body)
            if isinstance(s, cst.FunctionDef) and s.name.value == self.function
        ]
        if len(found) != 1 or not isinstance(found[0][1].body, cst.IndentedBlock):
            return Outcome(source, 0, 0)  # absent, defined twice, or a one-line def: not a site we know
        index, func = found[0]
        statements = list(func.body.body)
        first = statements[0] if statements else None
        is_doc = (
            isinstance(first, cst.SimpleStatementLine)
            and isinstance(first.body[0], cst.Expr)
            and isinstance(first.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
        )
        at = 1 if is_doc and not self.before_docstring else 0
        ours = statements[at] if at < len(statements) else None
        is_done = (
            isinstance(ours, cst.SimpleStatementLine)
            and len(ours.body) == 1
            and isinstance(ours.body[0], cst.Return)
            and (
                u.has_marker(ours.trailing_whitespace, patch_id)
                if self.marked
                else ours.trailing_whitespace.comment is None and _written(ours.body[0]) == _return_value(func, module)
            )
        )
        if forward == is_done:
            return Outcome(source, int(not is_done), int(is_done))
        if forward:
            value = _return_value(func, module)
            comment = (
                cst.TrailingWhitespace(whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment(marker(patch_id)))
                if self.marked
                else cst.TrailingWhitespace()
            )
            ret = cst.Return(value=None if value == "None" else cst.parse_expression(value))
            statements.insert(at, cst.SimpleStatementLine(body=[ret], trailing_whitespace=comment))
        else:
            del statements[at]
        body = list(module.body)
        body[index] = func.with_changes(body=func.body.with_changes(body=statements))
        return Outcome(module.with_changes(body=body).bytes, int(not is_done), int(is_done))
