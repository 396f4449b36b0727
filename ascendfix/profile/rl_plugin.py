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
installer changed (exactly so) from any other change, and name it as the rl-plugin's. These
edits are not ascendfix patches: the installer owns them, ``pip install`` of the plugin redoes
them, and undoing them switches the NPU rollout off.
"""

from __future__ import annotations

import ast

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
TYPING_IMPORT = "from typing import Any, Callable"


def _append_import_block(text: str) -> str:
    return text if IMPORT_BLOCK in text else text + IMPORT_BLOCK


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
    """Whether ``current`` is exactly what the installer makes of ``original`` (and differs from it)."""
    edited = installer_edit(path, original)
    return edited is not None and edited != original and edited == current


def _strip_import_block(text: str) -> str | None:
    return text[: -len(IMPORT_BLOCK)] if text.endswith(IMPORT_BLOCK) else None


def _uncomment_kernels(text: str) -> str | None:
    lines = text.splitlines(keepends=True)
    return "".join(line[2:] if line.startswith("# ") and line[2:].strip() == KERNELS_IMPORT else line for line in lines)


def _untyping_list(text: str) -> str | None:
    out = []
    for line in text.splitlines(keepends=True):
        if TYPING_IMPORT in line and line.rstrip("\n").endswith(", List"):
            out.append(line.rstrip("\n")[: -len(", List")] + "\n")
        else:
            out.append(line.replace("List", "list"))
    return "".join(out)


UNDO = {VERL_INIT: _strip_import_block, LINEAR_CROSS_ENTROPY: _uncomment_kernels, FP8_UTILS: _untyping_list}
UNDO[FUSED_MOE] = _untyping_list


def original_of(path: str, current: bytes) -> bytes | None:
    """The file the installer would have turned into ``current``, when one can be told (for files
    whose original is known only by its hash); the caller checks it against that hash."""
    undo = UNDO.get(path)
    try:
        text = current.decode("utf-8")
    except UnicodeDecodeError:
        return None
    candidate = undo(text) if undo else None
    if candidate is None:
        return None
    original = candidate.encode("utf-8")
    return original if is_installer_edit(path, original, current) else None


def _npu_guarded(test: ast.expr) -> bool:
    name = test.attr if isinstance(test, ast.Attribute) else test.id if isinstance(test, ast.Name) else None
    return name == "is_npu_available"


def imports_plugin(source: bytes) -> bool:
    """Whether ``verl/__init__.py`` (``source``) imports ``verl_npu`` under ``if is_npu_available``:
    with it, ``import verl`` activates the plugin on an NPU. Read as Python, so any spelling counts;
    a file that does not parse counts when it holds the installer's block verbatim."""
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
