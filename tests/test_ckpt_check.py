"""ckpt check: real checkpoints written at test time (torch DCP by 4 gloo ranks, megatron-core's torch_dist
save), then damaged each way; the pickle is never run; the geometry is the fast-validate template's."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import pickle
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import zipfile
import zlib
from pathlib import Path

import pytest
from ascendfix.checkpoint import check, geometry, layout, megatron, pickles, views
from ascendfix.checkpoint.layout import Tensor
from ascendfix.cli import main
from ascendfix.errors import UsageError
from ascendfix.job import preflight
from ascendfix.resources import data_dir
from click.testing import CliRunner

from tests import cli, upstream
from tests.cluster import SMALL_NODE, local_head, one_ray_start

REPO = Path(__file__).resolve().parent.parent
NO_TORCH = "torch is not installed (pip install torch==2.13.0: the CPU build is enough)"
NO_MCORE = "megatron-core is not installed (pip install megatron-core==0.12.1 psutil: it installs on CPU)"
JSON_KEYS = [
    "schema",
    "ok",
    "checkpoint",
    "tensors",
    "chunks",
    "files",
    "bytes",
    "proven_bytes",
    "problems",
    "warnings",
]

DCP_SAVE = """
import os, sys
import torch, torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.tensor import DeviceMesh, Shard, distribute_tensor

