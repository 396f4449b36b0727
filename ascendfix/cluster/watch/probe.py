"""What one node says of its ranks: read from ``/proc``, and their Python stacks from py-spy.

Runs inside a Ray task pinned to the node (``num_cpus=0``), so it imports the standard library only
and :mod:`follow` ships it by value. It writes nothing and starts nothing but ``py-spy dump
--nonblocking`` (which reads the process's memory without pausing it), bounded in time and output.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

DUMP_TIMEOUT_S = 10.0
MAX_FRAMES = 40
MAX_LINE = 300
DUMPS_AT_ONCE = 4  # a node's ranks are dumped four at a time
NO_PTRACE = ("Operation not permitted", "Permission denied", "ptrace")


def read_proc(pid: int, proc: str = "/proc") -> dict:
    """Title, state, CPU ticks (all threads) and wait channel of ``pid``; ``{"gone": True}`` when it ended."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            stat = f.read(4096).decode(errors="replace")
        with open(f"{proc}/{pid}/cmdline", "rb") as f:
            title = f.read(512).replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return {"gone": True}
    fields = stat.rsplit(")", 1)[-1].split()
    try:
        with open(f"{proc}/{pid}/wchan", "rb") as f:
            wchan = f.read(64).decode(errors="replace").strip()
    except OSError:
        wchan = ""
    return {"title": title, "state": fields[0], "ticks": int(fields[11]) + int(fields[12]), "wchan": wchan}


def pyspy() -> str | None:
    """The py-spy this node has: on PATH, or beside this interpreter (where Ray's dashboard extra puts it)."""
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return shutil.which("py-spy") or (beside if os.access(beside, os.X_OK) else None)


def main_frames(dump: str) -> list[str]:
    """The frames of the dump's main thread (else its first thread), innermost first, Ray's own loop cut off."""
    threads: list[tuple[str, list[str]]] = []
    for line in dump.splitlines():
        if line.startswith("Thread "):
            threads.append((line, []))
        elif threads and line.startswith("    ") and line.strip():
            threads[-1][1].append(line.strip()[:MAX_LINE])
    if not threads:
        return []
    frames = next((f for head, f in threads if '"MainThread"' in head), threads[0][1])
    ours = [i for i, frame in enumerate(frames) if not re.search(r"[(/]ray/", frame)]
    return frames[: ours[-1] + 1] if ours else frames


def dump_stack(pid: int, tool: str | None) -> dict:
    """``{"stack": [frames]}`` of ``pid``'s main thread, or ``{"stack_error": why}``."""
    if tool is None:
        return {"stack_error": "py-spy is not installed on this node (pip install py-spy)"}
    try:
        done = subprocess.run(
            [tool, "dump", "--pid", str(pid), "--nonblocking"],
            capture_output=True,
            timeout=DUMP_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return {"stack_error": f"py-spy dump took over {DUMP_TIMEOUT_S:g} s"}
    except OSError as e:
        return {"stack_error": f"py-spy could not start: {e}"}
    text = done.stdout[: 1 << 20].decode(errors="replace")
    if done.returncode != 0:
        said = [line.strip() for line in done.stderr[:4000].decode(errors="replace").splitlines() if line.strip()]
        why = next((line for line in said if line.startswith("Error:")), said[0] if said else "no output")
        if any(word in line for line in said for word in NO_PTRACE):
            denied = next(line for line in said if any(word in line for word in NO_PTRACE))
            why = f"ptrace is not permitted here ({why} {denied}): give the Ray nodes CAP_SYS_PTRACE to see stacks"
        return {"stack_error": f"py-spy: {why[:MAX_LINE]}"}
    return {"stack": main_frames(text)[:MAX_FRAMES]}


def sample(pids: list[int], stacks: list[int]) -> dict:
    """``{"clk_tck", "pids": {pid: read_proc}}``, with :func:`dump_stack` for the pids in ``stacks``
    (:data:`DUMPS_AT_ONCE` at a time)."""
    tool = pyspy() if stacks else None
    seen = {pid: read_proc(pid) for pid in pids}
    dump = [pid for pid in stacks if pid in seen and not seen[pid].get("gone")]
    if dump:
        with ThreadPoolExecutor(min(DUMPS_AT_ONCE, len(dump))) as pool:
            for pid, stack in zip(dump, pool.map(lambda p: dump_stack(p, tool), dump), strict=True):
                seen[pid].update(stack)
    return {"clk_tck": os.sysconf("SC_CLK_TCK"), "pids": seen}
