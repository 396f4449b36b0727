"""``profiles`` and ``show``: what the bundled profiles pin and patch, and why."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ascendfix.cli.base import escape, json_option, make_console, out, render
from ascendfix.jsonable import jsonable
from ascendfix.profile import manifest, records

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text


@click.command()
@json_option
def profiles(as_json: bool) -> int:
    """List the bundled profiles."""
    rows = []
    for name in manifest.bundled_profiles():
        profile = manifest.load_profile(name)
        rows.append({"name": name, "description": profile.description, "devices": list(profile.devices)})

    def human(listing: dict[str, Any]) -> None:
        from rich.table import Table

        table = Table("profile", "devices", "description", box=None)
        for row in listing["profiles"]:
            table.add_row(row["name"], ", ".join(row["devices"]), row["description"])
        out().print(table)

    return render({"ok": True, "profiles": rows}, as_json, human)


@click.command()
@click.argument("profile")
@json_option
def show(profile: str, as_json: bool) -> int:
    """Show a profile: its pinned components, devices and patches with their why."""
    prof = manifest.load_profile(profile)
    return render({"ok": True, **jsonable(prof)}, as_json, lambda _: _render_profile(prof))


def _render_profile(prof: records.Profile, console: Console | None = None) -> None:
    """The profile for a person, at the terminal's width (a pipe: ``$COLUMNS``, else 80).

    Each component's line (its name and whole pin) is printed whole, so it can be copied and
    grepped; every other line is wrapped to the width between words, never inside one (a path or
    a value stays whole), its continuation indented under it.
    """
    from rich.text import Text

    from ascendfix.transforms import registry

    console = console or make_console()

    def whole(markup: str = "") -> None:
        console.print(markup, soft_wrap=True)

    def prose(markup: str, indent: int = 0) -> None:
        hang = indent if indent >= 6 else indent + 4
        for i, line in enumerate(wrap(Text.from_markup(markup), max(console.width - hang, 20))):
            console.print(Text(" " * (hang if i else indent)) + line, soft_wrap=True)

    prose(f"[bold]{escape(prof.name)}[/] — {escape(prof.description)}")
    whole(f"[dim]{escape(str(prof.source))}[/]\n")
    whole("[italic]Components[/]")
    for c in prof.components:
        pin = c.commit or c.tag or c.version or ""
        if c.kind == "git":
            pin = f"{c.repo} @ {pin}" + (" (editable)" if c.editable else "")
        whole(f"  [bold]{escape(c.name)}[/]  {escape(pin)}")
        where = f"({', '.join(c.devices)}; {_guide_mark(c.guide, c.guide_value, None)})"
        prose(f"[dim]{where} {escape(' '.join(c.why.split()))}[/]", 6)
    for conflict in prof.accepted_conflicts:
        whole()
        prose(
            f"[yellow]accepted conflict[/]: {escape(conflict.requirer)} requires {escape(conflict.requirement)} — "
            + escape(" ".join(conflict.why.split()))
        )
    for device in prof.devices.values():
        whole()
        prose(f"[bold]{device.name}[/]: {escape(device.description)}")
        for line in show_device_lines(prof, device.name):
            prose(line.lstrip(" "), len(line) - len(line.lstrip(" ")))
    for patch in prof.patches.values():
        whole()
        prose(f"[bold]{patch.id}[/] ({patch.package}: {', '.join(f.path for f in patch.files)})")
        prose(f"[dim]why:[/] {escape(' '.join(patch.why.split()))}", 2)
        for variant in patch.variants:
            name = "" if variant.name == records.DEFAULT_VARIANT else f"variant {variant.name}: "
            how = registry.TRANSFORMS[variant.transform].description()  # the loader checked the name
            prose(f"[dim]{escape(name)}transform {variant.transform}:[/] {escape(how)}", 2)
        prose(f"[dim]drop when:[/] {escape(' '.join(patch.drop_when.split()))}", 2)
        if patch.drop_probe:
            probe = manifest.DROP_PROBES[patch.drop_probe]
            prose(f"[dim]checked by upgrade-check ({patch.drop_probe}):[/] obsolete when {escape(probe)}", 2)
        else:
            prose("[dim]not checked by upgrade-check (measure it; see drop when)[/]", 2)
    for rule in prof.rules:
        when = " and ".join(c.describe() for c in rule.when)
        whole()
        prose(f"[bold]rule {rule.id}[/] ({rule.action}; {', '.join(rule.devices)}): " + escape(when))
        prose(f"[dim]why:[/] {escape(' '.join(rule.why.split()))}", 2)
        prose(f"[dim]source:[/] {escape(rule.source)}", 2)


def wrap(text: Text, width: int) -> list[Text]:
    """``text`` (rich Text) cut into lines of at most ``width`` characters between words; a longer word
    (a path, a URL, a value) stays whole on a line of its own."""
    import textwrap

    lines, at = [], 0
    for piece in textwrap.wrap(text.plain, width, break_long_words=False, break_on_hyphens=False):
        start = text.plain.index(piece, at)
        lines.append(text[start : start + len(piece)])
        at = start + len(piece)
    return lines


BEYOND = "[yellow]beyond the guide[/]"


def _guide_mark(guide: str | None, guide_value: str | None, source: str | None) -> str:
    """Where a setting comes from: the guide's section (and its own value when ours differs), or its source."""
    if guide is None:
        return f"{BEYOND}, source: {escape(source)}" if source else BEYOND
    return f"guide {guide}" + (f", [yellow]the guide has {escape(guide_value)}[/]" if guide_value else "")


def show_device_lines(prof: records.Profile, name: str) -> list[str]:
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
            "      [yellow]differs from the guide's stock H100 run (3.4)[/], which patches nothing: "
            + escape(", ".join(device.patches))
            + " change the H100 side too, so both runs execute the same verl and torch code"
            + (f"; not {escape(', '.join(npu_only))} (NPU only)" if npu_only else "")
        )
    return lines