def main(rank, world, out, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = DeviceMesh("cpu", list(range(world)))
    state = {
        "w": distribute_tensor(torch.arange(64.0).reshape(8, 8), mesh, [Shard(0)]),  # 4 chunks of 2 rows
        "b": distribute_tensor(torch.arange(12.0).reshape(3, 4), mesh, [Shard(1)]),  # 4 chunks of 1 column
        "step": 3,  # a bytes item
    }
    dcp.save(state, checkpoint_id=out)
    dist.destroy_process_group()

if __name__ == "__main__":
    import torch.multiprocessing as mp
    mp.spawn(main, args=(4, sys.argv[1], int(sys.argv[2])), nprocs=4)
"""

# megatron-core's own dist_checkpointing.save (torch_dist) of ShardedTensors named and laid out as its
# TransformerBlock and MoE experts make them: 4 layers stacked on axis 0 (2 per PP rank), 8 experts on
# axis 1 (4 per EP rank), fc1 in its two SwiGLU halves on axis 2; plus common state (a tensor, args).
MCORE_SAVE = """
import argparse, functools, os, sys
import torch, torch.distributed as dist

def main(rank, world, out, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    # CPU only: megatron-core syncs the device after copying to the CPU and keeps small flags on it
    torch.cuda.synchronize = lambda *args, **kwargs: None
    torch.cuda.current_device = lambda: "cpu"
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing import ShardedTensor
    from megatron.core.dist_checkpointing.strategies import filesystem_async
    from torch.distributed.checkpoint import filesystem
    if "serialization_format" in filesystem._write_item.__code__.co_varnames:  # torch >= 2.8 added it
        filesystem_async._write_item = functools.partial(
            filesystem._write_item, serialization_format=filesystem.SerializationFormat.TORCH_SAVE
        )
    layers, experts, hidden, ffn = 4, 8, 4, 2
    state = {"iteration": 7, "args": argparse.Namespace(num_layers=layers), "bias": torch.zeros(3)}
    for layer in range(rank * layers // world, (rank + 1) * layers // world):
        state[f"qkv{layer}"] = ShardedTensor.from_rank_offsets(
            "decoder.layers.self_attention.linear_qkv.weight", torch.ones(6, hidden),
            (0, layer, layers), replica_id=0, prepend_axis_num=1,
        )
    per_rank = experts // world
    for layer in range(layers):
        for expert in range(rank * per_rank, (rank + 1) * per_rank):
            for half in range(2):
                state[f"fc1.{layer}.{expert}.{half}"] = ShardedTensor.from_rank_offsets(
                    "decoder.layers.mlp.experts.experts.linear_fc1.weight", torch.ones(ffn, hidden),
                    (0, layer, layers), (1, expert, experts), (2, half, 2), replica_id=0, prepend_axis_num=2,
                )
    dist_checkpointing.save(state, out, sharded_strategy=("torch_dist", 1))
    dist.barrier()
    dist.destroy_process_group()

if __name__ == "__main__":
    import torch.multiprocessing as mp
    mp.spawn(main, args=(2, sys.argv[1], int(sys.argv[2])), nprocs=2)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _save(script: str, out: Path, tmp: Path) -> Path:
    path = tmp / "save.py"
    path.write_text(script)
    out.mkdir()
    done = subprocess.run(
        [sys.executable, str(path), str(out), str(_free_port())], capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def dcp_saved(tmp_path_factory):
    """A torch.distributed.checkpoint save of DTensors by 4 gloo ranks (written once per module)."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip(NO_TORCH)
    tmp = tmp_path_factory.mktemp("dcp")
    return _save(DCP_SAVE, tmp / "ckpt", tmp)


@pytest.fixture(scope="module")
def mcore_saved(tmp_path_factory):
    """megatron-core's dist_checkpointing.save with the torch_dist backend, by 2 gloo ranks."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip(NO_TORCH)
    if importlib.util.find_spec("megatron") is None or importlib.util.find_spec("megatron.core") is None:
        pytest.skip(NO_MCORE)
    if importlib.util.find_spec("psutil") is None:
        pytest.skip(NO_MCORE)
    tmp = tmp_path_factory.mktemp("mcore")
    return _save(MCORE_SAVE, tmp / "ckpt", tmp)


# The guide's converter layout: one data file per rank (__0_0.distcp, __1_0.distcp), common.pt, metadata.json.
MCORE_SAVE_ONE_FILE_A_RANK = MCORE_SAVE.replace(
    'sharded_strategy=("torch_dist", 1)',
    "sharded_strategy=__import__('megatron.core.dist_checkpointing.strategies.torch', fromlist=['x'])"
    '.TorchDistSaveShardedStrategy("torch_dist", 1, thread_count=1)',
)


@pytest.fixture(scope="module")
def mcore_two_files_saved(mcore_saved, tmp_path_factory):
    """megatron-core's torch_dist save with one writer thread a rank: two data files."""
    tmp = tmp_path_factory.mktemp("mcore-two")
    return _save(MCORE_SAVE_ONE_FILE_A_RANK, tmp / "ckpt", tmp)


@pytest.fixture
def dcp(tmp_path, dcp_saved) -> Path:
    """This test's own copy of the DCP checkpoint (it may damage it)."""
    return Path(shutil.copytree(dcp_saved, tmp_path / "ckpt"))


@pytest.fixture
def mcore(tmp_path, mcore_saved) -> Path:
    return Path(shutil.copytree(mcore_saved, tmp_path / "ckpt"))


def ckpt_check(folder: Path, *args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(main, ["ckpt", "check", str(folder), "--json", *args])
    return result.exit_code, json.loads(result.stdout)


def kinds(report: dict) -> set[tuple[str, str]]:
    return {(p["kind"], p.get("tensor") or p.get("file")) for p in report["problems"]}


def _rewrite_metadata(folder: Path, edit) -> None:
    """Change the .metadata this test's own save wrote (read with torch's own classes: our file, trusted)."""
    pytest.importorskip("torch", reason=NO_TORCH)
    metadata = pickle.loads((folder / ".metadata").read_bytes())
    edit(metadata)
    (folder / ".metadata").write_bytes(pickle.dumps(metadata))


@pytest.mark.slow
def test_a_four_rank_dcp_save_is_complete(dcp):
    code, report = ckpt_check(dcp)
    data_files = sorted(dcp.glob("*.distcp"))
    assert (code, list(report)) == (0, JSON_KEYS)
    assert report == {
        "schema": 1,
        "ok": True,
        "checkpoint": str(dcp),
        "tensors": 2,
        "chunks": 8,
        "files": 4,
        "bytes": sum(f.stat().st_size for f in data_files),
        "proven_bytes": None,
        "problems": [],
        "warnings": [],
    }
    assert len(data_files) == 4


@pytest.mark.slow
def test_a_deleted_shard_is_named(dcp):
    (dcp / "__2_0.distcp").unlink()
    code, report = ckpt_check(dcp)
    assert (code, report["ok"]) == (1, False)
    assert kinds(report) == {("missing-file", "__2_0.distcp")}


@pytest.mark.slow
def test_a_truncated_shard_is_named(dcp):
    shard = dcp / "__1_0.distcp"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    code, report = ckpt_check(dcp)
    assert code == 1
    (problem,) = report["problems"]
    assert (problem["kind"], problem["file"], problem["tensor"]) == ("truncated", "__1_0.distcp", "w")
    assert "truncated (2 entries cut; the first: w [2, 0]" in problem["detail"]


@pytest.mark.slow
def test_a_save_killed_before_its_metadata_is_incomplete(dcp):
    (dcp / ".metadata").unlink()
    code, report = ckpt_check(dcp)
    assert code == 1
    assert kinds(report) == {("missing-file", ".metadata")}


@pytest.mark.slow
def test_overlapping_chunks_with_the_volume_kept_are_found(dcp):
    from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex

    def overlap(metadata):  # w's last chunk (rows 6:8) moved to rows 5:7: 64 elements still, row 7 uncovered
        chunks = metadata.state_dict_metadata["w"].chunks
        last = next(i for i, c in enumerate(chunks) if c.offsets[0] == 6)
        moved = ChunkStorageMetadata(offsets=type(chunks[last].offsets)([5, 0]), sizes=chunks[last].sizes)
        chunks[last] = moved
        info = metadata.storage_data.pop(MetadataIndex("w", [6, 0]))
        metadata.storage_data[MetadataIndex("w", [5, 0])] = info

    _rewrite_metadata(dcp, overlap)
    code, report = ckpt_check(dcp)
    assert code == 1
    assert kinds(report) == {("overlap", "w")}
    assert "[4:6, 0:8] and [5:7, 0:8]" in report["problems"][0]["detail"]


@pytest.mark.slow
def test_a_missing_chunk_is_a_gap_and_a_stray_entry_an_orphan(dcp):
    from torch.distributed.checkpoint.metadata import MetadataIndex

    def drop(metadata):
        chunks = metadata.state_dict_metadata["w"].chunks
        chunks[:] = [c for c in chunks if c.offsets[0] != 6]  # its storage entry stays: an orphan

    _rewrite_metadata(dcp, drop)
    code, report = ckpt_check(dcp)
    assert code == 1
    assert kinds(report) == {("gap", "w"), ("orphan", "w")}
    gap = next(p for p in report["problems"] if p["kind"] == "gap")
    assert gap["detail"] == "chunks cover 48 of 64 elements: no chunk covers 6:8 of dimension 0"

    _rewrite_metadata(dcp, lambda metadata: metadata.storage_data.pop(MetadataIndex("w", [6, 0])))
    assert kinds(ckpt_check(dcp)[1]) == {("gap", "w")}


@pytest.mark.slow
def test_a_chunk_without_storage_and_a_stray_data_file(dcp):
    from torch.distributed.checkpoint.metadata import MetadataIndex

    _rewrite_metadata(dcp, lambda metadata: metadata.storage_data.pop(MetadataIndex("b", [0, 2])))
    shutil.copy(dcp / "__0_0.distcp", dcp / "__9_0.distcp")
    code, report = ckpt_check(dcp)
    assert kinds(report) == {("no-storage", "b")}
    assert [(w["kind"], w["file"]) for w in report["warnings"]] == [("extra-file", "__9_0.distcp")]
    assert "[0, 2]" in next(p["detail"] for p in report["problems"] if p["kind"] == "no-storage")


class _RunsACommand:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_metadata_pickle_that_would_run_a_command_never_runs(tmp_path):
    marker = tmp_path / "ran"
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / ".metadata").write_bytes(pickle.dumps({"state_dict_metadata": _RunsACommand(marker)}))
    code, report = ckpt_check(folder)
    assert code == 1
    assert kinds(report) == {("unsafe-pickle", ".metadata")}
    assert f"{os.system.__module__}.system" in report["problems"][0]["detail"]
    assert not marker.exists()
    assert pickle.loads((folder / ".metadata").read_bytes()) is not None and marker.exists()  # it was armed


def test_a_common_pt_that_would_run_a_command_never_runs(tmp_path):
    marker = tmp_path / "ran"
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "metadata.json").write_text(json.dumps({"sharded_backend": "torch_dist"}))
    with zipfile.ZipFile(folder / "common.pt", "w") as archive:
        archive.writestr("common/data.pkl", pickle.dumps({"args": _RunsACommand(marker)}))
    problems = megatron.layout_problems(folder, megatron_expected=False, quick=False)
    assert [(p.kind, p.subject) for p in problems] == [("unsafe-pickle", "common.pt")]
    assert not marker.exists()


def test_the_allow_list_maps_names_to_stand_ins_and_refuses_the_rest():
    assert pickles.loads(pickle.dumps(Path("/ckpt/a"))) == "/ckpt/a"
    for forbidden in (print, os.system, subprocess.Popen, importlib.import_module):
        with pytest.raises(pickles.UnsafePickle, match="not a checkpoint class"):
            pickles.loads(pickle.dumps(forbidden))
    with pytest.raises(pickles.Unreadable):
        pickles.loads(b"\x80\x04not a pickle")


@pytest.mark.slow
def test_megatron_core_torch_dist_save_is_complete_and_matches_its_config(mcore, tmp_path):
    assert {p.name for p in mcore.iterdir()} >= {".metadata", "common.pt", "metadata.json"}
    code, report = ckpt_check(mcore)
    assert (code, report["problems"], report["tensors"]) == (0, [], 2)
    assert report["chunks"] == 4 + 4 * 8 * 2  # qkv per layer; fc1 per layer, expert and SwiGLU half
    code, proven = ckpt_check(mcore, "--bytes")  # megatron's writer: the same torch.save records, each proven
    assert (code, proven["problems"], proven["proven_bytes"]) == (0, [], _record_sizes(mcore))
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"num_hidden_layers": 4, "num_experts": 8, "mlp_only_layers": []}))
    assert ckpt_check(mcore, "--config", str(config))[0] == 0
    config.write_text(json.dumps({"num_hidden_layers": 6, "num_experts": 16}))
    code, report = ckpt_check(mcore, "--config", str(config))
    assert code == 1
    assert kinds(report) == {
        ("shape", "decoder.layers.self_attention.linear_qkv.weight"),
        ("shape", "decoder.layers.mlp.experts.experts.linear_fc1.weight"),
        ("missing-layer", "decoder.layers"),
    }
    assert "4 layers; the config has 6" in report["problems"][0]["detail"]


@pytest.mark.slow
def test_megatron_save_without_metadata_json_is_incomplete(mcore):
    (mcore / "metadata.json").unlink()
    code, report = ckpt_check(mcore)
    assert code == 1
    assert kinds(report) == {("incomplete", "metadata.json")}


