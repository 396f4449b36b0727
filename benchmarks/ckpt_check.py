"""``ascendfix ckpt check`` against torch's own ``FileSystemReader(d).read_metadata()``, side by side, in one run.

The checkpoints are written here with torch's own metadata classes (a ``.metadata`` that torch
itself reads) and sparse data files of the right sizes, each record's zip frame (its local header's magic and its end
record) written at its entry's ends, where ``ckpt check`` reads them:

- the expert tensor alone: Qwen3-235B-A22B's ``decoder.layers.mlp.experts.experts.linear_fc1.weight``,
  (94, 128, 3072, 4096) bf16, one chunk per layer, expert and gate/up half: 94 x 128 x 2 = 24,064
  chunks, over 128 files (one per rank of TP4 PP8 EP4);
- the whole checkpoint: every tensor of benchmarks/dcp_validation.py's layout (the same chunks).

torch only unpickles (a bare ``pickle.load``); ``ckpt check`` reads the same file without running it
and checks everything: each tensor's bounds, overlaps and exact cover, every chunk's storage entry,
each file's presence and size, orphans and duplicates, each record's zip frame (N + 1 small reads a
file), in its bounded child. Then the floor under that: reading ``.metadata`` through the allow-list
alone, and the frame reads alone (their offsets come from it, so the two cannot overlap). Each side
runs in its own interpreter (ours without torch loaded, as the command runs), best of ``--repeat``
calls, the import not counted; then each whole command, start-up included.

Targets: ckpt check <= 1/3 of torch's read_metadata time, and the whole checkpoint under 1 s.

    python benchmarks/ckpt_check.py [--repeat 7] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.dcp_validation import EP, PP, TP, WORLD, qwen3_235b  # noqa: E402

BYTES_PER_ELEMENT = 2  # bf16

OURS = """
import json, sys, time
from pathlib import Path
from ascendfix.checkpoint import check
best = float("inf")
for _ in range({repeat}):
    start = time.perf_counter()
    report = check.check(Path(sys.argv[1]))
    best = min(best, time.perf_counter() - start)
assert report.ok, report.problems[:3]
assert "torch" not in sys.modules
print(json.dumps({{"seconds": best, "chunks": report.chunks, "files": report.files}}))
"""

TORCH = """
import json, sys, time
from torch.distributed.checkpoint import FileSystemReader
best = float("inf")
for _ in range({repeat}):
    start = time.perf_counter()
    metadata = FileSystemReader(sys.argv[1]).read_metadata()
    best = min(best, time.perf_counter() - start)
print(json.dumps({{"seconds": best, "chunks": sum(len(getattr(m, "chunks", ())) for m in
                   metadata.state_dict_metadata.values())}}))
"""

FLOOR = """
import gc, json, os, sys, time
from pathlib import Path
from ascendfix.checkpoint import frames, layout
folder = Path(sys.argv[1])
gc.disable()
read = seams = float("inf")
for _ in range({repeat}):
    start = time.perf_counter()
    entries = layout.read(folder).entries
    read = min(read, time.perf_counter() - start)
    by_file = {{}}
    for path, offset, length in zip(entries.paths, entries.starts, entries.lengths):
        by_file.setdefault(path, ([], []))
        by_file[path][0].append(offset)
        by_file[path][1].append(length)
    start = time.perf_counter()
    for path, (starts, lengths) in by_file.items():
        fd = os.open(folder / path, os.O_RDONLY)
        assert not frames.frame_problems(fd, starts, lengths)
        os.close(fd)
    seams = min(seams, time.perf_counter() - start)
