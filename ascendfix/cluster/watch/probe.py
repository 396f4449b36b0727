"""What one node says of its ranks: read from ``/proc``, their Python stacks from py-spy, their NPUs' use
from ``npu-smi info``.

Runs inside a Ray task pinned to the node (``num_cpus=0``), so it imports the standard library only
and :mod:`follow` ships it by value. It writes nothing and starts nothing but ``py-spy dump
--nonblocking`` (which reads the process's memory without pausing it) and ``npu-smi info``, each
bounded in time and output.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

DUMP_TIMEOUT_S = 10.0
MAX_FRAMES = 40
MAX_LINE = 300
DUMPS_AT_ONCE = 4  # a node's ranks are dumped four at a time
NO_PTRACE = ("Operation not permitted", "Permission denied", "ptrace")
NPU_SMI_TIMEOUT_S = 5.0
NPU_SMI_MAX = 1 << 20  # bytes of npu-smi's answer read (a node's table is a few kB)
HEALTH = frozenset({"OK", "WARNING", "ALARM", "CRITICAL", "UNKNOWN"})  # npu-smi's health words


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


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else []


def parse_npu_info(text: str) -> tuple[dict[tuple[int, int], int], dict[int, tuple[int, int]]]:
    """``npu-smi info``'s AICore % per (NPU, chip), and the (NPU, chip) each process it lists runs on.

    The table has two rows per chip (``| NPU Name | Health | ...`` then ``| Chip | Bus-Id | AICore(%)
    ...``), then a process table ``| NPU Chip | Process id | Process name | Process memory(MB) |``,
    which newer drivers end with ``| Process id in container |``: that pid is the one this node's
    namespace sees, so it wins where it is given. Rows that do not fit are skipped.
    """
    aicore: dict[tuple[int, int], int] = {}
    procs: dict[int, tuple[int, int]] = {}
    npu, header = None, None
    for line in text.splitlines():
        cells = _cells(line)
        if "Process id" in line:
            header = cells
            continue
        if len(cells) < 3:
            continue
        if header is None:
            if re.match(r"\d+\s+\S", cells[0]) and cells[1].upper() in HEALTH:
                npu = int(cells[0].split()[0])
                continue
            chip, use = re.fullmatch(r"(\d+)(?:\s+\d+)?", cells[0]), re.match(r"(\d+)(?:\s|$)", cells[2])
            if npu is not None and chip and use:
                aicore[(npu, int(chip.group(1)))] = int(use.group(1))
            continue
        where = re.fullmatch(r"(\d+)\s+(\d+)", cells[0])
        if not where:
            continue
        pid = cells[header.index("Process id")] if "Process id" in header and len(cells) == len(header) else ""
        if "Process id in container" in header and len(cells) == len(header):
            inside = cells[header.index("Process id in container")]
            pid = inside if inside.isdigit() else pid
        if pid.isdigit():
            procs[int(pid)] = (int(where.group(1)), int(where.group(2)))
    return aicore, procs


def _bounded_output(argv: list[str], timeout: float, limit: int) -> bytes:
    """The first ``limit`` bytes ``argv`` prints; :class:`subprocess.TimeoutExpired` past ``timeout``."""
    got: list[bytes] = []
    quiet = subprocess.DEVNULL
    with subprocess.Popen(argv, stdin=quiet, stdout=subprocess.PIPE, stderr=quiet, start_new_session=True) as proc:
        stream = proc.stdout
        assert stream is not None  # stdout=PIPE
        reader = threading.Thread(target=lambda: got.append(stream.read(limit)), daemon=True)
        reader.start()
        reader.join(timeout)
        late = reader.is_alive()
        if proc.poll() is None:
            try:  # its whole group: a child left holding the pipe would keep the reader waiting
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
        reader.join()
    if late or not got:
        raise subprocess.TimeoutExpired(argv, timeout)
    return got[0]


def npu_use(pids: list[int], path: str | None = None) -> dict[int, dict]:
    """Per pid, its NPU's use: ``{"id", "chip", "aicore_pct"}`` where ``npu-smi info`` lists the pid,
    else ``{"error": why}`` (no npu-smi, no answer, the pid not listed): the evidence is absent, never an error."""
    tool = shutil.which("npu-smi", path=os.environ.get("PATH", "") if path is None else path)
    if tool is None:
        return {pid: {"error": "npu-smi is not on this node's PATH"} for pid in pids}
    try:
        text = _bounded_output([tool, "info"], NPU_SMI_TIMEOUT_S, NPU_SMI_MAX).decode(errors="replace")
    except subprocess.TimeoutExpired:
        return {pid: {"error": f"npu-smi info took over {NPU_SMI_TIMEOUT_S:g} s"} for pid in pids}
    except OSError as e:
        return {pid: {"error": f"npu-smi could not start: {e.strerror or e}"} for pid in pids}
    aicore, procs = parse_npu_info(text)
    use: dict[int, dict] = {}
    for pid in pids:
        where = procs.get(pid)
        if where is None:
            use[pid] = {"error": "npu-smi info lists no process with this pid"}
        elif where not in aicore:
            use[pid] = {"id": where[0], "chip": where[1], "error": "npu-smi info gives no AICore % for its chip"}
        else:
            use[pid] = {"id": where[0], "chip": where[1], "aicore_pct": aicore[where]}
    return use


def sample(pids: list[int], stacks: list[int], npu: bool = False) -> dict:
    """``{"clk_tck", "pids": {pid: read_proc}}``, with :func:`dump_stack` for the pids in ``stacks``
    (:data:`DUMPS_AT_ONCE` at a time) and, when ``npu``, each rank's :func:`npu_use` as ``"npu"``."""
    tool = pyspy() if stacks else None
    seen = {pid: read_proc(pid) for pid in pids}
    if npu:
        alive = [pid for pid in pids if not seen[pid].get("gone")]
        for pid, use in npu_use(alive).items():
            seen[pid]["npu"] = use
    dump = [pid for pid in stacks if pid in seen and not seen[pid].get("gone")]
    if dump:
        with ThreadPoolExecutor(min(DUMPS_AT_ONCE, len(dump))) as pool:
            for pid, stack in zip(dump, pool.map(lambda p: dump_stack(p, tool), dump), strict=True):
                seen[pid].update(stack)
    return {"clk_tck": os.sysconf("SC_CLK_TCK"), "pids": seen}
