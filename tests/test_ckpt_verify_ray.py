"""``ckpt verify --ray`` on a real local Ray cluster of two nodes, on real conversions (tests/conversion.py).

Shared storage: both nodes see the same files (one machine), each compares its share of the bytes,
and the report is the one ``ckpt verify`` gives alone; a damaged value is named with the node that
compared it. Node-local storage: the worker node runs in a mount namespace of its own where the
converted folder's path holds another copy (a bind mount), so the two nodes hold different files at
the same path, as two machines' local disks do; each verifies its own copy, and the file one copy
lacks is named with that copy's node. A save split across the nodes' disks (rank 0's files, ``.metadata``
and Megatron's own files on the head's, rank 1's on the worker's, at the same path) is proven as one
save: each node compares the files it holds, ``.metadata`` sent to the worker through the tasks'
arguments.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from ascendfix.checkpoint import check
from ascendfix.checkpoint.verify import nodes, run

from tests import conversion
from tests.cluster import REPO, SMALL_NODE, local_head, one_ray_start

FC1 = "decoder.layers.mlp.experts.experts.linear_fc1.weight"


@pytest.fixture(scope="module")
def built():
    """The tiny Qwen3-MoE model and its conversions (built once into the test cache)."""
    return conversion.built()


@pytest.fixture(scope="module")
def shared_nodes():
    """A head and a worker on this machine: both see the same files, as nodes on shared storage do."""
    with local_head("cvray") as (c, temp):
        with one_ray_start():
            c.add_node(**SMALL_NODE, temp_dir=temp)
        c.wait_for_nodes()
        yield c


def verify(cli, *args: object) -> tuple[int, dict]:
    result = cli("ckpt", "verify", *args, "--json", timeout=600)
    assert result.returncode in (0, 1), result.stderr[-3000:]
    return result.returncode, json.loads(result.stdout)


@pytest.mark.slow
@pytest.mark.upstream
def test_on_shared_storage_each_node_compares_a_share_and_the_report_is_the_local_one(
    built, shared_nodes, ascendfix_cli
):
    alone = verify(ascendfix_cli, built["moe"], built["moe-mcore-pp2"])[1]
    code, report = verify(ascendfix_cli, built["moe"], built["moe-mcore-pp2"], "--ray", shared_nodes.address)
    assert code == 0, report["problems"]
    assert report["ok"] and report["problems"] == []
    for field in ("direction", "architecture", "tensors", "proven_bytes", "ignored"):
        assert report[field] == alone[field], field
    nodes = report["nodes"]
    assert sorted(n["part"] for n in nodes) == [[0, 2, 0], [1, 2, 0]]  # one group: shared storage
    assert all(n["proven_bytes"] > 0 and n["error"] == "" and n["returncode"] == 0 for n in nodes)
    assert sum(n["proven_bytes"] for n in nodes) == alone["proven_bytes"]  # every byte once, by one node
    human = ascendfix_cli("ckpt", "verify", built["moe"], built["moe-mcore-pp2"], "--ray", shared_nodes.address)
    assert human.returncode == 0 and "proven byte for byte" in human.stdout and "1/2 of copy 1" in human.stdout


@pytest.mark.slow
@pytest.mark.upstream
def test_a_damaged_value_is_named_with_the_node_that_compared_it(built, shared_nodes, ascendfix_cli, tmp_path):
    converted = conversion.copy(built["moe-mcore-pp2"], tmp_path / "mcore")
    record = conversion.Record(converted, FC1, (1, 3, 0, 0))  # layer 1, expert 3's gate half
    data = bytearray(record.read())
    data[100] ^= 1  # one bit, its CRC-32 rewritten: ckpt check --bytes passes it
    record.write(bytes(data))
    code, report = verify(ascendfix_cli, built["moe"], converted, "--ray", shared_nodes.address)
    assert code == 1 and not report["ok"]
    (problem,) = report["problems"]
    assert problem["kind"] == "value-mismatch" and problem["file"] == record.path.name
    assert problem["region"] == f"{FC1}[1, 3, 0:64] (gate)"
    labels = {n["node"]: n for n in report["nodes"]}
    assert problem["node"] in labels  # one node compared it, and is named
    assert labels[problem["node"]]["returncode"] == 1
    assert [n["returncode"] for n in report["nodes"] if n["node"] != problem["node"]] == [0]
    human = ascendfix_cli("ckpt", "verify", built["moe"], converted, "--ray", shared_nodes.address)
    assert human.returncode == 1 and f"(node {problem['node']})" in human.stdout


# a worker node started as ray.cluster_utils.Cluster.add_node starts one, from its own process (which a
# mount namespace can hold), kept until SIGTERM
_WORKER = """
import signal, sys
import ray._private.node, ray._private.parameter, ray._private.services
params = ray._private.parameter.RayParams(
    gcs_address=sys.argv[1], temp_dir=sys.argv[2], num_cpus=1, num_gpus=0, object_store_memory=80 * 1024 * 1024,
    min_worker_port=0, max_worker_port=0, node_manager_port=0, include_log_monitor=False,
    env_vars={"PYTHONPATH": sys.argv[3]})
