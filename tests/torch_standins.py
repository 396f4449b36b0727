"""Run torch's real checkpoint-validation functions without torch.

The functions are taken out of the real module source (stock, or patched by ascendfix) with
``ast`` and executed with the module's own stdlib imports and small stand-ins for the few torch
types their signatures and bodies use. ``logger`` is a recorder, so a call returns what the
function returned or raised together with every warning it logged, in order.
"""

from __future__ import annotations

import ast
import types
from dataclasses import dataclass, field
from typing import Any

SHARD_FUNCTIONS = (
    "_check_shard_metadata_pair_overlap",
    "_find_nd_overlapping_shards",
    "_find_1d_overlapping_shards",
    "validate_non_overlapping_shards_metadata",
)
PLAN_FUNCTIONS = ("_check_box_overlap", "_check_box_bounds", "_validate_global_plan")


class Size(tuple):
    """Stand-in for torch.Size: a tuple that prints like one."""

    def __repr__(self) -> str:
        return f"torch.Size({list(self)})"


@dataclass
class ShardMetadata:
    shard_offsets: list
    shard_sizes: list
    placement: Any = None


@dataclass
class ChunkStorageMetadata:
    offsets: Size
    sizes: Size


@dataclass
class TensorStorageMetadata:
    size: Size
    chunks: list
    properties: Any = None


@dataclass
class BytesStorageMetadata:
    pass


@dataclass
class Metadata:
    state_dict_metadata: dict
    planner_data: Any = None


@dataclass
class Recorder:
    """Stand-in for a module's ``logger``: keeps each warning, formatted."""

    warnings: list[str] = field(default_factory=list)

    def warning(self, msg, *args):
        self.warnings.append(msg % args if args else msg)


def load(source: bytes, names: tuple[str, ...]) -> tuple[dict, Recorder]:
    """The functions ``names`` (and every ``_ascendfix_*`` one) of a module, executed with stand-ins."""
    tree = ast.parse(source)
    keep = []
    for node in tree.body:
        if isinstance(node, ast.Import) and all(a.name.split(".")[0] != "torch" for a in node.names):
            keep.append(node)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module.split(".")[0] != "torch":
            keep.append(node)
        elif isinstance(node, ast.FunctionDef) and (node.name in names or node.name.startswith("_ascendfix_")):
            keep.append(node)
    logger = Recorder()
    namespace = {
        "torch": types.SimpleNamespace(Size=Size),
        "ShardMetadata": ShardMetadata,
        "ChunkStorageMetadata": ChunkStorageMetadata,
        "TensorStorageMetadata": TensorStorageMetadata,
        "BytesStorageMetadata": BytesStorageMetadata,
        "Metadata": Metadata,
        "SavePlan": object,
        "logger": logger,
        "__name__": "torch_standin",
    }
    exec(compile(ast.Module(body=keep, type_ignores=[]), "<torch module>", "exec"), namespace)
    missing = [n for n in names if n not in namespace]
    assert not missing, f"not in the module: {missing}"
    return namespace, logger


def outcome(func, logger: Recorder, *args) -> tuple:
    """``(kind, value, warnings)``: what ``func(*args)`` returned or raised, and what it logged."""
    logger.warnings.clear()
    try:
        result = ("returned", repr(func(*args)))
    except Exception as e:  # the contract includes which exception, with which message
        result = ("raised", f"{type(e).__name__}: {e}")
    return (*result, list(logger.warnings))