print(json.dumps({{"read": read, "frames": seams}}))
"""

COMMAND_TORCH = (
    "import sys; from torch.distributed.checkpoint import FileSystemReader as R; R(sys.argv[1]).read_metadata()"
)


def write_checkpoint(folder: Path, tensors) -> int:
    """``.metadata`` with torch's own classes, and sparse ``__<rank>_0.distcp`` files; returns the chunk count."""
    import torch
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import (
        ChunkStorageMetadata,
        Metadata,
        MetadataIndex,
        StorageMeta,
        TensorProperties,
        TensorStorageMetadata,
    )

    folder.mkdir(parents=True, exist_ok=True)
    ends = [0] * WORLD
    items, storage = {}, {}
    for tensor in tensors:
        chunks = []
        for n, (offsets, sizes) in enumerate(tensor.boxes):
            rank = n * WORLD // len(tensor.boxes)  # the chunks in rank order, spread over every rank's file
            length = BYTES_PER_ELEMENT
            for size in sizes:
                length *= size
            chunks.append(ChunkStorageMetadata(torch.Size(offsets), torch.Size(sizes)))
            storage[MetadataIndex(tensor.name, offsets)] = _StorageInfo(f"__{rank}_0.distcp", ends[rank], length)
            ends[rank] += length
        properties = TensorProperties(dtype=torch.bfloat16)
        items[tensor.name] = TensorStorageMetadata(properties, torch.Size(tensor.shape), chunks)
    metadata = Metadata(items, storage_data=storage, storage_meta=StorageMeta())
    (folder / ".metadata").write_bytes(__import__("pickle").dumps(metadata))
    framed: dict[str, list] = {}
    for info in storage.values():
        framed.setdefault(info.relative_path, []).append(info)
    for rank, end in enumerate(ends):
        with open(folder / f"__{rank}_0.distcp", "wb") as f:
            f.truncate(end)  # sparse: the size the entries need, no blocks but each record's zip frame
            for info in framed.get(f"__{rank}_0.distcp", []):
                os.pwrite(f.fileno(), b"PK\x03\x04", info.offset)
                os.pwrite(f.fileno(), b"PK\x05\x06" + bytes(18), info.offset + info.length - 22)
    return len(storage)


def side(code: str, folder: Path, repeat: int) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", code.format(repeat=repeat), str(folder)], capture_output=True, text=True, cwd=REPO
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    return json.loads(done.stdout)


def command_seconds(argv: list[str], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=False, cwd=REPO)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="calls per side (best counts)")
    parser.add_argument("--keep", type=Path, help="write the checkpoints here and keep them")
    args = parser.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        raise SystemExit(
            "torch is needed for its own reader (pip install torch==2.13.0: the CPU build is enough)"
        ) from None
    base = args.keep or Path(tempfile.mkdtemp(prefix="ckpt-bench-"))
    tensors = qwen3_235b(94)
    expert = [t for t in tensors if t.name.endswith("experts.linear_fc1.weight")]
    layouts = {"expert tensor (fc1)": expert, "whole checkpoint": tensors}
    print(f"Qwen3-235B-A22B, TP{TP} PP{PP} EP{EP}, {WORLD} ranks' files (sparse); best of {args.repeat} calls")
    print(f"{'checkpoint':22} {'chunks':>7} {'.metadata':>10} {'torch read':>11} {'ckpt check':>11} {'ratio':>6}")
    floors = []
    for label, chosen in layouts.items():
        folder = base / label.split()[0]
        chunks = write_checkpoint(folder, chosen)
        size = (folder / ".metadata").stat().st_size
        theirs, ours = {}, {}
        for _ in range(3):  # alternate the two sides; keep each one's best
            t, o = side(TORCH, folder, args.repeat), side(OURS, folder, args.repeat)
            theirs = t if not theirs or t["seconds"] < theirs["seconds"] else theirs
            ours = o if not ours or o["seconds"] < ours["seconds"] else ours
        assert ours["chunks"] == theirs["chunks"] == chunks
        ratio = ours["seconds"] / theirs["seconds"]
        print(
            f"{label:22} {chunks:7,} {size / 1e6:8.1f}MB {theirs['seconds']:10.3f}s "
            f"{ours['seconds']:10.3f}s {ratio:6.2f}"
        )
        floors.append((label, side(FLOOR, folder, args.repeat), theirs["seconds"]))
    print("\nthe floor of any check that reads every record's frame: its two steps alone, one after the other")
    print("(the frames' offsets are in the pickle), best of each, as a ratio to torch's read:")
    for label, floor, torch_seconds in floors:
        read, seams = floor["read"] / torch_seconds, floor["frames"] / torch_seconds
        print(
            f"  {label:22} reading .metadata {floor['read']:.3f}s ({read:.2f}) + the frame reads "
            f"{floor['frames']:.3f}s ({seams:.2f}) = {read + seams:.2f}"
        )
    whole = base / "whole"
    command = command_seconds([sys.executable, "-m", "ascendfix", "ckpt", "check", str(whole)], 3)
    reader = command_seconds([sys.executable, "-c", COMMAND_TORCH, str(whole)], 3)
    print(f"\nwhole commands, start-up included (best of 3): `ascendfix ckpt check` {command:.2f} s,")
    print(f"  `python -c 'import torch ... read_metadata()'` {reader:.2f} s: ratio {command / reader:.2f}")
    print("targets: ratio <= 0.33 (checking everything vs torch only reading); whole checkpoint < 1 s")
    if not args.keep:
        import shutil

        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    from recorded import recorded

    recorded(__file__, main)
