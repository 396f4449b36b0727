"""The local Ray clusters the tests start, and the network namespaces they run in.

Every cluster has its own temp dir (``RAY_TMPDIR``, so its ``session_latest`` is its own) and its own
address; nodes started with ``ascendfix ray start --block`` run in a private network namespace of the
test's own (``unshare -n``: no name in ``/run/netns``, gone when its last process ends), so nothing
they bind is the host's. Teardown stops each node by pid, never by name (``ray stop`` would stop
every Ray on the machine).
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests import cli, upstream
from tests.machine import npu_smi_table, write_executable

REPO = cli.REPO
NEEDS_RAY = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None, reason="ray is not installed: pip install 'ascendfix[ray]'"
)
NOFILE = 4096  # the test profile's ulimit -n; nodes start at a soft limit of 1024 and ascendfix raises it


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def ray_temp_dir() -> Path:
    """A fresh temp dir for one cluster, short (Ray's socket paths must stay under 107 bytes)."""
    return Path(tempfile.mkdtemp(prefix="afr-", dir="/tmp"))


def team_profile(folder: Path) -> Path:
    """A site profile extending the bundled one: a ulimit -n this machine's hard limit allows."""
    path = folder / "site.toml"
    path.write_text(f'extends = "verl-796871d"\nname = "site"\n[devices.npu]\nulimit_nofile = {NOFILE}\n')
    return path


def fake_npu_smi(folder: Path, npus: int = 8) -> Path:
    """A folder for PATH whose npu-smi lists ``npus`` healthy 910B4-1."""
    table = folder / "npu-smi.out"
    table.write_text(npu_smi_table([("910B4-1", "OK", 3200, 65536)] * npus))
    write_executable(folder / "bin" / "npu-smi", f'#!/bin/sh\n[ "$1" = info ] && cat "{table}"\n')
    return folder / "bin"


def ray_of_this_interpreter(folder: Path) -> Path:
    """:func:`fake_npu_smi`'s folder, with a `ray` of this interpreter: its workers then import this torch."""
    bin_dir = fake_npu_smi(folder)
    write_executable(bin_dir / "ray", f'#!/bin/sh\nexec {sys.executable} -m ray.scripts.scripts "$@"\n')
    return bin_dir


def free_ports(n: int) -> list[int]:
    """``n`` ports free on loopback now."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def worker_ports(taken: set[int], count: int = 40) -> tuple[int, int]:
    """A free range of worker ports below the kernel's ephemeral range (where the single free ports come
    from, and where Ray picks its own), not overlapping another node's range."""
    for base in random.Random().sample(range(21000, 32000 - count, count), 50):
        ports = range(base, base + count)
        if taken.isdisjoint(ports) and all(_bindable(p) for p in ports):
            taken.update(ports)
            return base, base + count - 1
    raise AssertionError("no free range of worker ports")


