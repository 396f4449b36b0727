"""Narrow a pairwise overlap scan to the pairs an exact, fast helper from a template finds."""

from __future__ import annotations

import ast
import functools
import hashlib
import textwrap
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from ascendfix.resources import data_dir
from ascendfix.transforms.base import (
    Outcome,
    TransformError,
    add_marker,
    code_of,
    drop_marker,
    has_marker,
    marker,
    parse,
)

PREFIX = "_ascendfix_"
RESULT = "_ascendfix_overlaps"  # the local that holds the helper's answer in the patched function
_UNSET = f"{RESULT} is None"


def _canonical(node) -> str:
    """An AST as text, the same on every Python version (no context, no empty fields)."""
    if isinstance(node, ast.AST):
        skip = ("ctx", "kind", "type_comment", "type_params")
        fields = (f"{k}={_canonical(v)}" for k, v in ast.iter_fields(node) if k not in skip and v not in (None, []))
        return f"{type(node).__name__}({','.join(fields)})"
    if isinstance(node, list):
        return f"[{','.join(_canonical(v) for v in node)}]"
    return repr(node)


def _canonical_code(code: str) -> str:
    return _canonical(ast.parse(textwrap.dedent(code)))


def fingerprint(module: cst.Module, func: cst.FunctionDef) -> str:
    """sha256 of ``func`` and the module-level functions it calls; formatting and comments do not count."""
    called = {c.func.value for c in m.findall(func, m.Call(func=m.Name()))}
    parts = [code_of(func)]
    parts += [code_of(s) for s in module.body if isinstance(s, cst.FunctionDef) and s.name.value in called]
    return hashlib.sha256("\n".join(_canonical_code(p) for p in parts).encode()).hexdigest()


def _header(loop: cst.For) -> str:
    return _canonical_code(f"for {code_of(loop.target)} in {code_of(loop.iter)}:\n    pass\n")


@dataclass(frozen=True)
class _Template:
    replaces: dict[str, dict]
    functions: dict[str, str]  # name -> source, in file order
    uses: dict[str, set[str]]  # name -> the template functions it calls


@functools.cache
def _load_template(relative: str) -> _Template:
    path = data_dir("patches") / relative
    try:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (OSError, SyntaxError, UnicodeDecodeError) as e:
        raise TransformError(f"cannot read template {path}: {e}") from None
    lines = text.splitlines()
    replaces: dict[str, dict] = {}
    functions: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["REPLACES"]:
            replaces = ast.literal_eval(node.value)
        elif isinstance(node, ast.FunctionDef) and node.name.startswith(PREFIX):
            functions[node.name] = "\n".join(lines[node.lineno - 1 : node.end_lineno])
    uses = {
        name: {n.id for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Name) and n.id in functions} - {name}
        for name, code in functions.items()
    }
    return _Template(replaces, functions, uses)


def _helper_defs(template: _Template, helper: str, patch_id: str) -> list[cst.FunctionDef]:
    """``helper`` and every template function it needs, in template order, each line marked."""
    needed, todo = set(), [helper]
    while todo:
        name = todo.pop()
        if name not in template.functions:
            raise TransformError(f"the template has no function {name}()")
        if name not in needed:
            needed.add(name)
            todo.extend(template.uses[name])
    defs = []
    for name, code in template.functions.items():
        if name not in needed:
            continue
        marked = "\n".join(f"{line}  {marker(patch_id)}" if line.strip() else line for line in code.splitlines())
        if _canonical_code(marked) != _canonical_code(code):
            raise TransformError(f"template function {name}() has a multi-line string a marker would land in")
        (func,) = cst.parse_module(marked + "\n").body
        defs.append(func.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()]))
    return defs


def _is_wrapped(loop: cst.For, patch_id: str) -> bool:
    return (
        isinstance(loop.iter, cst.IfExp)
        and code_of(loop.iter.test) == _UNSET
        and isinstance(loop.body, cst.IndentedBlock)
        and has_marker(loop.body.header, patch_id)
    )


def _is_call(stmt: cst.CSTNode, patch_id: str) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and m.matches(stmt.body[0], m.Assign(targets=[m.AssignTarget(m.Name(RESULT))]))
        and has_marker(stmt.trailing_whitespace, patch_id)
    )


def _is_helper(stmt: cst.CSTNode, patch_id: str) -> bool:
    return (
        isinstance(stmt, cst.FunctionDef)
        and stmt.name.value.startswith(PREFIX)
        and isinstance(stmt.body, cst.IndentedBlock)
        and has_marker(stmt.body.header, patch_id)
    )


