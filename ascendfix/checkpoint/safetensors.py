"""An mbridge save: HF safetensors files and their index, checked without loading a tensor.

A ``.safetensors`` file is an 8-byte little-endian header length, a JSON header
``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}``, then the data;
each tensor's bytes are ``dtype size x prod(shape)``, the tensors tile the data exactly, and the file
ends where the data does. ``model.safetensors.index.json`` maps each weight to its file.
"""

from __future__ import annotations

import math
import os
import stat
from pathlib import Path

from ascendfix.checkpoint import bounded
from ascendfix.checkpoint.geometry import MAX_EXTENT, MAX_RANK
from ascendfix.checkpoint.report import CheckReport, Problem
from ascendfix.jsonable import loads

INDEX = "model.safetensors.index.json"
MAX_HEADER = 100 << 20  # the format's own limit
_DTYPE_BYTES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4,
    "U16": 2, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "C64": 8,
}  # fmt: skip


def check(folder: Path) -> CheckReport:
    """Every ``.safetensors`` file in ``folder`` (header, sizes) and the index (every weight in its file), read in
    a bounded child (:mod:`ascendfix.checkpoint.bounded`: a time limit per file, a fixed memory limit)."""
    try:
        return CheckReport.from_json(bounded.run(_check_json, [str(folder)], bounded.MEMORY, INDEX))
    except bounded.Died as e:
        return CheckReport(str(folder), 0, 0, 0, 0, [Problem("unreadable", "file", e.subject, e.detail)])


def _check_json(folder: str) -> dict:
    """Inside the bounded child: :func:`_check`'s report as JSON."""
    return _check(Path(folder)).to_json()


def _check(folder: Path) -> CheckReport:
    problems: list[Problem] = []
    held: dict[str, set[str]] = {}
    total = tensors = 0
    names = sorted(n for n in os.listdir(folder) if n.endswith(".safetensors"))
    for name in names:
        bounded.step(name)
        found, header, size = _file(folder / name, name)
        problems += found
        total += size
        held[name] = set(header)
        tensors += len(header)
    bounded.step(INDEX)
    problems += _index(folder, held)
    return CheckReport(str(folder), tensors, tensors, len(names), total, problems)


def _file(path: Path, name: str) -> tuple[list[Problem], dict, int]:
    def bad(detail: str, size: int = 0) -> tuple[list[Problem], dict, int]:
        return [Problem("malformed", "file", name, detail)], {}, size

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        return [Problem("unreadable", "file", name, f"cannot open it ({e.strerror}; a link is not followed)")], {}, 0
    try:
        size = os.fstat(fd).st_size
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return [Problem("unsafe-path", "file", name, "not a plain file: not followed")], {}, 0
        head = os.pread(fd, 8, 0)
        length = int.from_bytes(head, "little") if len(head) == 8 else -1
        if length < 2 or length > MAX_HEADER or 8 + length > size:
            return bad(f"{size:,} bytes: no safetensors header (its length field says {length:,})", size)
        raw = os.pread(fd, length, 8)
    finally:
        os.close(fd)
    try:
        header = loads(raw)
    except ValueError as e:
        return bad(f"its header is not JSON ({str(e)[:80]}; a zero fill or a cut copy?)", size)
    if not isinstance(header, dict):
        return bad("its header is not a JSON object", size)
    header.pop("__metadata__", None)
    spans = []
    for tensor, info in header.items():
        what = _tensor_problem(info)
        if what:
            return [Problem("malformed", "file", name, f"{tensor}: {what}", tensor)], {}, size
        spans.append((*info["data_offsets"], tensor))
    spans.sort()
    reached = 0
    for begin, end, tensor in spans:
        if begin != reached:
            how = "overlaps the one before" if begin < reached else f"leaves bytes {reached:,}-{begin:,} unused"
            return [Problem("malformed", "file", name, f"{tensor}: its data {how}", tensor)], header, size
        reached = end
    if 8 + length + reached != size:
        detail = f"{size:,} bytes, but its header and tensors take {8 + length + reached:,}: truncated or padded"
        return [Problem("truncated", "file", name, detail)], header, size
    return [], header, size


def _tensor_problem(info: object) -> str:
    if not isinstance(info, dict):
        return "not a tensor record"
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if dtype not in _DTYPE_BYTES:
        return f"an unknown dtype {str(dtype)[:20]}"
    if not isinstance(shape, list) or len(shape) > MAX_RANK:
        return f"a shape that is not a list of at most {MAX_RANK} dimensions"
    if any(type(n) is not int or not 0 <= n < MAX_EXTENT for n in shape):
        return "a shape that is not a list of non-negative int64s"
    if not isinstance(offsets, list) or len(offsets) != 2 or any(type(n) is not int for n in offsets):
        return "data_offsets that are not [begin, end]"
    if not 0 <= offsets[0] <= offsets[1]:
        return "data_offsets that run backwards"
    if offsets[1] - offsets[0] != _DTYPE_BYTES[dtype] * math.prod(shape):
        return f"{offsets[1] - offsets[0]:,} bytes for {dtype} {shape}"
    return ""


def _index(folder: Path, held: dict[str, set[str]]) -> list[Problem]:
    path = folder / INDEX
    if not os.path.lexists(path):
        if len(held) > 1:
            return [Problem("missing-file", "file", INDEX, f"missing, with {len(held)} safetensors files")]
        return []
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise ValueError("not a plain file")
            index = loads(f.read(MAX_HEADER))
        weights = index["weight_map"]
        if not isinstance(weights, dict) or not all(isinstance(v, str) for v in weights.values()):
            raise ValueError("weight_map is not {weight: file}")
    except (OSError, ValueError, KeyError, TypeError) as e:
        return [Problem("unreadable", "file", INDEX, f"not a safetensors index ({str(e)[:80]})")]
    problems = []
    for file in sorted(set(weights.values()) - set(held)):
        count = sum(1 for v in weights.values() if v == file)
        problems.append(Problem("missing-file", "file", file, f"missing; the index puts {count} weight(s) in it"))
    absent = [w for w, f in weights.items() if f in held and w not in held[f]]
    if absent:
        more = f" (and {len(absent) - 3} more)" if len(absent) > 3 else ""
        detail = f"the index puts {', '.join(absent[:3])}{more} in files whose headers lack them"
        problems.append(Problem("missing-tensor", "file", INDEX, detail))
    return problems