def ours(marker: str) -> list[int]:
    """Pids of live processes whose environment carries this cluster's RAY_TMPDIR."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if marker.encode() in (proc / "environ").read_bytes().split(b"\0") and alive(int(proc.name)):
                pids.append(int(proc.name))
        except (OSError, ProcessLookupError):
            continue
    return pids


@contextmanager
def one_ray_start() -> Iterator[None]:
    """Hold the lock under which one Ray node starts at a time, across the test processes of this machine.

    Ray gives a starting node 30 s to register with its GCS (a constant in ``ray._private.node``); nodes of
    several clusters starting together on a busy 2-core machine overran it (pytest-xdist runs the clusters'
    modules side by side). The lock is the test cache's, which every test process of this user shares.
    """
    with open(upstream.cache_dir() / ".ray-start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


class Netns:
    """A private network namespace: held by a ``sleep`` started with ``unshare -n -m`` (its own sysfs);
    ``prefix`` runs a command inside it (``nsenter --net=... --mount=...``)."""

    def __init__(self) -> None:
        for tool in ("unshare", "nsenter", "ip"):
            if shutil.which(tool) is None:
                pytest.skip(f"{tool} is not installed (util-linux, iproute2): no private network namespace")
        # its own mount namespace too, with sysfs mounted anew: /sys/class/net then lists its interfaces
        holder = "mount -t sysfs sysfs /sys && exec sleep infinity"
        self.holder = subprocess.Popen(
            ["unshare", "-n", "-m", "--propagation", "private", "sh", "-c", holder], stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + 10
        own = os.readlink("/proc/self/ns/net")
        while time.monotonic() < deadline and self.holder.poll() is None:
            try:
                if os.readlink(f"/proc/{self.holder.pid}/ns/net") != own:
                    break
            except OSError:
                pass
            time.sleep(0.05)
        if self.holder.poll() is not None:
            why = self.holder.stderr.read().decode(errors="replace").strip() if self.holder.stderr else ""
            pytest.skip(f"cannot make a network namespace here (unshare -n: {why})")
        proc = f"/proc/{self.holder.pid}/ns"
        self.prefix = ["nsenter", f"--net={proc}/net", f"--mount={proc}/mnt", "--wd=."]  # "." : the caller's cwd
        self.ip("link", "set", "lo", "up")

    def ip(self, *args: str) -> None:
        """``ip ARGS`` inside the namespace (a failure fails the test)."""
        subprocess.run([*self.prefix, "ip", *args], check=True, capture_output=True)

    def run(self, *argv: str, **kw) -> subprocess.CompletedProcess:
        """``argv`` inside the namespace."""
        return subprocess.run([*self.prefix, *argv], capture_output=True, text=True, **kw)

    def close(self) -> None:
        """End the holder: the namespace goes with the last process in it."""
        self.holder.kill()
        self.holder.wait()


@contextmanager
def private_netns() -> Iterator[Netns]:
    """A private network namespace with only ``lo``, up; gone afterwards."""
    ns = Netns()
    try:
        yield ns
    finally:
        ns.close()


def ascendfix(*args: str, env: dict[str, str], netns: Netns | None = None, timeout: float = 300):
    """``python -m ascendfix ARGS`` in ``env`` (inside ``netns`` when given), its output captured."""
    prefix = netns.prefix if netns else ()
    return cli.run(*args, env=env, clean_env=True, prefix=prefix, timeout=timeout, cwd=REPO)


class LocalCluster:
    """Nodes started with ``ascendfix ray start ... --block`` in one private namespace, in one RAY_TMPDIR.

    ``node_ip`` is the address every node binds (loopback unless the test gives the nodes their own).
    """

    def __init__(self, base: Path, profile: Path, bin_dir: Path, netns: Netns, node_ip: str = "127.0.0.1"):
        self.tmp = ray_temp_dir()
        self.netns, self.node_ip = netns, node_ip
        self.profile, self.marker = profile, f"RAY_TMPDIR={self.tmp}"
        self.env = {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": str(REPO),
            "RAY_TMPDIR": str(self.tmp),
            "HCCL_SOCKET_IFNAME": "lo",
            "GLOO_SOCKET_IFNAME": "lo",
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1",  # `ray start` joins only with it on; the netns keeps lo
            # a head finding ~/.ray/auth_token turns token auth on, and workers started without it cannot join
            "RAY_AUTH_MODE": "disabled",
        }
        self.env.pop("RAY_ADDRESS", None)
        self.env.pop("TASK_QUEUE_ENABLE", None)
        self.gcs = free_ports(1)[0]
        self.address = f"{node_ip}:{self.gcs}"
        self.procs: dict[str, subprocess.Popen] = {}
        self.worker_ports: set[int] = set()
        self.logs = base
        self._starting: contextlib.ExitStack | None = None  # one_ray_start, held from start() to started

    def start(
        self,
        name: str,
        extra_env: dict[str, str] | None = None,
        cpus: int = 1,
        prefix: list[str] | None = None,
        node_ip: str | None = None,
        resources: dict[str, float] | None = None,
    ) -> None:
        """Start one node (the head first, then workers joining it); ``prefix`` runs it in another namespace.
        No other node starts on the machine until :meth:`wait_started` (or :meth:`wait_for_head`) returns."""
        self._starting = contextlib.ExitStack()
        self._starting.enter_context(one_ray_start())
        ports = free_ports(6)
        low, high = worker_ports(self.worker_ports)
        role = ["--head", "--port", str(self.gcs), "--dashboard-host", "127.0.0.1", "--include-dashboard=false"]
        if name != "head":
            role = ["--address", self.address]
        args = [
            *role,
            "--node-ip-address", node_ip or self.node_ip,
            "--num-cpus", str(cpus),
            "--object-store-memory", str(80 * 1024 * 1024),
            "--resources", json.dumps({f"node_{name}": 1, **(resources or {})}),
            "--node-manager-port", str(ports[0]),
            "--object-manager-port", str(ports[1]),
            "--dashboard-agent-listen-port", str(ports[2]),
            "--metrics-export-port", str(ports[3]),
            "--runtime-env-agent-port", str(ports[4]),
            "--dashboard-port", str(ports[5]),
            "--min-worker-port", str(low),
            "--max-worker-port", str(high),
            "--disable-usage-stats",
            "--block",
        ]  # fmt: skip
        cmd = ["ray", "start", "--profile", str(self.profile), "--no-preflight", "--device", "npu"]

        def low_nofile() -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

        log = open(self.logs / f"{name}.log", "w")  # noqa: SIM115 - kept open for the node's life
        self.procs[name] = cli.start(
            *cmd,
            *args,
            prefix=prefix or self.netns.prefix,
            env={**self.env, **(extra_env or {})},
            clean_env=True,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=low_nofile,
        )

    def wait_for_head(self, seconds: float = 120) -> None:
        """Until the head's `ray start` is done: it wrote the cluster's address and says it blocks."""
        deadline = time.monotonic() + seconds
        with self._started():
            while time.monotonic() < deadline:
                if self.procs["head"].poll() is not None:
                    raise AssertionError((self.logs / "head.log").read_text())
                if (self.tmp / "ray" / "ray_current_cluster").is_file():
                    return self.wait_started("head", deadline - time.monotonic())
                time.sleep(0.5)
            raise AssertionError("the head never wrote the cluster's address")

    def wait_started(self, name: str, seconds: float = 120) -> None:
        """Until the node's `ray start --block` says it started; its log when it died instead."""
        log, deadline = self.logs / f"{name}.log", time.monotonic() + seconds
        with self._started():
            while "will now block forever" not in log.read_text():
                if self.procs[name].poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"node {name} did not start:\n{log.read_text()[-3000:]}")
                time.sleep(0.5)

    @contextmanager
    def _started(self) -> Iterator[None]:
        """Release the start lock :meth:`start` took, however the wait ends."""
        try:
            yield
        finally:
            self._release_start()

    def _release_start(self) -> None:
        if self._starting is not None:
            self._starting.close()
            self._starting = None

    def ascendfix(self, *args: str, env: dict[str, str] | None = None, timeout: float = 300):
        """``ascendfix ARGS`` inside the cluster's namespace, with its environment."""
        return ascendfix(*args, env=env or self.env, netns=self.netns, timeout=timeout)

    def stop(self) -> list[int]:
        """SIGTERM each `ray start --block` (workers, then the head); kill by pid whatever is left; return it."""
        self._release_start()  # a node started and never waited for leaves the start lock to others
        for name in reversed(list(self.procs)):
            proc = self.procs[name]
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        deadline = time.monotonic() + 20
        while ours(self.marker) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = ours(self.marker)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.tmp, ignore_errors=True)
        return left


