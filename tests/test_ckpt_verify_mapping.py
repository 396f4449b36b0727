"""The reviewed mappings (mappings/*.toml): each loads, each rule cites its upstream lines, and the regions of
one model tile every converted tensor exactly once (the bijection ``ckpt verify`` proves on bytes)."""

from __future__ import annotations

from collections import defaultdict

import pytest
from ascendfix.checkpoint.verify import mapping
from ascendfix.errors import UsageError

MOE = mapping.Model("Qwen3MoeForCausalLM", layers=3, experts=4, heads=8, kv_heads=2, head_dim=16, tied=False)
DENSE = mapping.Model("Qwen3ForCausalLM", layers=2, experts=0, heads=4, kv_heads=4, head_dim=8, tied=True)
HIDDEN = 64


def _shape(name: str, model: mapping.Model) -> tuple[int, ...]:
    rows = {"q_proj": model.heads * model.head_dim, "k_proj": model.kv_heads * model.head_dim}
    rows["v_proj"] = rows["k_proj"]
    for part, count in rows.items():
        if f".{part}." in name:
            return (count, HIDDEN)
    return (32, HIDDEN) if name.endswith("_proj.weight") or "embed" in name or "lm_head" in name else (HIDDEN,)


@pytest.mark.parametrize("model", [MOE, DENSE], ids=["qwen3-moe", "qwen3"])
def test_the_regions_tile_every_converted_tensor_once(model):
    rules = mapping.load(model.architecture)
    assert all(rule.source and rule.mcore for rule in rules.rules)
    expected = mapping.expected(rules, model)
    assert ("lm_head.weight" in expected) is (not model.tied)
    rows: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    slabs = {}
    for name, rule in expected.items():
        found, slab = mapping.regions(rule, model, name, _shape(name, model))
        assert slabs.setdefault(rule.mcore, slab) == slab
        for region in found:
            rows[(region.mcore, region.index)].append((region.row, region.row + region.rows))
    for (mcore, _index), spans in rows.items():
        spans.sort()
        assert spans[0][0] == 0 and spans[-1][1] == slabs[mcore]
        assert all(a[1] == b[0] for a, b in zip(spans[:-1], spans[1:], strict=True)), (mcore, spans)


def test_qkv_is_interleaved_per_kv_group():
    rule = next(r for r in mapping.load(MOE.architecture).rules if r.place == "qkv.k")
    found, slab = mapping.regions(rule, MOE, "model.layers.2.self_attn.k_proj.weight", (32, HIDDEN))
    q_rows = MOE.heads // MOE.kv_heads * MOE.head_dim  # 64: each group's q rows, then its k (16), then its v (16)
    assert slab == 2 * (q_rows + 32)
    assert [(r.index, r.row, r.hf_row, r.rows) for r in found] == [((2,), 64, 0, 16), ((2,), 96 + 64, 16, 16)]


def test_an_unknown_architecture_is_refused_by_name():
    with pytest.raises(UsageError, match="'LlamaForCausalLM' has no reviewed mapping"):
        mapping.load("LlamaForCausalLM")


@pytest.mark.parametrize("at", [0, 7, 8, 4095, 65536, (1 << 20) - 1])
def test_blocks_compare_equal_only_when_every_byte_is(at):
    """memcmp over the windows' writable buffers, 8-byte words over read-only views: one flipped bit
    anywhere (a word's edge, a page's, the last byte) is found, and where."""
    import mmap
    import os

    from ascendfix.checkpoint.verify import compare

    n = 1 << 20
    data = os.urandom(n)
    left, right = mmap.mmap(-1, n), mmap.mmap(-1, n)
    left.write(data)
    right.write(data)
    a, b = memoryview(left), memoryview(right)
    assert compare.same(a, b) and compare.same(a[3:-5], b[3:-5]) and compare.same(a[:0], b[:0])
    right[at] ^= 0x10
    for x, y in ((a, b), (memoryview(bytes(left)), memoryview(bytes(right)))):  # writable, then read-only
        assert not compare.same(x, y) and compare.same(x[:at], y[:at]) and compare.same(x[at + 1 :], y[at + 1 :])
        assert compare.first_difference(x, y) == at == compare.last_difference(x, y)


def test_a_window_maps_any_run_of_a_file_and_ends_with_it(tmp_path):
    """Runs read through a window equal the file's bytes wherever they lie: inside one mapping, across its
    end (mapped anew from the run's page), and up to the file's end, where the view is shorter."""
    import os

    from ascendfix.checkpoint.verify import compare

    data = os.urandom(3 * compare.WINDOW + 12345)
    (tmp_path / "f").write_bytes(data)
    files = compare.Files(tmp_path)
    window = compare.Window(files)
    try:
        for start in (0, 5, compare.WINDOW - 100, 2 * compare.WINDOW + 1, len(data) - compare.BLOCK, len(data) - 7):
            got = window.get("f", start, compare.BLOCK)
            assert bytes(got) == data[start : start + compare.BLOCK]
        assert len(window.get("f", len(data) + 1, 10)) == 0
    finally:
        window.close()
        files.close()


def test_a_file_cut_under_its_window_stops_the_reader_with_sigbus(tmp_path):
    """The premise of the bounded child's SIGBUS line: a mapped file cut shorter kills its reader (the
    bounded child), never hands it stale or zero bytes as the file's."""
    import signal
    import subprocess
    import sys

    (tmp_path / "f").write_bytes(b"x" * (1 << 20))
    script = (
        "import os, sys; from pathlib import Path; from ascendfix.checkpoint.verify import compare\n"
        "w = compare.Window(compare.Files(Path(sys.argv[1])))\n"
        "view = w.get('f', 0, 4096)\n"
        "os.truncate(Path(sys.argv[1]) / 'f', 0)\n"
        "print(bytes(w.get('f', 8192, 4096))[:1])\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, timeout=60)
    assert done.returncode == -signal.SIGBUS, done.stderr[-500:]
