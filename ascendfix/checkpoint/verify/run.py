"""``ckpt verify SOURCE CONVERTED``: the direction told from the formats, ``ckpt check`` of the Megatron side first,
then the bijection proven on bytes.

Every HF tensor the mapping expects (:func:`mapping.expected`) is cut into its regions; each region
is intersected with the chunks of its mcore tensor into runs (a run: bytes contiguous on both
sides); the runs are compared in the converted side's file order (:mod:`compare`). A region that
differs is then compared with the source bytes of the regions of the same size (the same layer's
other parts and experts first) to say whose bytes it holds.
"""

from __future__ import annotations

import os
import re
import struct
import threading
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ascendfix.checkpoint import bounded, check, layout, verl
from ascendfix.checkpoint.report import Problem
from ascendfix.checkpoint.verify import compare, mapping, sides
from ascendfix.checkpoint.verify.sides import Found, Piece
from ascendfix.errors import AscendfixError, UsageError
from ascendfix.tuples import NamedTuple

CONVERTER, MERGER = "hf-to-mcore", "mcore-to-hf"
MEGATRON_METADATA = "metadata.json"
_DIAGNOSED = 16  # mismatched regions whose bytes are looked for elsewhere
_CANDIDATES = 64  # source regions tried for each
_EXPERT_KEYS = re.compile(r"\.experts\.(gate_proj|up_proj|down_proj)\.weight\d+\Z")
_FORMATS = {"bfloat16": ">H", "float16": "<e", "float32": "<f"}


class VerifyReport(NamedTuple):
    """What ``ckpt verify`` proved: the source tensors and bytes proven, the items ignored, the problems."""

    source: str
    converted: str
    direction: str
    architecture: str
    tensors: int
    proven_bytes: int
    ignored: list[str]
    problems: list[Found]

    @property
    def ok(self) -> bool:
        """Proven: no problem."""
        return not self.problems

    def to_json(self) -> dict:
        """The ``--json`` answer."""
        data = self._asdict()
        data["ok"] = self.ok
        data["problems"] = [p.to_json() for p in self.problems]
        return data

    @classmethod
    def from_json(cls, data: dict) -> VerifyReport:
        """The report :meth:`to_json` made."""
        fields = {k: data[k] for k in cls._fields}
        return cls(**{**fields, "problems": [Found(**p) for p in data["problems"]]})


class _Run(NamedTuple):
    region: int  # index into the regions
    at: int  # the run's first byte within its region
    hf: Piece
    mc: Piece
    chunk: tuple


def verify(source: Path, converted: Path) -> VerifyReport:
    """Prove ``converted`` holds exactly the weights of ``source`` (see the module doc). UsageError on bad input.

    The folders, the direction, the config and the mapping are settled here; everything that reads the
    checkpoints' files (``ckpt check``, the headers, the records, the bytes) runs in one bounded child
    (:mod:`ascendfix.checkpoint.bounded`, with ``ckpt check``'s limits: address space, where its threads'
    stacks and malloc arenas count too, and time per step): a file that takes more is its ``unreadable``
    problem, in one line."""
    return VerifyReport.from_json(verify_part(source, converted, None))


