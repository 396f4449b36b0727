"""The command line: parse arguments, call the core, render the plain data it returns.

Every command that shows something also has ``--json``. Errors from the core are
``AscendfixError``s and reach the user as one line on stderr with the error's exit
status (2 for bad input, 1 for a refusal or a failed check), never as a traceback.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ascendfix import cluster, engine, manifest
from ascendfix import export as exporting
from ascendfix.device import require_device
from ascendfix.errors import AscendfixError, UsageError
from ascendfix.locate import parse_roots

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

DEVICE_CHOICE = click.Choice(list(manifest.DEVICES))


def emit_json(data: Any) -> None:
    """Print plain data as JSON on stdout (no colour, no wrapping)."""
    click.echo(json.dumps(data, indent=2, sort_keys=False))


class Group(click.Group):
    """Turns every AscendfixError into its one line and exit status."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except AscendfixError as e:
            err.print(f"[bold red]error:[/] {escape(str(e))}", markup=True)
            sys.exit(e.exit_code)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ascendfix")
def main() -> None:
    """Run verl RL training on Ascend NPUs declaratively: check, patch, launch, report."""


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def profiles(as_json: bool) -> None:
    """List the bundled profiles."""
    rows = []
    for name in manifest.bundled_profiles():
        profile = manifest.load_profile(name)
        rows.append({"name": name, "description": profile.description, "devices": list(profile.devices)})
    if as_json:
        emit_json(rows)
        return
    table = Table("profile", "devices", "description", box=None)
    for row in rows:
        table.add_row(row["name"], ", ".join(row["devices"]), row["description"])
    out.print(table)


@main.command()
@click.argument("profile")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def show(profile: str, as_json: bool) -> None:
    """Show a profile: its pinned components, devices and patches with their why."""
    prof = manifest.load_profile(profile)
    if as_json:
        emit_json(manifest.as_dict(prof))
        return
    out.print(f"[bold]{escape(prof.name)}[/] — {escape(prof.description)}\n[dim]{escape(str(prof.source))}[/]\n")
    table = Table("component", "pin", "devices", "why", box=None, title="Components", title_justify="left")
    for c in prof.components:
        pin = c.commit or c.tag or c.version or ""
        if c.kind == "git":
            pin = f"{c.repo} @ {pin}" + (" (editable)" if c.editable else "")
        table.add_row(c.name, pin, ", ".join(c.devices), c.why)
    out.print(table)
    for conflict in prof.accepted_conflicts:
        out.print(
            f"\n[yellow]accepted conflict[/]: {conflict.requirer} requires {conflict.requirement} — "
            + escape(conflict.why)
        )
    for device in prof.devices.values():
        out.print(f"\n[bold]{device.name}[/]: {device.description}")
        for var in device.env:
            value = var.value if var.value is not None else "<set per site>"
            out.print(f"  {var.name}={escape(value)}  [dim]{escape(var.why)}[/]")
        if device.ulimit_nofile:
            out.print(f"  ulimit -n {device.ulimit_nofile}")
        out.print(f"  patches: {', '.join(device.patches) or '-'}")
    for patch in prof.patches.values():
        out.print(f"\n[bold]{patch.id}[/] ({patch.package}: {', '.join(f.path for f in patch.files)})")
        out.print(f"  [dim]why:[/] {escape(' '.join(patch.why.split()))}")
        out.print(f"  [dim]drop when:[/] {escape(' '.join(patch.drop_when.split()))}")


# --- the whole Ray cluster: --ray [ADDRESS] on status / apply / doctor ------------------------------


def on_ray_cluster(command):
    """Add ``--ray [ADDRESS]`` and ``--ray-timeout``: run the command on every node of a Ray cluster instead."""

    @functools.wraps(command)
    def run(*args, ray_address=None, ray_timeout=60.0, **kwargs):
        if ray_address is None:
            return command(*args, **kwargs)
        argv = _local_argv(click.get_current_context())
        report = cluster.table(argv, cluster.run(argv, None if ray_address == "auto" else ray_address, ray_timeout))
        if kwargs.get("as_json"):
            emit_json(report.as_json())
        else:
            _render_cluster(report)
        if not report.ok:
            sys.exit(1)

    run = click.option(
        "--ray-timeout", type=float, default=60.0, show_default=True, metavar="SECONDS", help="Per-node answer limit."
    )(run)
    return click.option(
        "--ray",
        "ray_address",
        is_flag=False,
        flag_value="auto",
        default=None,
        metavar="[ADDRESS]",
        help="Run on every alive node of this Ray cluster (default: the local one's) and compare.",
    )(run)


def _local_argv(ctx: click.Context) -> list[str]:
    """The command line each node runs: this command's own options, minus --ray, plus --json."""
    argv = [ctx.command.name]
    for param in ctx.command.params:
        value = ctx.params.get(param.name)
        if param.name in ("ray_address", "ray_timeout", "as_json") or value is None or value is False:
            continue
        if isinstance(param, click.Argument):
            argv += [str(v) for v in value] if param.multiple else [str(value)]
        elif param.is_flag:
            argv.append(param.opts[0])
        else:
            for v in value if param.multiple else [value]:
                argv += [param.opts[0], str(v)]
    return [*argv, "--json"]


