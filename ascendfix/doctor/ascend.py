"""Checks of the Ascend stack: CANN toolkit, driver, NPUs (``npu-smi``), and set_env.sh.

Everything is read from files and one ``npu-smi info`` call; on a machine without
Ascend hardware each check says "no Ascend stack found" instead of failing to run.
"""

from __future__ import annotations

import re
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ascendfix.doctor.context import Context
from ascendfix.doctor.model import Finding, fail, ok, skip, warn
from ascendfix.tuples import NamedTuple

NO_STACK = "no Ascend stack found"
HEALTHY = "OK"
WARNING = "WARNING"  # npu-smi's health words: OK, Warning, Alarm, Critical


def _same_version(found: str, pin: str) -> bool:
    """CANN and driver versions (``8.3.RC1``, ``25.2.0``): compared as versions where they parse."""
    try:
        return Version(found) == Version(pin)
    except InvalidVersion:
        return found.strip().lower() == pin.strip().lower()


def pinned(ctx: Context, name: str) -> str | None:
    """The version the profile pins for the system component ``name`` (``cann``, ``hdk``), or None."""
    component = next((c for c in ctx.components("system") if c.name == name), None)
    return component.version if component else None


def _read_keys(path: Path) -> dict[str, str]:
    """``key=value`` lines of an Ascend .info / .cfg file."""
    values = {}
    for line in path.read_text(errors="replace").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    return values


