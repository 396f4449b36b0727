"""The command line: parse arguments, call the core, render the plain data it returns.

Every command that shows something also has ``--json``. Errors from the core are
``AscendfixError``s and reach the user as one line on stderr with the error's exit
status (2 for bad input, 1 for a refusal or a failed check), never as a traceback.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from ascendfix import manifest
from ascendfix.errors import AscendfixError

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


if __name__ == "__main__":  # pragma: no cover
    main()
