"""``ckpt check --ray``: what each node sees of the checkpoint folder, and where the nodes' views differ.

Without shared storage every node loads its own copy: a node missing a shard, or holding a shorter
one, fails at load while the others wait. :func:`node_view` runs on each node (a Ray task, pinned to
it): the check there, and every file under the folder with its size. :func:`differences` names each
file whose size is not the same on all nodes (absent counts).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
from pathlib import Path

from ascendfix.errors import AscendfixError


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
    """Inside a node's Ray task: ``argv`` is ``[folder]`` or ``[folder, config.json]``; answers as
    ``cluster.run_local`` does, its stdout the check's JSON plus ``view`` (:func:`file_view`)."""
    from ascendfix.checkpoint import check, megatron

    answer = {"hostname": socket.gethostname(), "stderr": ""}
    try:
        folder = Path(argv[0])
        model = megatron.read_config(Path(argv[1])) if len(argv) > 1 else None
        report = check.check(folder, model)
        data = {**report.to_json(), "view": file_view(folder)}
    except AscendfixError as e:
        return {**answer, "returncode": e.exit_code, "stdout": json.dumps({"error": str(e), "exit_code": e.exit_code})}
    return {**answer, "returncode": 0 if report.ok else 1, "stdout": json.dumps(data)}


def differences(views: dict[str, dict[str, int]]) -> list[tuple[str, dict[str, int | None]]]:
    """``[(file, {node: size or None when absent})]`` for each file not the same size on every node."""
    files = sorted(set().union(*views.values())) if views else []
    found = []
    for name in files:
        sizes = {node: view.get(name) for node, view in views.items()}
        if len(set(sizes.values())) > 1:
            found.append((name, sizes))
    return found