def verify_part(source: Path, converted: Path, part: tuple[int, int] | None, split: check.Split | None = None) -> dict:
    """:func:`verify`'s report as JSON, with ``failed`` (the source tensors whose bytes differ or were cut);
    with ``part`` ``(i, n)`` only share ``i`` of ``n`` of the byte comparisons is made (the runs, in the
    converted side's file order, cut into ``n`` shares of about equal bytes): ``ckpt verify --ray``'s nodes
    that see the same files each make one share. With ``split`` (a Megatron save split across the nodes'
    disks, :class:`check.Split`), only the runs whose Megatron chunk lies in this node's files; a source
    tensor with bytes in a file no node holds is not proven, and counts as neither proven nor failed."""
    direction, hf_folder, mc_given = folders(source, converted)
    located = verl.locate(mc_given)
    config = hf_folder / "config.json"
    if not os.path.isfile(config) and located.config is not None:
        config = located.config
    model = mapping.read_config(config)
    base = VerifyReport(str(source), str(converted), direction, model.architecture, 0, 0, [], [])
    mc_folder = located.folder
    needed = (layout.METADATA, MEGATRON_METADATA) if split is None or split.whole else ()  # else: another node's
    missing = [n for n in needed if not os.path.lexists(mc_folder / n)]
    if missing:
        if mc_given == source and not os.listdir(mc_folder):
            raise UsageError(f"{mc_folder}: empty: SOURCE should be the Megatron checkpoint to merge")
        what = "an empty folder" if not os.listdir(mc_folder) else f"no {' and no '.join(missing)}"
        detail = f"{what}: a conversion that did not finish; re-run the conversion into an empty folder"
        if direction == CONVERTER:
            detail += " (verl's converter skips a folder that is not empty)"
        return _with_failed(base._replace(problems=[Found("incomplete", str(mc_folder), "", "", "", detail)]))
    shared = None if split is None else split.as_args()
    args = [str(source), str(converted), direction, str(hf_folder), str(mc_given), list(model), part, shared]
    try:
        return bounded.run(_verify_json, args, bounded.MEMORY, layout.METADATA)
    except bounded.Died as e:
        return _with_failed(base._replace(problems=[Found("unreadable", e.subject, "", "", "", e.detail)]))
    except bounded.Failed as e:
        raise (UsageError if e.exit_code == 2 else AscendfixError)(str(e)) from None


def folders(source: Path, converted: Path) -> tuple[str, Path, Path]:
    """The direction, the Hugging Face folder and the Megatron side as given, told from the formats; UsageError
    when either is not a folder or neither (or both) is a Hugging Face folder."""
    for given, what in ((source, "SOURCE"), (converted, "CONVERTED")):
        if not given.is_dir():
            raise UsageError(f"{given}: not a folder ({what}: a Hugging Face folder or a Megatron checkpoint)")
    if sides.is_hf(source):
        if sides.is_hf(converted):
            raise UsageError(f"{converted}: Hugging Face safetensors too: CONVERTED should be the Megatron checkpoint")
        return CONVERTER, source, converted
    if sides.is_hf(converted):
        return MERGER, converted, source
    raise UsageError(f"{source}: no *.safetensors here or in {converted}: one side should be a Hugging Face folder")


def _verify_json(
    source: str,
    converted: str,
    direction: str,
    hf: str,
    mc_given: str,
    fields: list,
    part: list | None,
    shared: list | None,
) -> dict:
    """Inside the bounded child: ``ckpt check`` of the Megatron side (its ``.metadata`` read once, here), then
    the bijection; the report's JSON (``fields``: the :class:`mapping.Model`'s) with ``failed``. ``shared``:
    the :class:`check.Split`'s JSON, or None."""
    model = mapping.Model(*fields)
    base = VerifyReport(source, converted, direction, model.architecture, 0, 0, [], [])
    located = verl.locate(Path(mc_given))
    split = None if shared is None else check.Split.from_args(shared)
    report, metadata = check.checked(located.folder, verl.config_model(located), split=split)
    problems = verl.in_save(located, report).problems
    if problems or metadata is None:
        return _with_failed(base._replace(problems=[_checked(p) for p in problems]))
    try:
        hf_side = sides.read_hf(Path(hf))
        mc_side = sides.read_mcore(located.folder, metadata, split)
        rules = mapping.load(model.architecture)
        proof = _Verify(direction, model, rules, hf_side, mc_side, None if part is None else (part[0], part[1]))
        return _with_failed(proof.report(base), proof.failed)
    except OSError as e:  # a file changed under the check (removed, made a link or a FIFO)
        raise AscendfixError(f"{e.filename or located.folder}: {e.strerror or e} (did the files change?)") from None


