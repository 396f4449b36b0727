"""Preflight for ``ascendfix run``: what must stop the launch (problems) and what is only advice (hints).

The job's Hydra overrides are read from the script before it runs (a shim or a trace only
sees them once the job has started, which is too late to refuse it): logical lines with
their backslash continuations, tokenized like the shell, ``key.sub=value`` tokens kept,
``$VAR``/``${VAR}``/``${VAR:-default}`` expanded from the script's own assignments and the
environment. Overrides given on the ``ascendfix run`` command line count too (a script may
pass ``"$@"`` on). A Python file is not read as a script. The same tokens tell which of the
profile's modules and scripts the command runs (``-m verl.trainer.main_ppo``, or its file):
the rules about overrides and the hints apply only to a command that runs verl's trainer.
Doctor and the patch engine are asked about the :class:`~ascendfix.site.Site` the command built;
the Ray cluster and the checkpoint through :class:`Seams`. The profile's
``[[rules]]`` (:mod:`ascendfix.profile.rules`) are checked over the job's effective environment (the
user's exports win), these overrides, the command, what the interpreter can import and the
patch states: a ``refuse`` rule is a problem, a ``warn`` rule a hint.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ascendfix.profile import rules
from ascendfix.profile.records import Profile
from ascendfix.site import Site
from ascendfix.states import State, Status

TOTAL_STEPS = "trainer.total_training_steps"
_OVERRIDE = re.compile(r"^[+~]{0,2}([A-Za-z_][\w\-]*(?:\.[\w\-]+)+)=(.*)$", re.DOTALL)
_ASSIGN = re.compile(r"^(?:export\s+)?([A-Za-z_]\w*)=(.*)$")
_VAR = re.compile(r"\$\{([A-Za-z_]\w*)(?::?-([^}]*))?\}|\$([A-Za-z_]\w*)")
_MAX_SCRIPT_BYTES = 1 << 20


@dataclass(frozen=True)
class Finding:
    """One preflight result: ``source`` is doctor, patches, rules, overrides, checkpoint, ray or smoke;
    ``fix`` the command or change that fixes it (when one is known); ``detail`` the long why (``-v``)."""

    source: str
    message: str
    detail: str = ""
    fix: str = ""


@dataclass
class Preflight:
    """Problems refuse the launch (unless --no-preflight); hints never do."""

    overrides: dict[str, str]
    full: bool = True  # False: --no-preflight, only the refusals that protect correctness ran
    problems: list[Finding] = field(default_factory=list)
    hints: list[Finding] = field(default_factory=list)
    trainer: bool | None = None  # whether the command runs verl's trainer (None: the profile names none)
    patch_states: dict[str, str] | None = None  # {patch id: state} of the device's patches, when known


@dataclass(frozen=True)
class Seams:
    """What preflight asks beyond the site's own stack (doctor, the patch states, what the
    interpreter finds: :func:`doctor_failures`, :func:`patch_states`, the :class:`Site`).

    ``cluster_problems(profile, device, overrides, environ)`` returns why the reachable Ray
    cluster cannot take the job (None when no cluster is reachable or ray is not installed);
    ``smoke(profile, device, overrides, environ)`` (``run --smoke``) returns what ``ray smoke``
    found wrong with the cluster's nodes and collectives;
    ``checkpoint_problems(folder)`` returns what is wrong with the distributed checkpoint there
    (``ckpt check``'s quick part: files, sizes, metadata present).
    """

    cluster_problems: Callable[[Profile, str, Mapping[str, str], Mapping[str, str]], list[str] | None] | None = None
    smoke: Callable[[Profile, str, Mapping[str, str], Mapping[str, str]], list[str]] | None = None
    checkpoint_problems: Callable[[Path], list[str]] | None = None


def _expand(value: str, variables: Mapping[str, str]) -> str:
    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(3)
        if name in variables:
            return variables[name]
        return m.group(2) if m.group(2) is not None else m.group(0)

    return _VAR.sub(sub, value)


def _logical_lines(text: str) -> list[str]:
    lines, current = [], ""
    for raw in text.splitlines():
        if raw.rstrip().endswith("\\"):
            current += raw.rstrip()[:-1] + " "
            continue
        lines.append(current + raw)
        current = ""
    if current:
        lines.append(current)
    return lines


def _tokens(line: str) -> list[str]:
    try:
        return shlex.split(line, comments=True)
    except ValueError:
        return line.split()


def scan(argv: Sequence[str], environ: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The Hydra overrides (``key.sub=value``; later wins) and the words of the command: of the
    script ``argv[0]`` or ``argv[1]`` (a shell script, not a Python file), then of ``argv``."""
    variables = dict(environ)
    overrides: dict[str, str] = {}
    words: list[str] = []
    script = next((Path(a) for a in argv[:2] if Path(a).is_file()), None)
    if script is not None and script.suffix != ".py":
        try:
            text = script.read_bytes()[:_MAX_SCRIPT_BYTES].decode("utf-8", "replace")
        except OSError:
            text = ""
        if "\0" not in text:
            for line in _logical_lines(text):
                tokens = _tokens(line)
                for token in tokens:
                    assign = _ASSIGN.match(token)
                    if assign and len(tokens) <= 2 and (tokens[0] == "export" or tokens[0] == token):
                        variables[assign.group(1)] = _expand(assign.group(2), variables)
                    m = _OVERRIDE.match(token)
                    if m:
                        overrides[m.group(1)] = _expand(m.group(2), variables)
                    else:
                        words.append(_expand(token, variables))
    for arg in argv[1:]:
        m = _OVERRIDE.match(arg)
        if m:
            overrides[m.group(1)] = m.group(2)
    words.extend(argv)
    return overrides, words


def scan_overrides(argv: Sequence[str], environ: Mapping[str, str]) -> dict[str, str]:
    """Hydra overrides (``key.sub=value``) in the script ``argv[0]`` (if it is one) and in ``argv``; later wins."""
    return scan(argv, environ)[0]


def _dotted(name: str) -> str:
    """``verl/trainer/main_ppo.py`` and ``./scripts/x.py`` as modules (``verl.trainer.main_ppo``, ``scripts.x``)."""
    if name.endswith(".py"):
        name = name[: -len(".py")].lstrip("./").replace("/", ".")
    return name


def commands_run(words: Sequence[str], names: Sequence[str]) -> frozenset[str]:
    """Which of ``names`` (modules, or script paths) the command's words run: the module itself, or
    a path ending in its file (``/src/verl/verl/trainer/main_ppo.py`` runs ``verl.trainer.main_ppo``)."""
    dotted = {_dotted(w) for w in words if w and "=" not in w}
    found = set()
    for name in names:
        want = _dotted(name)
        if any(d == want or d.endswith("." + want) for d in dotted):
            found.add(name)
    return frozenset(found)


def _hint_missing(override: str, overrides: Mapping[str, str]) -> bool:
    key, sep, value = override.lstrip("+~").partition("=")
    if key not in overrides:
        return True
    return bool(sep) and overrides[key].strip("'\"").lower() != value.lower()


def rules_broken_by_applying(
    profile: Profile, facts: rules.Facts, device: str, pid: str, refused: set[str]
) -> list[str]:
    """The rules that refuse once patch ``pid`` is applied and do not refuse now, without it (``refused``):
    only those are why it is left out. A rule that refuses either way is not about the patch."""
    applied = facts._replace(patch_states={**(facts.patch_states or {}), pid: State.APPLIED})
    return [h.rule for h in rules.evaluate(profile.rules, applied, device).refusals if h.rule not in refused]


def run_preflight(site: Site, argv: Sequence[str], seams: Seams = Seams(), full: bool = True) -> Preflight:
    """Problems (doctor failures, bad patch states, refuse rules) and hints (warn rules, missing overrides)
    of running ``argv`` on the ``site`` (its device, interpreter, roots and environment).

    Without ``full`` (``--no-preflight``) doctor, the patches' readiness and the distributed
    checkpoint the overrides name are skipped; the rules, which refuse settings that break the run, are not.
    """
    profile, device, environ = site.profile, site.device, site.environ
    if device is None:
        raise ValueError("preflight checks a site with a device")
    overrides, words = scan(argv, environ)
    runs = commands_run(words, [*profile.trainer, *rules.commands(profile.rules)])
    trainer = bool(runs & set(profile.trainer)) if profile.trainer else None
    result = Preflight(overrides, full, trainer=trainer)
    failures = doctor_failures(site, overrides) if full else []
    if failures is None:
        result.hints.append(Finding("doctor", "doctor not run before a long job", fix=site.command("doctor")))
    result.problems.extend(failures or ())
    for message in nic_problems(profile, device, site.job_env) if full else ():
        result.problems.append(Finding("env", message))
    states = patch_states(site)
    known = None if states is None else {pid: state for pid, (state, _) in states.items()}
    wanted = profile.device(device).patches
    names, pairs = rules.modules(profile.rules), rules.markers(profile.rules)
    facts = rules.Facts(
        env=site.job_env,
        overrides=overrides,
        importable=site.importable(names) if names else {},
        patch_states=known,
        runs=runs,
        trainer=trainer,
        markers=site.markers(pairs) if pairs else {},
    )
    result.patch_states = known
    outcome = rules.evaluate(profile.rules, facts, device)
    refused = {h.rule for h in outcome.refusals}
    # a patch a refusal already names (the converter's) is not reported a second time
    named = {c.patch for r in profile.rules if r.id in refused for c in r.when if c.patch is not None}
    if states is None:
        result.hints.append(Finding("patches", "patch status unknown before a long job", fix=site.command("status")))
    elif full:
        pids = [p for p in wanted if p not in named]
        _patch_findings(result, site, device, facts, [(pid, *states.get(pid, ("", ""))) for pid in pids], refused)
    for hit in outcome.hits:
        finding = Finding("rules", f"{hit.message} (source: {hit.source})", fix=hit.fix or "")
        (result.problems if hit.action == rules.REFUSE else result.hints).append(finding)
    for rid in outcome.undecided:
        unknown = f"rule {rid} not checked: the patch states, modules or files it needs are unknown"
        result.hints.append(Finding("rules", unknown))
    if full and seams.checkpoint_problems is not None:
        _checkpoint_findings(result, overrides, seams.checkpoint_problems)
    if seams.cluster_problems is not None:  # a job the cluster cannot take hangs: checked with --no-preflight too
        objections = seams.cluster_problems(profile, device, overrides, environ)
        result.problems.extend(Finding("ray", m) for m in objections or ())
    if seams.smoke is not None:  # asked for with --smoke: runs with --no-preflight too
        result.problems.extend(Finding("smoke", m) for m in seams.smoke(profile, device, overrides, environ))
    if trainer is False:
        if overrides:  # overrides, but no trainer: perhaps a script that calls another
            ran = ", ".join(profile.trainer)
            skipped = f"the command runs none of {ran}: the rules and hints about its overrides are skipped"
            result.hints.append(Finding("overrides", skipped))
        return result
    for hint in profile.hints:
        if device in hint.devices and _hint_missing(hint.override, overrides):
            where = f" (guide {hint.guide})" if hint.guide else ""
            result.hints.append(Finding("overrides", f"consider {hint.override}{where}", " ".join(hint.why.split())))
    result.hints.extend(Finding("overrides", m) for m in batch_size_hints(overrides))
    return result


def _patch_findings(
    result: Preflight,
    site: Site,
    device: str,
    facts: rules.Facts,
    states: list[tuple[str, str, str]],
    refused: set[str],
) -> None:
    """Each patch of ``states`` (id, state, reason) the job would run without: a problem, or a hint where the
    guide's hand edit is in effect or a rule keeps the patch out."""
    for pid, state, reason in states:
        because = f" ({reason})" if reason else ""
        if state in (State.DRIFTED, State.PARTIAL):
            drifted = f"patch {pid} is {state}{because}"
            result.problems.append(Finding("patches", drifted, fix=site.command("status")))
        elif state == State.HAND_EDITED:  # the guide's edit, in effect: adopting it is the fix, not a blocker
            adopt = f"patch {pid}: {reason or state}"
            result.hints.append(Finding("patches", adopt, fix=site.command("apply")))
        elif state == State.NOT_APPLIED:
            # left out on purpose when applying it would break a rule (DAPO + filter_groups)
            blocking = rules_broken_by_applying(site.profile, facts, device, pid, refused)
            if blocking:
                result.hints.append(Finding("patches", f"{pid} is not applied, as rule {blocking[0]} requires"))
            else:
                result.problems.append(Finding("patches", f"patch {pid} is not applied", fix=site.command("apply")))


def _checkpoint_findings(
    result: Preflight, overrides: Mapping[str, str], checkpoint_problems: Callable[[Path], list[str]]
) -> None:
    """What is wrong with each checkpoint folder the overrides save to or resume from; a hint for each checkpoint
    path a variable set outside the script names (it cannot be checked here)."""
    for folder, keys in {**checkpoint_folders(overrides), **resume_folders(overrides)}.items():
        for message in checkpoint_problems(Path(folder)):
            result.problems.append(Finding("checkpoint", f"{keys[0]}={folder}: {message}"))
    for key in (k for k, v in overrides.items() if k.endswith(CHECKPOINT_PATH) and "$" in v):
        unchecked = f"{key}={overrides[key]} not checked (a variable set outside the script): ascendfix ckpt check"
        result.hints.append(Finding("checkpoint", unchecked))


def nic_problems(profile: Profile, device: str, env: Mapping[str, str]) -> list[str]:
    """Each NIC variable the job sets (``*_SOCKET_IFNAME``, ``HCCL_IF_IP``) whose selection is unusable here."""
    from ascendfix.doctor import nic

    here = nic.interfaces()
    verdicts = [nic.select(v.name, env, here) for v in profile.device(device).env if v.check == "interface"]
    return [v.message for v in verdicts if v is not None and not v.ok]


CHECKPOINT_PATH = "dist_checkpointing_path"
_FALSE = ("false", "0", "no", "off")


def checkpoint_folders(overrides: Mapping[str, str]) -> dict[str, list[str]]:
    """The distributed checkpoints the job loads: folder -> the ``*.dist_checkpointing_path`` overrides naming it.

    One whose ``use_dist_checkpointing`` beside it is set false is not loaded; one left a shell variable
    the scan could not expand (``$DIST_CKPT_PATH``) cannot be checked before the job runs.
    """
    folders: dict[str, list[str]] = {}
    for key, value in overrides.items():
        if key != CHECKPOINT_PATH and not key.endswith("." + CHECKPOINT_PATH):
            continue
        folder = value.strip().strip("'\"")
        use = overrides.get(key[: -len(CHECKPOINT_PATH)] + "use_dist_checkpointing", "")
        if not folder or "$" in folder or folder.lower() in ("null", "none") or use.strip("'\"").lower() in _FALSE:
            continue
        folders.setdefault(folder, []).append(key)
    return folders


def resume_folders(overrides: Mapping[str, str]) -> dict[str, list[str]]:
    """The save verl resumes from: ``trainer.resume_from_path`` with ``resume_mode`` ``resume_path``, or with
    ``auto`` (the default) ``trainer.default_local_dir`` when its latest_checkpointed_iteration.txt is there."""
    mode = overrides.get("trainer.resume_mode", "auto").strip("'\"").lower()
    if mode == "resume_path":
        key = "trainer.resume_from_path"
    elif mode == "auto":
        key = "trainer.default_local_dir"
    else:
        return {}
    folder = overrides.get(key, "").strip().strip("'\"")
    if not folder or "$" in folder or folder.lower() in ("null", "none"):
        return {}
    if mode == "auto" and not (Path(folder) / "latest_checkpointed_iteration.txt").exists():
        return {}  # nothing saved yet: verl starts afresh
    return {folder: [key]}


def _int(overrides: Mapping[str, str], key: str) -> int | None:
    try:
        return int(overrides[key].strip("'\""))
    except (KeyError, ValueError):
        return None


def batch_size_hints(overrides: Mapping[str, str]) -> list[str]:
    """verl's batch-size divisibility checks, before Ray spends minutes starting the job.

    As verl 0.5.0 ``RayPPOTrainer._validate_config`` does (ray_trainer.py:391-418): for the Megatron
    actor (the guide's; unless ``actor.strategy`` says fsdp) ``n_gpus % (tp·pp·cp)`` and
    ``real_train_batch_size % (megatron_dp × ppo_micro_batch_size_per_gpu)``, for FSDP
    ``real_train_batch_size % n_gpus``; and the mini-batch split ``DataProto.make_iterator`` asserts.
    """
    prompts, n = _int(overrides, "data.train_batch_size"), _int(overrides, "actor_rollout_ref.rollout.n")
    mini = _int(overrides, "actor_rollout_ref.actor.ppo_mini_batch_size")
    nodes, per_node = _int(overrides, "trainer.nnodes"), _int(overrides, "trainer.n_gpus_per_node")
    found = []
    if prompts and mini and prompts % mini:
        found.append(
            f"data.train_batch_size={prompts} is not a multiple of actor_rollout_ref.actor.ppo_mini_batch_size={mini}"
        )
    if not (nodes and per_node):
        return found
    n_gpus = nodes * per_node
    strategy = overrides.get("actor_rollout_ref.actor.strategy", "megatron").strip("'\"")
    samples = prompts * n if prompts and n else None
    if strategy.startswith("fsdp"):
        if samples and samples % n_gpus:
            found.append(
                f"data.train_batch_size × rollout.n = {samples} samples do not split evenly over "
                f"{nodes} × {per_node} devices (verl's _validate_config asserts divisibility)"
            )
        return found
    megatron = "actor_rollout_ref.actor.megatron."
    tp, pp, cp = (_int(overrides, megatron + k) or 1 for k in _MEGATRON_PARALLEL)
    if n_gpus % (tp * pp * cp):
        found.append(
            f"trainer.nnodes × trainer.n_gpus_per_node = {n_gpus} devices are not divisible by tensor × pipeline × "
            f"context parallel = {tp} × {pp} × {cp} (verl's _validate_config asserts it for the Megatron actor)"
        )
        return found
    dp = n_gpus // (tp * pp * cp)
    micro = _int(overrides, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu")
    minimal = dp * (micro or 1)  # unset: verl needs it; any value needs samples % megatron_dp at least
    if samples and samples % minimal:
        per = f"megatron_dp {dp} × ppo_micro_batch_size_per_gpu {micro}" if micro else f"megatron_dp {dp}"
        found.append(
            f"data.train_batch_size × rollout.n = {samples} samples do not split evenly over {per} = {minimal} "
            "(verl's _validate_config asserts real_train_batch_size % minimal_bsz == 0)"
        )
    return found


_MEGATRON_PARALLEL = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size")


def doctor_failures(site: Site, overrides: Mapping[str, str] | None = None) -> list[Finding] | None:
    """Doctor's fail-level checks on the site (those ``run`` does not handle itself), each with its fix and
    details, for the job's ``overrides`` (the disk check measures ``trainer.default_local_dir``); None when
    doctor cannot run."""
    from ascendfix.doctor import registry, runner
    from ascendfix.doctor.context import Context

    checks = [c.id for c in registry.CHECKS.values() if c.preflight]
    report = runner.run(Context(site, overrides=overrides), checks)
    return [
        Finding("doctor", f"{r.title}: {r.messages[0] if r.messages else 'failed'}", "\n".join(r.details), r.fix)
        for r in report.checks
        if r.status == Status.FAIL
    ]


def patch_states(site: Site) -> dict[str, tuple[str, str]] | None:
    """``{patch id: (state, reason)}`` of every patch on the site, as the engine finds them (None: unknown)."""
    from ascendfix.patching import engine

    return {s.id: (s.state, s.reason) for s in engine.status(engine.select(site))}


def default_seams(smoke: bool = False) -> Seams:
    """The reachable Ray cluster's objections and the distributed checkpoint's quick check; with
    ``smoke``, ``ray smoke`` over the reachable cluster too."""

    def cluster_problems(
        profile: Profile, device: str, overrides: Mapping[str, str], environ: Mapping[str, str]
    ) -> list[str] | None:
        from ascendfix.cluster import wait as raywait

        return raywait.job_problems(profile, device, overrides, environ)

    def smoke_problems(
        profile: Profile, device: str, overrides: Mapping[str, str], environ: Mapping[str, str]
    ) -> list[str]:
        from ascendfix.cluster.smoke import driver as raysmoke

        return raysmoke.job_problems(profile, device, overrides, environ)

    def checkpoint_problems(folder: Path) -> list[str]:
        from ascendfix.checkpoint import verl
        from ascendfix.errors import UsageError

        if not folder.is_dir():
            return [f"{folder}: not a folder (the checkpoint is not there)"]
        try:
            report = verl.check_save(folder, quick=True)
        except UsageError as e:
            return [str(e)]
        return [f"{p.kind} {p.subject}: {p.detail}" for p in report.problems]

    return Seams(cluster_problems, smoke_problems if smoke else None, checkpoint_problems)


def total_steps(overrides: Mapping[str, str]) -> int | None:
    """The job's step count when its overrides give ``trainer.total_training_steps``."""
    return _int(overrides, TOTAL_STEPS)
