"""Narrow a pairwise overlap scan to the pairs an exact, fast helper from a template finds."""

from __future__ import annotations

import ast
import functools
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ascendfix.resources import data_dir
from ascendfix.transforms.base import MAX_FILE_BYTES, Outcome, Transform, TransformError, marker
from ascendfix.tuples import NamedTuple

if TYPE_CHECKING:
    import libcst as cst

    from ascendfix.transforms.cst_util import Statements
    from ascendfix.transforms.regions import Region, Source

_Edit = Callable[[Any], Any]  # one node's edit for cst_util.edit (each takes and gives the node kind it edits)

PREFIX = "_ascendfix_"
RESULT = "_ascendfix_overlaps"  # the local that holds the helper's answer in the patched function
UNSET = f"{RESULT} is None"


def _canonical(node: object) -> str:
    """An AST as text, the same on every Python version (no context, no empty fields)."""
    if isinstance(node, ast.AST):
        skip = ("ctx", "kind", "type_comment", "type_params")
        fields = (f"{k}={_canonical(v)}" for k, v in ast.iter_fields(node) if k not in skip and v not in (None, []))
        return f"{type(node).__name__}({','.join(fields)})"
    if isinstance(node, list):
        return f"[{','.join(_canonical(v) for v in node)}]"
    return repr(node)


@functools.lru_cache(maxsize=1024)
def _canonical_code(code: str) -> str:
    """:func:`_canonical` of ``code`` (dedented); kept, as the two fast-validate patches share most template
    functions."""
    from textwrap import dedent

    return _canonical(ast.parse(dedent(code)))


def fingerprint(module: cst.Module, func: cst.FunctionDef) -> str:
    """sha256 of ``func`` and the module-level functions it calls; formatting and comments do not count."""
    import libcst as cst

    from ascendfix.transforms.cst_util import code_of, walk

    called = {n.func.value for n, _ in walk(func) if isinstance(n, cst.Call) and isinstance(n.func, cst.Name)}
    parts = [code_of(func)]
    parts += [code_of(s) for s in module.body if isinstance(s, cst.FunctionDef) and s.name.value in called]
    return _digest(parts)