def _with_failed(report: VerifyReport, failed: set[str] | None = None) -> dict:
    return {**report.to_json(), "failed": sorted(failed or ())}


def _checked(problem: Problem) -> Found:
    """One of ``ckpt check``'s problems, as this report's (its kind is ``ckpt check``'s)."""
    file = problem.subject if problem.about == "file" else ""
    tensor = problem.item or (problem.subject if problem.about == "tensor" else "")
    region = "" if problem.offsets is None else f"chunk at {list(problem.offsets)}"
    return Found(problem.kind, file, tensor, "", region, f"ckpt check: {problem.detail}")


class _Verify:
    def __init__(
        self,
        direction: str,
        model: mapping.Model,
        rules: mapping.Mapping,
        hf: sides.HFSide,
        mc: sides.McSide,
        part: tuple[int, int] | None = None,
    ):
        self.direction, self.model, self.rules, self.hf, self.mc = direction, model, rules, hf, mc
        self.part = part  # (i, n): only share i of n of the runs is compared
        self.failed: set[str] = set()  # source tensors, every byte with a place, whose bytes differ or were cut
        self.problems: list[Found] = list(hf.problems) + list(mc.problems)
        self.regions: list[mapping.Region] = []
        self.runs: list[_Run] = []
        self.itemsize: dict[str, int] = {}
        self._expected_shape: dict[str, tuple] = {}  # mcore name: (shape, dtype, first HF tensor mapped to it)
        self._uncovered: set[str] = set()  # HF tensors not every byte of which has a place to be compared
        self._unread: list[_Run] = []
        self._by_region: dict[int, list[_Run]] = defaultdict(list)
        self._chunk_index: dict[tuple, tuple[dict, list]] = {}  # (mcore name, depth): chunks by index, wide ones
        self.differ: dict[int, list] = {}  # region: [first, last differing byte, chunk, source bytes, converted]
        self._lock = threading.Lock()

    @property
    def converter(self) -> bool:
        return self.direction == CONVERTER

    def report(self, base: VerifyReport) -> VerifyReport:
        bounded.step(layout.METADATA)  # the mapping against the metadata's tensors
        expected = mapping.expected(self.rules, self.model)
        targeted: dict[str, list[int]] = defaultdict(list)
        for name, rule in expected.items():
            tensor = self.hf.tensors.get(name)
            if tensor is None:
                if name not in self.hf.lost:
                    self._missing_hf(name, rule)
                continue
            found, slab = mapping.regions(rule, self.model, name, tensor.shape)
            for region in found:
                targeted[rule.mcore].append(len(self.regions))
                self.regions.append(region)
            self._slab(rule, tensor, slab)
        for name in sorted(set(self.hf.tensors) - set(expected)):
            self._unexpected_hf(name)
        ignored = sorted({b.split("/", 1)[0] for b in self.mc.blobs if self.rules.is_ignored(b)})
        for name in sorted(b for b in self.mc.blobs if not self.rules.is_ignored(b)):
            self._add("unexpected-tensor", self._mc_file(name), name, "", "", "a bytes item no mapping rule names")
        for name in sorted(set(self.mc.tensors) - {rule.mcore for rule in expected.values()}):
            self._add("unexpected-tensor", self._mc_file(name), name, "", "", "no mapping rule puts a tensor here")
        bad_shapes = {name for name in targeted if self._shape_problem(name, targeted[name])}
        for name, indices in targeted.items():
            if name in bad_shapes or name in self.mc.lost:
                continue
            if name not in self.mc.tensors:
                self._missing_mc(name, indices)
                continue
            for i in indices:
                self._cut(i)
        mismatched, proven = self._compare()
        self._diagnose(mismatched)
        failed = {self.regions[i].hf for i in mismatched} | {self.regions[r.region].hf for r in self._unread}
        unreached = {self.regions[r.region].hf for r in self.runs if r.mc.start == sides.NOWHERE}
        self.failed = failed - self._uncovered - unreached
        done = {r.hf for r in self.regions} - failed - self._uncovered - unreached
        return base._replace(
            tensors=len(done), proven_bytes=proven, ignored=ignored, problems=sorted(self.problems, key=order)
        )

    # the mapping against both sides' names and shapes

    def _add(self, kind: str, file: str, tensor: str, source_tensor: str, region: str, detail: str) -> None:
        self.problems.append(Found(kind, file, tensor, source_tensor, region, detail))

    def _missing_hf(self, name: str, rule: mapping.Rule) -> None:
        if self.converter:
            detail = f"the source folder has no {name}, which the mapping expects (config.json's counts)"
            self._add("missing-tensor", "", name, name, "", detail)
        else:
            self._add("missing-tensor", "", name, rule.mcore, "", f"not in the converted folder; {rule.mcore} holds it")

    def _unexpected_hf(self, name: str) -> None:
        tensor = self.hf.tensors[name]
        if _EXPERT_KEYS.search(name):
            detail = "expert keys named `experts.<proj>.weight<N>`: the merger's expert rename did not run"
        elif "lora_" in name:
            detail = "a LoRA adapter's tensor: LoRA not merged into the weights"
        else:
            detail = f"no mapping rule ({self.rules.file}) names it"
        self._add("unexpected-tensor", tensor.bytes.file, name, "", "", detail)

    def _mc_file(self, name: str) -> str:
        tensor = self.mc.tensors.get(name)
        return tensor.chunks[0].bytes.file if tensor is not None and tensor.chunks else ""

    def _slab(self, rule: mapping.Rule, tensor: sides.HFTensor, slab: int) -> None:
        sizes = {"layer": self.model.layers, "expert": self.model.experts}
        shape = tuple(sizes[i] for i in rule.index) + (slab, *tensor.shape[1:])
        known = self._expected_shape.setdefault(rule.mcore, (shape, tensor.dtype, tensor.name))
        if known[0] != shape:
            raise UsageError(f"{tensor.name}: shape {list(tensor.shape)} disagrees with {known[2]}'s for {rule.mcore}")

    def _shape_problem(self, name: str, indices: list[int]) -> bool:
        tensor = self.mc.tensors.get(name)
        shape, dtype, first = self._expected_shape[name]
        if tensor is None:
            return False
        if tensor.dtype and tensor.dtype != dtype:
            detail = f"{tensor.dtype}, the source {dtype}: no rule declares a dtype change"
            self._add("value-mismatch", self._mc_file(name), *self._names(name, first), "", detail)
            return True
        if tuple(tensor.shape) != shape:
            detail = f"shape {list(tensor.shape)}; the source tensors, mapped, make {list(shape)}"
            self._add("value-mismatch", self._mc_file(name), *self._names(name, first), "", detail)
            return True
        self.itemsize[name] = _ITEMSIZE.get(dtype, 1)
        return False

    def _names(self, mcore: str, hf: str) -> tuple[str, str]:
        """(tensor, source_tensor): the converted side's name first."""
        return (mcore, hf) if self.converter else (hf, mcore)

    def _missing_mc(self, name: str, indices: list[int]) -> None:
        first = self.regions[indices[0]].hf
        if self.converter:
            detail = f"not in the converted checkpoint ({len(indices)} source region(s) map to it)"
            self._add("missing-tensor", "", name, first, "", detail)
        else:
            self._add("missing-tensor", "", name, first, "", "the source checkpoint lacks it")
        self._uncovered.update(self.regions[i].hf for i in indices)

    # regions into runs

    def _chunks_at(self, mc: sides.McTensor, index: tuple[int, ...]) -> list[sides.Chunk]:
        """The chunks of ``mc`` that may hold its slab at ``index``: those one index wide there (found by their
        offsets), and every wider one."""
        key = (mc.name, len(index))
        found = self._chunk_index.get(key)
        if found is None:
            found = self._chunk_index[key] = (defaultdict(list), [])
            for chunk in mc.chunks:
                if all(n == 1 for n in chunk.sizes[: len(index)]):
                    found[0][chunk.offsets[: len(index)]].append(chunk)
                else:
                    found[1].append(chunk)
        return found[0].get(index, []) + found[1]

    def _cut(self, i: int) -> None:
        """The runs of region ``i``: its rows intersected with each chunk of its mcore tensor."""
        region = self.regions[i]
        hf = self.hf.tensors[region.hf]
        mc = self.mc.tensors[region.mcore]
        k = len(region.index)
        item = self.itemsize[region.mcore]
        row_bytes = mapping.row_elements(hf.shape) * item
        covered = 0
        for chunk in self._chunks_at(mc, region.index):
            o, s = chunk.offsets, chunk.sizes
            if any(not o[j] <= region.index[j] < o[j] + s[j] for j in range(k)):
                continue
            lo, hi = max(region.row, o[k]), min(region.row + region.rows, o[k] + s[k])
            if lo >= hi:
                continue
            if any(o[j] != 0 or s[j] != mc.shape[j] for j in range(k + 1, len(mc.shape))):
                detail = f"a chunk holds part of each row (offsets {list(o)}, sizes {list(s)})"
                raise UsageError(f"{chunk.bytes.file}: {region.mcore}: {detail}: saved at tensor parallel > 1, which "
                                 "ckpt verify refuses (it proves saves at tensor parallel 1, as verl's converter "
                                 "writes them)")  # fmt: skip
            local = [region.index[j] - o[j] for j in range(k)] + [lo - o[k]]
            flat = sum(a * b for a, b in zip(local, _strides(s)[: k + 1], strict=True))
            length = (hi - lo) * row_bytes
            at = (lo - region.row) * row_bytes
            hf_piece = Piece(hf.bytes.file, hf.bytes.start + region.hf_row * row_bytes + at, length)
            at_mc = chunk.bytes.start + flat * item if _here(chunk.bytes) else chunk.bytes.start  # else: its mark
            mc_piece = Piece(chunk.bytes.file, at_mc, length)
            self.runs.append(_Run(i, at, hf_piece, mc_piece, o))
            covered += length
        if covered != region.rows * row_bytes:
            where = _where(region)
            detail = f"{covered:,} of its {region.rows * row_bytes:,} bytes lie in the checkpoint's chunks"
            self._add("missing-tensor", self._mc_file(region.mcore), *self._names(region.mcore, region.hf), where,
                      detail)  # fmt: skip
            self._uncovered.add(region.hf)

    # the bytes

    def _compare(self) -> tuple[set[int], int]:
        """Every run compared (with a part, that part's share of them), in the converted side's file order cut
        into :data:`compare.READERS` shares of about equal bytes, each share by a thread of its own (reads and
        ``memcmp`` release the GIL); the regions that differ (their first and last differing bytes noted) and
        the bytes proven."""
        key = (lambda r: (r.mc.file, r.mc.start)) if self.converter else (lambda r: (r.hf.file, r.hf.start))
        runs = sorted((r for r in self.runs if _here(r.mc)), key=key)  # with a split save: this node's
        if self.part is not None:
            parts = compare.shares(runs, lambda r: r.hf.length, self.part[1])
            runs = parts[self.part[0]] if self.part[0] < len(parts) else []
        shares = compare.shares(runs, lambda r: r.hf.length, compare.READERS)
        with ThreadPoolExecutor(len(shares) or 1) as pool:
            proven = sum(pool.map(self._compare_share, shares))
        return set(self.differ), proven

    def _compare_share(self, runs: list[_Run]) -> int:
        """The runs ``runs``, each compared block by block through this thread's own two windows; the bytes proven."""
        hf_files, mc_files = compare.Files(self.hf.folder), compare.Files(self.mc.folder)
        hf_window, mc_window = compare.Window(hf_files), compare.Window(mc_files)
        proven, reading = 0, None
        try:
            for run in runs:
                converted = run.mc if self.converter else run.hf
                if converted.file != reading:
                    reading = converted.file
                    bounded.step(reading)
                done = 0
                while done < run.hf.length:
                    n = min(compare.BLOCK, run.hf.length - done)
                    a = hf_window.get(run.hf.file, run.hf.start + done, n)
                    b = mc_window.get(run.mc.file, run.mc.start + done, n)
                    if len(a) != n or len(b) != n:
                        self._unread.append(run)
                        file = (run.mc if len(b) != n else run.hf).file
                        where = _where(self.regions[run.region])
                        self._add("truncated", file, *self._run_names(run), where, "the file ends inside its bytes")
                        break
                    if compare.same(a, b):
                        proven += n
                    else:
                        self._note(run, done, a, b)
                    done += n
        finally:
            for closing in (hf_window, mc_window, hf_files, mc_files):
                closing.close()
        return proven

    def _run_names(self, run: _Run) -> tuple[str, str]:
        region = self.regions[run.region]
        return self._names(region.mcore, region.hf)

    def _note(self, run: _Run, done: int, a: memoryview, b: memoryview) -> None:
        region = self.regions[run.region]
        item = self.itemsize[region.mcore]
        first, last = compare.first_difference(a, b), compare.last_difference(a, b)
        start = first - first % item
        src, dst = (a, b) if self.converter else (b, a)
        found = (run.at + done + first, run.at + done + last, run.chunk, bytes(src[start : start + item]),
                 bytes(dst[start : start + item]))  # fmt: skip
        with self._lock:  # a region's runs may lie in two threads' shares
            known = self.differ.get(run.region)
            if known is None:
                self.differ[run.region] = list(found)
                return
            if found[0] < known[0]:
                known[2:] = found[2:]
            known[0], known[1] = min(known[0], found[0]), max(known[1], found[1])

    def _diagnose(self, mismatched: set[int]) -> None:
        by_size: dict[int, list[int]] = defaultdict(list)
        for i, region in enumerate(self.regions):
            by_size[self._bytes(region)].append(i)
        for n, i in enumerate(sorted(mismatched)):
            region = self.regions[i]
            first, last, chunk, src, dst = self.differ[i]
            item = self.itemsize[region.mcore]
            row_elements = mapping.row_elements(self.hf.tensors[region.hf].shape)
            lo, hi = first // item, last // item
            detail = (
                f"chunk at {list(chunk)}: elements {lo:,}-{hi:,} of the region differ; the first, element "
                f"{_coordinate(region, lo, row_elements)}, is {_value(dst, self.mc.tensors[region.mcore].dtype)} "
                f"where the source has {_value(src, self.mc.tensors[region.mcore].dtype)}"
            )
            if n < _DIAGNOSED:
                holder = self._holder(i, by_size[self._bytes(region)])
                if holder is not None:
                    detail = f"{_holds(region, self.regions[holder])}; {detail}"
            pieces = self._converted_pieces(i)
            file = pieces[0].file if pieces else ""
            self._add("value-mismatch", file, *self._names(region.mcore, region.hf), _where(region), detail)

    def _bytes(self, region: mapping.Region) -> int:
        return region.rows * mapping.row_elements(self.hf.tensors[region.hf].shape) * self.itemsize.get(region.mcore, 1)

    def _region_runs(self, i: int) -> list[_Run]:
        """Region ``i``'s runs, in its byte order."""
        if not self._by_region:
            for run in self.runs:
                self._by_region[run.region].append(run)
            for runs in self._by_region.values():
                runs.sort(key=lambda r: r.at)
        return self._by_region.get(i, [])

    def _converted_pieces(self, i: int) -> list[Piece]:
        return [r.mc if self.converter else r.hf for r in self._region_runs(i)]

    def _source_pieces(self, i: int) -> list[Piece]:
        return [r.hf if self.converter else r.mc for r in self._region_runs(i)]

    def _holder(self, i: int, same_size: list[int]) -> int | None:
        """The region whose source bytes region ``i``'s converted bytes equal: the same layer's first."""
        region = self.regions[i]
        ranked = sorted((j for j in same_size if j != i), key=lambda j: _distance(region, self.regions[j]))
        converted = self._converted_pieces(i)
        src_folder, dst_folder = (
            (self.hf.folder, self.mc.folder) if self.converter else (self.mc.folder, self.hf.folder)
        )
        if not all(map(_here, converted)):
            return None
        for j in ranked[:_CANDIDATES]:
            source = self._source_pieces(j)
            if all(map(_here, source)) and compare.equal_pieces(dst_folder, converted, src_folder, source):
                return j
        return None


_ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2, "int8": 1,
             "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1}  # fmt: skip


def order(problem: Found) -> tuple:
    """Where a problem sorts in a report: by kind (the order of :data:`_KINDS`), then file and tensor."""
    return (_KINDS.index(problem.kind) if problem.kind in _KINDS else len(_KINDS), problem.file, problem.tensor)


_KINDS = [
    "incomplete",
    "missing-file",
    "truncated",
    "duplicate",
    "missing-tensor",
    "unexpected-tensor",
    "value-mismatch",
]


def _here(piece: Piece) -> bool:
    """Bytes this node reads (not another node's file of a split save, nor a file no node holds)."""
    return piece.start >= 0


def _strides(sizes: tuple) -> list[int]:
    strides, step = [], 1
    for n in reversed(sizes):
        strides.append(step)
        step *= n
    return list(reversed(strides))


def _where(region: mapping.Region) -> str:
    """The region in the mcore tensor's coordinates: ``[layer, expert, rows lo:hi, :]``."""
    index = ", ".join(map(str, region.index))
    rows = f"{region.row}:{region.row + region.rows}"
    part = f" ({region.part})" if region.part else ""
    return f"{region.mcore}[{index + ', ' if index else ''}{rows}]{part}"


def _coordinate(region: mapping.Region, element: int, row_elements: int) -> str:
    row, column = divmod(element, row_elements)
    at = [*region.index, region.row + row] + ([column] if row_elements > 1 else [])
    return "[" + ", ".join(map(str, at)) + "]"


