"""Megatron's files around the DCP checkpoint, and the HF model's layer and expert counts against its tensors.

``dist_checkpointing.save`` (megatron-core, ``torch_dist`` backend) writes the ``.distcp`` files and
``.metadata`` through torch, ``common.pt`` (``torch.save`` of the state that is not sharded, on rank
0) and, last and only when the whole save finished, ``metadata.json``:
``{"sharded_backend": "torch_dist", "sharded_backend_version": 1, "common_backend": "torch", ...}``.

Tensor names (megatron-core 0.12): ``TransformerBlock`` stacks its layers on a leading axis, so a
layer's weight is one tensor ``decoder.layers.<name>`` of shape ``(layers, ...)``, each layer a chunk
offset along axis 0; with ``non_homogeneous_layers`` each layer is its own tensor
``decoder.layers.<N>.<name>``. The experts (SequentialMLP, GroupedMLP and TEGroupedMLP alike) are
``...mlp.experts.experts.linear_fc1.weight`` and ``linear_fc2.weight`` with the global expert index
as the next axis: Qwen3-235B-A22B's fc1 is ``(94, 128, 3072, 4096)``, chunked per layer, expert and
(the SwiGLU factory) gate/up half: 94 x 128 x 2 = 24,064 chunks.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from ascendfix.checkpoint import bounded, pickles
from ascendfix.checkpoint.layout import Tensor
from ascendfix.checkpoint.report import Problem
from ascendfix.errors import UsageError
from ascendfix.jsonable import loads
from ascendfix.tuples import NamedTuple

CONFIG = "metadata.json"
COMMON = "common.pt"
BACKEND = "torch_dist"
LAYERS = "decoder.layers."
EXPERTS = "mlp.experts.experts."
_MAX_JSON_BYTES = 1 << 20
_MAX_COUNT = 100_000  # layers or experts a config may say (Qwen3-235B-A22B: 94 and 128)
_MAX_DIGITS = 6
_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")  # Qwen3-MoE, Mixtral, DeepSeek


def is_megatron(folder: Path) -> bool:
    """Whether the folder holds Megatron's own files (``metadata.json`` or ``common.pt``)."""
    return (folder / CONFIG).exists() or (folder / COMMON).exists()


def layout_problems(folder: Path, megatron_expected: bool, quick: bool) -> list[Problem]:
    """``metadata.json`` (present, backend ``torch_dist``) and ``common.pt`` (present; unless ``quick``,
    readable: its pickle through the allow-list, each tensor's storage member present and long enough).
    Nothing when the folder is a plain DCP checkpoint and a Megatron one is not expected."""
    if not megatron_expected and not is_megatron(folder):
        return []
    problems = _config_file(folder / CONFIG)
    common = folder / COMMON
    if not os.path.lexists(common):
        problems.append(Problem("missing-file", "file", COMMON, "missing: Megatron's common state (written by rank 0)"))
    elif not quick:
        problems += _common_file(common)
    return problems


def _config_file(path: Path) -> list[Problem]:
    try:
        info = os.lstat(path)
    except OSError:
        detail = "missing: Megatron writes it last, only when the whole save finished"
        return [Problem("incomplete", "file", CONFIG, detail)]
    if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_JSON_BYTES:
        return [Problem("unreadable", "file", CONFIG, "not a plain file of at most 1 MiB")]
    try:
        config = loads(path.read_bytes())
    except (OSError, ValueError) as e:
        return [Problem("unreadable", "file", CONFIG, f"not JSON ({e})")]
    backend = config.get("sharded_backend") if isinstance(config, dict) else None
    if backend != BACKEND:
        shown = json.dumps(backend)[:60]
        detail = f"sharded_backend is {shown}, not {json.dumps(BACKEND)}: this checks torch_dist checkpoints"
        return [Problem("backend", "file", CONFIG, detail)]
    return []


def _common_file(path: Path) -> list[Problem]:
    bounded.note(COMMON)
    try:
        found = pickles.read_torch_zip(path)
    except pickles.UnsafePickle as e:
        return [Problem("unsafe-pickle", "file", COMMON, str(e))]
    except pickles.Unreadable as e:
        return [Problem("unreadable", "file", COMMON, str(e))]
    short = [s for s in found.storages if found.member_sizes.get(s.key, -1) < s.numel * s.itemsize]
    if not short:
        return []
    first = short[0]
    have = found.member_sizes.get(first.key)
    what = "missing" if have is None else f"{have} bytes"
    detail = f"{len(short)} tensor storage(s) short: data/{first.key} is {what}, needs {first.numel * first.itemsize}"
    return [Problem("truncated", "file", COMMON, detail)]


class ModelShape(NamedTuple):
    """What an HF ``config.json`` says the checkpoint must hold."""

    layers: int
    experts: int  # 0: a dense model
    moe_layers: frozenset[int]


