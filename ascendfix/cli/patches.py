"""``apply``, ``revert``, ``status``, ``diff``: the patch engine's commands."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ascendfix.cli.base import (
    clean,
    device_option,
    escape,
    json_option,
    only_option,
    out,
    profile_option,
    render,
    target_options,
    variant_option,
)
from ascendfix.cli.fanout import on_ray_cluster
from ascendfix.patching import engine
from ascendfix.patching.evaluate import PatchStatus, Selection
from ascendfix.profile import manifest, records
from ascendfix.profile.device import require_device
from ascendfix.site import Site, parse_roots
from ascendfix.states import Action, State
from ascendfix.tuples import NamedTuple

STATE_STYLE: dict[str, dict[str, Any]] = {
    State.APPLIED: {"fg": "green"},
    State.NOT_APPLIED: {"fg": "yellow"},
    State.NOT_APPLICABLE: {"dim": True},
    State.DRIFTED: {"fg": "red"},
    State.PARTIAL: {"fg": "red"},
    State.HAND_EDITED: {"fg": "yellow"},
}


def tell_lock_wait(root: Path, pid: int | None) -> None:
    """Say, on stderr, that another process holds a package root's lock and this command waits for it."""
    holder = f" by pid {pid}" if pid else ""
    click.echo(f"waiting: {root} is locked{holder} (another ascendfix command); Ctrl-C to stop", err=True)


class PatchReport(NamedTuple):
    """What an engine command found or did, for one profile and device."""

    selection: Selection
    statuses: list[PatchStatus]
    dry_run: bool | None = None
    recovered: list[str] | None = None  # status: what finishing an interrupted command wrote
    ok: bool = True  # the command's verdict: status, every patch applied; revert, none refused
    diff: str | None = None  # diff: the unified diff

    def to_json(self) -> dict[str, object]:
        """``{"profile", "device", ["dry_run"], ["recovered"], "patches": [...], ["diff"]}``."""
        extra: dict[str, object] = {} if self.dry_run is None else {"dry_run": self.dry_run}
        if self.recovered is not None:
            extra["recovered"] = self.recovered
        return {
            "profile": self.selection.profile.name,
            "device": self.selection.device,
            **extra,
            "patches": [s.to_json() for s in self.statuses],
            **({} if self.diff is None else {"diff": self.diff}),
        }


def selection(
    profile: str,
    device: str | None,
    roots: tuple[str, ...],
    python: str | None,
    only: tuple[str, ...] = (),
    variants: tuple[str, ...] = (),
    need_device: bool = True,
) -> Selection:
    """The engine's selection from the shared options."""
    prof = manifest.load_profile(profile)
    chosen = require_device(device) if need_device else device
    site = Site(prof, chosen, python, parse_roots(roots), manifest.parse_variants(prof, variants))
    return engine.select(site, tuple(only))


def render_statuses(statuses: list[PatchStatus]) -> None:
    """One line per patch (state, id, variant, action), its reason and fix under it, warnings on stderr.

    Plain click styling, not rich: the engine's commands are the ones run on every node and in
    every build step, and start faster without rich's import.
    """
    for s in statuses:  # ids, reasons and warnings may carry names read from a state folder: cleaned
        action = f" ({s.action})" if s.action and s.action not in (Action.UNCHANGED, Action.SKIPPED) else ""
        variant = f" [{clean(s.variant)}]" if s.variant and s.variant != records.DEFAULT_VARIANT else ""
        variant += f" (the guide's {clean(s.guide)})" if s.guide else ""
        head = click.style(f"{s.state:15}", **STATE_STYLE.get(s.state, {}))
        click.echo(f"{head} {clean(s.id)}{variant}{action}")
        if s.reason:
            click.echo(" " * 16 + click.style(clean(s.reason), dim=True))
        if s.hint:
            click.echo(" " * 16 + click.style("fix:", bold=True) + " " + click.style(clean(s.hint), fg="cyan"))
        for w in s.warnings:
            click.echo(click.style("warning:", fg="yellow") + f" {clean(s.id)}: {clean(w)}", err=True)