@pytest.mark.slow
def test_megatron_metadata_json_must_name_torch_dist_and_common_pt_be_whole(mcore):
    (mcore / "metadata.json").write_text(json.dumps({"sharded_backend": "zarr"}))
    common = mcore / "common.pt"
    with zipfile.ZipFile(common) as archive:
        members = {i.filename: archive.read(i) for i in archive.infolist()}
    with zipfile.ZipFile(common, "w") as archive:  # the pickle kept, the tensor's storage cut short
        for name, data in members.items():
            archive.writestr(name, data[:4] if "/data/" in name else data)
    code, report = ckpt_check(mcore)
    assert kinds(report) == {("backend", "metadata.json"), ("truncated", "common.pt")}


def test_chunks_are_checked_with_the_fast_validate_templates_own_scan(monkeypatch):
    module = geometry.template()
    assert Path(module.__file__) == data_dir("patches") / geometry.TEMPLATE
    seen = []
    real = module._ascendfix_overlapping_pairs
    monkeypatch.setattr(module, "_ascendfix_overlapping_pairs", lambda boxes: seen.append(boxes) or real(boxes))
    shape = (4, 4)
    chunks = geometry.boxes(shape, [(0, 0), (0, 2), (2, 0), (2, 2)], [(2, 2)] * 4)
    assert geometry.findings(shape, chunks) == [] and seen == [chunks]


@pytest.mark.parametrize(
    ("offsets", "sizes", "kind", "detail"),
    [
        ([(0, 0), (2, 0)], [(2, 4), (3, 4)], "out-of-bounds", "[2:5, 0:4]"),
        ([(0, 0), (1, 0)], [(2, 4), (2, 4)], "overlap", "[0:2, 0:4] and [1:3, 0:4]"),
        ([(0, 0), (0, 2), (2, 0)], [(2, 2)] * 3, "gap", "no chunk at [2:4, 2:4]"),
        ([(0, 0)], [(4, 3)], "gap", "no chunk covers 3:4 of dimension 1"),
        ([(0, 0), (2, 2), (0, 0)], [(4, 4), (0, 0), (4, 4)], "overlap", "[0:4, 0:4] and [0:4, 0:4]"),
    ],
)
def test_bounds_overlap_and_cover(offsets, sizes, kind, detail):
    shape = (4, 4)
    (found,) = geometry.findings(shape, geometry.boxes(shape, offsets, sizes))
    assert found.kind == kind and detail in found.detail


def test_empty_chunks_and_scalars_cover_exactly():
    assert geometry.findings((4,), geometry.boxes((4,), [(0,), (2,), (4,)], [(4,), (0,), (0,)])) == []
    assert geometry.findings((), geometry.boxes((), [()], [()])) == []
    assert geometry.boxes((4, 4), [(0, 0)], [(4,)]) is None  # not the tensor's rank
    assert geometry.boxes((4,), [(0.5,)], [(4,)]) is None


def _stacked(name: str, layers: int, experts: int, missing=()) -> Tensor:
    offsets = [(n, e, 0) for n in range(layers) for e in range(experts) if (n, e) not in missing]
    return Tensor(name, (layers, experts, 8), offsets, [(1, 1, 8)] * len(offsets))


def test_config_names_missing_experts_and_layers():
    model = megatron.ModelShape(94, 128, frozenset(range(94)))
    fc1 = "decoder.layers.mlp.experts.experts.linear_fc1.weight"
    holes = {(3, e) for e in range(32, 64)} | {(4, e) for e in range(32, 64)} | {(90, 127)}
    problems = megatron.config_problems([_stacked(fc1, 94, 128, holes)], model)
    assert [(p.kind, p.detail) for p in problems] == [
        ("missing-expert", "layer(s) 3-4: no chunk for expert(s) 32-63"),
        ("missing-expert", "layer(s) 90: no chunk for expert(s) 127"),
    ]
    per_layer = [
        Tensor(f"decoder.layers.{n}.mlp.linear_fc1.weight", (8,), [(0,)], [(8,)]) for n in range(94) if n != 12
    ]
    dense = megatron.ModelShape(94, 0, frozenset())
    assert [(p.kind, p.detail) for p in megatron.config_problems(per_layer, dense)] == [
        ("missing-layer", "no tensor of layer(s) 12 of the config's 94")
    ]


def test_config_json_errors_name_the_field(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"num_experts": 128}))
    with pytest.raises(UsageError, match="num_hidden_layers"):
        megatron.read_config(config)
    config.write_text(json.dumps({"num_hidden_layers": 94, "num_experts": 128, "mlp_only_layers": [0, 1]}))
    assert megatron.read_config(config) == megatron.ModelShape(94, 128, frozenset(range(2, 94)))
    result = CliRunner().invoke(main, ["ckpt", "check", str(tmp_path), "--config", str(tmp_path / "none.json")])
    assert result.exit_code == 2 and "--config" in result.stderr


def test_not_a_folder_is_bad_input(tmp_path):
    result = CliRunner().invoke(main, ["ckpt", "check", str(tmp_path / "absent"), "--json"])
    assert result.exit_code == 2
    assert json.loads(result.stdout)["exit_code"] == 2


def test_a_storage_entry_outside_the_folder_is_refused(tmp_path):
    entries = layout.Entries(["w"], [(0,)], ["../../etc/passwd"], [0], [4])
    problems, files, size, _, _ = check._files(tmp_path, entries)
    assert [(p.kind, p.subject) for p in problems] == [("unsafe-path", "../../etc/passwd")]
    (tmp_path / "x.distcp").symlink_to("/etc/hostname")
    problems, *_ = check._files(tmp_path, layout.Entries(["w"], [(0,)], ["x.distcp"], [0], [4]))
    assert [(p.kind, p.detail) for p in problems] == [("unsafe-path", "a symbolic link: not followed")]


def _script(tmp_path: Path, folder: Path) -> Path:
    script = tmp_path / "train.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo \\\n"
        "    actor_rollout_ref.actor.megatron.use_dist_checkpointing=True \\\n"
        f"    actor_rollout_ref.actor.megatron.dist_checkpointing_path={folder} \\\n"
        f"    actor_rollout_ref.ref.megatron.dist_checkpointing_path={folder}\n"
    )
    return script


def test_run_preflight_refuses_a_broken_checkpoint_unless_no_preflight(tmp_path):
    from ascendfix.profile import manifest
    from ascendfix.site import Site

    profile = manifest.load_profile("verl-796871d")
    folder = tmp_path / "dist_ckpt"
    folder.mkdir()
    (folder / "common.pt").write_bytes(b"")
    seams = preflight.Seams(checkpoint_problems=preflight.default_seams().checkpoint_problems)
    argv = ["bash", str(_script(tmp_path, folder))]
    found = preflight.run_preflight(Site(profile, "npu", environ={}), argv, seams)
    messages = [f.message for f in found.problems if f.source == "checkpoint"]
    assert len(messages) == 2  # one folder, checked once: .metadata and metadata.json missing
    assert all(m.startswith(f"actor_rollout_ref.actor.megatron.dist_checkpointing_path={folder}: ") for m in messages)
    assert any("missing-file .metadata" in m for m in messages) and any(
        "incomplete metadata.json" in m for m in messages
    )
    skipped = preflight.run_preflight(Site(profile, "npu", environ={}), argv, seams, full=False)
    assert not [f for f in skipped.problems if f.source == "checkpoint"]


