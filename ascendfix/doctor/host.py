"""Checks of the host around the Python stack: the OS, CUDA GPUs, the job's environment, known hazards."""

from __future__ import annotations

import resource
import shlex
import shutil
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ascendfix.doctor import nic
from ascendfix.doctor.context import Context
from ascendfix.doctor.model import Finding, fail, ok, skip, warn
from ascendfix.profile import rules
from ascendfix.profile.jobenv import path_entries, prepend_shell

CHECKPOINT_FREE_GB = 500  # one bf16 copy of Qwen3-235B-A22B's weights is ~470 GB
MINDSPEED_CKPT_ACCELERATION = "mindspeed/features_manager/ckpt_acceleration"


def read_os_release(path: Path) -> dict[str, str]:
    """``KEY=value`` pairs of an os-release file, quotes removed."""
    values = {}
    for line in path.read_text(errors="replace").splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.startswith("#"):
            values[key.strip()] = value.strip().strip("'\"")
    return values


def _same_os(found: dict[str, str], pin: str) -> bool:
    """Whether os-release matches a pin like ``AlmaLinux 8`` (distribution id, then a version prefix)."""
    name, _, version = pin.rpartition(" ")
    ids = {found.get("ID", "").lower(), found.get("NAME", "").lower(), *found.get("ID_LIKE", "").lower().split()}
    found_version = found.get("VERSION_ID", "")
    same_version = found_version == version or found_version.startswith(version + ".")
    return name.lower().replace(" ", "") in {i.replace(" ", "") for i in ids} and same_version


def check_os(ctx: Context) -> Finding:
    """``/etc/os-release`` against the profile's OS pin (a warning: the stack may still run)."""
    pin = next((c for c in ctx.components("system") if c.name == "os"), None)
    if pin is None:
        return skip(f"the profile pins no OS for {ctx.device}")
    try:
        found = read_os_release(ctx.os_release)
    except OSError:
        return skip(f"{ctx.os_release} cannot be read")
    here = found.get("PRETTY_NAME") or f"{found.get('NAME', '?')} {found.get('VERSION_ID', '')}".strip()
    guide = f"; the guide's container is {pin.guide_value}" if pin.guide_value else ""
    if _same_os(found, pin.version):
        return ok(f"{here} ({ctx.os_release}), as the profile pins ({pin.version}){guide}")
    return warn(
        f"{here} ({ctx.os_release}); the profile pins {pin.version}{guide}",
        details=[" ".join(pin.why.split())],
        fix="run the job in the image the profile builds: ascendfix export dockerfile > Dockerfile",
    )


def check_cuda(ctx: Context) -> Finding:
    """NVIDIA GPUs and driver from ``nvidia-smi``."""
    if ctx.device != "cuda":
        return skip(f"device is {ctx.device}")
    smi = ctx.which("nvidia-smi")
    if smi is None:
        return fail(
            "nvidia-smi is not on PATH: no NVIDIA driver found",
            fix="install the NVIDIA driver (nvidia-smi comes with it)",
        )
    query = ["--query-gpu=index,name,driver_version,memory.total,memory.used", "--format=csv,noheader,nounits"]
    import subprocess

    try:
        result = subprocess.run(
            [smi, *query], capture_output=True, text=True, timeout=ctx.timeout, env=dict(ctx.environ)
        )
    except subprocess.TimeoutExpired:
        return fail(f"nvidia-smi did not answer within {ctx.timeout:.0f} s", fix="check the driver: dmesg | tail")
    rows = [[cell.strip() for cell in line.split(",")] for line in result.stdout.splitlines() if line.count(",") >= 4]
    if result.returncode != 0 or not rows:
        last = (result.stderr.strip() or result.stdout.strip() or "no output").splitlines()[-1]
        return fail(f"nvidia-smi found no GPU (exit {result.returncode}: {last})", fix="check the driver: dmesg | tail")
    lines = [f"GPU {r[0]} {r[1]}: {r[4]}/{r[3]} MiB used" for r in rows]
    return ok(f"{len(rows)} GPU(s): {rows[0][1]}, driver {rows[0][2]}", *lines)


def _nic_fix(var: str, nics: list[nic.Interface]) -> str:
    """The export a fix suggests for a per-site NIC variable: the site's own NIC, never a guessed one, with this
    node's usable interfaces (up, with an address) to choose from."""
    usable = ", ".join(n.name for n in nics if n.up and n.addresses and n.name != "lo") or "none but lo"
    return f"export {var}=SITE_NIC  # the NIC this site's nodes reach each other on (this host has: {usable})"


