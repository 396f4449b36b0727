"""``upgrade-check``: judge candidate releases against the profile before rebuilding the image."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ascendfix.cli.base import device_option, err, escape, json_option, out, profile_option, render
from ascendfix.profile import manifest, records

if TYPE_CHECKING:
    from ascendfix.patching.upgrade import UpgradeReport


@click.command("upgrade-check")
@profile_option
@device_option(help="npu or cuda (default: detected, else the profile's first).")
@click.option(
    "--with",
    "releases",
    multiple=True,
    metavar="DIST==VERSION|DIST=PATH",
    help="A release from the package index, or a local checkout, to judge (repeatable).",
)
@click.option(
    "--platform", metavar="TAG", help="Wheel platform tag (default: the device's, e.g. manylinux_2_28_aarch64)."
)
@json_option
def upgrade_check(
    profile: str, device: str | None, releases: tuple[str, ...], platform: str | None, as_json: bool
) -> int:
    """Judge an upgrade before rebuilding the image: each patch on the named releases, and the pins.

    Fetches each release with pip download --no-deps into the user's cache and judges it in memory,
    installing nothing. Exit 0 when every patch applies, is obsolete, unchanged or needs a checkout
    to be judged, and nothing conflicts; 1 otherwise; 2 on bad input or a release that does not exist.
    """
    from ascendfix.patching import upgrade
    from ascendfix.profile.device import detect_device

    prof = manifest.load_profile(profile)
    detected = detect_device()
    device = device or (detected if detected in prof.devices else next(iter(prof.devices)))
    with_ = upgrade.parse_with(prof, device, releases)
    report = upgrade.check(prof, device, with_, platform, tell=lambda what: click.echo(f"{what} ...", err=True))
    return render(report, as_json, _render)


def _render(report: UpgradeReport) -> None:
    from ascendfix.patching import upgrade

    style: dict[str, str] = {upgrade.APPLIES: "green", upgrade.OBSOLETE: "cyan", upgrade.REFUSED: "red"}
    asked = ", ".join(f"{dist} {what}" for dist, what in report.with_.items())
    where = f"{' or '.join(report.target.platforms)}, Python {report.target.python}"
    out().print(f"[bold]{escape(report.profile)}[/] on {report.device} with {escape(asked)} [dim]({where})[/]\n")
    for v in report.patches:
        variant = f" [{v.variant}]" if v.variant and v.variant != records.DEFAULT_VARIANT else ""
        sites = f", {v.sites} site(s)" if v.sites is not None else ""
        out().print(f"[{style.get(v.verdict, 'dim')}]{v.verdict:15}[/] {v.id}{escape(variant)}{sites}")
        if v.reason:
            out().print(f"                [dim]{escape(v.reason)}[/]")
    for c in report.conflicts:
        text = f"{escape(c.requirer)} requires {escape(c.requirement)}, not {escape(c.pinned)}"
        out().print(f"[red]conflict[/]        {text}")
    for a in report.accepted:
        state = "still needed" if a.needed else "[green]no longer needed[/]"
        text = f"{escape(a.requirer)} requires {escape(a.requirement)}; the stack pins {escape(a.pinned)}"
        out().print(f"[yellow]accepted[/]        {text}: {state}")
    for note in report.notes:
        err().print(f"[yellow]note:[/] {escape(note)}")
    failing = sum(v.verdict not in upgrade.PASSING for v in report.patches) + len(report.conflicts)
    if not report.ok:
        out().print(f"\n[red]{failing} problem(s)[/]")
    elif report.notes:
        out().print(f"\n[yellow]no problem found, but {len(report.notes)} requirement check(s) could not run[/]")
    else:
        out().print("\n[green]the upgrade keeps every patch and pin[/]")