def read_config(path: Path) -> ModelShape:
    """The layer and expert counts of an HF ``config.json``; UsageError naming the field when they are not there."""
    try:
        fd = pickles.open_plain(path, _MAX_JSON_BYTES)
        with os.fdopen(fd, "rb") as f:
            config = loads(f.read())
    except pickles.Unreadable as e:
        raise UsageError(f"--config {path}: {e}") from None
    except (OSError, ValueError) as e:
        raise UsageError(f"--config {path}: cannot read it as JSON ({str(e)[:120]})") from None
    if not isinstance(config, dict):
        raise UsageError(f"--config {path}: not a JSON object (give the HF model's config.json)")
    layers = config.get("num_hidden_layers")
    if type(layers) is not int or not 0 < layers <= _MAX_COUNT:
        detail = f"num_hidden_layers must be an integer from 1 to {_MAX_COUNT:,} (an HF config.json has it)"
        raise UsageError(f"--config {path}: {detail}")
    experts = next((config[k] for k in _EXPERT_KEYS if config.get(k) is not None), 0)
    if type(experts) is not int or not 0 <= experts <= _MAX_COUNT:
        keys = ", ".join(_EXPERT_KEYS)
        raise UsageError(f"--config {path}: the expert count ({keys}) must be an integer from 0 to {_MAX_COUNT:,}")
    dense = config.get("mlp_only_layers") or []
    step = config.get("decoder_sparse_step") or 1
    if not isinstance(dense, list) or any(type(i) is not int for i in dense) or type(step) is not int or step < 1:
        raise UsageError(f"--config {path}: mlp_only_layers must be a list of ints, decoder_sparse_step an int >= 1")
    moe = frozenset(i for i in range(layers) if experts and i not in dense and (i + 1) % step == 0)
    return ModelShape(layers, experts, moe)


def config_problems(tensors: list[Tensor], model: ModelShape) -> list[Problem]:
    """Layers and experts the config has that no tensor (or chunk) of the checkpoint holds, and shapes that differ."""
    problems: list[Problem] = []
    layers_seen: set[int] = set()
    expert_tensors = 0
    for tensor in tensors:
        if not tensor.name.startswith(LAYERS):
            continue
        head, _, rest = tensor.name[len(LAYERS) :].partition(".")
        number = _layer_number(head)
        stacked = number is None
        is_expert = (tensor.name[len(LAYERS) :] if stacked else rest).startswith(EXPERTS)
        expert_tensors += is_expert
        axis = 1 if stacked else 0  # the expert axis
        if stacked and (not tensor.shape or tensor.shape[0] != model.layers):
            got = tensor.shape[0] if tensor.shape else 0
            problems.append(Problem("shape", "tensor", tensor.name, f"{got} layers; the config has {model.layers}"))
            layers_seen |= _covered(tensor, 0)
            continue
        if number is not None:
            layers_seen.add(number)
        if is_expert and (len(tensor.shape) <= axis or tensor.shape[axis] != model.experts):
            got = tensor.shape[axis] if len(tensor.shape) > axis else 0
            problems.append(Problem("shape", "tensor", tensor.name, f"{got} experts; the config has {model.experts}"))
            continue
        if stacked:
            covered = _covered(tensor, 0)
            layers_seen |= covered
            missing = set(range(model.layers)) - covered
            if missing:
                detail = f"no chunk for layer(s) {_ranges(missing)} of {model.layers}"
                problems.append(Problem("missing-layer", "tensor", tensor.name, detail))
        if is_expert:
            problems += _missing_experts(tensor, model, number)
    beyond = {n for n in layers_seen if n >= model.layers}
    if beyond:
        detail = f"layer(s) {_ranges(beyond)} beyond the config's {model.layers}"
        problems.append(Problem("shape", "tensor", LAYERS.rstrip("."), detail))
    missing = set(range(model.layers)) - layers_seen
    if missing:
        detail = f"no tensor of layer(s) {_ranges(missing)} of the config's {model.layers}"
        problems.append(Problem("missing-layer", "tensor", LAYERS.rstrip("."), detail))
    if model.moe_layers and not expert_tensors:
        detail = f"no {LAYERS}*{EXPERTS}* tensor; the config has {model.experts} experts"
        problems.append(Problem("missing-expert", "tensor", LAYERS.rstrip("."), detail))
    return problems


def _layer_number(head: str) -> int | None:
    """``decoder.layers.<N>.``'s N (ASCII digits, a few of them), or None: a stacked tensor's name."""
    return int(head) if head.isascii() and head.isdigit() and len(head) <= _MAX_DIGITS else None


def _span(start: int, size: int, limit: int) -> range:
    """``range(start, start + size)`` clipped to ``[0, limit]``: a chunk's numbers are untrusted."""
    return range(max(0, min(start, limit)), max(0, min(start + size, limit)))


def _covered(tensor: Tensor, axis: int) -> set[int]:
    covered: set[int] = set()
    limit = _MAX_COUNT + 1
    for offsets, sizes in zip(tensor.offsets, tensor.sizes, strict=True):
        if len(offsets) > axis and len(sizes) > axis:
            covered.update(_span(offsets[axis], sizes[axis], limit))
    return covered


def _missing_experts(tensor: Tensor, model: ModelShape, layer: int | None) -> list[Problem]:
    """Per MoE layer, the experts no chunk holds; layers missing the same experts share one line."""
    held: dict[int, set[int]] = {}
    for offsets, sizes in zip(tensor.offsets, tensor.sizes, strict=True):
        if layer is None:
            for n in _span(offsets[0], sizes[0], model.layers):
                held.setdefault(n, set()).update(_span(offsets[1], sizes[1], model.experts))
        else:
            held.setdefault(layer, set()).update(_span(offsets[0], sizes[0], model.experts))
    wanted = sorted(model.moe_layers) if layer is None else [layer] if layer in model.moe_layers else []
    by_gap: dict[tuple[int, ...], set[int]] = {}
    for n in wanted:
        gap = tuple(sorted(set(range(model.experts)) - held.get(n, set())))
        if gap:
            by_gap.setdefault(gap, set()).add(n)
    ordered = sorted(by_gap.items(), key=lambda item: min(item[1]))
    detail = "layer(s) {}: no chunk for expert(s) {}"
    return [Problem("missing-expert", "tensor", tensor.name, detail.format(_ranges(n), _ranges(g))) for g, n in ordered]


def _ranges(numbers: Iterable[int]) -> str:
    """``0-3, 7, 9-10``."""
    ordered, spans = sorted(numbers), list[list[int]]()
    for n in ordered:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in spans)