def test_preflight_skips_a_checkpoint_the_job_does_not_load():
    overrides = {
        "a.megatron.use_dist_checkpointing": "False",
        "a.megatron.dist_checkpointing_path": "/ckpt/a",
        "b.megatron.dist_checkpointing_path": "$DIST_CKPT_PATH",
        "c.megatron.dist_checkpointing_path": "/ckpt/c",
        "d.dist_checkpointing_path": "'/ckpt/c'",
    }
    assert preflight.checkpoint_folders(overrides) == {
        "/ckpt/c": ["c.megatron.dist_checkpointing_path", "d.dist_checkpointing_path"]
    }


@pytest.mark.slow
def test_preflight_passes_a_complete_checkpoint(dcp):
    assert preflight.default_seams().checkpoint_problems(dcp) == []


@pytest.mark.slow
def test_every_node_sees_the_same_files_or_the_table_says_which(dcp, tmp_path, monkeypatch):
    from ascendfix.cluster import fanout

    other = Path(shutil.copytree(dcp, tmp_path / "other"))
    (other / "__3_0.distcp").unlink()
    folders = {"10.0.0.1": dcp, "10.0.0.2": dcp, "10.0.0.3": other}  # what each node's path holds

    def fake_run(argv, address, timeout, local):
        answers = []
        for address, folder in folders.items():
            answer = local([str(folder), *argv[1:]], timeout)
            answers.append(fanout._answer(fanout.NodeAnswer(address.replace(".", ""), address), answer))
        return answers

    monkeypatch.setattr(fanout, "run", fake_run)
    result = CliRunner().invoke(main, ["ckpt", "check", str(dcp), "--ray", "--json"])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    size = (dcp / "__3_0.distcp").stat().st_size
    labels = [n["node"] for n in report["nodes"]]
    assert report["differing"] == [
        {"file": "__3_0.distcp", "sizes": dict(zip(labels, [size, size, None], strict=True))}
    ]
    assert [n["returncode"] for n in report["nodes"]] == [0, 0, 1]
    text = CliRunner().invoke(main, ["ckpt", "check", str(dcp), "--ray"]).stdout
    assert "nodes see different files (1):" in text and "(absent)" in text
    folders["10.0.0.3"] = dcp
    assert CliRunner().invoke(main, ["ckpt", "check", str(dcp), "--ray"]).exit_code == 0


def test_file_views_and_differences(tmp_path):
    (tmp_path / "a.distcp").write_bytes(b"12345")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.pt").write_bytes(b"1")
    (tmp_path / "link").symlink_to(tmp_path / "a.distcp")
    view = views.file_view(tmp_path)
    assert view == {"a.distcp": 5, "link": -1, "sub/b.pt": 1}
    other = {**view, "a.distcp": 4}
    del other["sub/b.pt"]
    assert views.differences({"n1": view, "n2": other}) == [
        ("a.distcp", {"n1": 5, "n2": 4}),
        ("sub/b.pt", {"n1": 1, "n2": None}),
    ]
    assert views.digest(view) == views.digest(dict(view)) != views.digest(other)


def test_printed_names_carry_no_control_characters():
    from ascendfix.cli import ckpt

    assert ckpt.clean("w\x1b[2J\x07\x9b.weight") == "weight"  # what every line ckpt check prints goes through


# What layout.py reads from each record, by the torch class that pickles it.
READ_FIELDS = {
    ("metadata", "Metadata"): {"state_dict_metadata", "storage_data"},
    ("metadata", "TensorStorageMetadata"): {"size", "chunks"},
    ("metadata", "ChunkStorageMetadata"): {"offsets", "sizes"},
    ("metadata", "MetadataIndex"): {"fqn", "offset"},
    ("filesystem", "_StorageInfo"): {"relative_path", "offset", "length"},
}


