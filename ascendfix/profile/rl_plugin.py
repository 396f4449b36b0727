"""The edits MindSpeed-RL's rl-plugin installer makes to verl and vllm, re-derived in memory.

The guide's stack installs the rl-plugin (``verl_npu``, MindSpeed-RL branch 2.2.0,
``rl-plugin/setup.py``) after verl. Its install step edits upstream files as text:

- ``verl/__init__.py``: appends a block that imports ``verl_npu`` when an NPU is available
  (once: not when the block is already there);
- ``verl/utils/kernel/linear_cross_entropy.py``: comments out each ``from . import kernels`` line;
- vllm's ``model_executor/layers/quantization/utils/fp8_utils.py`` and
  ``model_executor/layers/fused_moe/fused_moe.py``: adds ``, List`` to a ``from typing import
  Any, Callable`` line that lacks ``List``, and on every other line containing ``list`` writes
  ``List`` for each ``list``.

:func:`installer_edit` applies that description to an original, so doctor can tell a file the
installer changed (exactly so) from any other change, and name it as the rl-plugin's. The
import block is recognised by its syntax tree, in any spelling (another tool's, a Dockerfile's
``cat >>``): statements importing verl_npu under ``is_npu_available``, added and nothing else. These
edits are not ascendfix patches: the installer owns them, ``pip install`` of the plugin redoes
them, and undoing them switches the NPU rollout off.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable

INSTALLER = "MindSpeed-RL rl-plugin installer (branch 2.2.0, rl-plugin/setup.py)"
VERL_INIT = "verl/__init__.py"
LINEAR_CROSS_ENTROPY = "verl/utils/kernel/linear_cross_entropy.py"
FP8_UTILS = "vllm/model_executor/layers/quantization/utils/fp8_utils.py"
FUSED_MOE = "vllm/model_executor/layers/fused_moe/fused_moe.py"

# The text the installer appends to verl/__init__.py: with it, `import verl` imports verl_npu on an NPU.
IMPORT_BLOCK = (
    "\n# NPU acceleration support added by mindspeed-rl plugin\n"
    "from verl.utils.device import is_npu_available\n"
    "\n"
    "if is_npu_available:\n"
    "    import verl_npu\n"
    '    print("NPU acceleration enabled for verl")\n'
)
KERNELS_IMPORT = "from . import kernels"
PLUGIN, PROBE = "verl_npu", "is_npu_available"
TYPING_IMPORT = "from typing import Any, Callable"


def _append_import_block(text: str) -> str:
    return text if IMPORT_BLOCK in text or has_import_block(text.encode()) else text + IMPORT_BLOCK


def _comment_out_kernels(text: str) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(f"# {line}" if line.strip() == KERNELS_IMPORT else line for line in lines)


def _typing_list(text: str) -> str:
    out = []
    for line in text.splitlines(keepends=True):
        if TYPING_IMPORT in line.strip() and "List" not in line.strip():
            out.append(f"{line[:-1]}, List\n")  # the installer drops the line's last character, then adds its own
        elif "list" in line:
            out.append(line.replace("list", "List"))
        else:
            out.append(line)
    return "".join(out)


# Without these the plugin is off (verl never imports verl_npu) or verl imports its Triton kernels on an
# NPU; a node that lost them is caught. vllm's two edits are never expected: the installer makes them
# only when vllm is a plain folder on a search path (setup.py:143-181), never with an editable vllm (the
# profile's), and they only respell type hints (``List`` for ``list``), which Python 3.10 reads either way.
REQUIRED = (VERL_INIT, LINEAR_CROSS_ENTROPY)

EDITS = {
    VERL_INIT: _append_import_block,
    LINEAR_CROSS_ENTROPY: _comment_out_kernels,
    FP8_UTILS: _typing_list,
    FUSED_MOE: _typing_list,
}


def installer_edit(path: str, original: bytes) -> bytes | None:
    """The file at ``path`` as the installer leaves ``original``; None when it does not edit that file."""
    edit = EDITS.get(path)
    if edit is None:
        return None
    try:
        text = original.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return edit(text).encode("utf-8")


def is_installer_edit(path: str, original: bytes, current: bytes) -> bool:
    """Whether ``current`` is what the installer makes of ``original`` (and differs from it): exactly,
    or for ``verl/__init__.py`` ``original`` with an import block in any spelling (:func:`adds_import_block`)."""
    if path == VERL_INIT:
        return adds_import_block(original, current)
    edited = installer_edit(path, original)
    return edited is not None and edited != original and edited == current


# --- the import block, by its syntax tree: whitespace, quotes, comments and the import's form do not matter


def _statements(code: bytes) -> list[ast.stmt] | None:
    try:
        return ast.parse(code).body
    except (SyntaxError, ValueError):
        return None


def _imports_plugin(node: ast.stmt) -> bool:
    """``import verl_npu`` (``as x``, a submodule) or ``from verl_npu... import ...``."""
    if isinstance(node, ast.Import):
        return any(a.name == PLUGIN or a.name.startswith(f"{PLUGIN}.") for a in node.names)
    return isinstance(node, ast.ImportFrom) and (node.module or "").partition(".")[0] == PLUGIN and not node.level


def _from_module(node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` of ``verl/__init__.py`` reads (``.utils.device``: its device)."""
    if node.level == 0:
        return node.module or ""
    return "verl" + (f".{node.module}" if node.module else "") if node.level == 1 else ""


