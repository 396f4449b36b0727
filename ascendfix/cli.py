"""The command line: parse arguments, call the core, render the plain data it returns.

Every command that shows something also has ``--json``. Errors from the core are
``AscendfixError``s and reach the user as one line on stderr with the error's exit
status (2 for bad input, 1 for a refusal or a failed check), never as a traceback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ascendfix import engine, manifest
from ascendfix.device import require_device
from ascendfix.errors import AscendfixError
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


def _selection(profile: str, device: str | None, roots, python, only=(), need_device=True) -> engine.Selection:
    prof = manifest.load_profile(profile)
    chosen = require_device(device) if need_device else device
    return engine.select(prof, chosen, tuple(only), python, parse_roots(roots))


def _render_patches(statuses: list[engine.PatchStatus], verb: str | None = None) -> None:
    for s in statuses:
        style = STATE_STYLE.get(s.state, "")
        action = f" ({s.action})" if s.action and s.action not in ("unchanged", "skipped") else ""
        out.print(f"[{style}]{s.state:15}[/] {s.id}{action}")
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
@click.option("--dry-run", is_flag=True, help="Plan and verify, write nothing.")
@click.option("--strict", is_flag=True, help="Refuse files that are not a known original.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def apply(profile, device, python, roots, only, dry_run, strict, as_json) -> None:
    """Apply the profile's patches for this device: all or nothing, idempotent."""
    selection = _selection(profile, device, roots, python, only)
    statuses = engine.apply(selection, strict=strict, dry_run=dry_run)
    if as_json:
        emit_json(_json_report(selection, statuses, dry_run=dry_run))
    else:
        _render_patches(statuses)
        wrote = sum(s.action == "applied" for s in statuses)
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
def diff(profile, device, python, roots, only) -> None:
    """Show the unified diff of what apply would change (coloured on a terminal)."""
    selection = _selection(profile, device, roots, python, only)
    text = engine.diff(engine.apply(selection, dry_run=True))
    if not out.is_terminal:
        click.echo(text, nl=False)
        return
    for line in text.splitlines():
        style = "bold" if line.startswith(("---", "+++")) else ""
        style = style or {"+": "green", "-": "red", "@": "cyan"}.get(line[:1], "")
        out.print(f"[{style}]{escape(line)}[/]" if style else escape(line))


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
