"""--ray: one command on every node of a real local multi-node Ray cluster, one table of the answers.

The cluster is Ray's in-process ``cluster_utils.Cluster`` (its nodes are this process's children, so it
cannot run in a namespace of its own): it gets its own temp dir, so Ray's ``/tmp/ray/session_latest``
is left as it was, and its own GCS port.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest
from ascendfix.cli import main
from ascendfix.cluster import fanout
from ascendfix.cluster.fanout import NodeAnswer

from tests import cli
from tests.cluster import alive, free_ports, one_ray_start, ray_temp_dir

REPO = Path(__file__).resolve().parent.parent
SHARD = "torch/distributed/_shard/sharding_spec/_internals.py"
DRIFTED_NODE = "w1"


def _tree(dest: Path, upstream_files) -> Path:
    """A node's site-packages stand-in: verl from its 0.5.0 wheel, torch's two 2.7.1 validation files."""
    shutil.copytree(upstream_files.verl_tree("0.5.0"), dest, ignore=shutil.ignore_patterns(".complete"))
    shutil.copytree(
        upstream_files.torch_tree("2.7.1"), dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".complete")
    )
    (dest / "torch" / "__init__.py").write_text("# stand-in: only the files the patches edit\n")
    return dest


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory, upstream_files):
    """Head + two workers on this machine, each raylet with its own tree on PYTHONPATH; w1's tree drifted."""
    cluster_utils = pytest.importorskip("ray.cluster_utils")
    base = tmp_path_factory.mktemp("nodes")
    trees = {name: _tree(base / name, upstream_files) for name in ("head", "w0", DRIFTED_NODE)}
    shard = trees[DRIFTED_NODE] / SHARD
    shard.write_text(shard.read_text().replace("def _find_nd_overlapping_shards(", "def _find_it("))
    temp = ray_temp_dir()  # not /tmp/ray: its session_latest is the one triage and the guide read
    (temp / "ray").mkdir()
    small = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024, "temp_dir": str(temp / "ray")}

    def env(name):
        return {"PYTHONPATH": f"{REPO}{os.pathsep}{trees[name]}", "ASCENDFIX_TEST_NODE": name, "RAY_TMPDIR": str(temp)}

    head = {**small, "include_dashboard": False, "env_vars": env("head"), "gcs_server_port": free_ports(1)[0]}
    before = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = str(temp)  # where the cluster writes its address for ray.init("auto")
    with one_ray_start():
        c = cluster_utils.Cluster(initialize_head=True, head_node_args={**head, "temp_dir": small["temp_dir"]})
    nodes = {"head": c.head_node}
    try:
        for name in ("w0", DRIFTED_NODE):
            with one_ray_start():
                nodes[name] = c.add_node(**small, env_vars=env(name))
        c.wait_for_nodes()
        assert {node.node_ip_address for node in nodes.values()} == {"127.0.0.1"}  # loopback only
        yield c, {name: node.node_id for name, node in nodes.items()}
    finally:
        pids = [p.process.pid for node in nodes.values() for procs in node.all_processes.values() for p in procs]
        c.shutdown()
        running = [pid for pid in pids if alive(pid)]
        if before is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = before
        shutil.rmtree(temp, ignore_errors=True)
        assert not running, f"Ray processes still running after shutdown: {running}"


def _row(report: dict, node_id: str) -> dict:
    return next(n for n in report["nodes"] if n["node_id"] == node_id)


@pytest.mark.slow
@pytest.mark.upstream
def test_apply_and_status_on_every_node_name_the_drifted_one(ray_cluster):
    c, ids = ray_cluster
    applied = cli.run("apply", "--ray", c.address, "--device", "npu", "--json", timeout=300)
    assert applied.returncode == 1, applied.stderr
    report = json.loads(applied.stdout)
    assert len(report["nodes"]) == 3
    assert "refused" in _row(report, ids[DRIFTED_NODE])["error"]  # apply is all or nothing on that node
    assert {_row(report, ids[n])["cells"]["torch-shard-overlap-check"]["value"] for n in ("head", "w0")} == {"applied"}

    status = cli.run("status", "--ray", c.address, "--device", "npu", "--json", timeout=300)
    assert status.returncode == 1
    report = json.loads(status.stdout)
    assert "torch-shard-overlap-check" in report["differing"]
    drifted = _row(report, ids[DRIFTED_NODE])
    assert drifted["returncode"] == 1
    assert drifted["cells"]["torch-shard-overlap-check"]["value"] == "drifted"
    for good in ("head", "w0"):
        row = _row(report, ids[good])
        assert row["returncode"] == 0 and row["error"] == ""
        assert row["cells"]["torch-shard-overlap-check"]["value"] == "applied"
        assert row["cells"]["verl-dapo-no-interleave"]["value"] == "not-applicable"  # a wheel has no recipe/
    assert "verl-dapo-no-interleave" not in report["differing"]

    shown = cli.run("status", "--ray", c.address, "--device", "npu", timeout=300)
    assert shown.returncode == 1
    drifted_line = next(line for line in shown.stdout.splitlines() if ids[DRIFTED_NODE][:8] in line)
    assert "drifted" in drifted_line
    assert "nodes disagree on:" in shown.stdout and "torch-shard-overlap-check" in shown.stdout
    assert f"failed on: {drifted['node']}" in shown.stdout


