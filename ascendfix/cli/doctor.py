"""``doctor``: is this machine ready for the profile's job, and what exactly to do if not."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import click

from ascendfix.cli.base import (
    clean,
    device_option,
    json_option,
    path_type,
    profile_option,
    render,
    target_options,
)
from ascendfix.cli.fanout import on_ray_cluster
from ascendfix.doctor.model import DoctorReport
from ascendfix.errors import UsageError
from ascendfix.profile import manifest
from ascendfix.site import Site, parse_roots
from ascendfix.states import Status

MARK = {
    Status.OK: click.style("✓", fg="green"),
    Status.WARN: click.style("!", fg="yellow"),
    Status.FAIL: click.style("✗", fg="red"),
    Status.SKIP: click.style("-", dim=True),
}


def _render_report(report: DoctorReport, verbose: bool) -> None:
    """The report for a person: a title, each group's checks with their mark, messages and fix, a verdict;
    the details (whys, long lists) with ``-v``.

    Plain click styling, not rich (as the engine's commands): doctor is the first command run on a
    fresh machine and starts faster without rich's import. The text has no markup to escape; what
    came from files is cleaned of terminal control, and click.echo drops the colours when stdout is
    not a terminal.
    """
    from ascendfix.doctor.registry import CHECKS

    dim, bold = functools.partial(click.style, dim=True), functools.partial(click.style, bold=True)
    lines = [
        f"{bold('ascendfix doctor')} — profile {report.profile}, device {report.device} "
        + dim(f"({report.device_reason})")
    ]
    group = None
    for result in report.checks:
        if CHECKS[result.id].group != group:
            group = CHECKS[result.id].group
            lines.append("\n" + bold(group))
        head, *rest = [clean(m) for m in result.messages] or [""]  # messages quote what files hold
        lines.append(f"  {MARK[result.status]} {result.title}" + (f" {dim('—')} {head}" if head else ""))
        if result.status != Status.OK or verbose:
            lines += [f"      • {line}" for line in rest]
        if verbose:
            lines += [f"        {line}" for line in result.details]
        elif result.details and result.status != Status.OK:
            lines.append("      " + dim(f"(-v shows {len(result.details)} more line(s))"))
        if result.fix and result.status in (Status.WARN, Status.FAIL):
            for i, line in enumerate(clean(result.fix).splitlines()):
                lines.append(f"      {bold('fix:') if i == 0 else '    '} {click.style(line, fg='cyan')}")
    n = report.summary
    verdict = (
        click.style("not ready", fg="red")
        if n[Status.FAIL]
        else click.style("ready, with warnings", fg="yellow")
        if n[Status.WARN]
        else click.style("ready", fg="green")
    )
    counts = (
        f"{n[Status.FAIL]} ✗ problem(s), {n[Status.WARN]} ! warning(s), {n[Status.OK]} ✓ ok, "
        f"{n[Status.SKIP]} not checkable here"
    )
    lines.append(f"\n{verdict}: {counts}")
    click.echo("\n".join(lines))


@click.command()
@on_ray_cluster
@profile_option
@device_option(help="npu or cuda (default: detected, else the profile's first).")
@target_options
@click.option("--ascend-home", type=path_type(), help="Ascend install root [default: /usr/local/Ascend].")
@click.option("--only", multiple=True, metavar="CHECK", help="Run only these checks (repeatable or a,b; see --list).")
@click.option("--list", "list_checks", is_flag=True, help="List the checks and exit.")
@click.option("--strict", is_flag=True, help="Exit 1 on warnings too.")
@json_option
@click.option("-v", "--verbose", is_flag=True, help="Show every detail: passing checks' lines, whys, long lists.")
def doctor(
    profile: str,
    device: str | None,
    python: str | None,
    roots: tuple[str, ...],
    ascend_home: Path | None,
    only: tuple[str, ...],
    list_checks: bool,
    strict: bool,
    as_json: bool,
    verbose: bool,
) -> int:
    """Is this machine ready for the profile's job? Every problem with the command that fixes it."""
    from ascendfix.doctor import context, runner
    from ascendfix.doctor.registry import CHECKS
    from ascendfix.profile import device as devices

    if list_checks:
        rows = [{"id": c.id, "title": c.title} for c in CHECKS.values()]
        listing = {"ok": True, "checks": rows}
        return render(listing, as_json, lambda _: click.echo("\n".join(f"{r['id']:10} {r['title']}" for r in rows)))
    only = tuple(check for value in only for check in value.split(",") if check)  # --only a,b as the image uses
    runner.select(only)  # unknown ids are bad input before anything runs
    prof = manifest.load_profile(profile)
    if device is not None:
        prof.device(device)
    if python is not None and not (Path(python).is_file() and os.access(python, os.X_OK)):
        raise UsageError(f"--python {python}: no such executable")
    if ascend_home is not None and not ascend_home.is_dir():
        what = "not a folder" if ascend_home.exists() else "no such folder"
        raise UsageError(f"--ascend-home {ascend_home}: {what}; give the Ascend install root (/usr/local/Ascend)")
    home = ascend_home or devices.ASCEND_HOME
    chosen, why = (device, f"--device {device} given") if device else context.choose_device(prof, home)
    ctx = context.Context(Site(prof, chosen, python, parse_roots(roots)), why, home)
    report = runner.run(ctx, only)._replace(strict=strict)
    return render(report, as_json, lambda r: _render_report(r, verbose))
