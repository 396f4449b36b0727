"""``profiles`` and ``show``: what the bundled profiles pin and patch, and why."""

from __future__ import annotations

import click

from ascendfix import manifest
from ascendfix.cli.base import escape, json_option, out, render, wide


@click.command()
@json_option
def profiles(as_json: bool) -> None:
    """List the bundled profiles."""
    rows = []
    for name in manifest.bundled_profiles():
        profile = manifest.load_profile(name)
        rows.append({"name": name, "description": profile.description, "devices": list(profile.devices)})

    def human(rows: list[dict]) -> None:
        from rich.table import Table

        table = Table("profile", "devices", "description", box=None)
        for row in rows:
            table.add_row(row["name"], ", ".join(row["devices"]), row["description"])
        out().print(table)

    render(rows, as_json, human)


@click.command()
@click.argument("profile")
@json_option
def show(profile: str, as_json: bool) -> None:
    """Show a profile: its pinned components, devices and patches with their why."""
    prof = manifest.load_profile(profile)
    render(manifest.to_json(prof) if as_json else prof, as_json, _render_profile)


def _render_profile(prof: manifest.Profile) -> None:
    from rich.table import Table

    from ascendfix.transforms import registry

    console = out() if out().is_terminal else wide()  # a pipe or a file gets every pin whole, on one line
    console.print(f"[bold]{escape(prof.name)}[/] — {escape(prof.description)}\n[dim]{escape(str(prof.source))}[/]\n")
    table = Table(box=None, title="Components", title_justify="left")
    for column in ("component", "pin", "devices", "why"):
        table.add_column(column, overflow="fold", no_wrap=column == "pin")  # a pin is never cut with "…"
    for c in prof.components:
        pin = c.commit or c.tag or c.version or ""
        if c.kind == "git":
            pin = f"{c.repo} @ {pin}" + (" (editable)" if c.editable else "")
        table.add_row(c.name, pin, ", ".join(c.devices), c.why)
    console.print(table)
    for conflict in prof.accepted_conflicts:
        console.print(
            f"\n[yellow]accepted conflict[/]: {conflict.requirer} requires {conflict.requirement} — "
            + escape(conflict.why)
        )
    for device in prof.devices.values():
        console.print(f"\n[bold]{device.name}[/]: {device.description}")
        for var in device.env:
            value = var.value if var.value is not None else "<set per site>"
            console.print(f"  {var.name}={escape(value)}  [dim]{escape(var.why)}[/]")
        if device.ulimit_nofile:
            console.print(f"  ulimit -n {device.ulimit_nofile}")
        console.print(f"  patches: {', '.join(device.patches) or '-'}")
    for patch in prof.patches.values():
        console.print(f"\n[bold]{patch.id}[/] ({patch.package}: {', '.join(f.path for f in patch.files)})")
        console.print(f"  [dim]why:[/] {escape(' '.join(patch.why.split()))}")
        for variant in patch.variants:
            name = "" if variant.name == manifest.DEFAULT_VARIANT else f"variant {variant.name}: "
            how = registry.get(variant.transform).description()
            console.print(f"  [dim]{escape(name)}transform {variant.transform}:[/] {escape(how)}")
        console.print(f"  [dim]drop when:[/] {escape(' '.join(patch.drop_when.split()))}")
