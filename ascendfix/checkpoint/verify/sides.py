"""Both sides' tensors located on disk, never loaded: a Hugging Face folder from its safetensors headers and index,
a DCP folder from ``.metadata`` and each chunk's ``torch.save`` record (its zip directory, its ``data.pkl``
read through :mod:`ascendfix.checkpoint.pickles`' allow-list, never run).

What is wrong on the way is a :class:`Found` problem (``missing-file``, ``duplicate``, ``truncated``,
``incomplete``), the contract's kinds.
"""

from __future__ import annotations

import json
import math
import os
import stat
import struct
from pathlib import Path
from typing import Any

from ascendfix.checkpoint import bounded, check, layout, pickles, proof, safetensors
from ascendfix.tuples import NamedTuple

DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64", "I32": "int32",
    "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
}  # fmt: skip
_LOCAL = struct.Struct("<4s5H3L2H")


class Found(NamedTuple):
    """One problem: the contract's ``kind``, the ``file``, the tensor on this side and on the other, the
    region, and what is wrong."""

    kind: str
    file: str
    tensor: str
    source_tensor: str
    region: str
    detail: str

    def to_json(self) -> dict:
        """The ``problems`` entry of ``--json``."""
        return self._asdict()


class Piece(NamedTuple):
    """Where bytes lie: ``length`` bytes of ``file`` (relative to its folder) from ``start``."""

    file: str
    start: int
    length: int


ELSEWHERE, NOWHERE = -1, -2  # a Piece's start: in another node's file (ckpt verify --ray), in a file no node holds


class HFTensor(NamedTuple):
    """A safetensors tensor: its dtype (torch's name), shape and bytes."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    bytes: Piece


class Chunk(NamedTuple):
    """One chunk of an mcore tensor: its box in the global shape, and its raw bytes (row-major in the box)."""

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    bytes: Piece


class McTensor(NamedTuple):
    """An mcore global tensor: dtype, global shape, chunks."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    chunks: list[Chunk]


class HFSide(NamedTuple):
    """A Hugging Face folder: its tensors, problems, and the names of tensors held by a missing or cut file."""

    folder: Path
    tensors: dict[str, HFTensor]
    problems: list[Found]
    lost: set[str]


class McSide(NamedTuple):
    """A DCP folder: its tensors, its bytes items, problems, and the tensors whose records could not be read."""

    folder: Path
    tensors: dict[str, McTensor]
    blobs: list[str]
    problems: list[Found]
    lost: set[str]


def is_hf(folder: Path) -> bool:
    """A Hugging Face folder: safetensors and no DCP metadata."""
    names = _names(folder)
    return any(n.endswith(".safetensors") for n in names) and layout.METADATA not in names


def read_hf(folder: Path) -> HFSide:
    """Every tensor of the safetensors files in ``folder``, with the index's missing files, keys held by several
    files and cut files as problems."""
    problems: list[Found] = []
    names = sorted(n for n in _names(folder) if n.endswith(".safetensors"))
    held: dict[str, list[tuple[str, HFTensor]]] = {}
    lost: set[str] = set()
    for name in names:
        bounded.step(name)
        found, header, size = safetensors._file(folder / name, name)
        base = 8 + _header_length(folder / name) if header else 0
        cut = []
        for tensor, info in header.items():
            begin, end = info["data_offsets"]
            if base + end > size:
                cut.append((begin, tensor))
                lost.add(tensor)
                continue
            dtype = DTYPES.get(info["dtype"], info["dtype"])
            held.setdefault(tensor, []).append(
                (name, HFTensor(tensor, dtype, tuple(info["shape"]), Piece(name, base + begin, end - begin)))
            )
        if cut:
            first = min(cut)[1]
            detail = f"{size:,} bytes: cut inside {first} ({len(cut)} tensor(s) cut short); copy it again"
            problems.append(Found("truncated", name, first, "", "", detail))
        elif found:  # no header, a malformed one, or a file longer than its tensors: damaged either way
            problems.append(Found("truncated", name, found[0].item, "", "", found[0].detail))
            lost.update(header)
    index = _index(folder)
    if index is not None:
        for file in sorted(set(index.values()) - set(names)):
            count = sum(1 for v in index.values() if v == file)
            problems.append(Found("missing-file", file, "", "", "", f"missing; the index puts {count} tensor(s) in it"))
            lost.update(t for t, f in index.items() if f == file)
    tensors = {}
    for tensor, copies in held.items():
        if len(copies) > 1:
            problems.append(_duplicate(folder, tensor, copies, index))
        listed = index.get(tensor) if index else None
        tensors[tensor] = next((t for f, t in copies if f == listed), copies[0][1])
    return HFSide(folder, tensors, problems, lost)


