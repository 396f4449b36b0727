"""One command on every node of a Ray cluster, and one table of what the nodes said.

``run`` starts one Ray task per alive node, pinned to it (hard node affinity), that runs
``python -m ascendfix <argv> --json`` there and returns its exit status and output. A
node that does not answer within the timeout becomes a row saying so. ``table`` turns
the answers into nodes x items (patches, checks, or any JSON's scalar fields) and names
every item whose value is not the same on all nodes. Ray is imported only here, only
when asked for: it is the optional extra ``ascendfix[ray]``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from types import ModuleType

from ascendfix.errors import UsageError, is_error_object

INSTALL_HINT = "ray is not installed: pip install 'ascendfix[ray]'"
# what Ray >= 2.5x's GCS answers a client without the cluster's token (ray/_private/authentication/
# grpc_authentication_server_interceptor.py; ray.exceptions.AuthenticationError in ray.init's cause)
_REFUSED = ("AuthenticationError", "InvalidAuthToken", "Invalid or missing authentication token")


def node_label(address: str, node_id: str) -> str:
    """How every table names a node: its address and the start of its Ray node id."""
    return f"{address} {node_id[:8]}"


@dataclass(frozen=True)
class NodeAnswer:
    """What one node answered: its exit status and parsed JSON, or why there is none."""

    node_id: str
    address: str
    hostname: str = ""
    returncode: int | None = None
    data: object = None
    error: str = ""

    @property
    def label(self) -> str:
        """How a row names the node (:func:`node_label`)."""
        return node_label(self.address, self.node_id)

    @property
    def failed(self) -> bool:
        """No answer, no JSON, or a non-zero exit status."""
        return bool(self.error) or self.returncode != 0


@dataclass(frozen=True)
class Table:
    """Nodes x items: each cell a value, plus a detail (file hashes, messages) shown where nodes differ."""

    argv: tuple[str, ...]
    nodes: tuple[NodeAnswer, ...]
    items: tuple[str, ...]
    cells: dict[str, dict[str, tuple[str, str]]] = field(default_factory=dict)  # node label -> item -> cell
    differing: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Every node answered, succeeded, and agrees with the others."""
        return not self.differing and not any(n.failed for n in self.nodes)

    def to_json(self) -> dict:
        """Plain data: the command, each node's answer (its own JSON under ``result``), cells, what differs."""
        return {
            "command": list(self.argv),
            "ok": self.ok,
            "differing": list(self.differing),
            "nodes": [
                {
                    "node": n.label,
                    "node_id": n.node_id,
                    "address": n.address,
                    "hostname": n.hostname,
                    "returncode": n.returncode,
                    "error": n.error,
                    "cells": {item: {"value": v, "detail": d} for item, (v, d) in self.cells.get(n.label, {}).items()},
                    "result": n.data,
                }
                for n in self.nodes
            ],
        }


def import_ray():
    """The ray module; a UsageError saying how to install it when it is missing."""
    try:
        import ray
    except ImportError:
        raise UsageError(INSTALL_HINT) from None
    return ray


def run_local(argv: list[str], timeout: float) -> dict:
    """Run ``python -m ascendfix ARGV`` here (inside the Ray task); return status, output and host."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "ascendfix", *argv], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"hostname": socket.gethostname(), "error": f"ascendfix did not finish within {timeout:g} s"}
    return {
        "hostname": socket.gethostname(),
        "returncode": done.returncode,
        "stdout": done.stdout,
        "stderr": done.stderr,
    }


def run(
    argv: list[str],
    address: str | None = None,
    timeout: float = 60.0,
    local: Callable[[list[str], float], dict] = run_local,
) -> list[NodeAnswer]:
    """Run the command on every alive node of the cluster at ``address`` ("auto": the local one's).

    ``local(argv, timeout)`` is what each node's task runs; it answers as :func:`run_local` does.
    """
    ray = import_ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if address:
        _reachable(address)
    try:
        init(ray, address, f"--ray {address or ''}".rstrip())
    except (ConnectionError, ValueError, RuntimeError) as e:
        if not address:
            raise UsageError("--ray: no Ray cluster runs on this machine (start one, or pass --ray ADDRESS)") from None
        raise UsageError(f"--ray {address}: cannot connect to a Ray cluster: {str(e).splitlines()[0]}") from None
    try:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        task = ray.remote(num_cpus=0, max_retries=0)(local)
        refs = {
            task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(
                argv, timeout
            ): n
            for n in nodes
        }
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout + 10)
        answers = []
        for ref, node in refs.items():
            base = NodeAnswer(node["NodeID"], node.get("NodeManagerAddress", "?"))
            if ref not in ready:
                ray.cancel(ref, force=True)
                answers.append(replace(base, error=f"no answer within {timeout:g} s"))
                continue
            try:
                answers.append(_answer(base, ray.get(ref)))
            except Exception as e:  # a task that died on its node is that node's row, not our crash
                answers.append(replace(base, error=f"the task failed on this node: {type(e).__name__}: {e}"))
        return answers
    finally:
        ray.shutdown()


def init(ray: ModuleType, address: str | None, where: str, namespace: str | None = None) -> None:
    """``ray.init`` to ``address`` (None: the local cluster), in ``namespace``, Ray's own native log kept off the
    terminal; a UsageError naming ``where`` when the cluster refuses this side's authentication. Other failures
    propagate."""
    try:
        with _native_stderr_quiet():
            ray.init(
                address=address or "auto",
                namespace=namespace,
                logging_level="ERROR",
                log_to_driver=False,
                configure_logging=False,
            )
    except Exception as e:
        if refused(e):
            raise UsageError(f"{where}: {AUTH_REFUSED}") from None
        raise


AUTH_REFUSED = (
    "the Ray cluster refused this connection's authentication: it runs with token authentication "
    "(RAY_AUTH_MODE=token) and this side sent no matching token; fix: export RAY_AUTH_MODE=token with the "
    "cluster's token in ~/.ray/auth_token (or RAY_AUTH_TOKEN), or start the cluster with RAY_AUTH_MODE=disabled"
)


def refused(error: BaseException) -> bool:
    """Whether ``error``, or an exception it was raised from, is Ray refusing this side's authentication."""
    seen: set[int] = set()
    at: BaseException | None = error
    while at is not None and id(at) not in seen:
        seen.add(id(at))
        if type(at).__name__ == "AuthenticationError" or any(mark in str(at) for mark in _REFUSED):
            return True
        at = at.__cause__ or at.__context__
    return False


@contextmanager
def _native_stderr_quiet() -> Iterator[None]:
    """File descriptor 2 into a discarded temp file: ray.init's C++ client logs each retry there (an auth
    refusal twenty times), which the one line that says why replaces."""
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)


def unreachable(address: str, seconds: float = 5.0) -> str | None:
    """Why nothing can answer at ``address`` (not HOST:PORT, or nothing listens), or None when something does."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return "expected HOST:PORT of the cluster's head (e.g. 10.0.0.1:6379)"
    try:
        socket.create_connection((host, int(port)), timeout=seconds).close()
    except OSError as e:
        return f"nothing answers there ({e.strerror or e})"
    return None


def _reachable(address: str, seconds: float = 5.0) -> None:
    """Fail fast on an address nothing listens on (Ray itself would retry for minutes)."""
    reason = unreachable(address, seconds)
    if reason is not None:
        raise UsageError(f"--ray {address}: {reason}")


def _answer(base: NodeAnswer, result: dict) -> NodeAnswer:
    if "error" in result:
        return replace(base, hostname=result["hostname"], error=result["error"])
    try:
        data = json.loads(result["stdout"])
    except json.JSONDecodeError:
        data = None
    failed = is_error_object(data)  # --json's error object
    if data is None or failed:
        last = data["error"] if failed else (result["stderr"].strip().splitlines() or ["no output"])[-1]
        return replace(base, hostname=result["hostname"], returncode=result["returncode"], error=last)
    return replace(base, hostname=result["hostname"], returncode=result["returncode"], data=data)


def cells(data: object) -> dict[str, tuple[str, str]]:
    """One node's JSON as item -> (value, detail): patch states, check statuses, or scalar fields."""
    if isinstance(data, dict) and isinstance(data.get("patches"), list):
        return {
            p["id"]: (p["state"], " ".join(f"{f['path']}={(f.get('sha256') or '-')[:12]}" for f in p.get("files", [])))
            for p in data["patches"]
        }
    if isinstance(data, dict) and isinstance(data.get("checks"), list):
        return {c["id"]: (c["status"], "; ".join(c.get("messages") or [])) for c in data["checks"]}
    flat: dict[str, tuple[str, str]] = {}
    _flatten(data, "", flat)
    return flat


def _flatten(data: object, prefix: str, into: dict[str, tuple[str, str]]) -> None:
    if isinstance(data, dict):
        for key, value in data.items():
            _flatten(value, f"{prefix}.{key}" if prefix else str(key), into)
    elif isinstance(data, list):
        for i, value in enumerate(data):
            _flatten(value, f"{prefix}[{i}]", into)
    else:
        into[prefix] = ("" if data is None else str(data), "")


def table(argv: list[str], answers: list[NodeAnswer]) -> Table:
    """Nodes x items, with the items whose value or detail is not the same on every answering node."""
    by_node = {a.label: cells(a.data) for a in answers if a.data is not None}
    items: dict[str, None] = {}
    for node_cells in by_node.values():
        items.update(dict.fromkeys(node_cells))
    differing = tuple(
        item for item in items if len({node_cells.get(item, ("(absent)", "")) for node_cells in by_node.values()}) > 1
    )
    return Table(tuple(argv), tuple(answers), tuple(items), by_node, differing)
