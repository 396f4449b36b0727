"""Make a function return right after its docstring, and tell a hand-written early return."""

import ast

from ascendfix.transforms.base import MARKER_PREFIX, HandEditError, Outcome, Transform, TransformError, marker


def parse_python(source: bytes) -> ast.Module:
    """``source`` as an ``ast`` module, or TransformError naming the line Python refuses and why."""
    try:
        return ast.parse(source)
    except SyntaxError as e:
        raise TransformError(f"not valid Python (line {e.lineno}: {e.msg})") from None
    except ValueError as e:
        raise TransformError(f"cannot decode: {e}") from None


def _is_none(value: ast.expr | None) -> bool:
    return value is None or isinstance(value, ast.Constant) and value.value is None


def _return_value(tree: ast.Module, func: ast.FunctionDef, ignore: tuple[ast.AST, ...] = ()) -> str:
    """The value that keeps every caller on its success path, from the annotation and the callers.

    ``None`` (bare ``return``) when the function returns no value; ``True`` for ``-> bool``
    whose callers all test ``not f(...)``; ``[]`` for ``-> list[str]`` whose callers all
    bind the result to a name (torch >= 2.12: an empty error list). Anything else: refuse.
    ``ignore``: statements of the function not to count (a hand-written early return).
    """
    name = func.name
    annotation = ast.unparse(func.returns).replace(" ", "") if func.returns else None
    returns_values = any(
        isinstance(n, ast.Return) and not _is_none(n.value) and n not in ignore for n in ast.walk(func)
    )
    calls = negated = assigned = 0
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Name) and child.func.id == name:
                calls += 1
                negated += isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)
                assigned += isinstance(node, ast.Assign) and node.value is child
    if annotation in (None, "None") and not returns_values:
        return "None"
    if annotation == "bool" and calls and negated == calls:
        return "True"
    if annotation in ("list[str]", "List[str]") and calls and assigned == calls:
        return "[]"
    raise TransformError(
        f"cannot tell what {name}() must return (annotation {annotation!r}, {calls} caller(s) in this file)"
    )


def _written(value: ast.expr | None) -> str:
    """The value a ``return`` returns, as ``_return_value`` spells it (``None`` for a bare one)."""
    return "None" if value is None or _is_none(value) else ast.unparse(value)


