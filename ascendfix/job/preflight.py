"""Preflight for ``ascendfix run``: what must stop the launch (problems) and what is only advice (hints).

The job's Hydra overrides are read from the script before it runs (a shim or a trace only
sees them once the job has started, which is too late to refuse it): logical lines with
their backslash continuations, tokenized like the shell, ``key.sub=value`` tokens kept,
``$VAR``/``${VAR}``/``${VAR:-default}`` expanded from the script's own assignments and the
environment. Overrides given on the ``ascendfix run`` command line count too (a script may
pass ``"$@"`` on). A Python file is not read as a script. The same tokens tell which of the
profile's modules and scripts the command runs (``-m verl.trainer.main_ppo``, or its file):
the rules about overrides and the hints apply only to a command that runs verl's trainer.
What doctor and the patch engine know comes in through :class:`Seams`. The profile's
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
from ascendfix.profile.manifest import Profile
from ascendfix.states import State

TOTAL_STEPS = "trainer.total_training_steps"
_OVERRIDE = re.compile(r"^[+~]{0,2}([A-Za-z_][\w\-]*(?:\.[\w\-]+)+)=(.*)$", re.DOTALL)
_ASSIGN = re.compile(r"^(?:export\s+)?([A-Za-z_]\w*)=(.*)$")
_VAR = re.compile(r"\$\{([A-Za-z_]\w*)(?::?-([^}]*))?\}|\$([A-Za-z_]\w*)")
_MAX_SCRIPT_BYTES = 1 << 20


@dataclass(frozen=True)
class Finding:
    """One preflight result: ``source`` is doctor, patches, overrides or env; ``detail`` the long why (``-v``)."""

    source: str
    message: str
    detail: str = ""


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
    """Where preflight asks doctor and the patch engine.

    ``doctor_failures(profile, device, overrides)`` returns the messages of doctor's fail-level checks
    for the job's overrides (its disk check measures ``trainer.default_local_dir``; None when doctor
    cannot run);
    ``patch_states(profile, device)`` returns ``{patch id: (state, reason)}`` with the engine's
    states (applied, not-applied, not-applicable, drifted, partial), or None when it cannot tell;
    ``importable(names)`` returns ``{module: whether the interpreter finds it}``, or None;
    ``cluster_problems(profile, device, overrides, environ)`` returns why the reachable Ray
    cluster cannot take the job (None when no cluster is reachable or ray is not installed);
    ``markers(pairs)`` returns ``{(module, marker): whether the module's file has it}`` (None: unknown);
    ``smoke(profile, device, overrides, environ)`` (``run --smoke``) returns what ``ray smoke``
    found wrong with the cluster's nodes and collectives;
    ``checkpoint_problems(folder)`` returns what is wrong with the distributed checkpoint there
    (``ckpt check``'s quick part: files, sizes, metadata present).
    """

    doctor_failures: Callable[[Profile, str, Mapping[str, str]], list[str] | None]
    patch_states: Callable[[Profile, str], dict[str, tuple[str, str]] | None]
    importable: Callable[[list[str]], dict[str, bool] | None] = lambda names: None
    cluster_problems: Callable[[Profile, str, Mapping[str, str], Mapping[str, str]], list[str] | None] | None = None
    markers: Callable[[list[tuple[str, str]]], dict[tuple[str, str], bool | None] | None] = lambda pairs: None
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


def run_preflight(
    profile: Profile,
    device: str,
    argv: Sequence[str],
    environ: Mapping[str, str],
    seams: Seams,
    full: bool = True,
) -> Preflight:
    """Problems (doctor failures, bad patch states, refuse rules) and hints (warn rules, missing overrides).

    Without ``full`` (``--no-preflight``) doctor, the patches' readiness and the distributed
    checkpoint the overrides name are skipped; the rules, which refuse settings that break the run, are not.
    """
    from ascendfix.profile.jobenv import job_environment, resolve_env

    overrides, words = scan(argv, environ)
    runs = commands_run(words, [*profile.trainer, *rules.commands(profile.rules)])
    trainer = bool(runs & set(profile.trainer)) if profile.trainer else None
    result = Preflight(overrides, full, trainer=trainer)
    failures = seams.doctor_failures(profile, device, overrides) if full else []
    if failures is None:
        result.hints.append(Finding("doctor", "doctor not run: run `ascendfix doctor` before a long job"))
    for message in failures or ():
        result.problems.append(Finding("doctor", message))
    states = seams.patch_states(profile, device)
    wanted = profile.device(device).patches
    env = job_environment(resolve_env(profile, device, environ), environ)
    names, pairs = rules.modules(profile.rules), rules.markers(profile.rules)
    facts = rules.Facts(
        env=env,
        overrides=overrides,
        importable=seams.importable(names) if names else {},
        patch_states=None if states is None else {pid: state for pid, (state, _) in states.items()},
        runs=runs,
        trainer=trainer,
        markers=seams.markers(pairs) if pairs else {},
    )
    result.patch_states = facts.patch_states
    outcome = rules.evaluate(profile.rules, facts, device)
    refused = {h.rule for h in outcome.refusals}
    # a patch a refusal already names (the converter's) is not reported a second time
    named = {c.patch for r in profile.rules if r.id in refused for c in r.when if c.patch is not None}
    if states is None:
        result.hints.append(Finding("patches", "patch status unknown: run `ascendfix status` before a long job"))
    else:
        for pid in [p for p in wanted if p not in named] if full else ():
            state, reason = states.get(pid, ("", ""))
            because = f" ({reason})" if reason else ""
            if state in (State.DRIFTED, State.PARTIAL):
                result.problems.append(Finding("patches", f"patch {pid} is {state}{because}: see `ascendfix status`"))
            elif state == State.HAND_EDITED:  # the guide's edit, in effect: adopting it is the fix, not a blocker
                result.hints.append(Finding("patches", f"patch {pid}: {reason or state}"))
            elif state == State.NOT_APPLIED:
                # left out on purpose when applying it would break a rule (DAPO + filter_groups)
                blocking = rules_broken_by_applying(profile, facts, device, pid, refused)
                if blocking:
                    result.hints.append(Finding("patches", f"{pid} is not applied, as rule {blocking[0]} requires"))
                else:
                    result.problems.append(Finding("patches", f"patch {pid} is not applied: run `ascendfix apply`"))
    for hit in outcome.hits:
        fix = f"; fix: {hit.fix}" if hit.fix else ""
        finding = Finding("rules", f"{hit.message} (source: {hit.source}){fix}")
        (result.problems if hit.action == rules.REFUSE else result.hints).append(finding)
    for rid in outcome.undecided:
        unknown = f"rule {rid} not checked: the patch states, modules or files it needs are unknown"
        result.hints.append(Finding("rules", unknown))
    if full and seams.checkpoint_problems is not None:
        for folder, keys in {**checkpoint_folders(overrides), **resume_folders(overrides)}.items():
            for message in seams.checkpoint_problems(Path(folder)):
                result.problems.append(Finding("checkpoint", f"{keys[0]}={folder}: {message}"))
        for key in (k for k, v in overrides.items() if k.endswith(CHECKPOINT_PATH) and "$" in v):
            unchecked = f"{key}={overrides[key]} not checked (a variable set outside the script): ascendfix ckpt check"
            result.hints.append(Finding("checkpoint", unchecked))
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
    """verl's batch-size divisibility rules, checked before Ray spends minutes starting the job."""
    prompts, n = _int(overrides, "data.train_batch_size"), _int(overrides, "actor_rollout_ref.rollout.n")
    mini = _int(overrides, "actor_rollout_ref.actor.ppo_mini_batch_size")
    nodes, per_node = _int(overrides, "trainer.nnodes"), _int(overrides, "trainer.n_gpus_per_node")
    found = []
    if prompts and mini and prompts % mini:
        found.append(
            f"data.train_batch_size={prompts} is not a multiple of actor_rollout_ref.actor.ppo_mini_batch_size={mini}"
        )
    if prompts and n and nodes and per_node and (prompts * n) % (nodes * per_node):
        found.append(
            f"data.train_batch_size × rollout.n = {prompts * n} samples do not split evenly over "
            f"{nodes} × {per_node} devices (verl's check_config asserts divisibility)"
        )
    return found


# run sets the profile's environment itself, and preflight reads the patch states directly.
PREFLIGHT_SKIPS = ("patches", "env")


def default_seams(
    python: str | None = None,
    roots: Mapping[str, Path] | None = None,
    variants: Mapping[str, str] | None = None,
    smoke: bool = False,
) -> Seams:
    """Doctor's fail-level checks and the patch engine's status, for the target interpreter and roots;
    with ``smoke``, ``ray smoke`` over the reachable cluster too."""

    def patch_states(profile: Profile, device: str) -> dict[str, tuple[str, str]]:
        from ascendfix.patching import engine

        chosen = dict(variants or {})
        selection = engine.select(profile, device, python=python, roots=dict(roots or {}), variants=chosen)
        return {s.id: (s.state, s.reason) for s in engine.status(selection)}

    def doctor_failures(profile: Profile, device: str, overrides: Mapping[str, str] | None = None) -> list[str]:
        from ascendfix.doctor import registry, runner
        from ascendfix.doctor.context import Context
        from ascendfix.doctor.model import Status

        checks = [cid for cid in registry.CHECKS if cid not in PREFLIGHT_SKIPS]
        ctx = Context(profile, device, python=python, roots=dict(roots or {}), overrides=overrides)
        report = runner.run(ctx, checks)
        failed = [r for r in report.checks if r.status == Status.FAIL]
        return [f"{r.title}: {r.messages[0] if r.messages else 'failed'}" for r in failed]

    def importable(names: list[str]) -> dict[str, bool]:
        from ascendfix.patching.locate import locate

        return {name: target.root is not None for name, target in locate(names, python, dict(roots or {})).items()}

    def markers(pairs: list[tuple[str, str]]) -> dict[tuple[str, str], bool | None]:
        from ascendfix.patching.locate import locate

        found = locate(sorted({module for module, _ in pairs}), python, dict(roots or {}))
        return {(module, name): _has_marker(found[module].root, module, name) for module, name in pairs}

    def cluster_problems(
        profile: Profile, device: str, overrides: Mapping[str, str], environ: Mapping[str, str]
    ) -> list[str] | None:
        from ascendfix.cluster import wait as raywait

        return raywait.job_problems(profile, device, overrides, environ)

    def smoke_problems(
        profile: Profile, device: str, overrides: Mapping[str, str], environ: Mapping[str, str]
    ) -> list[str]:
        from ascendfix.cluster import smoke as raysmoke

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

    return Seams(
        doctor_failures,
        patch_states,
        importable,
        cluster_problems,
        markers,
        smoke_problems if smoke else None,
        checkpoint_problems,
    )


def _has_marker(root: Path | None, module: str, name: str) -> bool | None:
    """Whether the module's file (under the folder holding the package) has the marker; None when unreadable."""
    if root is None:
        return None
    marker = rules.MARKERS[name]
    path = root / module / marker.file
    try:
        if path.is_symlink() or not path.is_file():
            return None
        with open(path, "rb") as f:
            return marker.test(f.read(_MAX_SCRIPT_BYTES))
    except OSError:
        return None


def total_steps(overrides: Mapping[str, str]) -> int | None:
    """The job's step count when its overrides give ``trainer.total_training_steps``."""
    return _int(overrides, TOTAL_STEPS)