def _classes(path: Path) -> dict[str, set[str]]:
    """Module-level classes -> their annotated fields."""
    import ast

    tree = ast.parse(path.read_text())
    return {
        node.name: {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
        for node in tree.body
        if isinstance(node, ast.ClassDef)
    }


@pytest.mark.upstream
@pytest.mark.parametrize("version", upstream.TORCH_RELEASES)
def test_the_allow_list_covers_what_each_torch_release_pickles(version, upstream_files):
    """Every class torch's checkpoint metadata module defines is allowed, and has the fields layout.py reads."""
    root = upstream_files.torch_checkpoint_tree(version) / "torch"
    dcp = root / "distributed" / "checkpoint"
    defined = {short: _classes(dcp / f"{short}.py") for short in ("metadata", "filesystem")}
    for name in defined["metadata"]:
        assert ("torch.distributed.checkpoint.metadata", name) in pickles.METADATA_NAMES, f"{version} {name}"
    assert ("torch.distributed.checkpoint.filesystem", "_StorageInfo") in pickles.METADATA_NAMES
    for (short, name), fields in READ_FIELDS.items():
        assert fields <= defined[short][name], f"torch {version}: {short}.{name} has {defined[short][name]}"
    planner = _classes(dcp / "planner.py")
    for name in ("SavePlan", "WriteItem", "TensorWriteData", "WriteItemType"):  # Megatron's metadata keeps its plans
        assert name in planner and ("torch.distributed.checkpoint.planner", name) in pickles.METADATA_NAMES
    assert "def _get_layout(" in (root / "serialization.py").read_text()


def test_a_symlinked_metadata_or_common_pt_is_not_followed(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (tmp_path / "elsewhere").write_bytes(pickle.dumps({}))
    (folder / ".metadata").symlink_to(tmp_path / "elsewhere")
    (folder / "common.pt").symlink_to(tmp_path / "elsewhere")
    (folder / "metadata.json").write_text(json.dumps({"sharded_backend": "torch_dist"}))
    code, report = ckpt_check(folder)
    assert code == 1
    assert kinds(report) == {("unreadable", ".metadata"), ("unreadable", "common.pt")}
    assert all("symbolic link" in p["detail"] for p in report["problems"])


@pytest.fixture(scope="module")
def two_ray_nodes():
    """A head and a worker on this machine, bound to loopback, each with this checkout on PYTHONPATH."""
    with local_head("ckray") as (c, temp):
        with one_ray_start():
            worker = c.add_node(**SMALL_NODE, temp_dir=temp)
        c.wait_for_nodes()
        assert {c.head_node.node_ip_address, worker.node_ip_address} == {"127.0.0.1"}  # loopback only
        yield c


@pytest.mark.slow
def test_every_node_of_a_real_ray_cluster_checks_the_checkpoint(two_ray_nodes, dcp, ascendfix_cli):
    done = ascendfix_cli("ckpt", "check", dcp, "--ray", two_ray_nodes.address, "--json", timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["ok"] and report["differing"] == []
    assert len(report["nodes"]) == 2
    assert {n["result"]["chunks"] for n in report["nodes"]} == {8}
    assert len({n["view"] for n in report["nodes"]}) == 1


@pytest.mark.slow
def test_every_node_of_a_real_ray_cluster_proves_its_share_of_a_verl_save(two_ray_nodes, dcp, tmp_path, ascendfix_cli):
    top = tmp_path / "checkpoints"  # verl's default_local_dir around the save; both nodes see it (shared)
    actor = top / "global_step_5" / "actor"
    actor.mkdir(parents=True)
    shutil.move(str(dcp), actor / "dist_ckpt")
    (top / "latest_checkpointed_iteration.txt").write_text("5")
    argv = ["ckpt", "check", top, "--bytes", "--ray", two_ray_nodes.address, "--json"]
    done = ascendfix_cli(*argv, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["ok"] and report["checkpoint"] == str(actor / "dist_ckpt")
    assert report["proven_bytes"] == _record_sizes(actor / "dist_ckpt")  # every record once, by one node
    assert sum(n["result"]["proven_bytes"] for n in report["nodes"]) == report["proven_bytes"]

    path, start, length, _ = _entry(actor / "dist_ckpt", "w", "__1_0.distcp")
    at, _ = _record_bytes(path, start, length)
    blob = bytearray(path.read_bytes())
    blob[at] ^= 0x01  # whichever node proves this file must name it
    path.write_bytes(bytes(blob))
    done = ascendfix_cli(*argv, timeout=300)
    assert done.returncode == 1, done.stderr[-2000:]
    found = [p for n in json.loads(done.stdout)["nodes"] for p in n["result"]["problems"]]
    assert [(p["kind"], p["file"]) for p in found] == [
        ("incomplete-save", "latest_checkpointed_iteration.txt"),
        ("crc-mismatch", "__1_0.distcp"),
    ]


def test_each_copy_is_proven_once_and_a_shared_file_by_one_node():
    seen = {
        "n1": {"a.distcp": "10:1:5:5", "b.distcp": "10:2:5:5", "c.distcp": "10:3:5:5"},
        "n2": {"a.distcp": "10:1:5:5", "b.distcp": "10:2:5:5", "c.distcp": "10:9:5:7"},  # c: its own copy
    }
    chosen = views.shares(seen)
    assert sorted(chosen) == ["n1", "n2"]
    assert sorted(chosen["n1"] + chosen["n2"]) == ["a.distcp", "b.distcp", "c.distcp", "c.distcp"]
    assert "c.distcp" in chosen["n1"] and "c.distcp" in chosen["n2"]
    assert views.shares(seen) == chosen  # stable


def _entry(folder: Path, fqn: str, file: str = ""):
    """(file, start, length) of the first storage entry of ``fqn`` (in ``file`` when given; read with torch:
    our own save, trusted)."""
    pytest.importorskip("torch", reason=NO_TORCH)
    metadata = pickle.loads((folder / ".metadata").read_bytes())
    index, info = next(
        (i, v) for i, v in metadata.storage_data.items() if i.fqn == fqn and v.relative_path.endswith(file)
    )
    return folder / info.relative_path, info.offset, info.length, list(index.offset)


def _cli(*args: str) -> subprocess.CompletedProcess:
    """The command as a new user runs it: its own interpreter, which must never import torch."""
    probe = "import runpy, sys; sys.argv = ['ascendfix', *sys.argv[1:]]; "
    probe += "sys.modules['torch'] = None; runpy.run_module('ascendfix', run_name='__main__')"
    return cli.run(*args, code=probe, timeout=120)


@pytest.mark.slow
def test_a_zero_fill_and_a_lost_tail_are_named_with_file_and_tensor(dcp):
    path, start, length, offsets = _entry(dcp, "w")
    with open(path, "r+b") as f:  # rsync --inplace died: this record's bytes never came
        f.seek(start)
        f.write(bytes(length))
    done = _cli("ckpt", "check", str(dcp), "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    (problem,) = report["problems"]
    assert (problem["kind"], problem["file"], problem["tensor"], problem["offsets"]) == (
        "corrupt",
        path.name,
        "w",
        offsets,
    )
    assert "zero fill" in problem["detail"]

    last = max(dcp.glob("*.distcp"), key=lambda p: p.name)
    data = bytearray(last.read_bytes())
    data[-512:] = bytes(512)  # a lost write at its end (these records are 1.5 kB; a real one's last 4 KiB)
    last.write_bytes(bytes(data))
    problems = {(p["file"], p["kind"]): p for p in ckpt_check(dcp)[1]["problems"]}
    tail = problems[(last.name, "corrupt")]
    assert "end record" in tail["detail"] and tail["tensor"] in {"w", "b"}


@pytest.mark.slow
def test_a_complete_save_says_its_bytes_were_not_proven(dcp):
    done = _cli("ckpt", "check", str(dcp))
    assert done.returncode == 0, done.stderr
    assert "complete (each record's zip frame read; its bytes not proven: --bytes proves them)" in done.stdout


def _record_bytes(path: Path, start: int, length: int, member: str = "/data/0") -> tuple[int, int]:
    """Where the bytes of a record (``member``) of the entry at ``start`` lie in ``path``: (position, size);
    read with the standard library's zipfile (our own save, trusted)."""
    with open(path, "rb") as f:
        f.seek(start)
        blob = f.read(length)
    info = next(i for i in zipfile.ZipFile(io.BytesIO(blob)).infolist() if i.filename.endswith(member))
    name_length, extra_length = struct.unpack_from("<2H", blob, info.header_offset + 26)
    return start + info.header_offset + 30 + name_length + extra_length, info.file_size


def _record_sizes(folder: Path) -> int:
    pytest.importorskip("torch", reason=NO_TORCH)
    return sum(info.length for info in pickle.loads((folder / ".metadata").read_bytes()).storage_data.values())


@pytest.mark.slow
def test_bytes_proves_every_record_of_a_clean_save_without_torch(dcp):
    done = _cli("ckpt", "check", str(dcp), "--bytes", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] and report["warnings"] == []
    assert report["proven_bytes"] == _record_sizes(dcp)
    shown = _cli("ckpt", "check", str(dcp), "--bytes")
    assert "proven against torch's CRC-32s" in shown.stdout


@pytest.mark.slow
def test_bytes_names_a_flipped_bit_with_its_file_tensor_and_chunk(dcp):
    path, start, length, offsets = _entry(dcp, "w")
    at, size = _record_bytes(path, start, length)
    with open(path, "r+b") as f:  # one bit of one float flipped: torch's own load returns it silently
        f.seek(at + size // 2)
        byte = f.read(1)[0]
        f.seek(at + size // 2)
        f.write(bytes([byte ^ 0x10]))
    assert _cli("ckpt", "check", str(dcp)).returncode == 0  # its frame is whole: only --bytes sees it
    done = _cli("ckpt", "check", str(dcp), "--bytes", "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    (problem,) = report["problems"]
    assert (problem["kind"], problem["file"], problem["tensor"], problem["offsets"]) == (
        "crc-mismatch",
        path.name,
        "w",
        offsets,
    )
    assert "archive/data/0: CRC-32" in problem["detail"]
    assert report["proven_bytes"] == _record_sizes(dcp) - length


@pytest.mark.slow
def test_bytes_names_a_zero_fill_and_a_record_cut_short(dcp):
    path, start, length, offsets = _entry(dcp, "b", "__0_0.distcp")
    with open(path, "r+b") as f:
        f.seek(start)
        f.write(bytes(length))
    cut_path, cut_start, cut_length, cut_offsets = _entry(dcp, "w", "__3_0.distcp")
    with open(cut_path, "r+b") as f:  # the copy stopped inside w's record
        f.truncate(cut_start + cut_length // 2)
    code, report = ckpt_check(dcp, "--bytes")
    assert code == 1
    found = {(p["kind"], p["file"], p.get("tensor"), tuple(p.get("offsets") or ())) for p in report["problems"]}
    assert ("corrupt", path.name, "b", tuple(offsets)) in found
    assert ("truncated", cut_path.name, "w", tuple(cut_offsets)) in found


@pytest.mark.slow
def test_bytes_names_a_record_whose_dtype_is_not_the_metadatas(dcp):
    import torch

    def as_bf16(metadata):
        metadata.state_dict_metadata["w"].properties.dtype = torch.bfloat16

    _rewrite_metadata(dcp, as_bf16)
    code, report = ckpt_check(dcp, "--bytes")
    assert code == 1
    wrong = [p for p in report["problems"] if p["kind"] == "wrong-dtype"]
    assert {p["tensor"] for p in wrong} == {"w"} and len(wrong) == 4
    assert "FloatStorage (float32), the metadata says bfloat16" in wrong[0]["detail"]


@pytest.mark.slow
def test_the_verl_tree_is_followed_to_the_save_its_iteration_file_names(dcp, tmp_path):
    top = tmp_path / "checkpoints"
    for step in (10, 20):
        actor = top / f"global_step_{step}" / "actor"
        (actor / "huggingface").mkdir(parents=True)
        shutil.copytree(dcp, actor / "dist_ckpt")
        (actor / "transformer_config.json").write_text("{}")
    (top / "latest_checkpointed_iteration.txt").write_text("20")
    wanted = str(top / "global_step_20" / "actor" / "dist_ckpt")
    for given in (top, top / "global_step_20", top / "global_step_20" / "actor", Path(wanted)):
        code, report = ckpt_check(given)
        assert (code, report["checkpoint"]) == (0, wanted), given
    (Path(wanted) / ".metadata").unlink()  # the save it names did not finish
    code, report = ckpt_check(top)
    assert code == 1
    assert kinds(report) == {
        ("incomplete-save", "latest_checkpointed_iteration.txt"),
        ("missing-file", ".metadata"),
    }
    (top / "latest_checkpointed_iteration.txt").write_text("30")
    code, report = ckpt_check(top)
    assert kinds(report) == {("missing-save", "latest_checkpointed_iteration.txt")}
    assert "global_step_30" in report["problems"][0]["detail"]


def test_a_hf_config_beside_the_save_is_the_default_config(tmp_path):
    from ascendfix.checkpoint import verl

    actor = tmp_path / "actor"
    (actor / "dist_ckpt").mkdir(parents=True)
    (actor / "huggingface").mkdir()
    (actor / "huggingface" / "config.json").write_text(json.dumps({"num_hidden_layers": 4}))
    found = verl.locate(actor)
    assert (found.folder, found.kind, found.config) == (actor / "dist_ckpt", "dcp", actor / "huggingface/config.json")


def _safetensors(path: Path, tensors: dict[str, tuple[str, list, bytes]]) -> None:
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    encoded = json.dumps(header).encode()
    path.write_bytes(len(encoded).to_bytes(8, "little") + encoded + data)


def test_an_mbridge_save_is_checked_as_safetensors(tmp_path):
    hf = tmp_path / "global_step_5" / "actor" / "huggingface"
    hf.mkdir(parents=True)
    _safetensors(hf / "model-00001-of-00002.safetensors", {"a.weight": ("BF16", [2, 2], bytes(8))})
    _safetensors(hf / "model-00002-of-00002.safetensors", {"b.weight": ("F32", [3], bytes(12))})
    index = {
        "weight_map": {"a.weight": "model-00001-of-00002.safetensors", "b.weight": "model-00002-of-00002.safetensors"}
    }
    (hf / "model.safetensors.index.json").write_text(json.dumps(index))
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("5\n")
    code, report = ckpt_check(tmp_path)
    assert (code, report["checkpoint"], report["files"]) == (0, str(hf), 2)
    second = hf / "model-00002-of-00002.safetensors"
    second.write_bytes(second.read_bytes()[:-4])
    index["weight_map"]["c.weight"] = "model-00001-of-00002.safetensors"
    (hf / "model.safetensors.index.json").write_text(json.dumps(index))
    code, report = ckpt_check(tmp_path)
    assert code == 1
    assert kinds(report) >= {("truncated", second.name), ("missing-tensor", "model.safetensors.index.json")}


@pytest.mark.slow
def test_a_copy_still_running_and_a_megatron_plan_without_its_files(mcore):
    common = mcore / "common.pt"
    common.rename(mcore / ".common.pt.Xa3b9Q")  # rsync's partial copy, not renamed yet
    (mcore / "metadata.json").unlink()
    code, report = ckpt_check(mcore)
    assert code == 1
    assert kinds(report) == {
        ("partial-copy", ".common.pt.Xa3b9Q"),
        ("incomplete", "metadata.json"),
        ("missing-file", "common.pt"),
    }
    assert "a copy is still running" in report["problems"][0]["detail"]


def _older(path: Path, hours: float) -> None:
    """Give ``path`` the mtime of a file saved ``hours`` before, as ``cp -p`` and rsync keep it."""
    os.utime(path, (path.stat().st_atime, path.stat().st_mtime - hours * 3600))


@pytest.mark.slow
def test_a_data_file_from_another_save_is_named_at_any_file_count(dcp):
    _older(dcp / "__3_0.distcp", 38)
    code, report = ckpt_check(dcp)
    assert code == 1
    assert kinds(report) == {("mixed-save", "__3_0.distcp")}
    (mixed,) = [p for p in report["problems"] if p["kind"] == "mixed-save"]
    assert mixed["detail"].startswith("written 38.0 h before .metadata (the save's last file): a file of another save")
    assert report["warnings"] == []  # named once
    code, proven = ckpt_check(dcp, "--bytes")
    assert (code, kinds(proven)) == (1, {("mixed-save", "__3_0.distcp")})


@pytest.mark.slow
def test_a_file_written_within_the_hour_before_the_metadata_is_the_saves_own(dcp):
    _older(dcp / "__3_0.distcp", 0.9)
    assert ckpt_check(dcp)[0] == 0


@pytest.mark.slow
@pytest.mark.parametrize("stale", ["__1_0.distcp", "common.pt"])
def test_a_two_file_megatron_save_mixed_from_two_saves_is_named(tmp_path, mcore_two_files_saved, stale):
    """The guide's converter writes two data files, common.pt and metadata.json: a stale one is named too."""
    mcore = Path(shutil.copytree(mcore_two_files_saved, tmp_path / "ckpt"))
    assert sorted(p.name for p in mcore.glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    assert ckpt_check(mcore)[0] == 0
    _older(mcore / stale, 38)
    code, report = ckpt_check(mcore)
    assert code == 1
    assert kinds(report) == {("mixed-save", stale)}


@pytest.mark.slow
def test_an_extra_copy_of_a_data_file_is_a_warning_naming_it(mcore):
    shutil.copy2(mcore / "__1_0.distcp", mcore / "__1_0 (copy).distcp")
    code, report = ckpt_check(mcore)
    assert (code, report["problems"]) == (0, [])
    assert [(w["kind"], w["file"]) for w in report["warnings"]] == [("extra-file", "__1_0 (copy).distcp")]


def _hostile(folder: Path, data: bytes) -> dict:
    folder.mkdir(exist_ok=True)
    (folder / ".metadata").write_bytes(data)
    done = _cli("ckpt", "check", str(folder), "--json")
    assert done.returncode == 1 and not done.stderr, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_hostile_metadata_pickles_are_unreadable_in_one_line(tmp_path):
    deep = b"\x80\x04}(" + b")" + b"\x85" * 1_000_000 + b"K\x01u."  # a key nested a million tuples deep
    memo_bomb = b"\x80\x04N" + b"r" + (2**28).to_bytes(4, "little") + b"."
    path_bomb = b"\x80\x04cpathlib\nPosixPath\n]" + b"\x94" + b"(h\x00h\x00e" * 40 + b"\x85R."
    for name, data in {"deep": deep, "memo": memo_bomb, "path": path_bomb}.items():
        report = _hostile(tmp_path / name, data)
        (problem,) = report["problems"]
        assert (problem["kind"], problem["file"]) == ("unreadable", ".metadata"), name
        assert "\n" not in problem["detail"]


@pytest.mark.slow
def test_random_mutations_of_a_real_metadata_never_crash_the_check(dcp, tmp_path):
    import random

    original = (dcp / ".metadata").read_bytes()
    rng = random.Random(27)
    for n in range(40):
        data = bytearray(original)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        (dcp / ".metadata").write_bytes(bytes(data))
        code, report = ckpt_check(dcp)
        assert code in (0, 1), n
        assert all("\n" not in p["detail"] for p in report["problems"])


# The bounded child run both ways, in a process of its own: one thread (it forks) and with a second
# thread alive (it never forks: a fresh interpreter). Each way must answer, and report a death, the same.
BOUNDED_BOTH_WAYS = """
import json, os, signal, sys, threading, time
from pathlib import Path
from ascendfix.checkpoint import bounded, check, megatron

forks = []
fork = os.fork
os.fork = lambda: forks.append(1) or fork()
if sys.argv[2] == "threads":
    threading.Thread(target=threading.Event().wait, daemon=True).start()
bounded.STEP_SECONDS = 2.0

def run(work, *args):
    try:
        return ["answer", bounded.run(work, list(args), 1 << 30, "first.pkl")]
    except bounded.Died as e:
        return ["died", e.subject, e.detail]
    except bounded.Failed as e:
        return ["failed", str(e), e.exit_code]

found = {
    "answer": run(json.loads, '{"a": [1, 2]}'),
    "signal": run(os.abort),
    "cut": run(signal.raise_signal, signal.SIGBUS),
    "error": run(megatron.read_config, "/nonexistent/config.json"),
    "memory": run(bytearray, 1 << 40),
    "stuck": run(time.sleep, 60),
    "check": check.check(Path(sys.argv[1]), prove=True).to_json(),
}
print(json.dumps({"forks": len(forks), "found": found}))
"""


def test_the_check_forks_only_a_single_threaded_process_and_answers_the_same_either_way(dcp, tmp_path):
    (dcp / "__2_0.distcp").write_bytes((dcp / "__2_0.distcp").read_bytes()[:-100])  # one problem to report
    script = tmp_path / "both.py"
    script.write_text(BOUNDED_BOTH_WAYS)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    ways = {}
    for way in ("one", "threads"):
        done = subprocess.run([sys.executable, str(script), str(dcp), way], capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        ways[way] = json.loads(done.stdout)
    assert ways["one"]["forks"] == 7 and ways["threads"]["forks"] == 0
    found = ways["threads"]["found"]
    assert found == ways["one"]["found"]
    assert found["answer"] == ["answer", {"a": [1, 2]}]
    assert found["signal"][:2] == ["died", "first.pkl"] and "killed its reader (SIGABRT)" in found["signal"][2]
    assert found["cut"][:2] == ["died", "first.pkl"] and "cut shorter while it was read (SIGBUS)" in found["cut"][2]
    assert found["error"][0] == "failed" and found["error"][2] == 2 and "/nonexistent/config.json" in found["error"][1]
    assert found["memory"][:2] == ["died", "first.pkl"] and "more memory" in found["memory"][2]
    assert found["stuck"] == ["died", "first.pkl", "its pickle took more than 2 s to read: stopped (a hostile file?)"]
    assert [(p["kind"], p["file"]) for p in found["check"]["problems"]] == [("truncated", "__2_0.distcp")]
    assert found["check"]["chunks"] == 8


@pytest.mark.slow
def test_a_process_with_ray_and_busy_threads_checks_a_good_save_as_good_every_time(dcp, monkeypatch):
    """The pytest process as the whole module leaves it, or a Ray worker: a driver connected in-process
    (gRPC's and Ray's threads), torch loaded and threads that allocate and lock while the checks run."""
    torch = pytest.importorskip("torch", reason=NO_TORCH)
    ray = pytest.importorskip("ray")
    temp = tempfile.mkdtemp(prefix="ckdrv")  # short: the session holds sockets
    monkeypatch.setenv("RAY_TMPDIR", temp)
    ray.init(num_cpus=1, include_dashboard=False, _temp_dir=temp, logging_level="ERROR", log_to_driver=False)
    stop, lock = threading.Event(), threading.Lock()

    def churn():
        while not stop.is_set():
            with lock:
                blocks = [bytearray(4096) for _ in range(64)]
            zlib.compress(bytes(blocks[0]) * 16, 1)
            torch.ones(64, 64).sum()
            ray.get(ray.put(len(blocks)))

    threads = [threading.Thread(target=churn, daemon=True) for _ in range(3)]
    try:
        for thread in threads:
            thread.start()
        answers = [ckpt_check(dcp) for _ in range(40)]
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)
    assert [(code, report["problems"]) for code, report in answers] == [(0, [])] * 40
    assert {report["chunks"] for _, report in answers} == {8}


def test_stand_ins_cannot_be_rebound_by_one_pickle_for_the_next():
    # BUILD on the Metadata class itself: sets a class attribute, were the classes shared between loads
    rebind = b"\x80\x04ctorch.distributed.checkpoint.metadata\nMetadata\nN}\x8c\x03bad\x88s\x86b."
    pickles.loads(rebind)
    later = pickles.loads_collecting(pickle.dumps(0), ())
    assert not hasattr(later.classes["torch.distributed.checkpoint.metadata", "Metadata"], "bad")


def test_a_fifo_or_a_device_as_common_pt_is_unreadable(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "metadata.json").write_text(json.dumps({"sharded_backend": "torch_dist"}))
    os.mkfifo(folder / "common.pt")
    problems = megatron.layout_problems(folder, megatron_expected=True, quick=False)
    assert [(p.kind, p.subject) for p in problems] == [("unreadable", "common.pt")]
    (folder / "common.pt").unlink()
    (folder / "common.pt").symlink_to("/dev/zero")
    problems = megatron.layout_problems(folder, megatron_expected=True, quick=False)
    assert [(p.kind, p.subject) for p in problems] == [("unreadable", "common.pt")]


def test_odd_layer_names_and_huge_numbers_give_no_traceback(tmp_path):
    model = megatron.ModelShape(4, 8, frozenset(range(4)))
    odd = [
        Tensor("decoder.layers.².mlp.linear_fc1.weight", (4, 8), [(0, 0)], [(4, 8)]),
        Tensor("decoder.layers." + "9" * 5000 + ".mlp.linear_fc1.weight", (4, 8), [(0, 0)], [(4, 8)]),
        Tensor("decoder.layers.mlp.experts.experts.linear_fc1.weight", (4, 8), [(0, 0)], [(10**30, 10**30)]),
    ]
    assert megatron.config_problems(odd, model)  # problems, no exception
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"num_hidden_layers": 10**30}))
    with pytest.raises(UsageError, match="num_hidden_layers"):
        megatron.read_config(config)


def test_a_symlinked_folder_inside_an_entry_path_is_not_followed(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "x.distcp").write_bytes(bytes(64))
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "sub").symlink_to(tmp_path / "elsewhere")
    problems, *_ = check._files(folder, layout.Entries(["w"], [(0,)], ["sub/x.distcp"], [0], [64]))
    assert [(p.kind, p.detail) for p in problems] == [("unsafe-path", "a symbolic link in its folders: not followed")]


@pytest.mark.slow
def test_preflight_checks_the_save_verl_resumes_from(dcp, tmp_path):
    top = tmp_path / "checkpoints"
    assert preflight.resume_folders({"trainer.default_local_dir": str(top)}) == {}  # nothing saved yet
    shutil.copytree(dcp, top / "global_step_3" / "actor" / "dist_ckpt")
    (top / "latest_checkpointed_iteration.txt").write_text("3")
    found = preflight.resume_folders({"trainer.default_local_dir": str(top)})
    assert found == {str(top): ["trainer.default_local_dir"]}
    assert preflight.resume_folders({"trainer.default_local_dir": str(top), "trainer.resume_mode": "disable"}) == {}
    seam = preflight.default_seams().checkpoint_problems
    assert seam(top) == []
    (top / "global_step_3" / "actor" / "dist_ckpt" / "__0_0.distcp").unlink()
    assert [m.split(" ", 2)[:2] for m in seam(top)] == [
        ["incomplete-save", "latest_checkpointed_iteration.txt:"],
        ["missing-file", "__0_0.distcp:"],
    ]


def _dcp_metadata(folder: Path, tensors: dict, entries: list = ()) -> None:
    """Write a ``.metadata`` with torch's own classes: ``tensors`` name -> (shape, [(offsets, sizes)]);
    ``entries``: (name, offsets, file, start, length) storage entries."""
    pytest.importorskip("torch", reason=NO_TORCH)
    import torch
    from torch.distributed.checkpoint import metadata as m
    from torch.distributed.checkpoint.filesystem import _StorageInfo

    items = {}
    for name, (shape, chunks) in tensors.items():
        chunk_list = [m.ChunkStorageMetadata(torch.Size(o), torch.Size(s)) for o, s in chunks]
        items[name] = m.TensorStorageMetadata(m.TensorProperties(dtype=torch.float32), torch.Size(shape), chunk_list)
    storage = {
        m.MetadataIndex(name, torch.Size(o)): _StorageInfo(file, start, length)
        for name, o, file, start, length in entries
    }
    folder.mkdir(exist_ok=True)
    (folder / ".metadata").write_bytes(pickle.dumps(m.Metadata(items, storage_data=storage)))


def test_disjoint_chunks_all_active_at_once_are_not_swept_for_minutes(tmp_path):
    """The sweep's dimension holds every chunk active at once (a staircase): a quadratic sweep, capped and said;
    the other tensors are still checked."""
    n = 4000  # 8 million comparisons, past the cap (24,064 such chunks took 15 minutes before)
    stairs = [((i, i), (n, 1)) for i in range(n)]
    _dcp_metadata(tmp_path, {"stairs": ((2 * n, n), stairs), "w": ((4,), [((0,), (3,)), ((2,), (2,))])})
    code, report = ckpt_check(tmp_path)
    assert code == 1
    found = {(p["kind"], p["tensor"]): p["detail"] for p in report["problems"] if p.get("tensor")}
    assert found["unchecked", "stairs"] == f"overlap not checked: {n:,} chunks active at once"
    assert ("overlap", "w") in found


def test_a_huge_rank_or_number_is_that_tensors_or_files_problem_and_hides_no_other(tmp_path):
    _dcp_metadata(
        tmp_path,
        {
            "rank": ((1,) * 60_000, [((0,) * 60_000, (1,) * 60_000)]),  # took 22 s (math.prod factor by factor)
            "huge": ((10**5000,), [((0,), (10**5000,))]),  # str() of it raises ValueError past 4,300 digits
            "gap": ((4,), [((0,), (2,))]),
        },
        [("gap", (0,), "far.distcp", 10**5000, 4), ("gap", (2,), "gone.distcp", 0, 4)],
    )
    (tmp_path / "far.distcp").write_bytes(bytes(8))
    code, report = ckpt_check(tmp_path)
    assert code == 1
    found = {(p["kind"], p.get("tensor") or p["file"]) for p in report["problems"]}
    assert {("malformed", "rank"), ("malformed", "huge"), ("gap", "gap")} <= found
    assert {("malformed", "far.distcp"), ("missing-file", "gone.distcp")} <= found
    assert all("\n" not in p["detail"] and len(p["detail"]) < 300 for p in report["problems"])


def _torch_zip(numel: int = 1) -> bytes:
    """A stored zip shaped like one DCP item's ``torch.save`` (records only: the proof checks the zip first)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", b"\x80\x02.")
        z.writestr("archive/data/0", bytes(4 * numel))
        z.writestr("archive/version", b"3\n")
    return out.getvalue()


def test_a_central_directory_that_runs_past_its_listing_is_that_files_problem(tmp_path):
    """Under --bytes, a hostile ``.distcp`` whose first central record's comment runs to 10 bytes before the
    listing's end (the next record's 46 cannot be there) is that file's problem; another file's is still named."""
    data = bytearray(_torch_zip())
    size, at = struct.unpack_from("<2L", data, len(data) - 22 + 12)  # the central directory's size and start
    names = struct.unpack_from("<3H", data, at + 28)  # the first record's name, extra and comment lengths
    struct.pack_into("<H", data, at + 32, size - 46 - names[0] - names[1] - 10)
    (tmp_path / "x.distcp").write_bytes(bytes(data))
    entries = layout.Entries(["w", "v"], [(0,), (0,)], ["x.distcp", "y.distcp"], [0, 0], [len(data), 4])
    chunk = check.proof.Chunk("torch.float32", (1,))
    problems, *_ = check._files(tmp_path, entries, [chunk, chunk])
    found = {(p.kind, p.subject): p.detail for p in problems}
    assert "its central directory runs past its end" in found["corrupt", "x.distcp"]
    assert ("missing-file", "y.distcp") in found


def test_every_step_after_the_pickle_is_bounded_in_time(monkeypatch):
    """A step that never ends is stopped and named; one that reads on (a large file's blocks) is not."""
    from ascendfix.checkpoint import bounded

    from tests import steps

    monkeypatch.setattr(bounded, "STEP_SECONDS", 3.0)
    with pytest.raises(bounded.Died) as died:
        bounded.run(steps.stuck, [], 1 << 30, ".metadata")
    assert (died.value.subject, died.value.detail) == (
        "__1_0.distcp",
        "checking it took more than 3 s: stopped (a hostile file?)",
    )
    assert bounded.run(steps.reading_on, [], 1 << 30, ".metadata") == {"read": 10}


def test_a_safetensors_header_of_160000_dims_or_nested_deep_is_one_line(tmp_path):
    hf = tmp_path / "global_step_5" / "actor" / "huggingface"
    hf.mkdir(parents=True)
    dims = [1] * 160_000  # 149 s before, with no timer at all
    _safetensors(hf / "model-00001-of-00003.safetensors", {"a.weight": ("BF16", dims, bytes(2))})
    deep = b'{"a.weight": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    (hf / "model-00002-of-00003.safetensors").write_bytes(len(deep).to_bytes(8, "little") + deep)
    _safetensors(hf / "model-00003-of-00003.safetensors", {"c.weight": ("F32", [3], bytes(8))})  # cut short
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("5\n")
    code, report = ckpt_check(tmp_path)
    assert code == 1
    found = {p["file"]: (p["kind"], p["detail"]) for p in report["problems"]}
    assert found["model-00001-of-00003.safetensors"] == (
        "malformed",
        f"a.weight: a shape that is not a list of at most {geometry.MAX_RANK} dimensions",
    )
    assert found["model-00002-of-00003.safetensors"][0] == "malformed"
    assert "nested more than 64 deep" in found["model-00002-of-00003.safetensors"][1]
    assert found["model-00003-of-00003.safetensors"][0] == "malformed"


def test_a_config_nested_past_the_limit_is_one_line(tmp_path):
    config = tmp_path / "config.json"
    config.write_text('{"num_hidden_layers": ' + "[" * 100_000 + "]" * 100_000 + "}")
    result = CliRunner().invoke(main, ["ckpt", "check", str(tmp_path), "--config", str(config)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.strip().startswith("error: --config") and "nested more than 64 deep" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
