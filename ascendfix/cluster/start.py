"""``ascendfix ray start``: the guide's ``ray start`` line, with the profile's environment and NPU resource.

:func:`plan` turns the user's ``ray start`` options into the command to execute: the head's
port and dashboard flags when the user gave none (guide 3.3.1), and on npu a ``--resources``
that registers this node's NPUs (counted by ``npu-smi info``, else the profile's per-node
count), merged into the user's own ``--resources``. :func:`exec_ray` then replaces this
process with ``ray start``: its exit status, ``--block`` and signals are ray's own. Nothing
here imports ray or prints.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ascendfix.cluster.fanout import INSTALL_HINT
from ascendfix.doctor.ascend import parse_npu_smi
from ascendfix.errors import UsageError
from ascendfix.profile.records import Profile

HEAD_DEFAULTS = (("--port", "6166"), ("--dashboard-host", "0.0.0.0"), ("--dashboard-port", "8260"))
RESOURCE = {"npu": "NPU", "cuda": "GPU"}


@dataclass(frozen=True)
class Plan:
    """The ``ray start`` command to run, and what ascendfix decided on the way (for the user to read)."""

    argv: tuple[str, ...]
    head: bool
    npus: int | None = None  # the NPU count ascendfix registered (None: not npu, or the user's own)
    npu_source: str = ""  # npu-smi | profile | yours
    warnings: tuple[str, ...] = ()


def require_ray() -> None:
    """A UsageError saying how to install ray when it is not importable (without importing it)."""
    if importlib.util.find_spec("ray") is None:
        raise UsageError(INSTALL_HINT)


def _given(args: Sequence[str], option: str) -> int | None:
    """Index of ``option`` (``--opt value`` or ``--opt=value``) in ``args``, or None."""
    return next((i for i, a in enumerate(args) if a == option or a.startswith(option + "=")), None)


def _value(args: Sequence[str], i: int) -> str | None:
    option, sep, value = args[i].partition("=")
    if sep:
        return value
    return args[i + 1] if i + 1 < len(args) else None


def count_npus(environ: Mapping[str, str], timeout: float = 20.0) -> tuple[int | None, str]:
    """The NPUs ``npu-smi info`` lists (parsed as doctor parses it), or None and why not."""
    smi = shutil.which("npu-smi", path=environ.get("PATH", ""))
    if smi is None:
        return None, "npu-smi is not on PATH"
    try:
        done = subprocess.run([smi, "info"], capture_output=True, text=True, timeout=timeout, env=dict(environ))
    except subprocess.TimeoutExpired:
        return None, f"npu-smi info did not answer within {timeout:g} s"
    except OSError as e:
        return None, f"npu-smi info cannot run: {e.strerror or e}"
    npus = parse_npu_smi(done.stdout)
    if done.returncode != 0 or not npus:
        return None, f"npu-smi info found no NPU (exit {done.returncode})"
    return len(npus), ""


def plan(
    profile: Profile,
    device: str,
    args: Sequence[str],
    environ: Mapping[str, str],
    npu_counter: Callable[[Mapping[str, str]], tuple[int | None, str]] = count_npus,
) -> Plan:
    """The ``ray start`` argv for these user options (``--head`` or ``--address`` among them)."""
    args = list(args)
    head, address = "--head" in args, _given(args, "--address")
    if head == (address is not None):
        raise UsageError("ray start: give --head (the first node) or --address HEAD_IP:PORT (every other node)")
    if address is not None and not _value(args, address):
        raise UsageError("ray start --address: expected HEAD_IP:PORT (e.g. 10.0.0.1:6166)")
    added: list[str] = []
    if head:
        for option, default in HEAD_DEFAULTS:
            if _given(args, option) is None:
                added.append(f"{option}={default}")
    warnings: list[str] = []
    npus, source = None, ""
    if device == "npu":
        at = _given(args, "--resources")
        resources: dict = {}
        if at is not None:
            text = _value(args, at)
            try:
                given = json.loads(text or "")
            except json.JSONDecodeError:
                given = None
            if not isinstance(given, dict):
                raise UsageError(f"--resources {text or ''}: expected a JSON object, e.g. '{{\"NPU\": 8}}'")
            resources = given
        if "NPU" in resources:
            source = "yours"
        else:
            npus, why = npu_counter(environ)
            source = "npu-smi"
            if npus is None:
                npus, source = profile.devices[device].accelerators_per_node, "profile"
                if npus is None:
                    raise UsageError(
                        f"{why}, and profile {profile.name} has no accelerators_per_node: "
                        "pass --resources '{\"NPU\": N}'"
                    )
                warnings.append(f"{why}: registering the profile's {npus} NPU(s) per node")
            merged = json.dumps({**resources, "NPU": npus})
            if at is None:
                added.append(f"--resources={merged}")
            else:
                args[at : at + (1 if "=" in args[at] else 2)] = [f"--resources={merged}"]
    return Plan(("ray", "start", *args, *added), head, npus, source, tuple(warnings))


def ray_executable(environ: Mapping[str, str]) -> str:
    """The ``ray`` command beside this interpreter (the ray ascendfix would import), else on PATH."""
    beside = Path(sys.executable).parent / "ray"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("ray", path=environ.get("PATH", ""))
    if found is None:
        raise UsageError(INSTALL_HINT + " (no ray command found)")
    return found


def exec_ray(argv: Sequence[str], env: Mapping[str, str]) -> None:
    """Replace this process with ``ray start``: the pid, signals, ``--block`` and exit status are ray's."""
    executable = ray_executable(env)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(executable, [executable, *argv[1:]], dict(env))