def _render_cluster(report: cluster.Table) -> None:
    table = Table("node", "host", *report.items, "exit", box=None, title=f"ascendfix {' '.join(report.argv[:-1])}")
    for node in report.nodes:
        row = report.cells.get(node.label, {})
        values = [
            f"[bold red]{escape(value)}[/]" if item in report.differing else escape(value)
            for item in report.items
            for value in [row.get(item, ("(absent)", ""))[0]]
        ]
        if node.error:
            values = [f"[bold red]{escape(node.error)}[/]", *[""] * (len(values) - 1)] if values else []
        code = "-" if node.returncode is None else str(node.returncode)
        table.add_row(escape(node.label), escape(node.hostname), *values, f"[red]{code}[/]" if node.failed else code)
    (out if out.is_terminal else Console(width=240, highlight=False)).print(table)  # a log keeps every column
    for node in report.nodes:
        if node.error and not report.items:
            out.print(f"[bold red]{escape(node.label)}:[/] {escape(node.error)}")
    if report.differing:
        out.print(f"[bold red]nodes disagree on:[/] {', '.join(report.differing)}")
        for item in report.differing:
            for node in report.nodes:
                value, detail = report.cells.get(node.label, {}).get(item, ("(absent)", ""))
                if node.label in report.cells:
                    out.print(f"  {item}  [bold]{escape(node.label)}[/]: {escape(value)}  [dim]{escape(detail)}[/]")
    failed = [n.label for n in report.nodes if n.failed]
    if failed:
        out.print(f"[bold red]failed on:[/] {', '.join(failed)}")
    if report.ok:
        out.print(f"[green]all {len(report.nodes)} node(s) agree[/]")


# --- patch engine: apply / revert / status / diff -------------------------------------------------

STATE_STYLE = {
    engine.APPLIED: "green",
    engine.NOT_APPLIED: "yellow",
    engine.NOT_APPLICABLE: "dim",
    engine.DRIFTED: "red",
    engine.PARTIAL: "red",
}


def target_options(func):
    """The options every engine command shares: where the packages are."""
    func = click.option("--python", "python", metavar="PATH", help="Target interpreter (default: this one).")(func)
    func = click.option(
        "--root", "roots", multiple=True, metavar="PKG=DIR", help="Directory holding PKG's files (repeatable)."
    )(func)
    return func


def _selection(
    profile: str, device: str | None, roots, python, only=(), need_device=True, variants=()
) -> engine.Selection:
    prof = manifest.load_profile(profile)
    chosen = require_device(device) if need_device else device
    overrides = manifest.parse_variants(prof, variants)
    return engine.select(prof, chosen, tuple(only), python, parse_roots(roots), overrides)


def variant_option(func):
    """``--variant PATCH_ID=NAME``: override the profile's choice of variant."""
    return click.option(
        "--variant", "variants", multiple=True, metavar="PATCH_ID=NAME", help="Use this variant of a patch."
    )(func)


def _render_patches(statuses: list[engine.PatchStatus], verb: str | None = None) -> None:
    for s in statuses:
        style = STATE_STYLE.get(s.state, "")
        action = f" ({s.action})" if s.action and s.action not in ("unchanged", "skipped") else ""
        variant = f" [{s.variant}]" if s.variant and s.variant != manifest.DEFAULT_VARIANT else ""
        out.print(f"[{style}]{s.state:15}[/] {s.id}{escape(variant)}{action}")
        if s.reason:
            out.print(f"                [dim]{escape(s.reason)}[/]")
        for w in s.warnings:
            err.print(f"[yellow]warning:[/] {s.id}: {escape(w)}")


def _json_report(selection: engine.Selection, statuses: list[engine.PatchStatus], **extra) -> dict:
    return {
        "profile": selection.profile.name,
        "device": selection.device,
        **extra,
        "patches": [s.as_json() for s in statuses],
    }


