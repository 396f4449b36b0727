"""``profiles`` and ``show``: what the bundled profiles pin and patch, and why."""

from __future__ import annotations

import click

from ascendfix.cli.base import escape, json_option, out, render, wide
from ascendfix.profile import manifest


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
    for column in ("component", "pin", "devices", "guide", "why"):
        table.add_column(column, overflow="fold", no_wrap=column == "pin")  # a pin is never cut with "…"
    for c in prof.components:
        pin = c.commit or c.tag or c.version or ""
        if c.kind == "git":
            pin = f"{c.repo} @ {pin}" + (" (editable)" if c.editable else "")
        mark = _guide_mark(c.guide, c.guide_value, None)
        table.add_row(c.name, escape(pin), ", ".join(c.devices), mark, escape(" ".join(c.why.split())))
    console.print(table)
    for conflict in prof.accepted_conflicts:
        console.print(
            f"\n[yellow]accepted conflict[/]: {conflict.requirer} requires {conflict.requirement} — "
            + escape(conflict.why)
        )
    for device in prof.devices.values():
        console.print(f"\n[bold]{device.name}[/]: {device.description}")
        for line in show_device_lines(prof, device.name):
            console.print(line)
    for patch in prof.patches.values():
        console.print(f"\n[bold]{patch.id}[/] ({patch.package}: {', '.join(f.path for f in patch.files)})")
        console.print(f"  [dim]why:[/] {escape(' '.join(patch.why.split()))}")
        for variant in patch.variants:
            name = "" if variant.name == manifest.DEFAULT_VARIANT else f"variant {variant.name}: "
            how = registry.get(variant.transform).description()
            console.print(f"  [dim]{escape(name)}transform {variant.transform}:[/] {escape(how)}")
        console.print(f"  [dim]drop when:[/] {escape(' '.join(patch.drop_when.split()))}")
        if patch.drop_probe:
            probe = manifest.DROP_PROBES[patch.drop_probe]
            console.print(f"  [dim]checked by upgrade-check ({patch.drop_probe}):[/] obsolete when {escape(probe)}")
        else:
            console.print("  [dim]not checked by upgrade-check (measure it; see drop when)[/]")
    for rule in prof.rules:
        when = " and ".join(c.describe() for c in rule.when)
        console.print(f"\n[bold]rule {rule.id}[/] ({rule.action}; {', '.join(rule.devices)}): " + escape(when))
        console.print(f"  [dim]why:[/] {escape(' '.join(rule.why.split()))}")
        console.print(f"  [dim]source:[/] {escape(rule.source)}")


BEYOND = "[yellow]beyond the guide[/]"


def _guide_mark(guide: str | None, guide_value: str | None, source: str | None) -> str:
    """Where a setting comes from: the guide's section (and its own value when ours differs), or its source."""
    if guide is None:
        return f"{BEYOND}, source: {escape(source)}" if source else BEYOND
    return f"guide {guide}" + (f", [yellow]the guide has {escape(guide_value)}[/]" if guide_value else "")


def show_device_lines(prof: manifest.Profile, name: str) -> list[str]:
    """``show``'s lines for one device: env (guide section or "beyond the guide"), limits, Ray, hints, patches."""
    device = prof.devices[name]
    lines = []
    for var in device.env:
        value = var.value if var.value is not None else "<set per site>"
        if var.prepend:
            value = f"{var.value}:${var.name} (prepended)"
        lines.append(f"  {var.name}={escape(value)}  [dim]({_guide_mark(var.guide, var.guide_value, var.source)})[/]")
        lines.append(f"      [dim]{escape(' '.join(var.why.split()))}[/]")
    if device.ulimit_nofile:
        lines.append(f"  ulimit -n {device.ulimit_nofile}  [dim]({_guide_mark(device.ulimit_guide, None, None)})[/]")
    if device.ray_head:
        lines.append(f"  ray head:   {escape(device.ray_head)}  [dim](guide {device.ray_guide})[/]")
    if device.ray_worker:
        lines.append(f"  ray worker: {escape(device.ray_worker)}  [dim](guide {device.ray_guide})[/]")
    for hint in prof.hints:
        if name in hint.devices:
            lines.append(f"  hint: {escape(hint.override)}  [dim]({_guide_mark(hint.guide, None, None)})[/]")
            lines.append(f"      [dim]{escape(' '.join(hint.why.split()))}[/]")
    lines.append(f"  patches: {', '.join(device.patches) or '-'}")
    if name == "cuda" and not device.patches:
        lines.append("  [dim]as the guide's H100 run (3.4), which patches nothing: stock verl and torch[/]")
    elif name == "cuda":
        npu_only = sorted(set(prof.patches) - set(device.patches))
        lines.append(
            "  [yellow]differs from the guide's stock H100 run (3.4)[/], which patches nothing: "
            + escape(", ".join(device.patches))
            + " change the H100 side too, so both runs execute the same verl and torch code"
            + (f"; not {escape(', '.join(npu_only))} (NPU only)" if npu_only else "")
        )
    return lines
