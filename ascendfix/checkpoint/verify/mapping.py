"""The reviewed mapping (``mappings/<architecture>.toml``) and the HF config: where each Hugging Face tensor lies
in the Megatron checkpoint.

A rule names an HF tensor (``{layer}``, ``{expert}`` placeholders), the mcore global tensor, the
placeholders that index its leading axes, and a ``place``: how the HF tensor's rows lie in the slab
that index selects (see the TOML files' header). :func:`regions` turns one HF tensor into its
:class:`Region` s: row blocks ``[row, row + rows)`` of the slab, filled from the HF tensor's rows
``[hf_row, hf_row + rows)``; every byte of a tensor's row is contiguous on both sides.
"""

from __future__ import annotations

import fnmatch
import functools
import math
import os
import re
import stat
import sys
from pathlib import Path

from ascendfix import resources
from ascendfix.errors import UsageError
from ascendfix.jsonable import loads
from ascendfix.tuples import NamedTuple

if sys.version_info >= (3, 11):
    import tomllib  # novermin (guarded: Python 3.10 reads tomli, the same parser)
else:  # pragma: no cover - exercised on the container's Python 3.10
    import tomli as tomllib

FILES = {"Qwen3MoeForCausalLM": "qwen3_moe.toml", "Qwen3ForCausalLM": "qwen3.toml"}
PLACES = ("whole", "gate", "up", "qkv.q", "qkv.k", "qkv.v")
_MAX_CONFIG = 1 << 20


class Rule(NamedTuple):
    """One ``[[tensor]]`` of the mapping."""

    hf: str
    mcore: str
    index: tuple[str, ...]  # type: ignore[assignment]  # the field shadows tuple.index; its name is the record's
    place: str
    when: str
    source: str
    pattern: re.Pattern


class Mapping(NamedTuple):
    """A mapping file: its architecture, its rules, the names of the bytes items ignored."""

    architecture: str
    rules: list[Rule]
    ignored: list[str]
    file: str

    def is_ignored(self, name: str) -> bool:
        """Whether the converted side's item ``name`` is ignored by name (``*._extra_state``)."""
        return any(fnmatch.fnmatchcase(name, p) for p in self.ignored)


class Model(NamedTuple):
    """What the mapping needs from ``config.json``."""

    architecture: str
    layers: int
    experts: int
    heads: int
    kv_heads: int
    head_dim: int
    tied: bool


class Region(NamedTuple):
    """Rows ``[row, row + rows)`` of the mcore tensor's slab at ``index``, from the HF tensor's rows from
    ``hf_row``; ``part``: which part of the slab (``gate``, ``qkv group 1 k``; "" for the whole)."""

    hf: str
    mcore: str
    index: tuple[int, ...]  # type: ignore[assignment]  # the field shadows tuple.index; its name is the record's
    row: int
    hf_row: int
    rows: int
    part: str


@functools.cache
def load(architecture: str) -> Mapping:
    """The mapping for ``architecture``, parsed once per process (a child forked after inherits it); UsageError
    naming it when none is bundled (never guessed)."""
    name = FILES.get(architecture)
    if name is None:
        known = ", ".join(sorted(FILES))
        raise UsageError(f"config.json: architecture {architecture!r} has no reviewed mapping (known: {known})")
    path = resources.data_dir("mappings") / name
    data = tomllib.loads(path.read_text())
    rules = []
    for entry in data["tensor"]:
        index = tuple(entry["index"])
        if entry["place"] not in PLACES or any(i not in ("layer", "expert") for i in index):
            raise UsageError(f"{path}: {entry['hf']}: an unknown place or index")
        rules.append(
            Rule(entry["hf"], entry["mcore"], index, entry["place"], entry.get("when", ""), entry["source"],
                 _pattern(entry["hf"]))
        )  # fmt: skip
    return Mapping(data["architecture"], rules, list(data.get("ignored", [])), name)


def _pattern(template: str) -> re.Pattern:
    escaped = re.escape(template).replace(r"\{layer\}", r"(?P<layer>0|[1-9][0-9]*)")
    return re.compile(escaped.replace(r"\{expert\}", r"(?P<expert>0|[1-9][0-9]*)") + r"\Z")