@main.command()
@on_ray_cluster
@click.option("--profile", default="verl-796871d", show_default=True, help="Profile name or manifest path.")
@click.option("--device", type=DEVICE_CHOICE, help="npu or cuda (default: detected).")
@target_options
@click.option("--only", multiple=True, metavar="ID", help="Apply only this patch (repeatable).")
@variant_option
@click.option("--dry-run", is_flag=True, help="Plan and verify, write nothing.")
@click.option("--strict", is_flag=True, help="Refuse files that are not a known original.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def apply(profile, device, python, roots, only, variants, dry_run, strict, as_json) -> None:
    """Apply the profile's patches for this device: all or nothing, idempotent."""
    selection = _selection(profile, device, roots, python, only, variants=variants)
    statuses = engine.apply(selection, strict=strict, dry_run=dry_run)
    if as_json:
        emit_json(_json_report(selection, statuses, dry_run=dry_run))
    else:
        _render_patches(statuses)
        wrote = sum(s.action in ("applied", "switched") for s in statuses)
        planned = sum(s.action == "would-apply" for s in statuses)
        out.print(f"\n{planned} patch(es) would be applied (dry run)" if dry_run else f"\n{wrote} patch(es) applied")


@main.command()
@click.option("--profile", default="verl-796871d", show_default=True, help="Profile name or manifest path.")
@target_options
@click.option("--only", multiple=True, metavar="ID", help="Revert only this patch (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def revert(profile, python, roots, only, as_json) -> None:
    """Restore every patched file byte for byte (any device's patches)."""
    selection = _selection(profile, None, roots, python, only, need_device=False)
    statuses = engine.revert(selection)
    if as_json:
        emit_json(_json_report(selection, statuses))
    else:
        _render_patches(statuses)
    if any(s.action == "refused" for s in statuses):
        sys.exit(1)


@main.command()
@on_ray_cluster
@click.option("--profile", default="verl-796871d", show_default=True, help="Profile name or manifest path.")
@click.option("--device", type=DEVICE_CHOICE, help="npu or cuda (default: detected).")
@target_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status(profile, device, python, roots, as_json) -> None:
    """Show each patch's state: applied, not-applied, not-applicable, drifted or partial."""
    selection = _selection(profile, device, roots, python)
    statuses = engine.status(selection)
    if as_json:
        emit_json(_json_report(selection, statuses))
    else:
        _render_patches(statuses)
    if any(s.state not in (engine.APPLIED, engine.NOT_APPLICABLE) for s in statuses):
        sys.exit(1)


@main.command()
@click.option("--profile", default="verl-796871d", show_default=True, help="Profile name or manifest path.")
@click.option("--device", type=DEVICE_CHOICE, help="npu or cuda (default: detected).")
@target_options
@click.option("--only", multiple=True, metavar="ID", help="Only this patch (repeatable).")
@variant_option
def diff(profile, device, python, roots, only, variants) -> None:
    """Show the unified diff of what apply would change (coloured on a terminal)."""
    selection = _selection(profile, device, roots, python, only, variants=variants)
    text = engine.diff(engine.apply(selection, dry_run=True))
    if not out.is_terminal:
        click.echo(text, nl=False)
        return
    for line in text.splitlines():
        style = "bold" if line.startswith(("---", "+++")) else ""
        style = style or {"+": "green", "-": "red", "@": "cyan"}.get(line[:1], "")
        out.print(f"[{style}]{escape(line)}[/]" if style else escape(line))


# --- build inputs: export dockerfile / constraints ------------------------------------------------


@main.group()
def export() -> None:
    """Generate build inputs from a profile: the image's Dockerfile, a pip constraints file."""


@export.command("dockerfile")
@click.option("--profile", default="verl-796871d", show_default=True, help="Profile name or manifest path.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def export_dockerfile(profile: str, as_json: bool) -> None:
    """Print the Dockerfile of the profile's NPU image (stack stage, then the ascendfix build step)."""
    prof = manifest.load_profile(profile)
    text = exporting.dockerfile(prof)
    if as_json:
        image, origin = exporting.base_image(prof)
        emit_json({"profile": prof.name, "base_image": image, "origin": origin, "dockerfile": text})
    else:
        click.echo(text, nl=False)


@export.command("constraints")
@click.option("--profile", default="verl-796871d", show_default=True, help="Profile name or manifest path.")
@click.option("--device", type=DEVICE_CHOICE, default="npu", show_default=True, help="Whose components to pin.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def export_constraints(profile: str, device: str, as_json: bool) -> None:
    """Print a pip constraints file: name==version and name @ git+URL@commit lines."""
    prof = manifest.load_profile(profile)
    text = exporting.constraints(prof, device)
    if as_json:
        emit_json({"profile": prof.name, "device": device, "constraints": text})
    else:
        click.echo(text, nl=False)


# --- doctor ---------------------------------------------------------------------------------------

DOCTOR_MARK = {"ok": "[green]✓[/]", "warn": "[yellow]![/]", "fail": "[red]✗[/]", "skip": "[dim]-[/]"}


def _render_doctor(report, device_reason: str, verbose: bool) -> None:
    from ascendfix.doctor.registry import CHECKS

    lines = [f"[bold]ascendfix doctor[/] — profile {report.profile}, device {report.device} [dim]({device_reason})[/]"]
    group = None
    for result in report.checks:
        if CHECKS[result.id].group != group:
            group = CHECKS[result.id].group
            lines.append(f"\n[bold]{group}[/]")
        head, *rest = result.messages or [""]
        lines.append(f"  {DOCTOR_MARK[result.status]} {result.title}" + (f" [dim]—[/] {escape(head)}" if head else ""))
        if result.status != "ok" or verbose:
            lines += [f"      • {escape(line)}" for line in rest]
        if result.fix and result.status in ("warn", "fail"):
            for i, line in enumerate(result.fix.splitlines()):
                lines.append(f"      {'[bold]fix:[/]' if i == 0 else '    '} [cyan]{escape(line)}[/]")
    n = report.summary
    verdict = (
        "[red]not ready[/]" if n["fail"] else "[yellow]ready, with warnings[/]" if n["warn"] else "[green]ready[/]"
    )
    counts = f"{n['fail']} ✗ problem(s), {n['warn']} ! warning(s), {n['ok']} ✓ ok, {n['skip']} not checkable here"
    lines.append(f"\n{verdict}: {counts}")
    out.print("\n".join(lines))  # one print: rich renders a report this size ~10x faster than line by line


@main.command()
@on_ray_cluster
@click.option("--profile", default="verl-796871d", show_default=True, help="Profile name or manifest path.")
@click.option("--device", type=DEVICE_CHOICE, help="npu or cuda (default: detected, else the profile's first).")
@target_options
@click.option(
    "--ascend-home", type=click.Path(path_type=Path), help="Ascend install root [default: /usr/local/Ascend]."
)
@click.option("--only", multiple=True, metavar="CHECK", help="Run only these checks (repeatable or a,b; see --list).")
@click.option("--list", "list_checks", is_flag=True, help="List the checks and exit.")
@click.option("--strict", is_flag=True, help="Exit 1 on warnings too.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("-v", "--verbose", is_flag=True, help="Show the details of passing checks too.")
def doctor(profile, device, python, roots, ascend_home, only, list_checks, strict, as_json, verbose) -> None:
    """Is this machine ready for the profile's job? Every problem with the command that fixes it."""
    from ascendfix.doctor import context, runner
    from ascendfix.doctor.registry import CHECKS

    if list_checks:
        rows = [{"id": c.id, "title": c.title} for c in CHECKS.values()]
        if as_json:
            emit_json(rows)
        else:
            for row in rows:
                out.print(f"{row['id']:10} {row['title']}")
        return
    only = tuple(check for value in only for check in value.split(",") if check)  # --only a,b as the image uses
    runner.select(only)  # unknown ids are bad input before anything runs
    prof = manifest.load_profile(profile)
    if device is not None and device not in prof.devices:
        raise UsageError(f"--device {device}: profile {prof.name} defines only {', '.join(prof.devices)}")
    if python is not None and not (Path(python).is_file() and os.access(python, os.X_OK)):
        raise UsageError(f"--python {python}: no such executable")
    home = ascend_home or context.DEFAULT_ASCEND_HOME
    chosen, why = (device, f"--device {device} given") if device else context.choose_device(prof, home)
    ctx = context.Context(prof, chosen, why, python, parse_roots(roots), home)
    report = runner.run(ctx, only)
    if as_json:
        emit_json(report.as_dict())
    else:
        _render_doctor(report, why, verbose)
    sys.exit(report.exit_code(strict))


# --- demo --------------------------------------------------------------------------------------------


@main.command()
@click.option("--dir", "folder", type=click.Path(file_okay=False, path_type=Path), help="Keep the demo here.")
def demo(folder: Path | None) -> None:
    """Run the main job end to end on a built-in demo workspace (no Ascend hardware needed)."""
    import subprocess
    import tempfile

    from ascendfix import demo as demo_workspace
    from ascendfix import metrics, report

    base = folder or Path(tempfile.mkdtemp(prefix="ascendfix-demo-"))
    workspace = demo_workspace.build(base)
    prof = manifest.load_profile(str(workspace.profile))
    selection = engine.select(prof, "npu", roots=workspace.roots())
    out.print(f"[bold]ascendfix demo[/] — profile {prof.name}, device npu, workspace {escape(str(base))}\n")
    out.print("[bold]1. status before[/]  (ascendfix status --profile profile.toml --device npu --root ...)")
    out.print("[dim]   profile.toml extends verl-796871d; its torch files are stand-ins, so the torch patches[/]")
    out.print("[dim]   take the skip variant (fast-validate accepts only the real torch releases it knows)[/]")
    _render_patches(engine.status(selection))
    out.print("\n[bold]2. diff[/]  (what apply will change)")
    for line in engine.diff(engine.apply(selection, dry_run=True)).splitlines():
        if line.startswith(("+", "-")) and not line.startswith(("+++", "---")):
            out.print(f"  [{'green' if line[0] == '+' else 'red'}]{escape(line)}[/]")
    out.print("\n[bold]3. apply[/]  (atomic, journaled; the demo files are not known upstream originals)")
    _render_patches(engine.apply(selection))
    out.print("\n[bold]4. apply again[/]  (idempotent: nothing to do)")
    _render_patches(engine.apply(selection))
    out.print("\n[bold]5. run the job[/]  (ascendfix run --no-preflight --device npu train.sh)")
    out.print("[dim]   preflight is skipped: this machine has no Ascend stack for doctor to pass[/]")
    sys.stdout.flush()
    job = [sys.executable, "-m", "ascendfix", "run", "--no-preflight", "--device", "npu"]
    subprocess.run([*job, "--log-dir", str(base / "run"), str(workspace.train_sh)], cwd=base, check=False)
    run_data = report.load_run(base / "run" / "train.log")
    first = metrics.throughput(run_data.series.steps[0])
    out.print(f"\n[bold]6. report[/]  (ascendfix report {escape(str(base / 'run'))})")
    out.print(f"   step 1, as the guide computes it: e2e {first['e2e_tps']:.3f} tokens/s per device")
    out.print(f"   (world {first['world_size']}, update {first['update_tps']:.3f}, vllm {first['vllm_tps']:.3f})")
    out.print("\n[bold]7. revert[/]  (byte for byte)")
    _render_patches(engine.revert(engine.select(prof, None, roots=workspace.roots())))
    out.print(
        f"\nDone. Try it on your own trees: ascendfix apply --profile {prof.name} --root verl=DIR --root torch=DIR"
    )


# --- run, env, report, compare -----------------------------------------------------------------

DEFAULT_PROFILE = "verl-796871d"


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


class _RichStatus:
    """The live line under the job's output on a terminal's stderr: cleared before each chunk, redrawn
    after it at most ten times a second, and on idle ticks (so the elapsed time moves)."""

    def __init__(self, total: int | None):
        self.total, self.text, self.shown = total, "waiting for the first step", None
        self.started = self.last_draw = time.monotonic()

    def update(self, step: Any, parser: Any) -> None:
        from ascendfix import metrics

        total = parser.stats.total_steps or self.total
        reward = step.get(metrics.REWARD)
        parts = [
            f"step {step.step}" + (f"/{total}" if total else ""),
            f"reward {_num(reward if reward is not None else step.get(metrics.SCORE))}",
            f"{_num(step.get(metrics.STEP_TIME), 1)} s/step",
            f"{_num(metrics.throughput(step)['e2e_tps'], 2)} tok/s/dev",
        ]
        self.text = " · ".join(parts)

    def clear(self) -> None:
        if self.shown is not None:
            err.file.write("\r\x1b[2K")
            self.shown = None

    def draw(self) -> None:
        now = time.monotonic()
        if self.shown is None and now - self.last_draw < 0.1:
            return
        elapsed = int(now - self.started)
        line = Text.from_markup(f"[bold cyan]ascendfix[/] {escape(self.text)}")
        line.append(f" · {elapsed // 3600}h{elapsed // 60 % 60:02d}m")
        line.truncate(max(err.width - 1, 10))
        if line.plain == self.shown:
            return
        self.clear()
        err.print(line, end="")
        err.file.flush()
        self.shown, self.last_draw = line.plain, now


def _report_table(console: Console, data: dict[str, Any], sparks: dict[str, str]) -> None:
    table = Table(box=None, show_header=False, title=f"[bold]{escape(data['run'])}[/]", title_justify="left")
    table.add_column(style="dim")
    table.add_column()
    p = data["parse"]
    span = "" if not data["steps_seen"] else f" (step {data['first_step']} → {data['last_step']}"
    span += f" of {data['total_steps']})" if span and data["total_steps"] else (")" if span else "")
    table.add_row("steps seen", f"{data['steps_seen']}{span}, {data['steady_steps']} steady")
    table.add_row(
        "parsed",
        (f"{p['files']} file(s), " if p["files"] else "")
        + f"{p['step_lines']} step lines, {p['duplicates']} duplicates, {p['skipped']} skipped",
    )

    r = data["reward_mean"]
    table.add_row("reward mean", f"{_num(r['first'])} → {_num(r['last'])}  {sparks.get('reward', '')}")
    for key in ("response_length", "prompt_length"):
        v = data[key]
        table.add_row(
            key.replace("_", " "),
            f"{_num(v['first'], 1)} → {_num(v['last'], 1)} (median {_num(v['median'], 1)})  {sparks.get(key, '')}",
        )
    shares = " · ".join(f"{name} {'-' if s is None else f'{s * 100:.1f}%'}" for name, s in data["timing_share"].items())
    table.add_row("step time", f"{_num(data['timing_s/step'], 2)} s  {sparks.get('timing_s/step', '')}")
    table.add_row("time share", shares)
    t = data["throughput"]
    world = "-" if t["world_size"] is None else f"{t['world_size']:.0f}"
    table.add_row(
        "tokens/s/device",
        f"e2e {_num(t['e2e_tps'])} · update {_num(t['update_tps'])} · vllm {_num(t['vllm_tps'])} (world {world})"
        f"  {sparks.get('e2e_tps', '')}",
    )
    for key, value in data["metrics"].items():
        table.add_row(escape(key), f"{_num(value)}  {sparks.get(key, '')}")
    console.print(table)
    console.print("[dim]figures are medians over steady steps (not step 1, not validating or saving)[/]")


def _sparks(run: Any, extra: tuple[str, ...]) -> dict[str, str]:
    from ascendfix import report

    keys = ("reward", "response_length", "prompt_length", "timing_s/step", "e2e_tps", *extra)
    curves = {k: report.curve(run, k) for k in keys}
    return {k: report.sparkline([v for _, v in c]) for k, c in curves.items() if len(c) > 1}


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--profile", "profile_ref", default=DEFAULT_PROFILE, show_default=True, help="Profile name or file.")
@click.option("--device", type=DEVICE_CHOICE, help="Device kind (default: detected).")
@click.option("--no-preflight", is_flag=True, help="Launch even if doctor or the patch status say no.")
@click.option("--log-dir", type=click.Path(file_okay=False, path_type=Path), help="Where train.log and run.json go.")
@click.option("--json-metrics", type=click.Path(dir_okay=False, path_type=Path), help="Write each step as JSONL.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED, metavar="SCRIPT [ARGS]...")
def run(
    profile_ref: str,
    device: str | None,
    no_preflight: bool,
    log_dir: Path | None,
    json_metrics: Path | None,
    command: tuple[str, ...],
) -> None:
    """Run SCRIPT [ARGS...] (or any command) with the profile's environment, live progress and a summary.

    A non-executable *.sh script runs under bash. Exits with the command's exit status.
    """
    import os

    from ascendfix import launch, metrics, preflight, report
    from ascendfix.errors import RefusedError

    profile = manifest.load_profile(profile_ref)
    device = require_device(device)
    argv = launch.command_for(command)
    settings = launch.resolve_env(profile, device, os.environ)
    overrides = preflight.scan_overrides(argv, os.environ)
    pre = None
    if not no_preflight:
        pre = preflight.run_preflight(profile, device, argv, os.environ, preflight.default_seams())
        for finding in pre.hints:
            err.print(f"[yellow]hint[/] ({finding.source}): {escape(finding.message)}")
    for s in settings:
        if s.source == "user" and s.profile_value is not None and s.value != s.profile_value:
            mine, theirs = escape(s.value or ""), escape(s.profile_value)
            err.print(f"[dim]env[/] {s.name}={mine} (yours) wins over the profile's {theirs}")
        elif s.source == "missing":
            err.print(f"[yellow]hint[/] (env): {s.name} must be set per site: {escape(s.why)}")
    if pre is not None and pre.problems:
        for finding in pre.problems:
            err.print(f"[red]problem[/] ({finding.source}): {escape(finding.message)}")
        raise RefusedError(f"preflight found {len(pre.problems)} problem(s); fix them or pass --no-preflight")
    log_dir = log_dir or Path("ascendfix-runs") / time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"{log_dir}: cannot create the log directory: {e.strerror}") from None
    env = launch.job_environment(settings, os.environ)
    ulimit = launch.raise_nofile(profile.devices[device].ulimit_nofile)
    record = launch.run_record(profile.name, device, argv, settings, env, log_dir)
    record.update(ulimit_nofile=ulimit, overrides=overrides)
    record["preflight_hints"] = None if pre is None else [manifest.as_dict(h) for h in pre.hints]
    launch.write_run_json(log_dir, record)
    total = preflight.total_steps(overrides)
    status = _RichStatus(total) if err.is_terminal and out.is_terminal else None
    write_metrics = launch.metrics_writer(json_metrics) if json_metrics else None

    def on_step(step: metrics.Step) -> None:
        if status is not None:
            status.update(step, parser)
        if write_metrics is not None:
            write_metrics(step)

    parser = metrics.StepParser(on_step=on_step)
    err.print(f"[dim]ascendfix: {escape(' '.join(record['command']))} → {escape(str(log_dir))}/train.log[/]")
    result = launch.launch(argv, env, log_dir, parser, status)
    if status is not None:
        status.clear()
    record.update(ended=launch.now(), **result.as_dict(), steps=len(parser.steps))
    launch.write_run_json(log_dir, record)
    run_data = report.Run(str(log_dir), parser)
    if run_data.series.steps:
        _report_table(err, report.report_data(run_data), _sparks(run_data, ()))
    else:
        err.print("[dim]ascendfix: no verl step lines seen[/]")
    how = f" after {result.forwarded}" + (" and SIGKILL" if result.killed else "") if result.forwarded else ""
    err.print(f"[dim]ascendfix: exit status {result.exit_status}{how}; log {escape(str(log_dir))}/train.log[/]")
    sys.exit(result.exit_status)


@main.command("env")
@click.option("--profile", "profile_ref", default=DEFAULT_PROFILE, show_default=True, help="Profile name or file.")
@click.option("--device", type=DEVICE_CHOICE, help="Device kind (default: detected).")
@click.option("--shell", type=click.Choice(["bash", "json"]), default="bash", show_default=True)
def env_command(profile_ref: str, device: str | None, shell: str) -> None:
    """Print the profile's environment: eval "$(ascendfix env)" before `ray start` or in a Dockerfile."""
    import shlex

    from ascendfix import launch

    profile = manifest.load_profile(profile_ref)
    device = require_device(device)
    settings = launch.resolve_env(profile, device, {})
    ulimit = profile.devices[device].ulimit_nofile
    if shell == "json":
        emit_json(
            {
                "profile": profile.name,
                "device": device,
                "env": {s.name: s.value for s in settings if s.value is not None},
                "site_specific": [{"name": s.name, "why": s.why} for s in settings if s.value is None],
                "ulimit_nofile": ulimit,
            }
        )
        return
    lines = [f"# ascendfix env --profile {profile.name} --device {device}"]
    for s in settings:
        if s.value is None:
            lines.append(f"# {s.name} must be set per site: {s.why}")
        else:
            lines.append(f"export {s.name}={shlex.quote(s.value)}")
    if ulimit:
        lines.append(f'ulimit -n {ulimit} 2>/dev/null || echo "ascendfix: cannot raise ulimit -n to {ulimit}" >&2')
    click.echo("\n".join(lines))


@main.command("report")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), help="Write a PNG (needs matplotlib).")
@click.option("--metrics", "extra", default="", help="More metric keys to report, comma-separated.")
def report_command(paths: tuple[Path, ...], as_json: bool, plot: Path | None, extra: str) -> None:
    """Report each run: a log file, a Ray session logs directory, or a verl JSONL file."""
    from ascendfix import report

    keys = tuple(k.strip() for k in extra.split(",") if k.strip())
    runs = [report.load_run(p) for p in paths]
    if plot is not None:
        report.plot(runs, plot)
    if as_json:
        emit_json([report.report_data(r, keys) for r in runs])
        return
    for run in runs:
        _report_table(out, report.report_data(run, keys), _sparks(run, keys))
    if plot is not None:
        out.print(f"plot written to {escape(str(plot))}")


@main.command("compare")
@click.argument("a", type=click.Path(path_type=Path))
@click.argument("b", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def compare_command(a: Path, b: Path, as_json: bool) -> None:
    """Compare run B with run A (e.g. NPU against H100): steady figures as ratios B/A and the reward gap."""
    from ascendfix import report

    data = report.compare_data(report.load_run(a), report.load_run(b))
    if as_json:
        emit_json(data)
        return
    table = Table("metric", "A", "B", "B/A", box=None, caption=escape(f"A = {a}\nB = {b}"), caption_justify="left")
    for row in data["rows"]:
        table.add_row(row["metric"], _num(row["a"]), _num(row["b"]), _num(row["ratio"], 2))
    out.print(table)
    gap = data["reward_difference"]
    out.print(f"reward B − A over {gap['common_steps']} common steps: ", end="")
    out.print(f"mean {_num(gap['mean'])}, max |Δ| {_num(gap['max_abs'])}")


# --- ray start / ray wait: bring the Ray cluster up the guide's way -----------------------------------


@main.group("ray")
def ray_group() -> None:
    """Start this node's Ray with the profile's environment; wait until every node is there and agrees."""


@ray_group.command("start", context_settings={"ignore_unknown_options": True})
@click.option("--profile", "profile_ref", default=DEFAULT_PROFILE, show_default=True, help="Profile name or file.")
@click.option("--device", type=DEVICE_CHOICE, help="Device kind (default: detected).")
@click.option("--no-preflight", is_flag=True, help="Start even if doctor's fail-level checks fail here.")
@click.argument("ray_args", nargs=-1, type=click.UNPROCESSED, metavar="(--head | --address HOST:PORT) [RAY OPTIONS]...")
def ray_start(profile_ref: str, device: str | None, no_preflight: bool, ray_args: tuple[str, ...]) -> None:
    """Run `ray start` with the profile's environment, `ulimit -n` raised and this node's NPUs registered.

    --head adds the guide's --port 6166 --dashboard-host=0.0.0.0 --dashboard-port=8260 unless given;
    on npu, --resources gets {"NPU": N} (N from npu-smi) merged in. Every other option goes to
    `ray start` unchanged, which then replaces this process: --block, signals and the exit status are ray's.
    """
    import shlex

    from ascendfix import launch, preflight, raystart
    from ascendfix.errors import RefusedError

    raystart.require_ray()
    profile = manifest.load_profile(profile_ref)
    device = require_device(device)
    settings = launch.resolve_env(profile, device, os.environ)  # a device the profile lacks is bad input
    plan = raystart.plan(profile, device, ray_args, os.environ)
    if not no_preflight:
        failures = preflight.default_seams().doctor_failures(profile, device) or []
        for message in failures:
            err.print(f"[red]problem[/] (doctor): {escape(message)}")
        if failures:
            raise RefusedError(f"doctor found {len(failures)} problem(s) on this node; fix them or pass --no-preflight")
    for s in settings:
        if s.source == "user" and s.profile_value is not None and s.value != s.profile_value:
            mine, theirs = escape(s.value or ""), escape(s.profile_value)
            err.print(f"[dim]env[/] {s.name}={mine} (yours) wins over the profile's {theirs}")
        elif s.source == "missing":
            err.print(f"[yellow]hint[/] (env): {s.name} must be set per site: {escape(s.why)}")
    for warning in plan.warnings:
        err.print(f"[yellow]warning:[/] {escape(warning)}")
    if plan.npu_source == "yours":
        err.print("[dim]resources[/] your --resources names NPU: kept as given")
    ulimit = launch.raise_nofile(profile.devices[device].ulimit_nofile)
    if ulimit["wanted"] and ulimit["after"] < ulimit["wanted"]:
        hard = f"ulimit -n could be raised only to {ulimit['after']} (the hard limit)"
        err.print(f"[yellow]warning:[/] {hard}; the profile wants {ulimit['wanted']}")
    err.print(f"[dim]ascendfix: {escape(shlex.join(plan.argv))}[/]")
    raystart.exec_ray(plan.argv, launch.job_environment(settings, os.environ))


@ray_group.command("wait")
@click.option("--profile", "profile_ref", default=DEFAULT_PROFILE, show_default=True, help="Profile name or file.")
@click.option("--device", type=DEVICE_CHOICE, help="Device kind (default: detected).")
@click.option("--address", metavar="HOST:PORT", help="The cluster's head (default: RAY_ADDRESS, else the local one).")
@click.option("--nodes", type=click.IntRange(min=1), metavar="N", help="Wait for N alive nodes.")
@click.option(
    "--per-node", type=click.IntRange(min=1), metavar="K", help="Each with K NPUs (GPUs) [default: the profile's]."
)
@click.option("--for", "script", type=click.Path(path_type=Path), help="N and K from the script's trainer.* overrides.")
@click.option("--timeout", type=click.FloatRange(min=0), default=600.0, show_default=True, metavar="SECONDS")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def ray_wait(
    profile_ref: str,
    device: str | None,
    address: str | None,
    nodes: int | None,
    per_node: int | None,
    script: Path | None,
    timeout: float,
    as_json: bool,
) -> None:
    """Wait until N nodes with K NPUs each are registered, then check every node sees the same.

    Compares, as a Ray task pinned to each node sees them: the profile's variables, `ulimit -n`, the
    node's NPU (GPU) resource and the patch status. Exit 0 when ready, 1 naming what lacks or differs.
    """
    from ascendfix import preflight, raystart, raywait

    raystart.require_ray()
    if (nodes is None) == (script is None):
        raise UsageError("ray wait: give --nodes N [--per-node K], or --for SCRIPT")
    if script is not None and per_node is not None:
        raise UsageError(f"--per-node: --for {script} reads it from the script's {raywait.PER_NODE}")
    profile = manifest.load_profile(profile_ref)
    device = require_device(device)
    if device not in profile.devices:
        raise UsageError(f"--device {device}: profile {profile.name} defines only {', '.join(profile.devices)}")
    if script is not None:
        if not script.is_file():
            raise UsageError(f"--for {script}: no such file")
        nodes, per_node = raywait.job_size(preflight.scan_overrides([str(script)], os.environ), f"--for {script}")
    per_node = per_node or profile.devices[device].accelerators_per_node
    if per_node is None:
        raise UsageError(f"--per-node: profile {profile.name} has no accelerators_per_node; pass --per-node K")
    unit = raystart.RESOURCE[device]
    live = err.is_terminal and not as_json

    def progress(now: raywait.Arrival) -> None:
        err.file.write(f"\r\x1b[2Kascendfix ray wait: {now.line()}")
        err.file.flush()

    arrived = raywait.wait(address, nodes, per_node, unit, timeout, progress if live else None)
    if live:
        err.file.write("\r\x1b[2K")
    report = raywait.WaitReport(address or "auto", arrived)
    if arrived.ready:
        status_argv = ["status", "--profile", profile_ref, "--device", device, "--json"]
        report = raywait.check(profile, device, address, arrived, per_node, 60.0, status_argv)
    if as_json:
        emit_json({**report.as_json(), "timeout_s": timeout})
    else:
        _render_ray_wait(report, timeout)
    sys.exit(0 if report.ok else 1)


def _render_ray_wait(report, timeout: float) -> None:
    if not report.arrival.ready:
        out.print(f"[bold red]not ready after {timeout:g} s:[/] {report.arrival.line()}")
        return
    unit = report.arrival.unit
    table = Table("node", "host", unit, "ulimit -n", "patches", box=None, title="Ray nodes", title_justify="left")
    for node in report.nodes:
        states = sorted({state for state, _ in node.patches.values()})
        table.add_row(
            escape(node.label),
            escape(node.hostname),
            f"{node.resources.get(unit, 0):g}",
            escape(node.ulimit_nofile),
            escape(node.error or ", ".join(states) or "-"),
        )
    (out if out.is_terminal else Console(width=240, highlight=False)).print(table)
    if report.differences:
        diffs = Table("node", "what", "value there", "other nodes (or wanted)", "why", box=None, title_justify="left")
        diffs.title = "[bold red]nodes that lack something or differ[/]"
        for d in report.differences:
            diffs.add_row(escape(d.node), escape(d.item), escape(d.value), escape(d.others), escape(d.why))
        (out if out.is_terminal else Console(width=240, highlight=False)).print(diffs)
        out.print(f"[bold red]not ready:[/] {report.arrival.line()}, {len(report.differences)} difference(s)")
    else:
        out.print(f"[green]ready:[/] {report.arrival.line()}, every node sees the same")


if __name__ == "__main__":  # pragma: no cover
    main()