class ReturnEarly(Transform):
    """Matches the module-level ``def <function>`` and inserts ``return <value>`` after its docstring.

    The value comes from the function's return annotation, cross-checked against its
    callers in the same file (see ``_return_value``). The rest of the body stays in
    place, unreachable, so the inverse is a plain removal of the inserted line.

    With ``marked`` false the form is a hand edit (the guide's 6.1 and 6.2): the done site is any body
    whose first executed statement returns that value (``return``, ``return None``, ``pass`` lines
    before it, comments on or directly above it), with no marker; the inverse deletes those lines.
    A body that returns another value there first is a HandEditError. ``before_docstring`` looks
    for it first in the body, above the docstring, where a hand edit may put it too.
    """

    name = "return-early"

    def __init__(self, function: str, marked: bool = True, before_docstring: bool = False):
        self.function, self.marked, self.before_docstring = function, marked, before_docstring

    def reproduces(self, original: bytes, code: bytes, patch_id: str) -> bool:
        """A hand return has several spellings; its inverse deletes only the lines of one (see the class)."""
        if self.marked:
            return super().reproduces(original, code, patch_id)
        back = self.revert(code, patch_id)
        return back.done == 1 and back.code == original

    def _rewrite(self, source: bytes, patch_id: str, forward: bool) -> Outcome:
        if not self.marked:
            return self._by_hand(source, forward)
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
            and u.has_marker(ours.trailing_whitespace, patch_id)
        )
        if forward == is_done:
            return Outcome(source, int(not is_done), int(is_done))
        if forward:
            tree = parse_python(source)
            (node,) = [s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == self.function]
            value = _return_value(tree, node)
            comment = cst.TrailingWhitespace(
                whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment(marker(patch_id))
            )
            ret = cst.Return(value=None if value == "None" else cst.parse_expression(value))
            statements.insert(at, cst.SimpleStatementLine(body=[ret], trailing_whitespace=comment))
        else:
            del statements[at]
        body = list(module.body)
        body[index] = func.with_changes(body=func.body.with_changes(body=statements))
        return Outcome(module.with_changes(body=body).bytes, int(not is_done), int(is_done))

    def _by_hand(self, source: bytes, forward: bool) -> Outcome:
        """The hand form, by lines: a done site's lines deleted, or the guide's ``return <value>`` inserted."""
        try:
            tree = ast.parse(source)
        except SyntaxError as e:
            line = e.lineno or 0
            fix = f"indent line {line} with spaces, as the lines around it" if isinstance(e, TabError) else ""
            raise HandEditError(line, f"line {line}: {e.msg}: Python cannot import the file", fix) from None
        except ValueError as e:
            raise TransformError(f"cannot decode: {e}") from None
        found = [s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == self.function]
        if len(found) != 1 or found[0].body[0].lineno == found[0].lineno:
            return Outcome(source, 0, 0)  # absent, defined twice, or a one-line def: not a site we know
        func = found[0]
        body = func.body
        first = body[0]
        is_doc = (
            isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)
        )
        at = 1 if is_doc and not self.before_docstring else 0
        lines = source.splitlines(keepends=True)
        span = self._hand_span(tree, func, at, lines)
        if span is None:
            if not forward or at >= len(body):
                return Outcome(source, int(at < len(body)), 0)
            value = _return_value(tree, func)
            head = lines[body[at].lineno - 1]
            indent = head[: len(head) - len(head.lstrip(b" \t"))]
            ending = head[len(head.rstrip(b"\r\n")) :] or b"\n"
            text = b"return" if value == "None" else b"return " + value.encode()
            lines.insert(body[at].lineno - 1, indent + text + ending)
            return Outcome(b"".join(lines), 1, 0)
        if forward:
            return Outcome(source, 0, 1)
        start, end = span
        return Outcome(b"".join(lines[: start - 1] + lines[end:]), 0, 1)

    def _hand_span(
        self, tree: ast.Module, func: ast.FunctionDef, at: int, lines: list[bytes]
    ) -> tuple[int, int] | None:
        """The lines (first, last; 1-based) of a hand-written early return at ``func.body[at]``, or None.

        ``pass`` statements then a ``return`` of the value the function's callers need, each alone on its lines,
        with any comment lines directly above. A return of another value there is a HandEditError.
        """
        body, run = func.body, []
        for stmt in body[at:]:
            run.append(stmt)
            if not isinstance(stmt, ast.Pass):
                break
        ret = run[-1] if run else None
        if not isinstance(ret, ast.Return):
            return None
        end = ret.end_lineno or ret.lineno  # ast.parse sets end_lineno on every statement
        if MARKER_PREFIX.encode() in lines[end - 1]:
            return None
        after = body[at + len(run)] if at + len(run) < len(body) else None
        above = (body[at - 1].end_lineno or body[at - 1].lineno) if at else func.lineno
        start = run[0].lineno
        if start <= above or (after is not None and after.lineno <= end):
            raise HandEditError(
                start,
                f"line {start} returns before {self.function}() runs, on a line shared with more code",
                f"put the return of line {start} on a line of its own",
            )
        try:
            expected = _return_value(tree, func, ignore=(ret,))
        except TransformError as e:
            raise HandEditError(
                ret.lineno,
                f"line {ret.lineno} returns before {self.function}() runs, and {e}",
                f"delete line {ret.lineno}",
            ) from None
        if _written(ret.value) != expected:
            written, want = _written(ret.value), "return" if expected == "None" else f"return {expected}"
            problem = (
                f"line {ret.lineno} returns {written} before {self.function}() runs, where its callers need {expected}"
            )
            raise HandEditError(ret.lineno, problem, f"make line {ret.lineno} `{want}`")
        while start - 1 > above and lines[start - 2].lstrip().startswith(b"#"):
            start -= 1
        return start, end