def source_fingerprint(source: Source, func: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """:func:`fingerprint` from a file's ``ast`` (see :class:`~ascendfix.transforms.regions.Source`), without libcst.

    Each part is the function's own lines, which give the same canonical form as libcst's code for it.
    """
    from ascendfix.transforms.regions import first_line

    def lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
        return source.lines(first_line(node), node.end_lineno or node.lineno).decode("utf-8")

    called = {n.func.id for n in ast.walk(func) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    parts = [lines(func)]
    parts += [lines(s) for s in source.tree.body if isinstance(s, _DEFS) and s.name in called]
    return _digest(parts)


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)  # what libcst calls a FunctionDef


def _is_helper(stmt: ast.stmt) -> bool:
    """Whether ``stmt`` is a module-level def this transform inserts (``_ascendfix_*``)."""
    return isinstance(stmt, _DEFS) and stmt.name.startswith(PREFIX)


def _digest(parts: list[str]) -> str:
    import hashlib  # here, not at the top: status and a no-op apply import this module but never digest

    return hashlib.sha256("\n".join(_canonical_code(p) for p in parts).encode()).hexdigest()


class _Template(NamedTuple):
    replaces: dict[str, dict]
    functions: dict[str, str]  # name -> source, in file order
    uses: dict[str, set[str]]  # name -> the template functions it calls
    four_spaces: bool = False  # every function's body indented four spaces: libcst's default indent for each alone


def read_template(path: Path, limit: int) -> str:
    """The text of a template: a regular file of at most ``limit`` bytes, not reached through a symlink."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError("not a regular file")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OSError(f"over {limit} bytes")
    return data.decode("utf-8")


@functools.cache
def _load_template(name: str) -> _Template:
    """The template ``name``: a path (a patch file's, resolved by the manifest), or one relative to the
    bundled ``patches/`` folder."""
    path = data_dir("patches") / name
    try:
        text = read_template(path, MAX_FILE_BYTES)
        tree = ast.parse(text)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError) as e:
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
    from ascendfix.transforms.regions import first_line

    bodies = [n.body[0] for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in functions]
    four_spaces = all(lines[first_line(b) - 1][: b.col_offset] == "    " for b in bodies)
    return _Template(replaces, functions, uses, four_spaces)


def _helper_texts(template: _Template, helper: str, patch_id: str) -> list[str]:
    """``helper`` and every template function it needs, in template order, each line marked."""
    needed, todo = set[str](), [helper]
    while todo:
        name = todo.pop()
        if name not in template.functions:
            raise TransformError(f"the template has no function {name}()")
        if name not in needed:
            needed.add(name)
            todo.extend(template.uses[name])
    texts = []
    for name, code in template.functions.items():
        if name not in needed:
            continue
        if not _markable(code):
            raise TransformError(f"template function {name}() has a multi-line string a marker would land in")
        texts.append(_marked(code, patch_id))
    return texts


def _helper_defs(texts: list[str]) -> list[Statements]:
    """The marked helpers (:func:`_helper_texts`) as libcst statements, each after two blank lines."""
    import libcst as cst

    defs = []
    for text in texts:
        (func,) = cst.parse_module(text + "\n").body
        defs.append(func.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()]))
    return defs


def _helpers_as_written(texts: list[str]) -> bytes:
    """What :func:`_helper_defs` regenerates to in a module with LF newlines and a four-space indent, from a template
    whose functions are indented four spaces too: each text after two blank lines, as it is (libcst gives back the
    bytes it parsed)."""
    return "".join(f"\n\n{text}\n" for text in texts).encode("utf-8")


def _marked(code: str, patch_id: str) -> str:
    """``code`` with ``patch_id``'s marker at the end of every line that is not blank."""
    return "\n".join(f"{line}  {marker(patch_id)}" if line.strip() else line for line in code.splitlines())


@functools.lru_cache(maxsize=256)
def _markable(code: str) -> bool:
    """Whether ``code`` means the same with a marker at the end of each line (no line ends inside a multi-line
    string): asked once per template function, not once per patch that inserts it (a cold apply of the two
    fast-validate patches parsed each shared function twice), as a patch id (letters, digits and dashes,
    :func:`~ascendfix.profile.schema.is_id`) cannot change what a comment is."""
    return _canonical_code(_marked(code, "patch")) == _canonical_code(code)


def _parts(
    module: cst.Module, func: cst.FunctionDef, patch_id: str
) -> tuple[list[cst.FunctionDef], list[tuple[cst.SimpleStatementLine, cst.CSTNode]], list[cst.For]]:
    """This patch's helper defs in ``module``, its call statements and narrowed loops in ``func``."""
    import libcst as cst

    from ascendfix.transforms.cst_util import code_of, has_marker, walk

    helpers = [
        s
        for s in module.body
        if isinstance(s, cst.FunctionDef)
        and s.name.value.startswith(PREFIX)
        and isinstance(s.body, cst.IndentedBlock)
        and has_marker(s.body.header, patch_id)
    ]
    calls: list[tuple[cst.SimpleStatementLine, cst.CSTNode]] = []
    loops: list[cst.For] = []
    for node, above in walk(func):
        if (
            isinstance(node, cst.SimpleStatementLine)
            and isinstance(node.body[0], cst.Assign)
            and code_of(node.body[0].targets[0].target) == RESULT
            and has_marker(node.trailing_whitespace, patch_id)
        ):
            calls.append((node, above[-1]))
        elif (
            isinstance(node, cst.For)
            and isinstance(node.iter, cst.IfExp)
            and code_of(node.iter.test) == UNSET
            and isinstance(node.body, cst.IndentedBlock)
            and has_marker(node.body.header, patch_id)
        ):
            loops.append(node)
    return helpers, calls, loops


class FastOverlapScan(Transform):
    """Matches the module-level ``def <function>`` holding an overlap scan that ``template`` knows.

    A scan is a ``for`` loop over positions with one inner ``for`` over candidate partners. The
    function is known when its :func:`fingerprint` (it and the module functions it calls) is a key
    of the template's ``REPLACES`` table, which names the scan's outer loop and the helper that
    replays it; any other version is refused, not mangled. Apply inserts that helper and the
    template functions it uses right before the function (each line marked), calls it before the
    loop, and narrows the inner loop (and, for a sweep, the outer loop) to the helper's answer;
    the stock loop keeps its own test, messages, warnings and return value. Revert removes
    exactly those lines and unwraps the loops.
    """

    name = "fast-overlap-scan"

    def __init__(self, function: str, template: str):
        self.function, self.template = function, template

    def _find(self, module: cst.Module) -> tuple[int, cst.FunctionDef] | None:
        import libcst as cst

        found = [
            (i, s)
            for i, s in enumerate(module.body)
            if isinstance(s, cst.FunctionDef) and s.name.value == self.function
        ]
        return found[0] if len(found) == 1 else None

    def _scan(self, func: cst.FunctionDef, digest: Callable[[], str]) -> tuple[cst.For, Any, cst.For, dict]:
        """The stock scan's outer loop, the block holding it, its inner loop, and the template's form."""
        import libcst as cst

        from ascendfix.transforms.cst_util import code_of, walk

        form = _load_template(self.template).replaces.get(digest())
        if form is None:
            raise TransformError(
                f"{self.function}() is not a version that {self.template} knows "
                "(a torch it was not written for): use the skip variant"
            )
        header = _canonical_code(f"{form['loop']}:\n    pass\n")
        outers = [
            (node, above[-1])
            for node, above in walk(func)
            if isinstance(node, cst.For)
            and _canonical_code(f"for {code_of(node.target)} in {code_of(node.iter)}:\n    pass\n") == header
        ]
        inners = [s for node, _ in outers for s in node.body.body if isinstance(s, cst.For)]
        if len(outers) != 1 or len(inners) != 1:
            raise TransformError(f"{self.template}: {form['loop']!r} is not one loop with one inner loop")
        return (*outers[0], inners[0], form)

    def _narrow(
        self, func: cst.FunctionDef, patch_id: str, digest: Callable[[], str]
    ) -> tuple[cst.FunctionDef, list[str]]:
        """The function with the scan narrowed, and the marked helpers to insert before it."""
        import libcst as cst

        from ascendfix.transforms.cst_util import add_marker, edit

        outer, block, inner, form = self._scan(func, digest)

        def wrap(orelse: str) -> _Edit:
            def narrowed(loop: Any) -> Any:  # a cst.For whose body is an IndentedBlock
                iterable = cst.IfExp(
                    test=cst.parse_expression(UNSET),
                    body=loop.iter,
                    orelse=cst.parse_expression(orelse),
                    lpar=[cst.LeftParen()],
                    rpar=[cst.RightParen()],
                )
                header = add_marker(loop.body.header, patch_id)
                return loop.with_changes(iter=iterable, body=loop.body.with_changes(header=header))

            return narrowed

        at = next(i for i, s in enumerate(block.body) if s is outer)
        call = cast(cst.SimpleStatementLine, cst.parse_statement(f"{RESULT} = {form['helper']}({form['args']})\n"))
        call = call.with_changes(
            trailing_whitespace=add_marker(call.trailing_whitespace, patch_id), leading_lines=outer.leading_lines
        )

        def insert(new_block: Any) -> Any:
            body = list(new_block.body)
            body[at] = body[at].with_changes(leading_lines=[])
            return new_block.with_changes(body=[*body[:at], call, *body[at:]])

        edits: dict[int, _Edit] = {id(inner): wrap(f"{RESULT}[{form['index']}]"), id(block): insert}
        if form["narrow_outer"]:
            edits[id(outer)] = wrap(RESULT)
        return edit(func, edits), _helper_texts(_load_template(self.template), form["helper"], patch_id)

    @staticmethod
    def _restore(
        func: cst.FunctionDef,
        calls: list[tuple[cst.SimpleStatementLine, cst.CSTNode]],
        loops: list[cst.For],
        patch_id: str,
    ) -> cst.FunctionDef:
        from ascendfix.transforms.cst_util import drop_marker, edit

        def unwrap(loop: Any) -> Any:
            header = drop_marker(loop.body.header, patch_id)
            return loop.with_changes(iter=loop.iter.body, body=loop.body.with_changes(header=header))

        def remove(call: cst.SimpleStatementLine) -> _Edit:
            def without(block: Any) -> Any:
                body = list(block.body)
                at = next(i for i, s in enumerate(body) if s is call)
                following = body[at + 1].with_changes(leading_lines=call.leading_lines)
                return block.with_changes(body=[*body[:at], following, *body[at + 2 :]])

            return without

        edits: dict[int, _Edit] = {id(loop): unwrap for loop in loops}
        edits.update({id(block): remove(call) for call, block in calls})
        return edit(func, edits)

    def _rewrite(self, source: bytes, patch_id: str, forward: bool) -> Outcome:
        from ascendfix.transforms.cst_util import parse
        from ascendfix.transforms.regions import splice

        if self.function.encode() not in source:
            return Outcome(source, 0, 0)
        located = self._region(source)
        found = self._find(located[1].module) if located is not None else None
        if located is not None and found is not None:
            lines, region, func = located
            # the function first in a region with LF newlines and a four-space indent (a template's, where its own are
            # four spaces): the helpers are inserted as the bytes libcst would regenerate them to, neither parsed nor
            # regenerated (most of an apply's work)
            as_written = (
                found[0] == 0
                and not region.wrapper
                and not region.module.header
                and (region.module.default_newline, region.module.default_indent) == ("\n", "    ")
            )
            try:  # a refusal is left to the whole-file path, which says it in its own words
                module, pending, done, inserted = self._edit(
                    region.module, *found, lambda: source_fingerprint(lines, func), patch_id, forward, as_written
                )
            except TransformError:
                pass
            else:
                if module is None:
                    return Outcome(source, pending, done)
                return Outcome(splice(lines, [(region, inserted + region.code(module))]), pending, done)
        whole = parse(source)
        found = self._find(whole)
        if found is None:
            return Outcome(source, 0, 0)
        index, function = found
        module, pending, done, _ = self._edit(
            whole, index, function, lambda: fingerprint(whole, function), patch_id, forward
        )
        return Outcome(module.bytes if module is not None else source, pending, done)

    def _region(self, source: bytes) -> tuple[Source, Region, ast.FunctionDef | ast.AsyncFunctionDef] | None:
        """``(Source, Region, ast of the function)``: the function's lines, and the ``_ascendfix_*`` defs
        right before it, parsed alone; None when the whole file must be parsed instead.

        The region starts right after the statement before them (the blank lines and column-0 comments
        between belong to the first def, as in the whole file), or at the file's start; no other
        module-level ``_ascendfix_*`` def may exist, and libcst must read the region with the whole
        file's default newline and indent (what the inserted helpers are written with).
        """
        from ascendfix.transforms import regions

        lines = regions.Source.read(source)
        if lines is None:
            return None
        body = lines.tree.body
        found = [(i, s) for i, s in enumerate(body) if isinstance(s, _DEFS) and s.name == self.function]
        if len(found) != 1:
            return None
        (end, func), start = found[0], found[0][0]
        while start > 0 and _is_helper(body[start - 1]):
            start -= 1
        if any(_is_helper(s) for s in (*body[:start], *body[end + 1 :])):
            return None
        first = regions.end_line(body[start - 1]) + 1 if start else 1
        gap = (lines.line(n) for n in range(first, regions.first_line(body[start])))
        if not all(line in (b"\n", b"\r\n") or line.startswith(b"#") for line in gap):
            return None  # an indented comment may close the statement before (a block's footer)
        region = regions.parse_lines(lines, first, regions.end_line(func))
        if region is None or region.module.default_indent != lines.default_indent():
            return None
        return lines, region, func

    def _edit(
        self,
        module: cst.Module,
        index: int,
        func: cst.FunctionDef,
        digest: Callable[[], str],
        patch_id: str,
        forward: bool,
        as_written: bool = False,
    ) -> tuple[cst.Module | None, int, int, bytes]:
        """``(edited module or None when unchanged, pending, done, inserted)`` for ``module.body[index]``, ``func``.

        ``as_written``: the helpers an apply inserts are returned as bytes to put before the module's code
        (:func:`_helpers_as_written`), not inserted into it, when the template's functions are indented four spaces;
        only for a module with no header whose first statement is ``func``, with LF newlines and a four-space
        indent.
        """
        helpers, calls, loops = _parts(module, func, patch_id)
        if (helpers or calls or loops) and not (helpers and len(calls) == 1 and loops):
            raise TransformError(f"{self.function}() carries only part of this patch; restore the file and apply again")
        is_done = bool(helpers)
        if forward == is_done:
            return None, int(not is_done), int(is_done), b""
        if not forward:
            new_func = self._restore(func, calls, loops, patch_id)
            body = [new_func if s is func else s for s in module.body if not any(s is h for h in helpers)]
            return module.with_changes(body=body), int(not is_done), int(is_done), b""
        new_func, texts = self._narrow(func, patch_id, digest)
        if as_written and _load_template(self.template).four_spaces:
            body = [*module.body[:index], new_func, *module.body[index + 1 :]]
            return module.with_changes(body=body), 1, 0, _helpers_as_written(texts)
        body = [*module.body[:index], *_helper_defs(texts), new_func, *module.body[index + 1 :]]
        return module.with_changes(body=body), 1, 0, b""
