"""A torch.distributed.checkpoint ``.metadata`` file as plain records: tensors, their chunks, and storage entries.

The pickle is read by :mod:`ascendfix.checkpoint.pickles`; what it holds is untrusted, so every
field is checked for its type here and anything else is :class:`Malformed`, naming the item.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from itertools import chain, repeat
from operator import itemgetter
from pathlib import Path
from typing import Any, TypeGuard

from ascendfix.checkpoint import bounded, pickles
from ascendfix.errors import AscendfixError
from ascendfix.tuples import NamedTuple

METADATA = ".metadata"

_DCP = "torch.distributed.checkpoint.metadata"
_METADATA = (_DCP, "Metadata")
_TENSOR = (_DCP, "TensorStorageMetadata")
_BYTES = (_DCP, "BytesStorageMetadata")
_CHUNK = (_DCP, "ChunkStorageMetadata")
_INDEX = (_DCP, "MetadataIndex")
_STORAGE = ("torch.distributed.checkpoint.filesystem", "_StorageInfo")
MCORE_PLAN = ("megatron.core.dist_checkpointing.strategies.torch", "MCoreSavePlan")


class Malformed(AscendfixError):
    """The pickle is readable but does not hold a checkpoint's metadata."""


class Tensor(NamedTuple):
    """One tensor of the checkpoint: its global shape, each chunk's offsets and sizes, and its dtype's name
    (``TensorProperties``; "" when the metadata gives none)."""

    name: str
    shape: tuple[int, ...]
    offsets: list[tuple]
    sizes: list[tuple]
    dtype: str = ""


class Entries(NamedTuple):
    """The storage entries, one column per field: entry ``i`` is the item ``(fqns[i], offsets[i])`` (a tensor
    chunk's offsets, or None for a bytes item), stored in ``paths[i]`` at ``starts[i]`` for ``lengths[i]`` bytes."""

    fqns: list[str]
    offsets: list[tuple | None]
    paths: list[str]
    starts: list[int]
    lengths: list[int]


class Layout(NamedTuple):
    """What ``.metadata`` says: the tensors, the bytes items (pickled objects), every storage entry."""

    tensors: list[Tensor]
    blobs: list[str]
    entries: Entries
    megatron: bool  # it names megatron-core's save plan: a Megatron save (metadata.json, common.pt required)


def read(folder: Path) -> Layout:
    """Read and check ``folder/.metadata``; raises FileNotFoundError when it is not there, pickles' errors, or
    :class:`Malformed`. Opened with :func:`pickles.open_plain` (no symbolic link, no FIFO, at most 1 GiB)."""
    if not os.path.lexists(folder / METADATA):
        raise FileNotFoundError(METADATA)
    fd = pickles.open_plain(folder / METADATA, pickles.MAX_PICKLE_BYTES)
    with os.fdopen(fd, "rb") as f:
        data = f.read()
    return parse(data)


def parse(data: bytes) -> Layout:
    """:func:`read` on bytes already read.

    The chunks and storage entries (tens of thousands) are collected (:func:`pickles.loads_collecting`),
    in the order the pickle built them, which is the order torch's pickler writes the metadata's fields:
    ``state_dict_metadata`` first (each tensor's chunks are the next ``len(chunks)`` chunk states), then
    ``storage_data`` (its entries are the first index and info states, pairwise, in its order). Megatron
    adds its write plans after those, which hold more of both (ignored).

    Inside a bounded child (:mod:`ascendfix.checkpoint.bounded`) a small pickle is not pre-scanned either,
    as a large one never is: the child's limits stop what the scan would refuse (a memo or a nesting that
    takes the loader's memory or stack), and its death is this file's problem; the scan of a 400 kB
    ``.metadata`` took longer than reading a gigabyte of its data files.
    """
    found = pickles.loads_collecting(data, (_CHUNK, _INDEX, _STORAGE), scan=not bounded.inside())
    metadata = found.obj
    tensor_kind, bytes_kind = found.classes[_TENSOR], found.classes[_BYTES]
    if type(metadata) is not found.classes[_METADATA]:
        raise Malformed(f"it holds a {type(metadata).__name__}, not torch's checkpoint Metadata")
    fields = vars(metadata)
    items = fields.get("state_dict_metadata")
    storage = fields.get("storage_data")
    if not isinstance(items, dict):
        raise Malformed("state_dict_metadata is not a dict")
    if not isinstance(storage, dict):
        raise Malformed("storage_data is not a dict (a checkpoint written by another storage writer?)")
    chunk_kind, chunk_states = found.classes[_CHUNK], found.states[_CHUNK]
    tensors, blobs, used = [], [], 0
    for name, item in items.items():
        if not isinstance(name, str):
            raise Malformed(f"an item's name is a {type(name).__name__}, not a string")
        if type(item) is bytes_kind:
            blobs.append(name)
        elif type(item) is tensor_kind:
            tensor, used = _tensor(name, vars(item), chunk_kind, chunk_states, used)
            tensors.append(tensor)
        else:
            raise Malformed(f"{name}: a {type(item).__name__}, neither tensor nor bytes metadata")
    if used > len(chunk_states):
        raise Malformed(f"{len(chunk_states)} chunk records for {used} chunks of the tensors")
    return Layout(tensors, blobs, _entries(storage, found), MCORE_PLAN in found.named)