@click.command()
@on_ray_cluster
@profile_option
@device_option()
@target_options
@only_option("patch")
@variant_option
@click.option("--dry-run", is_flag=True, help="Plan and verify, write nothing.")
@click.option("--strict", is_flag=True, help="Refuse files that are not a known original.")
@json_option
def apply(
    profile: str,
    device: str | None,
    python: str | None,
    roots: tuple[str, ...],
    only: tuple[str, ...],
    variants: tuple[str, ...],
    dry_run: bool,
    strict: bool,
    as_json: bool,
) -> int:
    """Apply the profile's patches for this device: all or nothing, idempotent."""
    sel = selection(profile, device, roots, python, only, variants)
    if dry_run:
        statuses = engine.dry_run(engine.plan(sel, strict))
    else:
        statuses = engine.apply(sel, strict=strict, on_wait=tell_lock_wait)
    report = PatchReport(sel, statuses, dry_run)

    def human(report: PatchReport) -> None:
        render_statuses(report.statuses)
        if dry_run:
            planned = sum(s.action == Action.WOULD_APPLY for s in report.statuses)
            click.echo(f"\n{planned} patch(es) would be applied (dry run)")
        else:
            wrote = sum(s.action in (Action.APPLIED, Action.SWITCHED, Action.ADOPTED) for s in report.statuses)
            click.echo(f"\n{wrote} patch(es) applied")

    return render(report, as_json, human)


@click.command()
@profile_option
@target_options
@only_option("patch")
@json_option
def revert(profile: str, python: str | None, roots: tuple[str, ...], only: tuple[str, ...], as_json: bool) -> int:
    """Restore every patched file byte for byte (any device's patches)."""
    sel = selection(profile, None, roots, python, only, need_device=False)
    statuses = engine.revert(sel, on_wait=tell_lock_wait)
    report = PatchReport(sel, statuses, ok=not any(s.action == Action.REFUSED for s in statuses))
    return render(report, as_json, lambda r: render_statuses(r.statuses))


@click.command()
@on_ray_cluster
@profile_option
@device_option()
@target_options
@json_option
def status(profile: str, device: str | None, python: str | None, roots: tuple[str, ...], as_json: bool) -> int:
    """Show each patch's state: applied, not-applied, hand-edited, not-applicable, drifted or partial."""
    sel = selection(profile, device, roots, python)
    statuses, recovered = engine.status_and_recovery(sel, on_wait=tell_lock_wait)
    done = all(s.state in (State.APPLIED, State.NOT_APPLICABLE) for s in statuses)
    report = PatchReport(sel, statuses, recovered=recovered, ok=done)

    def human(report: PatchReport) -> None:
        for note in report.recovered or ():
            click.echo(click.style("recovered:", fg="yellow") + f" {clean(note)}", err=True)
        render_statuses(report.statuses)

    return render(report, as_json, human)


@click.command()
@profile_option
@device_option()
@target_options
@only_option("patch")
@variant_option
@json_option
def diff(
    profile: str,
    device: str | None,
    python: str | None,
    roots: tuple[str, ...],
    only: tuple[str, ...],
    variants: tuple[str, ...],
    as_json: bool,
) -> int:
    """Show the unified diff of what apply would change (coloured on a terminal)."""
    sel = selection(profile, device, roots, python, only, variants)
    planned = engine.plan(sel)
    report = PatchReport(sel, engine.dry_run(planned), True, diff=engine.diff(planned))
    return render(report, as_json, _render_diff)


def _render_diff(report: PatchReport) -> None:
    """The diff for a person (coloured on a terminal; a pipe gets it byte for byte)."""
    text = report.diff or ""
    if not out().is_terminal:
        click.echo(text, nl=False)
        return
    for line in text.splitlines():
        style = "bold" if line.startswith(("---", "+++")) else ""
        style = style or {"+": "green", "-": "red", "@": "cyan"}.get(line[:1], "")
        out().print(f"[{style}]{escape(line)}[/]" if style else escape(line))