def read_config(path: Path) -> Model:
    """The HF ``config.json`` at ``path``; UsageError (one line) when it cannot be read or lacks a field."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise UsageError(f"{path}: not a plain file")
            config = loads(f.read(_MAX_CONFIG))
    except (OSError, ValueError) as e:
        raise UsageError(f"{path}: cannot read the model's config ({str(e)[:80]})") from None
    if not isinstance(config, dict):
        raise UsageError(f"{path}: not a JSON object")
    names = config.get("architectures")
    if not isinstance(names, list) or len(names) != 1 or not isinstance(names[0], str):
        raise UsageError(f"{path}: architectures should name one model class, it holds {str(names)[:80]}")
    architecture = names[0]
    load(architecture)  # refuse an unknown architecture before anything else

    def number(field: str, default: int | None = None) -> int:
        value = config.get(field, default)
        if type(value) is not int or value < (0 if field == "num_experts" else 1):
            raise UsageError(f"{path}: {field} should be a positive integer, it is {str(value)[:40]}")
        return value

    heads, hidden = number("num_attention_heads"), number("hidden_size")
    head_dim = config.get("head_dim") or hidden // heads
    dense = config.get("mlp_only_layers") or config.get("decoder_sparse_step", 1) != 1
    if architecture == "Qwen3MoeForCausalLM" and dense:
        raise UsageError(f"{path}: mlp_only_layers / decoder_sparse_step: dense layers in a MoE model, "
                         "which verl's converter does not convert")  # fmt: skip
    model = Model(
        architecture,
        number("num_hidden_layers"),
        number("num_experts", 0) if architecture == "Qwen3MoeForCausalLM" else 0,
        heads,
        number("num_key_value_heads", heads),
        number("head_dim", head_dim),
        bool(config.get("tie_word_embeddings", False)),
    )
    if heads % model.kv_heads:
        raise UsageError(f"{path}: num_attention_heads {heads} is not a multiple of num_key_value_heads")
    return model


def expected(mapping: Mapping, model: Model) -> dict[str, Rule]:
    """Every HF tensor name the mapping expects for ``model``, with its rule."""
    names = {}
    for rule in mapping.rules:
        if rule.when == "untied" and model.tied:
            continue
        for layer in range(model.layers) if "layer" in rule.index else [None]:
            for expert in range(model.experts) if "expert" in rule.index else [None]:
                names[rule.hf.format(layer=layer, expert=expert)] = rule
    return names


def index_of(rule: Rule, name: str) -> tuple[int, ...]:
    """The leading indices of the mcore tensor that the HF tensor ``name`` (matching ``rule``) lies at."""
    found = rule.pattern.match(name)
    return tuple(int(found.group(i)) for i in rule.index) if found else ()


def regions(rule: Rule, model: Model, name: str, shape: tuple[int, ...]) -> tuple[list[Region], int]:
    """The regions of HF tensor ``name`` (``shape``) and the slab's row count; UsageError when the config
    disagrees with the shape (the qkv heads)."""
    rows = shape[0] if shape else 1
    at = index_of(rule, name)
    place = rule.place
    if place == "whole":
        return [Region(name, rule.mcore, at, 0, 0, rows, "")], rows
    if place in ("gate", "up"):
        return [Region(name, rule.mcore, at, 0 if place == "gate" else rows, 0, rows, place)], 2 * rows
    groups, dim = model.kv_heads, model.head_dim
    q_rows = model.heads // groups * dim
    want = {"qkv.q": groups * q_rows, "qkv.k": groups * dim, "qkv.v": groups * dim}[place]
    if rows != want:
        what = "num_attention_heads x head_dim" if place == "qkv.q" else "num_key_value_heads x head_dim"
        raise UsageError(f"config.json: {what} is {want}, but {name} has {rows} rows: the config is not this model's")
    stride = q_rows + 2 * dim
    per, skip = (q_rows, 0) if place == "qkv.q" else (dim, q_rows if place == "qkv.k" else q_rows + dim)
    part = place[-1]
    found = [
        Region(name, rule.mcore, at, g * stride + skip, g * per, per, f"qkv group {g} {part}") for g in range(groups)
    ]
    return found, groups * stride


def row_elements(shape: tuple[int, ...]) -> int:
    """Elements in one row of an HF tensor (1 for a vector)."""
    return math.prod(shape[1:]) if shape else 1