def _duplicate(folder: Path, tensor: str, copies: list, index: dict | None) -> Found:
    from ascendfix.checkpoint.verify import compare

    files = [f for f, _ in copies]
    first = copies[0][1]
    same = all(t.bytes.length == first.bytes.length and t.shape == first.shape for _, t in copies[1:]) and all(
        compare.equal_pieces(folder, [first.bytes], folder, [t.bytes]) for _, t in copies[1:]
    )
    listed = f"; the index names {index[tensor]}" if index and tensor in index else ""
    detail = f"in {len(files)} files: {', '.join(files)}; the copies {'are identical' if same else 'differ'}{listed}"
    return Found("duplicate", files[0], tensor, "", "", detail)


def _header_length(path: Path) -> int:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        return int.from_bytes(os.pread(fd, 8, 0), "little")
    finally:
        os.close(fd)


def _index(folder: Path) -> dict[str, str] | None:
    path = folder / safetensors.INDEX
    if not os.path.lexists(path):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return None
            weights = json.loads(f.read(safetensors.MAX_HEADER))["weight_map"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(weights, dict) or not all(isinstance(v, str) and "/" not in v for v in weights.values()):
        return None
    return weights


def read_mcore(folder: Path, metadata: layout.Layout, split: check.Split | None = None) -> McSide:
    """Every tensor of the DCP checkpoint in ``folder`` (``metadata``: its ``.metadata``, as ``ckpt check`` read
    it), each chunk's raw bytes located in its record. With ``split`` (a save split across nodes), only the
    records of this node's files are read: a chunk in another node's file lies :data:`ELSEWHERE`, one in a
    file no node holds :data:`NOWHERE` (that file's ``missing-file`` named by the node that holds the whole
    save's files)."""
    entries = metadata.entries
    where: dict[tuple[str, tuple], int] = {}
    for i, (fqn, offsets) in enumerate(zip(entries.fqns, entries.offsets, strict=True)):
        if offsets is not None:
            where[(fqn, offsets)] = i
    problems: list[Found] = []
    lost: set[str] = set()
    by_file: dict[str, list[tuple[int, str, tuple, tuple, str]]] = {}
    for tensor in metadata.tensors:
        for offsets, sizes in zip(tensor.offsets, tensor.sizes, strict=True):
            at = where.get((tensor.name, offsets))
            if at is not None:
                by_file.setdefault(entries.paths[at], []).append((at, tensor.name, offsets, sizes, tensor.dtype))
    located: dict[tuple[str, tuple], Piece] = {}
    for path, items in sorted(by_file.items()):
        if split is not None and path not in split.files:
            at = ELSEWHERE if path in split.held else NOWHERE
            located.update(((name, offsets), Piece(path, at, 0)) for _, name, offsets, _, _ in items)
            if at == NOWHERE and split.whole:
                detail = f"no node holds it; it holds {len(items)} chunk(s) of {len({i[1] for i in items})} tensor(s)"
                problems.append(Found("missing-file", path, "", "", "", detail))
            continue
        items.sort(key=lambda item: entries.starts[item[0]])
        found = _records(folder, path, items, entries, located)
        problems += found
        lost.update(p.tensor for p in found)
    tensors = {}
    for tensor in metadata.tensors:
        chunks = [
            Chunk(o, s, located[(tensor.name, o)])
            for o, s in zip(tensor.offsets, tensor.sizes, strict=True)
            if (tensor.name, o) in located
        ]
        tensors[tensor.name] = McTensor(tensor.name, tensor.dtype.removeprefix("torch."), tensor.shape, chunks)
    return McSide(folder, tensors, list(metadata.blobs), problems, lost)


def _records(folder: Path, path: str, items: list, entries: layout.Entries, located: dict) -> list[Found]:
    """Locate each chunk's raw bytes in the records of data file ``path`` (``items`` in file order)."""
    bounded.step(path)
    try:
        fd = os.open(folder / path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        return [Found("missing-file", path, items[0][1], "", "", f"cannot open it ({e.strerror})")]
    try:
        size = os.fstat(fd).st_size
        problems = []
        for i, name, offsets, sizes, dtype in items:
            start, length = entries.starts[i], entries.lengths[i]
            region = _box(offsets, sizes)
            if start + length > size:
                detail = f"{size:,} bytes: the chunk's record ends at {start + length:,}; copy it again"
                problems.append(Found("truncated", path, name, "", region, detail))
                break  # every later record is cut too: the first names the cut
            try:
                located[(name, offsets)] = _data(_Ends(fd, start, length), path, start, sizes, dtype)
            except (proof._Wrong, pickles.UnsafePickle, pickles.Unreadable, struct.error) as e:
                problems.append(Found("value-mismatch", path, name, "", region, f"its record cannot be read: {e}"))
        return problems
    finally:
        os.close(fd)


class _Ends(proof._Entry):
    """A record's first and last :data:`_ENDS` bytes, each read once (its local headers, its ``data.pkl``, its
    central directory and end record lie there); any other read goes to the file. Positions are the record's."""

    def __init__(self, fd: int, start: int, length: int):  # no reader: the two ends are its window
        self.fd, self.start, self.length = fd, start, length
        n = min(length, _ENDS)
        self.head = os.pread(fd, n, start)
        self.tail_at = length - n
        self.tail = os.pread(fd, n, start + self.tail_at)
        if len(self.head) != n or len(self.tail) != n:
            raise proof._Wrong("corrupt", "the file ended inside it")

    def read(self, at: int, count: int) -> bytes:
        """``count`` bytes of the record from ``at``."""
        if at < 0 or count < 0 or at + count > self.length:
            raise proof._Wrong("corrupt", f"its zip points outside it (bytes {at:,}-{at + count:,} of {self.length:,})")
        if at + count <= len(self.head):
            return self.head[at : at + count]
        if at >= self.tail_at:
            return self.tail[at - self.tail_at : at - self.tail_at + count]
        data = os.pread(self.fd, count, self.start + at)
        if len(data) != count:
            raise proof._Wrong("corrupt", "the file ended inside it")
        return data


_ENDS = 4096  # a chunk record's zip: about 400 bytes of headers and data.pkl at its start, 400 of directory at its end


def _data(entry: _Ends, path: str, start: int, sizes: tuple, dtype: str) -> Piece:
    """The raw bytes of the one tensor a chunk's ``torch.save`` record holds."""
    records, _ = proof._directory(entry)
    by_name = {r.name: r for r in records}
    pickle = next((r for r in records if r.name.endswith("/data.pkl") and r.name.count("/") == 1), None)
    if pickle is None or pickle.size > proof.MAX_DATA_PICKLE:
        raise proof._Wrong("corrupt", "no data.pkl of one tensor")
    ref = _tensor_ref(entry.read(_data_at(entry, pickle), pickle.size))
    storage = ref.storage
    assert storage is not None  # _tensor_ref refuses a tensor without one
    size: Any = ref.size  # as pickled: torch writes tuples
    stride: Any = ref.stride
    numel = math.prod(sizes)
    held = proof.STORAGE_DTYPES.get(storage.kind, "")
    if ref.offset != 0 or tuple(size) != tuple(sizes) or storage.numel != numel or (dtype and held != dtype):
        raise proof._Wrong("corrupt", f"its data.pkl holds {storage.kind} {list(size)}, not {dtype} {list(sizes)}")
    if tuple(stride) != _strides(sizes):
        raise proof._Wrong("corrupt", "its tensor is not stored row-major")
    member = by_name.get(pickle.name[: -len("data.pkl")] + f"data/{storage.key}")
    if member is None or member.size != numel * storage.itemsize:
        raise proof._Wrong("corrupt", f"no data/{storage.key} record of {numel * storage.itemsize:,} bytes")
    return Piece(path, start + _data_at(entry, member), member.size)


_REFS: dict[bytes, pickles.TensorRef] = {}  # a data.pkl's bytes -> its tensor (chunks of one shape share one)


def _tensor_ref(data: bytes) -> pickles.TensorRef:
    """The one tensor a record's ``data.pkl`` holds (read through the allow-list, never run)."""
    ref = _REFS.get(data)
    if ref is None:
        storages: list = []
        ref = pickles.loads(data, pickles.zip_names(), storages)
        if not isinstance(ref, pickles.TensorRef) or ref.storage is None or len(storages) != 1:
            raise proof._Wrong("corrupt", "its data.pkl holds no single tensor")
        _REFS[data] = ref
    return ref


def _data_at(entry: proof._Entry, record: proof._Record) -> int:
    """Where a zip record's data starts, inside the entry."""
    magic, *_, name_length, extra_length = _LOCAL.unpack(entry.read(record.header, _LOCAL.size))
    if magic != b"PK\x03\x04":
        raise proof._Wrong("corrupt", f"no local header for {record.name}")
    return record.header + _LOCAL.size + name_length + extra_length


def _strides(sizes: tuple) -> tuple:
    strides, step = [], 1
    for n in reversed(sizes):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def _box(offsets: tuple, sizes: tuple) -> str:
    return "[" + ", ".join(f"{o}:{o + s}" for o, s in zip(offsets, sizes, strict=True)) + "]"


def _names(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []
