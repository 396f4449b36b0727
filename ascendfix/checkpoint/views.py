"""``ckpt check --ray``: what each node sees of the checkpoint folder, and where the nodes' views differ.

Without shared storage every node loads its own copy: a node missing a shard, or holding a shorter
one, fails at load while the others wait. :func:`node_view` runs on each node (a Ray task, pinned to
it): the check there, every file under the folder with its size, and each data file's identity.
:func:`differences` names each file whose size is not the same on all nodes (absent counts). With
``--bytes`` a second round proves the bytes where they lie: :func:`shares` gives each node the files
it proves (each copy once; a file on shared storage by one of the nodes that see it).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
from pathlib import Path

from ascendfix.errors import AscendfixError, error_object


def file_view(folder: Path) -> dict[str, int]:
    """Every plain file under ``folder`` (relative path -> size); symbolic links are not followed (size -1)."""
    view: dict[str, int] = {}
    for root, dirs, files in os.walk(folder):
        base = Path(root).relative_to(folder)
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            info = os.lstat(os.path.join(root, name))
            view[(base / name).as_posix()] = info.st_size if stat.S_ISREG(info.st_mode) else -1
    return dict(sorted(view.items()))


def digest(view: dict[str, int]) -> str:
    """A short fingerprint of a file view: equal views, equal digests."""
    return hashlib.sha256(json.dumps(view, sort_keys=True).encode()).hexdigest()[:12]


def node_view(argv: list[str], _timeout: float) -> dict:
    """Inside a node's Ray task: ``argv`` is ``[folder, config.json or "", shares or ""]``; answers as
    ``cluster.run_local`` does, its stdout the check's JSON (through verl's layout,
    :func:`ascendfix.checkpoint.verl.check_save`) plus ``view`` (:func:`file_view` of the folder checked)
    and ``identities`` (:func:`identities`). ``shares`` (JSON, from :func:`shares`): node id -> the data
    files whose bytes that node proves; this node proves its own share."""
    from ascendfix.checkpoint import megatron, verl

    answer = {"hostname": socket.gethostname(), "stderr": ""}
    folder, config, shared = (argv + ["", ""])[:3]
    try:
        model = megatron.read_config(Path(config)) if config else None
        share = frozenset(json.loads(shared).get(node_id(), [])) if shared else None
        report = verl.check_save(Path(folder), model, config_given=bool(config), prove=share is not None, share=share)
        checked = Path(report.checkpoint)
        data = {**report.to_json(), "view": file_view(checked), "identities": identities(checked)}
    except AscendfixError as e:
        return {**answer, "returncode": e.exit_code, "stdout": json.dumps(error_object(str(e), e.exit_code))}
    return {**answer, "returncode": 0 if report.ok else 1, "stdout": json.dumps(data)}


def node_id() -> str:
    """Inside a Ray task: the id of the node it runs on."""
    import ray  # inside a Ray task: ray is there

    return ray.get_runtime_context().get_node_id()


def identities(folder: Path, suffix: str = ".distcp") -> dict[str, str]:
    """Each plain file of ``folder`` whose name ends in ``suffix`` ("": every one) -> its size, inode, mtime and
    ctime: one file on shared storage shows the same identity on every node that mounts it, while two copies
    differ (the inode, the ctime)."""
    found = {}
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if name.endswith(suffix):
            info = os.lstat(folder / name)
            if stat.S_ISREG(info.st_mode):
                found[name] = f"{info.st_size}:{info.st_ino}:{info.st_mtime_ns}:{info.st_ctime_ns}"
    return found


def shares(seen: dict[str, dict[str, str]]) -> dict[str, list[str]]:
    """Node id -> the files it proves, from each node's :func:`identities`: every copy of a file proven once,
    a file that several nodes see (one identity: shared storage) by one of them, chosen by a stable hash of
    its path, so the nodes share the work and the bytes never travel."""
    groups: dict[tuple[str, str], list[str]] = {}
    for node, files in seen.items():
        for name, identity in files.items():
            groups.setdefault((name, identity), []).append(node)
    chosen: dict[str, list[str]] = {node: [] for node in seen}
    for (name, _), nodes in sorted(groups.items()):
        nodes.sort()
        chosen[nodes[int(hashlib.sha256(name.encode()).hexdigest()[:8], 16) % len(nodes)]].append(name)
    return chosen


def differences(views: dict[str, dict[str, int]]) -> list[tuple[str, dict[str, int | None]]]:
    """``[(file, {node: size or None when absent})]`` for each file not the same size on every node."""
    files = sorted(set().union(*views.values())) if views else []
    found = []
    for name in files:
        sizes = {node: view.get(name) for node, view in views.items()}
        if len(set(sizes.values())) > 1:
            found.append((name, sizes))
    return found
