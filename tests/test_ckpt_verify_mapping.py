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
