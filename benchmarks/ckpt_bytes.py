"""``ascendfix ckpt check --bytes`` against torch's own ``dcp.load`` of the same save, side by side, in one run.

A ~1 GiB DCP save is written here with the installed torch (``dcp.save``, one process, 4 writer
threads: 4 ``.distcp`` files), bf16 tensors of 16 MiB each, the size of a Qwen3-235B-A22B expert
chunk's order. torch's side loads it into preallocated CPU tensors (``dcp.load``: it reads every
record and copies it in, checking no CRC); ours proves every record's zip, data.pkl and CRC-32 (the
check's whole work, in its bounded child, without torch). Each side runs in its own interpreter,
best of ``--repeat`` calls, the files in the page cache for both (the first call of each warms it).

Target: ckpt check --bytes <= 1/2 of dcp.load's time.

    python benchmarks/ckpt_bytes.py [--repeat 5] [--mib 1024] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TENSOR_MIB = 16

WRITE = """
import sys, warnings
import torch, torch.distributed.checkpoint as dcp
warnings.simplefilter("ignore")
count = int(sys.argv[2]) // {tensor_mib}
state = {{f"layer{{i}}.weight": torch.randn({tensor_mib} << 19, dtype=torch.bfloat16) for i in range(count)}}
dcp.save(state, storage_writer=dcp.FileSystemWriter(sys.argv[1], thread_count=4))
"""

TORCH = """
import json, sys, time, warnings
import torch, torch.distributed.checkpoint as dcp
warnings.simplefilter("ignore")
count = int(sys.argv[2]) // {tensor_mib}
state = {{f"layer{{i}}.weight": torch.empty({tensor_mib} << 19, dtype=torch.bfloat16) for i in range(count)}}
best = float("inf")
for _ in range({repeat}):
    start = time.perf_counter()
    dcp.load(state, storage_reader=dcp.FileSystemReader(sys.argv[1]))
    best = min(best, time.perf_counter() - start)
print(json.dumps({{"seconds": best}}))
"""

OURS = """
import json, sys, time
from pathlib import Path
from ascendfix.checkpoint import check, proof
best = float("inf")
for _ in range({repeat}):
    start = time.perf_counter()
    report = check.check(Path(sys.argv[1]), prove=True)
    best = min(best, time.perf_counter() - start)
assert report.ok and report.proven_bytes, report.problems[:3]
assert "torch" not in sys.modules
print(json.dumps({{"seconds": best, "proven": report.proven_bytes, "crc": proof.crc32.__module__}}))
"""


def side(code: str, folder: Path, mib: int, repeat: int) -> dict:
    """Run one side's code in its own interpreter; its JSON answer."""
    argv = [sys.executable, "-c", code.format(repeat=repeat, tensor_mib=TENSOR_MIB), str(folder), str(mib)]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="calls per side (best counts)")
    parser.add_argument("--mib", type=int, default=1024, help="the save's size in MiB")
    parser.add_argument("--keep", type=Path, help="write the save here and keep it")
    args = parser.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        raise SystemExit("torch is needed to write the save and for dcp.load (the CPU build is enough)") from None
    base = args.keep or Path(tempfile.mkdtemp(prefix="ckpt-bytes-"))
    folder = base / "save"
    if not (folder / ".metadata").exists():
        side(WRITE, folder, args.mib, 1)
    size = sum(p.stat().st_size for p in folder.glob("*.distcp"))
    theirs, ours = float("inf"), float("inf")
    for _ in range(2):  # alternate the two sides; keep each one's best
        theirs = min(theirs, side(TORCH, folder, args.mib, args.repeat)["seconds"])
        answer = side(OURS, folder, args.mib, args.repeat)
        ours = min(ours, answer["seconds"])
    print(f"a {size / 2**30:.2f} GiB DCP save ({args.mib // TENSOR_MIB} bf16 tensors of {TENSOR_MIB} MiB, 4 files),")
    print(f"  page cache warm, best of {2 * args.repeat} calls each; CRC-32 from {answer['crc']}")
    print(f"  dcp.load into preallocated CPU tensors  {theirs:7.3f} s  ({size / theirs / 1e9:.2f} GB/s)")
    print(f"  ascendfix ckpt check --bytes            {ours:7.3f} s  ({answer['proven'] / ours / 1e9:.2f} GB/s proven)")
    print(f"  ratio {ours / theirs:.2f} (target <= 0.50)")
    if not args.keep:
        import shutil

        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    from recorded import recorded

    recorded(__file__, main)