def _ints(value: object) -> TypeGuard[tuple[int, ...]]:
    return type(value) is tuple and all(type(v) is int for v in value)


def _fields(states: list, names: str, what: str, optional: str = "") -> tuple[list, ...]:
    """Each state's fields ``names`` (and ``optional`` ones, None when absent), one list per field."""
    try:  # a state that is no dict (the pickle's built-ins, the stand-ins) has no str keys: TypeError
        columns = [list(map(itemgetter(name), states)) for name in names.split()]
        return (*columns, *(list(map(dict.get, states, repeat(name))) for name in optional.split()))
    except KeyError as e:
        raise Malformed(f"{what}: a record without its {e} field") from None
    except TypeError:
        raise Malformed(f"{what}: a record whose state is not a dict") from None


def _tensor(name: str, fields: Mapping[str, Any], kind: object, states: list, used: int) -> tuple[Tensor, int]:
    shape, chunks = fields.get("size"), fields.get("chunks")
    if not _ints(shape):
        raise Malformed(f"{name}: its size is not a tuple of ints")
    if type(chunks) is not list or _count(chunks, kind) != len(chunks):
        raise Malformed(f"{name}: its chunks are not a list of chunk metadata")
    offsets, sizes = _fields(states[used : used + len(chunks)], "offsets sizes", name)
    return Tensor(name, shape, offsets, sizes, _dtype(fields.get("properties"))), used + len(chunks)


def _dtype(properties: object) -> str:
    """The dtype's name in a TensorProperties' state: torch pickles ``(dtype, layout, ...)``, a dataclass a dict."""
    state = getattr(properties, "state", None)
    dtype = state[0] if type(state) is tuple and state else state.get("dtype") if type(state) is dict else None
    return str(dtype) if isinstance(dtype, pickles.Dtype) else ""


def _entries(storage: dict, found: pickles.Collected) -> Entries:
    """The entries' columns; Malformed unless each is (name, None or offsets) -> (file, start, length)."""
    index_states, info_states = found.states[_INDEX], found.states[_STORAGE]
    count = len(storage)
    if _count(storage, found.classes[_INDEX]) != count or _count(storage.values(), found.classes[_STORAGE]) != count:
        raise Malformed("storage_data holds something other than (MetadataIndex, _StorageInfo) pairs")
    if count > min(len(index_states), len(info_states)):
        counts = f"{count} storage entries, {len(index_states)} index and {len(info_states)} info records"
        raise Malformed(f"{counts}: they do not pair up")
    index_states, info_states = index_states[:count], info_states[:count]
    fqns, offsets = _fields(index_states, "fqn", "storage_data", optional="offset")
    paths, starts, lengths = _fields(info_states, "relative_path offset length", "storage_data")
    if _count(chain(fqns, paths), str) != 2 * count:
        raise Malformed("storage_data: a name or file that is not a string")
    offset_types = list(map(type, offsets))  # the ints inside: an entry matches a chunk's, or is an orphan
    if offset_types.count(tuple) + offset_types.count(type(None)) != count:
        raise Malformed("storage_data: an offset that is neither a tuple nor None")
    inside = [v for o in offsets if o is not None for v in o]
    if _count(inside, int) != len(inside):
        raise Malformed("storage_data: an offset that is not a tuple of ints")
    if _count(chain(starts, lengths), int) != 2 * count or min(starts, default=0) < 0 or min(lengths, default=0) < 0:
        raise Malformed("storage_data: a start or length that is not a non-negative int")
    return Entries(fqns, offsets, paths, starts, lengths)


def _count(values: Iterable[object], kind: object) -> int:
    """How many of ``values`` are exactly of type ``kind`` (one pass in C, no set)."""
    kinds: list[object] = list(map(type, values))
    return kinds.count(kind)