class _Narrow(cst.CSTTransformer):
    """Insert the helper call before ``outer`` and narrow the loops' candidates to its answer."""

    def __init__(self, outer: cst.For, inner: cst.For, form: dict, patch_id: str):
        super().__init__()
        self.outer, self.inner, self.form, self.patch_id = outer, inner, form, patch_id

    def _wrap(self, loop: cst.For, orelse: str) -> cst.For:
        narrowed = cst.IfExp(
            test=cst.parse_expression(_UNSET),
            body=loop.iter,
            orelse=cst.parse_expression(orelse),
            lpar=[cst.LeftParen()],
            rpar=[cst.RightParen()],
        )
        return loop.with_changes(
            iter=narrowed, body=loop.body.with_changes(header=add_marker(loop.body.header, self.patch_id))
        )

    def leave_For(self, original, updated):
        if original is self.inner:
            return self._wrap(updated, f"{RESULT}[{self.form['index']}]")
        if original is self.outer and self.form["narrow_outer"]:
            return self._wrap(updated, RESULT)
        return updated

    def leave_IndentedBlock(self, original, updated):
        if not any(s is self.outer for s in original.body):
            return updated
        at = next(i for i, s in enumerate(original.body) if s is self.outer)
        call = cst.parse_statement(f"{RESULT} = {self.form['helper']}({self.form['args']})\n")
        call = call.with_changes(trailing_whitespace=add_marker(call.trailing_whitespace, self.patch_id))
        body = list(updated.body)
        body.insert(at, call.with_changes(leading_lines=body[at].leading_lines))
        body[at + 1] = body[at + 1].with_changes(leading_lines=[])
        return updated.with_changes(body=body)


class _Restore(cst.CSTTransformer):
    """The inverse of :class:`_Narrow`: drop the call, unwrap the loops."""

    def __init__(self, patch_id: str):
        super().__init__()
        self.patch_id = patch_id

    def leave_For(self, original, updated):
        if not _is_wrapped(updated, self.patch_id):
            return updated
        return updated.with_changes(
            iter=updated.iter.body,
            body=updated.body.with_changes(header=drop_marker(updated.body.header, self.patch_id)),
        )

    def leave_IndentedBlock(self, original, updated):
        body = list(updated.body)
        for at, stmt in enumerate(body):
            if _is_call(stmt, self.patch_id):
                following = body[at + 1].with_changes(leading_lines=stmt.leading_lines)
                return updated.with_changes(body=[*body[:at], following, *body[at + 2 :]])
        return updated


@dataclass(frozen=True)
class FastOverlapScan:
    """Matches the module-level ``def <function>`` holding an overlap scan that ``template`` knows.

    A scan is a ``for`` loop over positions with one inner ``for`` over candidate partners; it is
    known when its fingerprint (the loop and the module functions it calls, see :func:`fingerprint`)
    is a key of the template's ``REPLACES`` table, so a torch whose scan changed is refused, not
    mangled. Apply inserts the helper and the template functions it uses right before the function
    (each line marked), calls it before the loop, and narrows the inner loop (and, for a sweep, the
    outer loop) to the helper's answer; the stock loop keeps its own test, messages and return value.
    Revert removes exactly those lines and unwraps the loops.
    """

    function: str
    template: str

    def _find(self, module: cst.Module) -> tuple[int, cst.FunctionDef] | None:
        for index, stmt in enumerate(module.body):
            if isinstance(stmt, cst.FunctionDef) and stmt.name.value == self.function:
                return index, stmt
        return None

    def _is_done(self, module: cst.Module, func: cst.FunctionDef, patch_id: str) -> bool:
        parts = (
            any(_is_helper(s, patch_id) for s in module.body),
            any(_is_call(s, patch_id) for s in m.findall(func, m.SimpleStatementLine())),
            any(_is_wrapped(f, patch_id) for f in m.findall(func, m.For())),
        )
        if any(parts) and not all(parts):
            raise TransformError(f"{self.function}() carries only part of this patch; restore the file and apply again")
        return all(parts)

    def _scan(self, module: cst.Module, func: cst.FunctionDef) -> tuple[cst.For, cst.For, dict]:
        form = _load_template(self.template).replaces.get(fingerprint(module, func))
        if form is None:
            raise TransformError(
                f"{self.function}() is not a version that {self.template} knows "
                "(a torch it was not written for): use the skip variant"
            )
        loop = _canonical_code(f"{form['loop']}:\n    pass\n")
        (outer,) = [f for f in m.findall(func, m.For()) if _header(f) == loop]
        (inner,) = [s for s in outer.body.body if isinstance(s, cst.For)]
        return outer, inner, form

    def apply(self, source: bytes, patch_id: str) -> Outcome:
        """Insert the fast helper and narrow the stock scan, unless already done."""
        module = parse(source)
        found = self._find(module)
        if found is None:
            return Outcome(source, 0, 0)
        index, func = found
        if self._is_done(module, func, patch_id):
            return Outcome(source, 0, 1)
        outer, inner, form = self._scan(module, func)
        helpers = _helper_defs(_load_template(self.template), form["helper"], patch_id)
        new_func = func.visit(_Narrow(outer, inner, form, patch_id))
        body = [*module.body[:index], *helpers, new_func, *module.body[index + 1 :]]
        return Outcome(module.with_changes(body=body).bytes, 1, 0)

    def revert(self, source: bytes, patch_id: str) -> Outcome:
        """Remove the helper and restore the stock scan this patch narrowed."""
        module = parse(source)
        found = self._find(module)
        if found is None:
            return Outcome(source, 0, 0)
        index, func = found
        if not self._is_done(module, func, patch_id):
            return Outcome(source, 1, 0)
        body = [s for s in module.body if not _is_helper(s, patch_id)]
        body = [func.visit(_Restore(patch_id)) if s is func else s for s in body]
        return Outcome(module.with_changes(body=body).bytes, 0, 1)