def _is_probe_import(node: ast.stmt) -> bool:
    """An import that brings in verl's ``is_npu_available`` (or its module), in any form, relative ones included."""
    if isinstance(node, ast.ImportFrom):
        module = _from_module(node)
        return (module == "verl.utils.device" and any(a.name == PROBE for a in node.names)) or (
            module == "verl.utils" and any(a.name == "device" for a in node.names)
        )
    return isinstance(node, ast.Import) and any(a.name == "verl.utils.device" for a in node.names)


def _names_probe(test: ast.expr, aliases: set[str]) -> bool:
    if isinstance(test, ast.Call) and not test.args and not test.keywords:
        test = test.func
    return (isinstance(test, ast.Name) and test.id in aliases) or (
        isinstance(test, ast.Attribute) and test.attr == PROBE
    )


def _is_guard(node: ast.stmt, aliases: set[str]) -> bool:
    """``if is_npu_available: import verl_npu`` (beside it only prints, docstrings or ``pass``)."""
    if not isinstance(node, ast.If) or node.orelse or not _names_probe(node.test, aliases):
        return False
    allowed = all(_imports_plugin(n) or isinstance(n, (ast.Expr, ast.Pass)) for n in node.body)
    return allowed and any(_imports_plugin(n) for n in node.body)


def _aliases(statements: list[ast.stmt]) -> set[str]:
    """The names ``is_npu_available`` is bound to by the module's imports (``as npu``)."""
    names = {PROBE}
    for node in statements:
        if isinstance(node, ast.ImportFrom) and _from_module(node) == "verl.utils.device":
            names |= {a.asname for a in node.names if a.name == PROBE and a.asname}
    return names


def _block_statements(statements: list[ast.stmt]) -> list[bool]:
    """For each top-level statement, whether it belongs to an import block (a guard, or a probe import)."""
    aliases = _aliases(statements)
    return [_is_guard(n, aliases) or _is_probe_import(n) for n in statements]


def has_import_block(code: bytes) -> bool:
    """Whether ``verl/__init__.py``'s ``code`` imports verl_npu under ``is_npu_available``, in any spelling:
    with it, ``import verl`` on an NPU turns the plugin on."""
    statements = _statements(code) or []
    aliases = _aliases(statements)
    return any(_is_guard(n, aliases) for n in statements)


def adds_import_block(original: bytes, current: bytes) -> bool:
    """Whether ``current`` is ``original`` with import-block statements added (anywhere, in any spelling,
    at least one guarded ``import verl_npu``) and nothing else changed, compared as syntax trees."""
    import difflib  # only doctor asks: status and apply load this module through the rules

    before, after = _statements(original), _statements(current)
    if before is None or after is None:
        return False
    dumps = [ast.dump(n) for n in before], [ast.dump(n) for n in after]
    block = _block_statements(after)
    added = []
    for op, _, _, j1, j2 in difflib.SequenceMatcher(None, *dumps, autojunk=False).get_opcodes():
        if op != "equal" and (op != "insert" or not all(block[j1:j2])):
            return False
        added += after[j1:j2] if op == "insert" else []
    aliases = _aliases(after)
    return any(_is_guard(n, aliases) for n in added)