@pytest.mark.slow
@pytest.mark.upstream
def test_doctor_on_every_node_names_the_drifted_one(ray_cluster):
    c, ids = ray_cluster  # head and w0 applied (a no-op when the test above ran first), w1's torch file drifted
    cli.run("apply", "--ray", c.address, "--device", "npu", "--json", timeout=300)  # w1 refuses: all or nothing
    result = cli.run("doctor", "--ray", c.address, "--device", "npu", "--only", "patches", "--json", timeout=300)
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert "patches" in report["differing"]
    assert _row(report, ids[DRIFTED_NODE])["cells"]["patches"]["value"] == "fail"
    assert {_row(report, ids[n])["cells"]["patches"]["value"] for n in ("head", "w0")} <= {"ok", "warn"}


@pytest.mark.slow
@pytest.mark.upstream
def test_a_node_that_does_not_answer_is_a_row_not_a_hang(ray_cluster):
    c, ids = ray_cluster
    worker = next(n for n in c.worker_nodes if n.node_id == ids["w0"])
    raylet = worker.all_processes["raylet"][0].process.pid
    os.kill(raylet, signal.SIGSTOP)
    try:
        result = cli.run("status", "--ray", c.address, "--device", "npu", "--ray-timeout", "15", "--json", timeout=120)
    finally:
        os.kill(raylet, signal.SIGCONT)
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert _row(report, ids["w0"])["error"] == "no answer within 15 s"
    assert _row(report, ids["head"])["returncode"] == 0


def test_without_ray_the_core_imports_and_ray_says_how_to_install():
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "import ascendfix.cli, ascendfix.cluster.fanout\n"
        "sys.argv = ['ascendfix', 'status', '--ray', '--device', 'npu']\n"
        "ascendfix.cli.main()\n"
    )
    result = cli.run(code=code, timeout=None)
    assert result.returncode == 2
    assert result.stderr.strip() == "error: ray is not installed: pip install 'ascendfix[ray]'"


def test_forwarded_command_line_keeps_options_and_drops_ray(monkeypatch):
    seen = {}

    def fake_run(argv, address, timeout):
        seen.update(argv=argv, address=address, timeout=timeout)
        return [NodeAnswer("a" * 32, "10.0.0.1", "n1", 0, {"patches": []})]

    monkeypatch.setattr(fanout, "run", fake_run)
    from click.testing import CliRunner

    args = ["apply", "--ray", "--device", "npu", "--root", "verl=/src/verl", "--only", "x", "--strict"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert seen["address"] is None and seen["timeout"] == 60.0
    assert seen["argv"] == [
        "apply", "--profile", "verl-796871d", "--device", "npu", "--root", "verl=/src/verl", "--only", "x", "--strict",
        "--json",
    ]  # fmt: skip
    CliRunner().invoke(main, ["status", "--ray", "10.0.0.9:6379", "--ray-timeout", "5"])
    assert seen["address"] == "10.0.0.9:6379" and seen["timeout"] == 5.0


def _patches(**states):
    return {
        "patches": [
            {"id": pid, "state": state, "reason": "", "files": [{"path": f"{pid}.py", "sha256": sha, "state": state}]}
            for pid, (state, sha) in states.items()
        ]
    }


def test_table_flags_values_and_hashes_that_differ():
    same = ("applied", "1" * 64)
    answers = [
        NodeAnswer("a" * 32, "10.0.0.1", "n1", 0, _patches(p1=same, p2=("not-applied", "2" * 64))),
        NodeAnswer("b" * 32, "10.0.0.2", "n2", 0, _patches(p1=same, p2=("not-applied", "3" * 64))),
        NodeAnswer("c" * 32, "10.0.0.3", "n3", 0, _patches(p1=same, p2=("not-applied", "2" * 64))),
    ]
    report = fanout.table(["status", "--json"], answers)
    assert report.items == ("p1", "p2") and report.differing == ("p2",)  # same state, other file hash
    assert report.cells["10.0.0.2 bbbbbbbb"]["p2"] == ("not-applied", "p2.py=" + "3" * 12)
    assert not report.ok


def test_table_of_doctor_checks_and_failed_nodes():
    def doctor(cann_status, message):
        return {"checks": [{"id": "cann", "title": "CANN", "status": cann_status, "messages": [message], "fix": ""}]}

    answers = [
        NodeAnswer("a" * 32, "10.0.0.1", "n1", 0, doctor("ok", "CANN 8.3.RC1")),
        NodeAnswer("b" * 32, "10.0.0.2", "n2", 0, doctor("ok", "CANN 8.3.RC1")),
    ]
    assert fanout.table(["doctor", "--json"], answers).ok
    answers.append(NodeAnswer("c" * 32, "10.0.0.3", "n3", 1, doctor("fail", "CANN 8.2.RC1")))
    answers.append(NodeAnswer("d" * 32, "10.0.0.4", error="no answer within 60 s"))
    report = fanout.table(["doctor", "--json"], answers)
    assert report.differing == ("cann",)
    assert report.cells["10.0.0.3 cccccccc"]["cann"] == ("fail", "CANN 8.2.RC1")
    assert [n["error"] for n in report.to_json()["nodes"]][-1] == "no answer within 60 s"
    assert not report.ok


def test_any_json_is_compared_field_by_field():
    a = NodeAnswer("a" * 32, "h", "n1", 0, {"schema": 1, "ok": True, "profiles": [{"devices": ["npu", "cuda"]}]})
    b = NodeAnswer("b" * 32, "h", "n2", 0, {"schema": 1, "ok": True, "profiles": [{"devices": ["npu"]}]})
    report = fanout.table(["profiles", "--json"], [a, b])
    assert report.differing == ("profiles[0].devices[1]",)
    assert report.cells["h bbbbbbbb"].get("profiles[0].devices[1]") is None