def _value(data: bytes, dtype: str) -> str:
    form = _FORMATS.get(dtype)
    if form is None or len(data) != struct.calcsize(form):
        return data.hex()
    if dtype == "bfloat16":
        return (
            f"{struct.unpack('<f', (int.from_bytes(data, 'little') << 16).to_bytes(4, 'little'))[0]!r} ({data.hex()})"
        )
    return f"{struct.unpack(form, data)[0]!r} ({data.hex()})"


def _distance(a: mapping.Region, b: mapping.Region) -> tuple:
    """Candidates first: the same mcore tensor at the same index, then the same layer, then the rest."""
    return (a.mcore != b.mcore, a.index != b.index, a.index[:1] != b.index[:1], b.hf)


_EXPERT = re.compile(r"\.experts\.(\d+)\.")


def _holds(region: mapping.Region, holder: mapping.Region) -> str:
    """``expert 5 holds expert 6's bytes``, ``holds `up_proj`'s bytes``, ``equals `model.embed_tokens.weight```."""
    mine, theirs = _EXPERT.search(region.hf), _EXPERT.search(holder.hf)
    same_place = _EXPERT.sub(".experts.N.", region.hf) == _EXPERT.sub(".experts.N.", holder.hf)
    if mine and theirs and same_place and region.part == holder.part:
        return f"expert {mine.group(1)} holds expert {theirs.group(1)}'s bytes (`{holder.hf}`)"
    if region.mcore == holder.mcore and region.index == holder.index:
        part = holder.hf.rsplit(".", 2)[-2]
        group = f" {holder.part}" if holder.part.startswith("qkv") else ""
        return f"holds `{part}`'s bytes{group} (`{holder.hf}`)"
    if not holder.part:
        return f"equals `{holder.hf}`"
    return f"holds the bytes of `{holder.hf}` ({holder.part})"
