"""The command line: parse arguments, call the core, render the plain data it returns.

Every command that shows something also has ``--json``. Errors from the core are
``AscendfixError``s and reach the user as one line on stderr with the error's exit
status (2 for bad input, 1 for a refusal or a failed check), never as a traceback.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ascendfix import engine, manifest
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
            err.print(f"[bold red]error:[/] {e}", markup=True)
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
    out.print(f"[bold]{prof.name}[/] — {prof.description}\n[dim]{prof.source}[/]\n")
    table = Table("component", "pin", "devices", "why", box=None, title="Components", title_justify="left")
    for c in prof.components:
        pin = c.commit or c.tag or c.version or ""
        if c.kind == "git":
            pin = f"{c.repo} @ {pin}" + (" (editable)" if c.editable else "")
        table.add_row(c.name, pin, ", ".join(c.devices), c.why)
    out.print(table)
    for conflict in prof.accepted_conflicts:
        out.print(
            f"\n[yellow]accepted conflict[/]: {conflict.requirer} requires {conflict.requirement} — {conflict.why}"
        )
    for device in prof.devices.values():
        out.print(f"\n[bold]{device.name}[/]: {device.description}")
        for var in device.env:
            value = var.value if var.value is not None else "<set per site>"
            out.print(f"  {var.name}={value}  [dim]{var.why}[/]")
        if device.ulimit_nofile:
            out.print(f"  ulimit -n {device.ulimit_nofile}")
        out.print(f"  patches: {', '.join(device.patches) or '-'}")
    for patch in prof.patches.values():
        out.print(f"\n[bold]{patch.id}[/] ({patch.package}: {', '.join(f.path for f in patch.files)})")
        out.print(f"  [dim]why:[/] {' '.join(patch.why.split())}")
        out.print(f"  [dim]drop when:[/] {' '.join(patch.drop_when.split())}")


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
            out.print(f"                [dim]{s.reason}[/]")
        for w in s.warnings:
            err.print(f"[yellow]warning:[/] {s.id}: {w}")


def _json_report(selection: engine.Selection, statuses: list[engine.PatchStatus], **extra) -> dict:
    return {
        "profile": selection.profile.name,
        "device": selection.device,
        **extra,
        "patches": [s.as_json() for s in statuses],
    }


@main.command()
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
@click.option("--profile", default="verl-796871d", show_default=True, help="Profile name or manifest path.")
@click.option("--device", type=DEVICE_CHOICE, help="npu or cuda (default: detected, else the profile's first).")
@target_options
@click.option(
    "--ascend-home", type=click.Path(path_type=Path), help="Ascend install root [default: /usr/local/Ascend]."
)
@click.option("--only", multiple=True, metavar="CHECK", help="Run only this check (repeatable; see --list).")
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
    import tempfile

    from ascendfix import demo as demo_workspace

    base = folder or Path(tempfile.mkdtemp(prefix="ascendfix-demo-"))
    workspace = demo_workspace.build(base)
    prof = manifest.load_profile("verl-796871d")
    selection = engine.select(prof, "npu", roots=workspace.roots())
    out.print(f"[bold]ascendfix demo[/] — profile {prof.name}, device npu, workspace {base}\n")
    out.print("[bold]1. status before[/]  (ascendfix status --profile verl-796871d --device npu --root ...)")
    _render_patches(engine.status(selection))
    out.print("\n[bold]2. diff[/]  (what apply will change)")
    for line in engine.diff(engine.apply(selection, dry_run=True)).splitlines():
        if line.startswith(("+", "-")) and not line.startswith(("+++", "---")):
            out.print(f"  [{'green' if line[0] == '+' else 'red'}]{escape(line)}[/]")
    out.print("\n[bold]3. apply[/]  (atomic, journaled; the demo files are not known upstream originals)")
    _render_patches(engine.apply(selection))
    out.print("\n[bold]4. apply again[/]  (idempotent: nothing to do)")
    _render_patches(engine.apply(selection))
    out.print("\n[bold]5. revert[/]  (byte for byte)")
    _render_patches(engine.revert(engine.select(prof, None, roots=workspace.roots())))
    out.print(
        f"\nDone. Try it on your own trees: ascendfix apply --profile {prof.name} --root verl=DIR --root torch=DIR"
    )


if __name__ == "__main__":  # pragma: no cover
    main()
