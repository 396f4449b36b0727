"""``ckpt verify --ray``: the nodes that see the same files, each one's share of the comparisons, one report.

Each round is a Ray task pinned to every alive node (the command line runs them). First
:func:`node_files`: the identity (size, inode, mtime, ctime) of every file of both sides as that node
sees them. :func:`parts` groups the nodes that see the same files with the same identities: on shared
storage, every node in one group; with node-local storage, each node alone with its own copy (or
with the nodes it shares a mount with). Each node of a group of ``n`` gets its part ``(i, n, group)``:
every node of the group reads the metadata and locates every chunk (small reads), and compares share
``i`` of the group's byte runs, in the converted side's file order, cut into ``n`` shares of about
equal bytes; a node alone verifies everything it holds.

A Megatron save split across the nodes' own disks (each rank's ``.distcp`` files on its node's disk,
``.metadata``, ``metadata.json`` and ``common.pt`` on rank 0's only; :func:`split`: no node holds every
data file the nodes hold together) is verified as one save: each data file (each copy of it: each
identity) is compared by one node that holds it (:func:`views.shares`), and the node that holds
``.metadata`` also checks ``metadata.json`` and ``common.pt`` and names each data file no node holds.
A round between the two, :func:`node_metadata`, brings that node's ``.metadata`` (at most
:data:`pickles.MAX_PICKLE_BYTES`, read as a plain file, never loaded there) to the others through the
tasks' arguments; each node reads it as it would read the file, in its bounded child. Only
``.metadata`` travels: never a weight byte.

Then :func:`node_verify`: ``ckpt verify`` with that part. :func:`merge` makes one report, each problem
naming the node(s) that found it: a file one node lacks is that node's ``missing-file``.
"""

from __future__ import annotations

import base64
import json
import os
import socket
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from ascendfix.checkpoint import check, layout, pickles, verl, views
from ascendfix.checkpoint.verify import run
from ascendfix.checkpoint.verify.sides import Found
from ascendfix.errors import AscendfixError, error_object


def held(source: Path, converted: Path) -> dict[str, dict[str, str]]:
    """What this node holds: ``{"hf": {file: identity}, "mc": {file: identity}}``, every plain file of the
    Hugging Face folder and of the Megatron checkpoint's folder (:func:`views.identities`)."""
    _, hf, mc_given = run.folders(source, converted)
    return {"hf": views.identities(hf, ""), "mc": views.identities(verl.locate(mc_given).folder, "")}


def node_files(argv: list[str], _timeout: float) -> dict:
    """Inside a node's Ray task: ``argv`` is ``[SOURCE, CONVERTED]``; answers as ``cluster.run_local`` does, its
    stdout ``{"held": ...}`` (:func:`held`) or the error object."""
    return _answer(lambda: (0, {"held": held(Path(argv[0]), Path(argv[1]))}))


def parts(seen: dict[str, dict]) -> dict[str, list[int]]:
    """Node id -> ``[i, n, group]``, from each node's :func:`held`: the nodes that hold the same files with the
    same identities are one group (numbered in the order of their first node id); each of its ``n`` nodes,
    in node id order, compares share ``i``."""
    groups: dict[str, list[str]] = defaultdict(list)
    for node in sorted(seen):
        groups[json.dumps(seen[node], sort_keys=True)].append(node)
    found = {}
    for g, nodes in enumerate(groups.values()):
        for i, node in enumerate(nodes):
            found[node] = [i, len(nodes), g]
    return found


def split(seen: dict[str, dict]) -> dict | None:
    """A save split across the nodes' disks, from each node's :func:`held` (node id -> it): when no node holds
    every data file (``*.distcp``) the nodes hold together and one holds ``.metadata``, ``{"whole": the first
    such node, "held": every data file some node holds, "files": node id -> the data files it compares}``
    (each copy of a file by one node that holds it: :func:`views.shares`); else None."""
    data = {node: {n: i for n, i in sides["mc"].items() if n.endswith(".distcp")} for node, sides in seen.items()}
    names = set().union(*data.values()) if data else set()
    holders = sorted(node for node, sides in seen.items() if layout.METADATA in sides["mc"])
    if not names or not holders or any(set(files) == names for files in data.values()):
        return None
    return {"whole": holders[0], "held": sorted(names), "files": views.shares(data)}


def plan(seen: dict[str, dict]) -> dict:
    """What each node verifies, from each node's :func:`held`: ``{"parts": node id -> [i, n, group], "split":
    :func:`split`}``; the nodes of a split save are one group, each its own part."""
    shared = split(seen)
    if shared is None:
        return {"parts": parts(seen), "split": None}
    nodes = sorted(seen)
    return {"parts": {node: [i, len(nodes), 0] for i, node in enumerate(nodes)}, "split": shared}


def node_metadata(argv: list[str], _timeout: float) -> dict:
    """Inside a node's Ray task: ``argv`` is ``[SOURCE, CONVERTED, node id]``; on that node, its JSON is
    ``{"metadata": the Megatron side's .metadata in base64}``, read as a plain file of at most
    :data:`pickles.MAX_PICKLE_BYTES` (no link followed, nothing loaded here); elsewhere ``{"metadata": null}``."""

    def read() -> tuple[int, dict]:
        if views.node_id() != argv[2]:
            return 0, {"metadata": None}
        _, _, mc_given = run.folders(Path(argv[0]), Path(argv[1]))
        path = verl.locate(mc_given).folder / layout.METADATA
        try:
            with os.fdopen(pickles.open_plain(path, pickles.MAX_PICKLE_BYTES), "rb") as f:
                data = f.read(pickles.MAX_PICKLE_BYTES + 1)
            if len(data) > pickles.MAX_PICKLE_BYTES:  # it grew since it was opened
                raise pickles.Unreadable(f"more than {pickles.MAX_PICKLE_BYTES:,} bytes")
        except (pickles.Unreadable, OSError) as e:
            raise AscendfixError(f"{path}: {e}") from None
        return 0, {"metadata": base64.b64encode(data).decode()}

    return _answer(read)


def node_verify(argv: list[str], _timeout: float) -> dict:
    """Inside a node's Ray task: ``argv`` is ``[SOURCE, CONVERTED, plan, metadata]`` (:func:`plan`, JSON; the
    split save's ``.metadata`` in base64 from :func:`node_metadata`, or ""); this node's share verified
    (:func:`run.verify_part`), answered as ``cluster.run_local`` does, with ``part`` in its JSON (``null``:
    this node has no part, as one that joined after the first round) and, in a split save, ``files``."""
    source, converted, planned, metadata = argv

    def verify() -> tuple[int, dict]:
        node, found = views.node_id(), json.loads(planned)
        part, shared = found["parts"].get(node), found["split"]
        if part is None:
            return 0, {"part": None}
        if shared is None:
            data = run.verify_part(Path(source), Path(converted), (part[0], part[1]))
            return (1 if data["problems"] else 0), {**data, "part": part}
        files = shared["files"].get(node, [])
        mine = check.Split(
            base64.b64decode(metadata) if metadata else None,
            frozenset(files),
            node == shared["whole"],
            frozenset(shared["held"]),
        )
        data = run.verify_part(Path(source), Path(converted), None, mine)
        return (1 if data["problems"] else 0), {**data, "part": part, "files": files}

    return _answer(verify)


def _order(item: tuple[Found, list[str]]) -> tuple:
    return run.order(item[0])


def _answer(work: Callable[[], tuple[int, dict]]) -> dict:
    answer = {"hostname": socket.gethostname(), "stderr": ""}
    try:
        code, data = work()
    except AscendfixError as e:
        return {**answer, "returncode": e.exit_code, "stdout": json.dumps(error_object(str(e), e.exit_code))}
    return {**answer, "returncode": code, "stdout": json.dumps(data)}


def merge(answers: list[tuple[str, dict]], seen: dict[str, dict] | None = None) -> dict:
    """One report from the nodes' ``(node label, node_verify's JSON)``: :class:`run.VerifyReport`'s fields, each
    problem once with ``node`` (the labels of the nodes that found it, comma-separated), ``proven_bytes``
    summed, ``tensors`` the source tensors proven whole in every group (a group's count less the tensors any
    of its nodes found failed). ``seen``: node label -> :func:`held`; a ``missing-file`` then names the other
    nodes that hold the file."""
    if not answers:
        return {"tensors": 0, "proven_bytes": 0, "ignored": [], "problems": []}
    found: dict[Found, list[str]] = {}
    groups: dict[int, list[dict]] = defaultdict(list)
    for label, data in answers:
        groups[data["part"][2]].append(data)
        for p in data["problems"]:
            found.setdefault(Found(**p), []).append(label)
    tensors = []
    for reports in groups.values():
        failed = set().union(*(r["failed"] for r in reports))
        tensors.append(max(r["tensors"] + len(r["failed"]) for r in reports) - len(failed))
    first = answers[0][1]
    return {
        **{k: first[k] for k in ("source", "converted", "direction", "architecture")},
        "tensors": max(0, min(tensors)),
        "proven_bytes": sum(data["proven_bytes"] for _, data in answers),
        "ignored": sorted(set().union(*(data["ignored"] for _, data in answers))),
        "problems": [
            {**_elsewhere(p, nodes, seen or {}).to_json(), "node": ", ".join(nodes)}
            for p, nodes in sorted(found.items(), key=_order)
        ],
    }


def _elsewhere(problem: Found, nodes: list[str], seen: dict[str, dict]) -> Found:
    """A ``missing-file`` that other nodes hold says which: a copy to fetch it from, or a save split across the
    nodes' own disks (each node verifies the copy it holds, so gather the save on one first)."""
    if problem.kind != "missing-file":
        return problem
    holds = {n for n, sides in seen.items() if any(problem.file in files for files in sides.values())}
    others = sorted(holds - set(nodes))
    if not others:
        return problem
    return problem._replace(detail=f"{problem.detail} (on this node; {', '.join(others)} hold(s) it)")