def check_env(ctx: Context) -> Finding:
    """The profile's environment variables, ``ulimit -n``, and free space for checkpoints."""
    device = ctx.profile.devices[ctx.device]
    nics = nic.interfaces()
    bad, good, exports, whys = [], [], [], []
    for var in device.env:
        value = ctx.environ.get(var.name)
        why = f"{var.name}: {' '.join(var.why.split())}"
        if var.prepend:
            missing = [e for e in path_entries(var.value) if e not in path_entries(value)]
            if missing:
                bad.append(f"{var.name} lacks {':'.join(missing)}; the profile puts {var.value} in front")
                whys.append(why)
                exports.append(f'export {var.name}={shlex.quote(var.value)}"{prepend_shell(var.name, "")}"')
            else:
                good.append(f"{var.name} has {var.value}")
        elif var.value is not None and value != var.value:
            now = "unset" if value is None else f"{value!r}"
            bad.append(f"{var.name} is {now}; the profile sets {var.value!r}")
            whys.append(why)
            exports.append(f"export {var.name}={shlex.quote(var.value)}")
        elif var.check == "interface":
            verdict = nic.select(var.name, ctx.environ, nics)
            if verdict is None or not verdict.ok:
                bad.append(verdict.message if verdict else f"{var.name} is unset; it is site-specific")
                whys.append(why)
                exports.append(_nic_fix(var.name, nics))
            else:
                good.append(verdict.message)
        elif var.value is None and not value:
            bad.append(f"{var.name} is unset; it is site-specific")
            whys.append(why)
            exports.append(f"export {var.name}=VALUE  # this site's value")
        else:
            good.append(f"{var.name}={value}")
    warned, advice = [], []
    ports = nic.port_warning(ctx.environ) if ctx.device == "npu" else None  # HCCL's listen ports
    if ports:
        warned.append(ports[0])
        advice.append(ports[1])
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    limits = []
    if device.ulimit_nofile and soft != resource.RLIM_INFINITY and soft < device.ulimit_nofile:
        bad.append(f"ulimit -n is {soft}; the job needs at least {device.ulimit_nofile} open files")
        limits.append(f"ulimit -n {device.ulimit_nofile}")
    else:
        good.append(f"ulimit -n {'unlimited' if soft == resource.RLIM_INFINITY else soft}")
    free_gb = shutil.disk_usage(ctx.cwd).free / 1e9
    space = f"{free_gb:.0f} GB free in {ctx.cwd} (verl writes checkpoints/ under the working directory)"
    if free_gb < CHECKPOINT_FREE_GB:
        warned.append(f"only {space}; one bf16 copy of the weights needs ~470 GB")
        advice.append(f"run the job with trainer.default_local_dir=DIR on a disk with {CHECKPOINT_FREE_GB} GB free")
    else:
        good.append(space)
    fix = "\n".join(exports + limits + advice)
    if bad:
        head = f"{len(bad)} problem(s) with the environment the job inherits"
        return fail(head, *bad, *warned, *good, fix=fix, details=whys)
    if warned:
        return warn(*warned, *good, fix=fix)
    return ok(f"{len(device.env)} variables set as the profile needs", *good)


def _rule_outcome(ctx: Context) -> rules.Outcome:
    """The profile's rules over the job's effective environment and the interpreter's modules.

    Doctor sees no job script, so the overrides are none (verl's defaults, which the rules
    carry) and the patch states are left to the patches check.
    """
    env = ctx.site.job_env
    names = rules.modules(ctx.profile.rules)
    importable = {name: ctx.package_root(name) is not None for name in names} if names else {}
    return rules.evaluate(ctx.profile.rules, rules.Facts(env=env, overrides={}, importable=importable), ctx.device)


def _why(hit: rules.Hit) -> str:
    return " ".join(hit.why.split())


def _short(hit: rules.Hit) -> str:
    """A rule's hit as one short line: its id and the values that made it hold (the why is a detail)."""
    return hit.message.removesuffix(f": {_why(hit)}")


def check_hazards(ctx: Context) -> Finding:
    """The profile's rules, and known combinations: MindSpeed's ckpt_acceleration, a patch superseded upstream.

    A ``refuse`` rule that holds fails the check (``run`` would refuse the job), a ``warn`` rule warns.
    """
    notes, warnings, fixes = [], [], []
    outcome = _rule_outcome(ctx)
    failures = [_short(h) for h in outcome.refusals]
    warnings += [_short(h) for h in outcome.hits if h.action != rules.REFUSE]
    details = [line for h in outcome.hits for line in (f"{h.rule}: {_why(h)}", f"{h.rule} source: {h.source}")]
    fixes += [h.fix for h in outcome.hits if h.fix]
    patches = ctx.profile.devices[ctx.device].patches
    torch_checks = [p for p in patches if ctx.profile.patches[p].package == "torch"]
    mindspeed = ctx.package_root("mindspeed")
    if torch_checks and mindspeed is not None and (mindspeed / MINDSPEED_CKPT_ACCELERATION).is_dir():
        notes.append(
            f"MindSpeed at {mindspeed} has ckpt_acceleration, which disables the same torch validators: "
            f"when the job enables it (+actor_rollout_ref.actor.megatron.override_transformer_config."
            f"ckpt_acceleration=True), {', '.join(torch_checks)} are redundant"
        )
    for pid in patches:
        patch = ctx.profile.patches[pid]
        installed = ctx.installed(patch.package) if patch.superseded else None
        if installed is None:
            continue
        try:
            superseded = Version(installed.version) >= Version(patch.superseded.since)
        except InvalidVersion:
            superseded = False
        if superseded:
            warnings.append(f"{patch.package} {installed.version} {' '.join(patch.superseded.why.split())}")
            fixes.append(patch.superseded.fix)
    if failures:
        return fail(*failures, *warnings, *notes, fix="\n".join(fixes), details=details)
    if warnings:
        return warn(*warnings, *notes, fix="\n".join(fixes), details=details)
    checked = f"{len(ctx.profile.rules)} rule(s) of the profile hold for the environment and verl's defaults"
    return ok(*(notes or ["none of the known hazards applies"]), checked)