def _strip_import_block(text: str) -> list[str]:
    """Candidates for the file before its import block was added: the block's lines taken out, with
    or without the comment and blank lines around it (the caller keeps the one that hashes right)."""
    statements = _statements(text.encode())
    if statements is None:
        return []
    lines = text.splitlines(keepends=True)
    block = _block_statements(statements)
    candidates = [text[: -len(IMPORT_BLOCK)]] if text.endswith(IMPORT_BLOCK) else []  # the installer's own
    runs, start = [], None
    for i, (node, inside) in enumerate(zip(statements, block, strict=True)):
        if inside and start is None:
            start = i
        if inside and start is not None and (i + 1 == len(statements) or not block[i + 1]):
            runs.append((statements[start].lineno - 1, node.end_lineno or node.lineno))
            start = None
    for first, last in runs:
        above = _loose_lines(reversed(lines[:first]))
        below = _loose_lines(lines[last:])
        for up in range(above + 1):
            for down in range(below + 1):
                kept = "".join(lines[: first - up] + lines[last + down :])
                candidates.append(kept)
                if last + down == len(lines) and kept.endswith("\n"):
                    candidates.append(kept[:-1])  # the block began with the newline the file lacked
    return candidates


def _loose_lines(lines: Iterable[str]) -> int:
    """How many comment or blank lines lead ``lines`` (at most a few: what a tool writes around a block)."""
    count = 0
    for line in lines:
        if count == 4 or (line.strip() and not line.lstrip().startswith("#")):
            break
        count += 1
    return count


def _uncomment_kernels(text: str) -> list[str]:
    lines = text.splitlines(keepends=True)
    return [
        "".join(line[2:] if line.startswith("# ") and line[2:].strip() == KERNELS_IMPORT else line for line in lines)
    ]


def _untyping_list(text: str) -> list[str]:
    out = []
    for line in text.splitlines(keepends=True):
        if TYPING_IMPORT in line and line.rstrip("\n").endswith(", List"):
            out.append(line.rstrip("\n")[: -len(", List")] + "\n")
        else:
            out.append(line.replace("List", "list"))
    return ["".join(out)]


UNDO = {VERL_INIT: _strip_import_block, LINEAR_CROSS_ENTROPY: _uncomment_kernels, FP8_UTILS: _untyping_list}
UNDO[FUSED_MOE] = _untyping_list


def original_of(path: str, current: bytes, is_original: Callable[[bytes], bool] = lambda _: True) -> bytes | None:
    """The file the installer (or a tool writing the import block its own way) would have turned into
    ``current``, among those ``is_original`` accepts: for files whose original is known only by its
    hash, the caller's hash check."""
    undo = UNDO.get(path)
    try:
        text = current.decode("utf-8")
    except UnicodeDecodeError:
        return None
    for candidate in undo(text) if undo else []:
        original = candidate.encode("utf-8")
        if is_installer_edit(path, original, current) and is_original(original):
            return original
    return None


def _npu_guarded(test: ast.expr) -> bool:
    name = test.attr if isinstance(test, ast.Attribute) else test.id if isinstance(test, ast.Name) else None
    return name == "is_npu_available"


def imports_plugin(source: bytes) -> bool:
    """Whether ``verl/__init__.py`` (``source``) imports ``verl_npu`` anywhere under ``if is_npu_available``
    (wrapped in a ``try``, say): with it, ``import verl`` activates the plugin on an NPU. Broader than
    :func:`has_import_block`, which recognises the installer's own block and nothing more. A file that does
    not parse counts when it holds the installer's block verbatim."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return IMPORT_BLOCK.encode() in source
    for node in tree.body:
        if isinstance(node, ast.If) and _npu_guarded(node.test):
            for inner in ast.walk(ast.Module(body=node.body, type_ignores=[])):
                names = [a.name for a in inner.names] if isinstance(inner, ast.Import) else []
                if isinstance(inner, ast.ImportFrom) and inner.level == 0:
                    names = [inner.module or ""]
                if any(n == "verl_npu" or n.startswith("verl_npu.") for n in names):
                    return True
    return False
