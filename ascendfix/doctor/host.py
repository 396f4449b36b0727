"""Checks of the host around the Python stack: the OS, CUDA GPUs, the job's environment, known hazards."""

from __future__ import annotations

import resource
import shlex
import shutil
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ascendfix.doctor import ascend, nic
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
    assert pin.version is not None  # the manifest requires a system component's version
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
    """The profile's environment variables, HCCL's listen ports and ``ulimit -n``."""
    device = ctx.profile.devices[ctx.device]
    nics = nic.interfaces()
    bad, good, exports, whys = [], [], [], []
    for var in device.env:
        value = ctx.environ.get(var.name)
        why = f"{var.name}: {' '.join(var.why.split())}"
        if var.prepend and var.value is not None:  # the manifest gives every prepended variable a value
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
    cann = _cann_version(ctx) if ctx.device == "npu" else None
    base = nic.base_port_problem(ctx.environ, cann) if ctx.device == "npu" else None
    if base:
        bad.append(base)
        whys.append(f"HCCL listens on HCCL_IF_BASE_PORT and the {nic.hccl_port_count(cann) - 1} ports above it")
        exports.append("unset HCCL_IF_BASE_PORT  # HCCL then listens from 60000")
    ports = nic.port_warning(ctx.environ, cann=cann) if ctx.device == "npu" else None  # HCCL's listen ports
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
    fix = "\n".join(exports + limits + advice)
    if bad:
        # one count for each kind of line under it, in their order: the head counts every bullet shown
        counts = [f"{len(bad)} problem(s)", *([f"{len(warned)} warning(s)"] if warned else [])]
        counts += [f"{len(good)} as needed"] if good else []
        head = f"{', '.join(counts)} in the environment the job inherits"
        return fail(head, *bad, *warned, *good, fix=fix, details=whys)
    if warned:
        return warn(*warned, *good, fix=fix)
    return ok(f"{len(device.env)} variables set as the profile needs", *good)


def check_disk(ctx: Context) -> Finding:
    """Free space where verl saves (``trainer.default_local_dir``, else the working directory) against one save."""
    problems, warnings, fixes, space = _checkpoint_space(ctx)
    if problems:
        return fail(*problems, fix="\n".join(fixes))
    if warnings:
        return warn(*warnings, fix="\n".join(fixes))
    return ok(space)


# Bytes per parameter of one verl save, by save_contents entry (UPSTREAM.md "verl's checkpoints at 796871d":
# the bf16 weights, 2 B/param; the distributed optimizer's fp32 master weights and Adam moments, about 12 B/param;
# hf_model another bf16 copy; extra (RNG, scheduler) next to nothing). Default [model, optimizer, extra]:
# 14 B/param, about 3.3 TB for Qwen3-235B-A22B.
SAVE_BYTES_PER_PARAM = {"model": 2, "optimizer": 12, "hf_model": 2, "extra": 0}
DEFAULT_SAVE_CONTENTS = ("model", "optimizer", "extra")  # verl 796871d trainer/config/actor/actor.yaml
SAVE_DIR, SAVE_CONTENTS = "trainer.default_local_dir", "actor_rollout_ref.actor.checkpoint.save_contents"
KEEP = "trainer.max_actor_ckpt_to_keep"


def _checkpoint_space(ctx: Context) -> tuple[list[str], list[str], list[str], str]:
    """Free space where verl saves against one save's size: (problems, warnings, fixes, the measurement).

    The folder is the job's ``trainer.default_local_dir`` when its overrides set it (too small for one save:
    a problem), else the working directory (verl's default ``checkpoints/``: a warning). One save is the
    profile's parameter count times the bytes of its ``save_contents``; with room for one but not two,
    ``trainer.max_actor_ckpt_to_keep=1`` (verl deletes the older save before writing the next one).
    """
    given = ctx.overrides.get(SAVE_DIR, "").strip("'\"")
    given = "" if "$" in given else given  # a variable the script leaves to the shell: not known here
    folder = ctx.cwd / given if given else ctx.cwd
    measured = folder
    while not measured.exists() and measured != measured.parent:
        measured = measured.parent  # the first save creates it: measure the disk it will be on
    free = shutil.disk_usage(measured).free
    where = f"{folder} ({SAVE_DIR})" if given else f"{ctx.cwd} (verl writes checkpoints/ under the working directory)"
    space = f"{free / 1e9:,.0f} GB free in {where}"
    model = ctx.profile.model
    if model is None:
        if free >= CHECKPOINT_FREE_GB * 1e9:
            return [], [], [], space
        fix = f"run the job with {SAVE_DIR}=DIR on a disk with {CHECKPOINT_FREE_GB} GB free"
        return [], [f"only {space}; one bf16 copy of the weights needs ~470 GB"], [fix], space
    contents = _save_contents(ctx.overrides.get(SAVE_CONTENTS))
    per_param = sum(SAVE_BYTES_PER_PARAM.get(c, 0) for c in contents)
    save = model.parameters * per_param
    sized = f"one save of {model.name} ({', '.join(contents)}: {per_param} B/param) is ~{save / 1e12:.1f} TB"
    if free >= 2 * save:
        return [], [], [], f"{space}: {free // save:,.0f} saves ({sized})"
    if free >= save:
        fix = f"{KEEP}=1 (verl deletes the older save before writing the next)"
        return [], [f"{space}: room for one save, not two ({sized}); set {fix}"], [fix], space
    message = f"only {space}; {sized}: the first save would fail"
    two = f"{2 * save / 1e12:.1f} TB"
    fix = f"run the job with {SAVE_DIR}=DIR on a disk with {save / 1e12:.1f} TB free (two saves: {two})"
    return ([message], [], [fix], space) if given else ([], [message], [fix], space)


def _save_contents(value: str | None) -> tuple[str, ...]:
    """The override's list (``['model','optimizer']``), else verl's default."""
    if value is None:
        return DEFAULT_SAVE_CONTENTS
    return tuple(w for w in (part.strip(" '\"") for part in value.strip(" '\"[]").split(",")) if w)


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
        later = patch.superseded
        installed = ctx.installed(patch.package) if later else None
        if later is None or installed is None:
            continue
        try:
            superseded = Version(installed.version) >= Version(later.since)
        except InvalidVersion:
            superseded = False
        if superseded:
            warnings.append(f"{patch.package} {installed.version} {' '.join(later.why.split())}")
            fixes.append(later.fix)
    if failures:
        return fail(*failures, *warnings, *notes, fix="\n".join(fixes), details=details)
    if warnings:
        return warn(*warnings, *notes, fix="\n".join(fixes), details=details)
    checked = f"{len(ctx.profile.rules)} rule(s) of the profile hold for the environment and verl's defaults"
    return ok(*(notes or ["none of the known hazards applies"]), checked)


def _cann_version(ctx: Context) -> str | None:
    """The CANN version found on disk, else the profile's (how many ports HCCL listens on depends on it)."""
    toolkit = ascend.find_toolkit(ctx)
    return toolkit.version if toolkit is not None else ascend.pinned(ctx, "cann")
