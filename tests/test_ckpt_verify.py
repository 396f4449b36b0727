"""``ckpt verify`` on real conversions: verl's own converter and megatron-core 0.12.1's own save (tests/conversion.py),
proven intact, then damaged the ways conversions fail in the field, each named by its kind.

The value damage (swapped halves, permuted experts, QKV order, the embedding in ``output_layer``, a
1-ulp drift) keeps every zip and CRC-32 valid: ``ckpt check --bytes`` passes it, ``ckpt verify``
names it. The merger's direction runs on verl's own merger's output (``global_step_N/actor``, as
verl's trainer lays a save out, merged at 1 and at 2 ranks), and is damaged there.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests import conversion

pytestmark = [pytest.mark.slow, pytest.mark.upstream]

FC1 = "decoder.layers.mlp.experts.experts.linear_fc1.weight"
FC2 = "decoder.layers.mlp.experts.experts.linear_fc2.weight"
QKV = "decoder.layers.self_attention.linear_qkv.weight"
ROW = 128 * 2  # one row of hidden 128 in bfloat16


@pytest.fixture(scope="module")
def built():
    """The tiny Qwen3-MoE model and its conversions at 1 rank and at 2 (PP=2), the dense model and its own
    (built once into the test cache; tests copy what they damage)."""
    return conversion.built()


def verify(cli, source: Path, converted: Path) -> tuple[int, dict]:
    result = cli("ckpt", "verify", source, converted, "--json", timeout=600)
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def kinds(report: dict) -> list[str]:
    return sorted({p["kind"] for p in report["problems"]})


@pytest.mark.parametrize(
    "source, converted, direction, tensors",
    [
        ("moe", "moe-mcore", "hf-to-mcore", 135),
        ("moe", "moe-mcore-pp2", "hf-to-mcore", 135),
        ("dense", "dense-mcore", "hf-to-mcore", 36),
        ("moe-actor", "moe-merged", "mcore-to-hf", 135),
        ("moe-actor", "moe-merged-pp2", "mcore-to-hf", 135),
        ("dense-actor", "dense-merged", "mcore-to-hf", 36),
        ("moe-mcore", "moe", "mcore-to-hf", 135),
    ],
    ids=["moe", "moe-pp2", "dense", "merge-moe", "merge-moe-pp2", "merge-dense", "moe-back-to-its-source"],
)
def test_a_real_conversion_is_proven_byte_for_byte(built, ascendfix_cli, source, converted, direction, tensors):
    code, report = verify(ascendfix_cli, built[source], built[converted])
    assert code == 0, report["problems"]
    assert report["ok"] and report["direction"] == direction and report["tensors"] == tensors
    weights = sum(
        os.path.getsize(p) for p in built[source if direction == "hf-to-mcore" else converted].glob("*.safetensors")
    )
    assert 0.9 * weights < report["proven_bytes"] < weights  # every weight byte; the headers are not weights
    assert any(name.endswith("linear_qkv._extra_state") for name in report["ignored"])
    human = ascendfix_cli("ckpt", "verify", built[source], built[converted])
    assert human.returncode == 0 and "proven byte for byte" in human.stdout


def _swap(a: conversion.Record, b: conversion.Record) -> None:
    left, right = a.read(), b.read()
    a.write(right)
    b.write(left)


def _gate_up(folder: Path) -> None:  # layer 1, expert 3: [up; gate] instead of [gate; up]
    _swap(conversion.Record(folder, FC1, (1, 3, 0, 0)), conversion.Record(folder, FC1, (1, 3, 64, 0)))


def _experts(folder: Path) -> None:  # layer 1: experts 5 and 6 of linear_fc2 permuted
    _swap(conversion.Record(folder, FC2, (1, 5, 0, 0)), conversion.Record(folder, FC2, (1, 6, 0, 0)))


def _qkv(folder: Path) -> None:  # layer 0, KV group 0: its k and v rows (32 each, after 64 q rows) swapped
    record = conversion.Record(folder, QKV, (0, 0, 0))
    data = bytearray(record.read())
    k, v = data[64 * ROW : 96 * ROW], data[96 * ROW : 128 * ROW]
    data[64 * ROW : 96 * ROW], data[96 * ROW : 128 * ROW] = v, k
    record.write(bytes(data))


def _embedding(folder: Path) -> None:  # output_layer written from the embedding (a tied model's habit)
    embedding = conversion.Record(folder, "embedding.word_embeddings.weight", (0, 0))
    conversion.Record(folder, "output_layer.weight", (0, 0)).write(embedding.read())


def _ulp(folder: Path) -> None:  # layer 2's linear_proj, element 1000: its last mantissa bit flipped
    record = conversion.Record(folder, "decoder.layers.self_attention.linear_proj.weight", (2, 0, 0))
    data = bytearray(record.read())
    data[2000] ^= 1
    record.write(bytes(data))


@pytest.mark.parametrize(
    "damage, expected",
    [
        (_gate_up, ["holds `up_proj`'s bytes", "holds `gate_proj`'s bytes"]),
        (_experts, ["expert 5 holds expert 6's bytes", "expert 6 holds expert 5's bytes"]),
        (_qkv, ["holds `v_proj`'s bytes qkv group 0 v", "holds `k_proj`'s bytes qkv group 0 k"]),
        (_embedding, ["equals `model.embed_tokens.weight`"]),
        (_ulp, ["elements 1,000-1,000 of the region differ; the first, element [2, 7, 104]"]),
    ],
    ids=["gate-up-swapped", "experts-permuted", "qkv-order", "embedding-in-output-layer", "one-ulp"],
)
def test_wrong_values_pass_ckpt_check_and_are_named(built, ascendfix_cli, tmp_path, damage, expected):
    converted = conversion.copy(built["moe-mcore"], tmp_path / "mcore")
    damage(converted)
    checked = ascendfix_cli("ckpt", "check", converted, "--bytes", "--json", timeout=600)
    assert checked.returncode == 0, checked.stdout  # every zip and CRC-32 valid: today's check sees nothing
    code, report = verify(ascendfix_cli, built["moe"], converted)
    assert code == 1 and not report["ok"] and kinds(report) == ["value-mismatch"]
    details = [p["detail"] for p in report["problems"]]
    assert len(details) == len(expected)
    for text in expected:
        assert any(text in d for d in details), (text, details)
    for p in report["problems"]:
        assert p["file"].endswith(".distcp") and p["tensor"].startswith(("decoder.", "output_layer"))
        assert p["source_tensor"].startswith(("model.", "lm_head")) and p["region"].startswith(p["tensor"])


def test_a_half_written_conversion_is_incomplete(built, ascendfix_cli, tmp_path):
    converted = conversion.copy(built["moe-mcore"], tmp_path / "mcore")
    (converted / ".metadata").unlink()
    code, report = verify(ascendfix_cli, built["moe"], converted)
    assert code == 1 and kinds(report) == ["incomplete"]
    assert "re-run the conversion into an empty folder" in report["problems"][0]["detail"]
    empty = tmp_path / "empty"
    empty.mkdir()
    code, report = verify(ascendfix_cli, built["moe"], empty)
    assert code == 1 and kinds(report) == ["incomplete"] and "an empty folder" in report["problems"][0]["detail"]


def test_a_cut_data_file_is_ckpt_checks_finding(built, ascendfix_cli, tmp_path):
    converted = conversion.copy(built["moe-mcore"], tmp_path / "mcore")
    data = converted / "__0_1.distcp"
    os.truncate(data, data.stat().st_size // 2)
    code, report = verify(ascendfix_cli, built["moe"], converted)
    assert code == 1 and report["problems"]
    assert all(p["detail"].startswith("ckpt check: ") for p in report["problems"])
    assert any(p["file"] == "__0_1.distcp" for p in report["problems"])


def _merged(built, tmp_path) -> Path:
    """A copy of verl's merger's output (2 ranks: four shards and their index)."""
    return conversion.copy(built["moe-merged-pp2"], tmp_path / "merged")


def _shards(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.safetensors"))


def _rewrite(path: Path, change) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(path)
    change(tensors)
    save_file(tensors, path, metadata={"format": "pt"})


def test_a_shard_the_index_lists_is_missing(built, ascendfix_cli, tmp_path):
    merged = _merged(built, tmp_path)
    shard = _shards(merged)[-1]
    shard.unlink()
    code, report = verify(ascendfix_cli, built["moe-actor"], merged)
    assert code == 1 and kinds(report) == ["missing-file"]
    assert report["problems"][0]["file"] == shard.name


@pytest.mark.parametrize("same", [True, False])
def test_a_key_in_two_shards_is_a_duplicate(built, ascendfix_cli, tmp_path, same):
    from safetensors.torch import load_file

    merged = _merged(built, tmp_path)
    name = "model.embed_tokens.weight"
    first = next(p for p in merged.glob("*.safetensors") if name in load_file(p))
    other = next(p for p in merged.glob("*.safetensors") if p != first)
    copy = load_file(first)[name].clone()
    if not same:
        copy[0, 0] += 1
    _rewrite(other, lambda tensors: tensors.__setitem__(name, copy))
    code, report = verify(ascendfix_cli, built["moe-actor"], merged)
    assert code == 1 and kinds(report) == ["duplicate"]
    problem = report["problems"][0]
    assert problem["tensor"] == name and first.name in problem["detail"] and other.name in problem["detail"]
    assert ("the copies are identical" if same else "the copies differ") in problem["detail"]


def test_a_cut_shard_is_truncated_at_its_first_cut_tensor(built, ascendfix_cli, tmp_path):
    merged = _merged(built, tmp_path)
    shard = max(_shards(merged), key=lambda p: p.stat().st_size)
    os.truncate(shard, shard.stat().st_size - 100_000)
    code, report = verify(ascendfix_cli, built["moe-actor"], merged)
    assert code == 1 and kinds(report) == ["truncated"]
    problem = report["problems"][0]
    assert problem["file"] == shard.name and problem["tensor"].startswith("model.")


def test_expert_keys_not_renamed_and_lora_left_unmerged_are_diagnosed(built, ascendfix_cli, tmp_path):
    merged = _merged(built, tmp_path)
    old = "model.layers.3.mlp.experts.7.gate_proj.weight"
    shard = next(p for p in merged.glob("*.safetensors") if old in json.loads(_header(p)))

    def change(tensors):
        tensors["model.layers.3.self_attn.q_proj.lora_A.weight"] = tensors[old].clone()
        tensors["model.layers.3.mlp.experts.gate_proj.weight7"] = tensors.pop(old)

    _rewrite(shard, change)
    index = merged / "model.safetensors.index.json"
    weights = json.loads(index.read_text())
    weights["weight_map"].pop(old)
    index.write_text(json.dumps(weights))
    code, report = verify(ascendfix_cli, built["moe-actor"], merged)
    assert code == 1 and kinds(report) == ["missing-tensor", "unexpected-tensor"]
    details = {p["tensor"]: p["detail"] for p in report["problems"]}
    assert "the merger's expert rename did not run" in details["model.layers.3.mlp.experts.gate_proj.weight7"]
    assert "LoRA not merged" in details["model.layers.3.self_attn.q_proj.lora_A.weight"]
    assert details[old].startswith("not in the converted folder")


def _header(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(int.from_bytes(f.read(8), "little"))


def test_bad_input_is_one_line_and_exit_2(built, ascendfix_cli, tmp_path):
    missing = ascendfix_cli("ckpt", "verify", tmp_path / "nowhere", built["moe-mcore"])
    assert missing.returncode == 2 and "not a folder" in missing.stderr and "Traceback" not in missing.stderr
    other = conversion.copy(built["moe"], tmp_path / "llama")
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "architectures": ["LlamaForCausalLM"]}))
    refused = ascendfix_cli("ckpt", "verify", other, built["moe-mcore"])
    assert refused.returncode == 2 and "'LlamaForCausalLM' has no reviewed mapping" in refused.stderr
    (other / "config.json").write_text(json.dumps({**config, "num_key_value_heads": 1}))
    disagrees = ascendfix_cli("ckpt", "verify", other, built["moe-mcore"])
    assert disagrees.returncode == 2 and "the config is not this model's" in disagrees.stderr
    assert len(disagrees.stderr.strip().splitlines()) == 1
    (other / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    nested = ascendfix_cli("ckpt", "verify", other, built["moe-mcore"])
    assert nested.returncode == 2 and "nested more than 64 deep" in nested.stderr
    assert len(nested.stderr.strip().splitlines()) == 1
    shutil.rmtree(other)


def test_the_mergers_direction_names_permuted_experts_too(built, ascendfix_cli, tmp_path):
    merged = _merged(built, tmp_path)
    five, six = (f"model.layers.1.mlp.experts.{e}.down_proj.weight" for e in (5, 6))
    shard = next(p for p in merged.glob("*.safetensors") if five in json.loads(_header(p)))

    def change(tensors):
        tensors[five], tensors[six] = tensors[six], tensors[five]

    _rewrite(shard, change)
    code, report = verify(ascendfix_cli, built["moe-actor"], merged)
    assert code == 1 and report["direction"] == "mcore-to-hf" and kinds(report) == ["value-mismatch"]
    found = {p["tensor"]: p for p in report["problems"]}
    assert set(found) == {five, six}
    assert "expert 5 holds expert 6's bytes" in found[five]["detail"] and found[five]["file"] == shard.name
    assert found[five]["source_tensor"] == FC2


@pytest.mark.parametrize(
    "pickle",
    [
        b"\x80\x04}(" + b")" + b"\x85" * 1_000_000 + b"K\x01u.",  # a key nested a million tuples deep: the C stack
        b"\x80\x04N" + b"r" + (2**29).to_bytes(4, "little") + b".",  # one put at 2**29: an 8 GiB memo (2**30 slots)
    ],
    ids=["nested-deep", "memo-bomb"],
)
def test_a_hostile_metadata_is_stopped_by_the_childs_bound_in_one_line(built, ascendfix_cli, tmp_path, pickle):
    """Every reader of the checkpoints runs in one bounded child: a ``.metadata`` that would overflow the
    unpickler's stack or take its memory ends that child, and is named, never a crash or a hang."""
    converted = conversion.copy(built["moe-mcore"], tmp_path / "mcore")
    written = (converted / ".metadata").stat()
    (converted / ".metadata").write_bytes(pickle)
    os.utime(converted / ".metadata", ns=(written.st_atime_ns, written.st_mtime_ns))  # no newer than the save's files
    result = ascendfix_cli("ckpt", "verify", built["moe"], converted, "--json", timeout=300)
    assert result.returncode == 1 and not result.stderr, result.stderr[-2000:]
    (problem,) = json.loads(result.stdout)["problems"]
    assert (problem["kind"], problem["file"]) == ("unreadable", ".metadata")
    assert "\n" not in problem["detail"] and problem["detail"]
    human = ascendfix_cli("ckpt", "verify", built["moe"], converted, timeout=300)
    assert human.returncode == 1 and "Traceback" not in human.stdout + human.stderr
    assert ".metadata" in human.stdout