@contextmanager
def local_cluster(base: Path, netns: Netns, names: tuple[str, ...], **node) -> Iterator[LocalCluster]:
    """A cluster of ``names`` (the first is the head), started one after the other (raylets starting together
    can pick the same port), stopped afterwards with nothing of it left running."""
    pytest.importorskip("ray", reason="ray is not installed: pip install 'ascendfix[ray]'")
    c = LocalCluster(base, team_profile(base), node.pop("bin_dir", None) or fake_npu_smi(base), netns)
    try:
        for name in names:
            c.start(name, **node)
            if name == names[0]:
                c.wait_for_head()
            else:
                c.wait_started(name)
        yield c
    finally:
        left = c.stop()
        assert not left, f"Ray processes still running after SIGTERM to ray start --block: {left}"


SMALL_NODE = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024, "env_vars": {"PYTHONPATH": str(REPO)}}


@contextmanager
def local_head(prefix: str) -> Iterator[tuple[object, str]]:
    """A ``ray.cluster_utils.Cluster`` whose head (:data:`SMALL_NODE`, this checkout on PYTHONPATH) runs on loopback
    in a temp folder of its own, named from ``prefix`` (short: it holds sockets): (the cluster, that folder). Shut
    down afterwards, what it left killed and the folder removed."""
    cluster_utils = pytest.importorskip("ray.cluster_utils")
    temp = tempfile.mkdtemp(prefix=prefix)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_TMPDIR", temp)  # Cluster writes ray_current_cluster there, not into the host's /tmp/ray
        os.mkdir(os.path.join(temp, "ray"))
        with one_ray_start():
            c = cluster_utils.Cluster(True, head_node_args={**SMALL_NODE, "temp_dir": temp, "include_dashboard": False})
        try:
            yield c, temp
        finally:
            c.shutdown()
            for pid in ours(f"RAY_TMPDIR={temp}"):  # what this cluster started and left
                os.kill(pid, signal.SIGKILL)
            shutil.rmtree(temp, ignore_errors=True)