node = ray._private.node.Node(params, head=False, shutdown_at_exit=False, spawn_reaper=False)
ray._private.services.wait_for_node(node.gcs_address, node.plasma_store_socket_name, 60)  # registered
print("worker started", flush=True)
signal.sigwait({signal.SIGTERM})
node.kill_all_processes(check_alive=False, allow_graceful=True)
"""


@contextmanager
def _worker_with_its_own_copy(head, temp: str, copy: Path, at: Path) -> Iterator[None]:
    """A worker node whose processes see ``copy`` at ``at`` (a bind mount in a mount namespace of its own)."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux) for a mount namespace of the worker's own")
    mount = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
    argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", mount, "sh", str(copy), str(at),
            sys.executable, "-c", _WORKER, head.address, temp, str(REPO)]  # fmt: skip
    log = Path(temp) / "worker.log"
    with one_ray_start(), open(log, "w") as out:
        worker = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 120
        while "worker started" not in log.read_text():
            if worker.poll() is not None or time.monotonic() > deadline:
                worker.kill()
                pytest.fail(f"the worker did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
    try:
        yield
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


@pytest.mark.slow
@pytest.mark.upstream
def test_on_node_local_storage_each_node_verifies_its_own_copy(built, ascendfix_cli, tmp_path):
    converted = conversion.copy(built["moe-mcore-pp2"], tmp_path / "mcore")  # the head's copy
    other = conversion.copy(built["moe-mcore-pp2"], tmp_path / "worker-disk")  # the worker's, at the same path
    with local_head("cvray") as (head, temp), _worker_with_its_own_copy(head, temp, other, converted):
        alone = verify(ascendfix_cli, built["moe"], converted)[1]
        code, report = verify(ascendfix_cli, built["moe"], converted, "--ray", head.address)
        assert code == 0, report
        assert sorted(n["part"] for n in report["nodes"]) == [[0, 1, 0], [0, 1, 1]]  # two copies, one node each
        assert report["proven_bytes"] == 2 * alone["proven_bytes"]  # each copy proven whole, where it lies
        assert report["tensors"] == alone["tensors"]

        (other / "__1_1.distcp").unlink()  # the worker's disk lacks one file
        code, report = verify(ascendfix_cli, built["moe"], converted, "--ray", head.address)
        assert code == 1 and not report["ok"]
        lacking = next(n["node"] for n in report["nodes"] if n["proven_bytes"] == 0)
        whole = next(n for n in report["nodes"] if n["node"] != lacking)
        assert whole["returncode"] == 0 and whole["proven_bytes"] == alone["proven_bytes"]
        missing = [p for p in report["problems"] if p["kind"] == "missing-file"]
        assert [(p["file"], p["node"]) for p in missing] == [("__1_1.distcp", lacking)]
        assert missing[0]["detail"].endswith(f"(on this node; {whole['node']} hold(s) it)")  # where a copy lies
        assert all(p["node"] == lacking for p in report["problems"])


def test_nodes_that_see_the_same_files_share_the_work_and_a_copy_of_its_own_is_its_nodes():
    shared = {"hf": {"a.safetensors": "10:1:5:5"}, "mc": {"__0_0.distcp": "20:2:5:5"}}
    own = {"hf": shared["hf"], "mc": {"__0_0.distcp": "20:9:5:7"}}  # the same name, another copy
    assert nodes.parts({"n3": shared, "n1": shared, "n2": own}) == {"n1": [0, 2, 0], "n3": [1, 2, 0], "n2": [0, 1, 1]}

    def report(part: list[int], tensors: int, failed: list[str], problems: list[dict], proven: int) -> dict:
        head = {"source": "s", "converted": "c", "direction": "hf-to-mcore", "architecture": "Qwen3MoeForCausalLM"}
        return {**head, "tensors": tensors, "failed": failed, "proven_bytes": proven, "ignored": ["x._extra_state"],
                "problems": problems, "part": part}  # fmt: skip

    lost = {"kind": "missing-tensor", "file": "", "tensor": "t", "source_tensor": "s", "region": "", "detail": "d"}
    differs = {**lost, "kind": "value-mismatch", "tensor": "u", "source_tensor": "model.u"}
    merged = nodes.merge(
        [
            ("n1", report([0, 2, 0], 9, ["model.u"], [lost, differs], 100)),
            ("n3", report([1, 2, 0], 10, [], [lost], 200)),
            ("n2", report([0, 1, 1], 10, [], [], 300)),
        ]
    )
    assert merged["proven_bytes"] == 600 and merged["ignored"] == ["x._extra_state"]
    assert merged["tensors"] == 9  # model.u failed in copy 1: not proven in every copy
    assert [(p["kind"], p["node"]) for p in merged["problems"]] == [
        ("missing-tensor", "n1, n3"),
        ("value-mismatch", "n1"),
    ]


def _split(full: Path, head_disk: Path, worker_disk: Path) -> tuple[list[str], list[str]]:
    """``full`` split as a PP=2 save lies on two nodes' own disks: rank 1's data files on the worker's, the rest
    (rank 0's data files, ``.metadata``, ``metadata.json``, ``common.pt``) on the head's; (rank 0's, rank 1's)."""
    rank1 = sorted(p.name for p in full.glob("__1_*.distcp"))
    rank0 = sorted(p.name for p in full.glob("__0_*.distcp"))
    assert rank0 and rank1
    for path in head_disk.iterdir():
        if path.name in rank1:
            path.unlink()
    for path in worker_disk.iterdir():
        if path.name not in rank1:
            path.unlink()
    return rank0, rank1


@pytest.mark.slow
@pytest.mark.upstream
def test_a_split_save_is_proven_from_each_nodes_part_and_the_metadata_it_was_sent(built, tmp_path):
    head_disk = conversion.copy(built["moe-mcore-pp2"], tmp_path / "head")
    worker_disk = conversion.copy(built["moe-mcore-pp2"], tmp_path / "worker")
    rank0, rank1 = _split(built["moe-mcore-pp2"], head_disk, worker_disk)
    metadata = (head_disk / ".metadata").read_bytes()  # what the head's node sends
    alone = run.verify(built["moe"], built["moe-mcore-pp2"])

    def both(held: set[str], worker_metadata: bytes | None = metadata) -> dict:
        head = check.Split(None, frozenset(rank0) & held, True, frozenset(held))
        worker = check.Split(worker_metadata, frozenset(rank1) & held, False, frozenset(held))
        answers = [
            ("head", {**run.verify_part(built["moe"], head_disk, None, head), "part": [0, 2, 0]}),
            ("worker", {**run.verify_part(built["moe"], worker_disk, None, worker), "part": [1, 2, 0]}),
        ]
        return nodes.merge(answers)

    merged = both(set(rank0 + rank1))
    assert merged["problems"] == []
    assert (merged["tensors"], merged["proven_bytes"]) == (alone.tensors, alone.proven_bytes)

    merged = both(set(rank0[1:] + rank1))  # a file no node holds: named once, by the node of .metadata
    assert [(p["kind"], p["file"], p["node"]) for p in merged["problems"]] == [("missing-file", rank0[0], "head")]
    assert merged["problems"][0]["detail"].startswith("no node holds it")
    assert 0 < merged["tensors"] < alone.tensors and 0 < merged["proven_bytes"] < alone.proven_bytes

    bad = both(set(rank0 + rank1), metadata[: len(metadata) // 2])  # what arrives is read as the file would be
    assert [(p["kind"], p["file"], p["node"]) for p in bad["problems"]] == [("unreadable", ".metadata", "worker")]
    none = both(set(rank0 + rank1), None)  # the node of .metadata could not send it
    assert [(p["kind"], p["file"], p["node"]) for p in none["problems"]] == [("missing-file", ".metadata", "worker")]
    assert "not on this node" in none["problems"][0]["detail"]


@pytest.mark.slow
@pytest.mark.upstream
def test_on_node_local_storage_a_save_split_across_the_nodes_is_proven_as_one(built, ascendfix_cli, tmp_path):
    converted = conversion.copy(built["moe-mcore-pp2"], tmp_path / "mcore")  # the head's disk
    other = conversion.copy(built["moe-mcore-pp2"], tmp_path / "worker-disk")  # the worker's, at the same path
    record = conversion.Record(other, FC1, (2, 3, 0, 0))  # layer 2, expert 3's gate half: rank 1's
    rank0, rank1 = _split(built["moe-mcore-pp2"], converted, other)
    assert record.path.name in rank1
    alone = verify(ascendfix_cli, built["moe"], built["moe-mcore-pp2"])[1]
    with local_head("cvray") as (head, temp), _worker_with_its_own_copy(head, temp, other, converted):
        code, report = verify(ascendfix_cli, built["moe"], converted, "--ray", head.address)
        assert code == 0, report["problems"]
        assert report["ok"] and report["problems"] == []
        for field in ("direction", "architecture", "tensors", "proven_bytes", "ignored"):
            assert report[field] == alone[field], field  # every byte once, by the node that holds it
        files = {n["node"]: n["files"] for n in report["nodes"]}
        worker = next(node for node, names in files.items() if names == rank1)
        (head_node,) = set(files) - {worker}
        assert files[head_node] == rank0
        human = ascendfix_cli("ckpt", "verify", built["moe"], converted, "--ray", head.address)
        assert human.returncode == 0 and "proven byte for byte" in human.stdout
        assert "its 2 file(s) of the split save" in human.stdout

        original = record.read()
        data = bytearray(original)
        data[100] ^= 1  # one bit on the worker's disk, its CRC-32 rewritten
        record.write(bytes(data))
        code, report = verify(ascendfix_cli, built["moe"], converted, "--ray", head.address)
        assert code == 1 and not report["ok"]
        (problem,) = report["problems"]
        assert problem["kind"] == "value-mismatch" and problem["file"] == record.path.name
        assert problem["region"] == f"{FC1}[2, 3, 0:64] (gate)" and problem["node"] == worker
        record.write(original)

        (converted / rank0[0]).unlink()  # a file neither node holds
        code, report = verify(ascendfix_cli, built["moe"], converted, "--ray", head.address)
        assert code == 1 and not report["ok"]
        assert [(p["kind"], p["file"], p["node"]) for p in report["problems"]] == [
            ("missing-file", rank0[0], head_node)
        ]


def test_a_save_split_across_the_nodes_disks_is_told_from_full_copies():
    meta = {".metadata": "9:1:1:1", "metadata.json": "1:2:1:1", "common.pt": "1:3:1:1"}
    hf = {"model.safetensors": "5:4:1:1", "config.json": "1:5:1:1"}
    head = {"hf": hf, "mc": {**meta, "__0_0.distcp": "7:6:1:1", "__0_1.distcp": "7:7:1:1"}}
    worker = {"hf": hf, "mc": {"__1_0.distcp": "7:8:1:1", "__1_1.distcp": "7:9:1:1"}}
    planned = nodes.plan({"n2": worker, "n1": head})
    assert planned["parts"] == {"n1": [0, 2, 0], "n2": [1, 2, 0]}  # one save, each node its part
    assert planned["split"] == {
        "whole": "n1",
        "held": ["__0_0.distcp", "__0_1.distcp", "__1_0.distcp", "__1_1.distcp"],
        "files": {"n1": ["__0_0.distcp", "__0_1.distcp"], "n2": ["__1_0.distcp", "__1_1.distcp"]},
    }
    # __1_0.distcp on storage both nodes mount (one identity): compared once
    shared = nodes.plan({"n1": {**head, "mc": {**head["mc"], "__1_0.distcp": "7:8:1:1"}}, "n2": worker})
    assert shared["split"] is not None
    files = shared["split"]["files"]
    assert sorted(f for names in files.values() for f in names) == shared["split"]["held"]
    assert set(files["n2"]) <= set(worker["mc"]) and "__1_1.distcp" in files["n2"]
    lacking = {**head, "mc": {k: v for k, v in head["mc"].items() if k != "__0_1.distcp"}}
    assert nodes.plan({"n1": head, "n2": lacking})["split"] is None  # a full copy and one lacking a file
    no_metadata = {"hf": hf, "mc": {"__0_0.distcp": "7:6:1:1"}}
    assert nodes.plan({"n1": no_metadata, "n2": worker})["split"] is None  # nothing says what the save holds
