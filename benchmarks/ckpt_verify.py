"""``ascendfix ckpt verify`` against ``cat`` of the same files, interleaved runs, median of ``--repeat``.

The pair is a real conversion (tests/conversion.py: a random Qwen3-MoE saved by transformers,
converted by verl's own converter and megatron-core 0.12.1's own save, on CPU): by default 8
layers, 32 experts, hidden 1024 (about 2 x 1 GB); ``--small`` builds a tenth of that. Both sides
are read once before timing (page cache warm, as ``cat`` then ``verify`` would find them), then,
interleaved: ``cat SOURCE/* CONVERTED/* > /dev/null`` and ``ascendfix ckpt verify SOURCE CONVERTED``
(start-up included), with the peak RSS of the verify process and its children, and ``python -c pass``
(the interpreter's start-up, which ``cat`` does not pay). ``ascendfix`` is the one a user runs: the
console script of a venv holding the checkout installed, not editable (``benchmarks/startup.py``'s
:func:`installed_venv`), in this shell's own environment; the checkout run from source with
``PYTHONDONTWRITEBYTECODE`` set (a developer's machine) compiles every module at every start.

Targets: verify <= 1.3 x cat, peak RSS <= 1 GiB. Then the buffer both ``ckpt verify`` and ``ckpt check
--bytes`` read into, measured alone: every file of the pair read with ``preadv`` into a reused
``bytearray`` and into a reused anonymous ``mmap``, at 1 MiB and at 16 MiB, median of ``--repeat``.
Last, the projection to Qwen3-235B-A22B (438 GB a side) at the measured rate.

    python benchmarks/ckpt_verify.py [--repeat 5] [--small] [--keep DIR]
"""

from __future__ import annotations

import argparse
import mmap
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests import conversion  # noqa: E402

from startup import installed_venv  # noqa: E402

BIG = dict(layers=8, experts=32, hidden=1024, moe=512, vocab=32000)
SMALL = dict(layers=4, experts=16, hidden=512, moe=256, vocab=8000)


def build(root: Path, size: dict) -> tuple[Path, Path]:
    """The HF model and its conversion, built once into ``root``."""
    hf, mcore = root / "hf", root / "mcore"
    if not (mcore / "metadata.json").exists():
        shutil.rmtree(hf, ignore_errors=True)
        shutil.rmtree(mcore, ignore_errors=True)
        code = (
            f"""
from transformers import Qwen3MoeConfig as Config, Qwen3MoeForCausalLM as Model
config = Config(vocab_size={size["vocab"]}, hidden_size={size["hidden"]}, intermediate_size={4 * size["hidden"]},
    moe_intermediate_size={size["moe"]}, num_hidden_layers={size["layers"]}, num_attention_heads=8,
    num_key_value_heads=4, head_dim={size["hidden"] // 8}, num_experts={size["experts"]}, num_experts_per_tok=2,
    max_position_embeddings=512, tie_word_embeddings=False)
"""
            + conversion.SAVE
        )
        subprocess.run([sys.executable, "-c", code, str(hf), "500MB"], check=True)
        conversion.convert(hf, mcore)
    return hf, mcore


def files(*folders: Path) -> list[str]:
    return [str(p) for folder in folders for p in sorted(folder.iterdir()) if p.is_file()]


MEASURE = """
import resource, subprocess, sys, time
start = time.perf_counter()
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
print(time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
"""


def timed(argv: list[str]) -> tuple[float, int]:
    """Seconds, and the peak RSS (bytes) of ``argv``'s process and its children alone, measured by a small
    interpreter that starts it (its own start-up not counted)."""
    result = subprocess.run([sys.executable, "-c", MEASURE, *argv], check=True, capture_output=True)
    seconds, rss = result.stdout.split()
    return float(seconds), int(rss)


def buffered(names: list[str], kind: str, block: int) -> float:
    """Seconds to read every file of ``names`` with ``preadv`` into one reused buffer of ``kind``."""
    buffer = memoryview(bytearray(block) if kind == "bytearray" else mmap.mmap(-1, block))
    start = time.perf_counter()
    for name in names:
        fd = os.open(name, os.O_RDONLY)
        try:
            at = 0
            while n := os.preadv(fd, [buffer], at):
                at += n
        finally:
            os.close(fd)
    return time.perf_counter() - start


def _runs(seconds: list[float]) -> str:
    return ", ".join(f"{s:.2f}" for s in seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--small", action="store_true", help="a tenth of the default pair")
    parser.add_argument("--keep", type=Path, help="build (or reuse) the pair here")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="ckpt-verify-bench-"))
    hf, mcore = build(root, SMALL if args.small else BIG)
    names = files(hf, mcore)
    total = sum(os.path.getsize(n) for n in names)
    subprocess.run(["cat", *names], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
    venv = installed_venv()
    python = str(venv / "bin" / "python")
    verify = [str(venv / "bin" / "ascendfix"), "ckpt", "verify", str(hf), str(mcore)]
    cats, verifies, starts, peak = [], [], [], 0
    for _ in range(args.repeat):
        cats.append(timed(["cat", *names])[0])
        seconds, rss = timed(verify)
        verifies.append(seconds)
        peak = max(peak, rss)
        starts.append(timed([python, "-c", "pass"])[0])
    cat, ours, start = statistics.median(cats), statistics.median(verifies), statistics.median(starts)
    print(f"pair: {total / 1e9:.2f} GB in {len(names)} files ({root}), load average {os.getloadavg()[0]:.1f}")
    print(f"cat            {cat:7.2f} s  {total / cat / 1e9:5.2f} GB/s   (runs: {_runs(cats)})")
    print(f"ckpt verify    {ours:7.2f} s  {total / ours / 1e9:5.2f} GB/s   {ours / cat:.2f} x cat (target <= 1.3)"
          f"   (runs: {_runs(verifies)})")  # fmt: skip
    print(f"peak RSS       {peak / 2**20:7.0f} MiB (target <= 1024; the largest of the verify processes)")
    print(f"python -c pass {start:7.2f} s (the interpreter's start-up alone, in ckpt verify's time)")
    print("\nthe read buffer alone (preadv of every file of the pair, reused buffer):")
    for block in (1 << 20, 16 << 20):
        for kind in ("bytearray", "mmap"):
            seconds = statistics.median(buffered(names, kind, block) for _ in range(args.repeat))
            print(f"  {kind:9} {block >> 20:2} MiB  {seconds:6.2f} s  {total / seconds / 1e9:5.2f} GB/s")
    side, rate = 438e9, total / ours  # the whole command's rate: its fixed start-up counted as if per byte
    print(f"\nQwen3-235B-A22B, {side / 1e9:.0f} GB a side ({2 * side / 1e9:.0f} GB read), one node, at these "
          f"rates: ckpt verify at most {2 * side / rate / 60:.0f} min, cat {2 * side / (total / cat) / 60:.0f} min "
          "(a disk slower than these rates bounds both)")  # fmt: skip
    if args.keep is None:
        shutil.rmtree(root)


if __name__ == "__main__":
    from recorded import recorded

    recorded(__file__, main)