def toolkit_dirs(ctx: Context) -> list[Path]:
    """Where the CANN toolkit may be: the environment's, else the install root's layouts (newest first)."""
    named = [ctx.environ.get(k) for k in ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH")]
    if any(named):
        return [Path(p) for p in dict.fromkeys(named) if p]
    home = ctx.ascend_home
    return [home / "ascend-toolkit" / "latest", *sorted(home.glob("cann*"), reverse=True)]


class Toolkit(NamedTuple):
    """A CANN toolkit found on disk."""

    home: Path
    version: str
    source: Path


def find_toolkit(ctx: Context) -> Toolkit | None:
    """The CANN toolkit and its version (``<arch>-linux/*_install.info``, else ``version.cfg``)."""
    for home in toolkit_dirs(ctx):
        for info in sorted(home.glob("*-linux/*_install.info")):
            version = _read_keys(info).get("version")
            if version:
                return Toolkit(home, version, info)
        cfg = home / "version.cfg"
        if cfg.is_file():
            for value in _read_keys(cfg).values():
                match = re.search(r":([^\]:]+)\]", value)  # runtime_running_version=[7.7.T20.0.B210:8.1.RC1]
                if match:
                    return Toolkit(home, match.group(1), cfg)
    return None


def _stack_present(ctx: Context) -> bool:
    home = ctx.ascend_home
    return (home / "driver").is_dir() or find_toolkit(ctx) is not None or ctx.which("npu-smi") is not None


def _no_stack(ctx: Context) -> str:
    why = f"no driver/ or toolkit under {ctx.ascend_home}, no npu-smi on PATH"
    return f"{NO_STACK} ({why}; {ctx.device_reason})" if ctx.device_reason else f"{NO_STACK} ({why})"


def _set_env_script(ctx: Context, toolkit: Toolkit) -> Path:
    for candidate in (toolkit.home / "set_env.sh", toolkit.home.parent / "set_env.sh"):
        if candidate.is_file():
            return candidate
    return ctx.ascend_home / "ascend-toolkit" / "set_env.sh"


def _sourced(ctx: Context, toolkit: Toolkit) -> bool:
    """Whether CANN's libraries are on LD_LIBRARY_PATH (what sourcing set_env.sh does)."""
    home = toolkit.home.resolve()
    for entry in filter(None, ctx.environ.get("LD_LIBRARY_PATH", "").split(":")):
        try:
            Path(entry).resolve().relative_to(home)
            return True
        except ValueError:
            continue
    return False


def check_cann(ctx: Context) -> Finding:
    """The CANN toolkit's version against the profile, and whether set_env.sh was sourced."""
    if ctx.device != "npu":
        return skip(f"device is {ctx.device}")
    pin = pinned(ctx, "cann")
    toolkit = find_toolkit(ctx)
    if toolkit is None:
        looked = ", ".join(str(p) for p in toolkit_dirs(ctx))
        if not _stack_present(ctx):
            return fail(_no_stack(ctx), fix=f"install CANN {pin} (or pass --ascend-home PATH if it is elsewhere)")
        return fail(f"no CANN toolkit found (looked in {looked})", fix=f"install the CANN {pin} toolkit")
    found = f"CANN {toolkit.version} at {toolkit.home} (from {toolkit.source.name})"
    if pin and not _same_version(toolkit.version, pin):
        return fail(f"{found}; the profile needs {pin}", fix=f"install the CANN {pin} toolkit")
    if not _sourced(ctx, toolkit):
        script = _set_env_script(ctx, toolkit)
        return fail(f"{found}, but its libraries are not on LD_LIBRARY_PATH", fix=f"source {script}")
    return ok(found, "set_env.sh sourced (CANN libraries on LD_LIBRARY_PATH)")


def check_driver(ctx: Context) -> Finding:
    """The Ascend driver's version (``driver/version.info``) against the profile."""
    if ctx.device != "npu":
        return skip(f"device is {ctx.device}")
    if not _stack_present(ctx):
        return skip(_no_stack(ctx))
    path = ctx.ascend_home / "driver" / "version.info"
    pin = pinned(ctx, "hdk")
    if not path.is_file():
        return fail(f"{path} is missing: no Ascend driver installed", fix=f"install the Ascend HDK {pin} driver")
    version = _read_keys(path).get("Version")
    if not version:
        return fail(f"{path} has no Version= line", fix=f"reinstall the Ascend HDK {pin} driver")
    if pin and not _same_version(version, pin):
        return fail(f"driver {version} ({path}); the profile needs {pin}", fix=f"install the Ascend HDK {pin} driver")
    return ok(f"driver {version} ({path})")


class Npu(NamedTuple):
    """One NPU row pair of ``npu-smi info``."""

    index: int  # type: ignore[assignment]  # the field shadows tuple.index; the name is the row's
    name: str
    health: str
    hbm_used_mb: int | None
    hbm_total_mb: int | None


ROW_ONE = re.compile(r"^\s*(\d+)\s+(\S.*?)\s*$")
ROW_TWO = re.compile(r"^\s*\d+\s*$")
USAGE = re.compile(r"(\d+)\s*/\s*(\d+)\s*$")


def parse_npu_smi(text: str) -> list[Npu]:
    """The NPUs of an ``npu-smi info`` table: two boxed rows per NPU, until the process table."""
    npus, pending = [], None
    for line in text.splitlines():
        if "Process id" in line or "Process name" in line:
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else []
        if len(cells) < 3:
            continue
        first = ROW_ONE.match(cells[0])
        if first and not ROW_TWO.match(cells[0]) and re.fullmatch(r"[A-Za-z]+", cells[1]):
            pending = (int(first.group(1)), first.group(2), cells[1])
        elif pending and ROW_TWO.match(cells[0]) and re.match(r"[0-9A-Fa-f]{4,8}:", cells[1]):
            usage = USAGE.search(cells[2])
            used, total = (int(usage.group(1)), int(usage.group(2))) if usage else (None, None)
            npus.append(Npu(*pending, used, total))
            pending = None
    return npus


def check_npu(ctx: Context) -> Finding:
    """NPUs from ``npu-smi info``: how many, their health, their HBM."""
    if ctx.device != "npu":
        return skip(f"device is {ctx.device}")
    smi = ctx.which("npu-smi")
    if smi is None:
        if not _stack_present(ctx):
            return skip(_no_stack(ctx))
        return fail("npu-smi is not on PATH", fix=f"export PATH={ctx.ascend_home}/driver/tools:$PATH")
    import subprocess

    try:
        result = subprocess.run(
            [smi, "info"], capture_output=True, text=True, timeout=ctx.timeout, env=dict(ctx.environ)
        )
    except subprocess.TimeoutExpired:
        return fail(f"npu-smi info did not answer within {ctx.timeout:.0f} s", fix="check the driver: dmesg | tail")
    npus = parse_npu_smi(result.stdout)
    if result.returncode != 0 or not npus:
        last = (result.stderr.strip() or result.stdout.strip() or "no output").splitlines()[-1]
        return fail(
            f"npu-smi info found no NPU (exit {result.returncode}: {last})", fix="check the driver: dmesg | tail"
        )
    lines = [
        f"NPU {n.index} {n.name}: {n.health}"
        + (f", HBM {n.hbm_used_mb}/{n.hbm_total_mb} MB used" if n.hbm_total_mb else "")
        for n in npus
    ]
    unhealthy = [n for n in npus if n.health.upper() not in (HEALTHY, WARNING)]
    warned = [n for n in npus if n.health.upper() == WARNING]
    busy = [n for n in npus if n.hbm_used_mb and n.hbm_total_mb and n.hbm_used_mb > n.hbm_total_mb // 10]
    head = f"{len(npus)} NPU(s): {npus[0].name}"
    if unhealthy:
        bad = ", ".join(f"NPU {n.index} is {n.health}" for n in unhealthy)
        return fail(f"{head}; {bad}", *lines, fix="npu-smi info -t health -i <id>  # details; reset or replace the NPU")
    if warned:
        which = ", ".join(f"NPU {n.index}" for n in warned)
        return warn(f"{head}; health Warning on {which}", *lines, fix="npu-smi info -t health -i <id>  # details")
    if busy:
        held = ", ".join(f"NPU {n.index}" for n in busy)
        return warn(
            f"{head}; HBM already in use on {held} (another job?)", *lines, fix="npu-smi info  # see its process table"
        )
    return ok(head + ", all healthy", *lines)
