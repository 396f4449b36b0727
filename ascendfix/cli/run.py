"""``run`` and ``env``: the job with the profile's environment, live progress and a summary."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from ascendfix.cli.base import (
    clean,
    device_option,
    err,
    escape,
    json_option,
    note_json,
    out,
    path_type,
    profile_option,
    render,
    target_options,
    variant_option,
)
from ascendfix.cli.progress import RichStatus, report_table, sparks
from ascendfix.profile import manifest
from ascendfix.profile.device import require_device

if TYPE_CHECKING:
    from ascendfix.job.preflight import Finding


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@profile_option
@device_option()
@target_options
@variant_option
@click.option(
    "--no-preflight",
    is_flag=True,
    help="Skip doctor, the patch status and the checkpoint check (not the refusals of settings that clash).",
)
@click.option(
    "--smoke", is_flag=True, help="Run `ascendfix ray smoke` on the reachable Ray cluster first; refuse on a problem."
)
@click.option(
    "--no-watch", is_flag=True, help="Do not run `ascendfix watch` beside the job when its Ray cluster answers."
)
@click.option(
    "--on-stall",
    type=click.Choice(["report", "abort"]),
    default="report",
    show_default=True,
    help="When the watch names a stall: show it and record it in run.json, or also end the job (SIGTERM).",
)
@click.option("--log-dir", type=path_type(file_okay=False), help="Where train.log and run.json go.")
@click.option("--json-metrics", type=path_type(dir_okay=False), help="Write each step as JSONL.")
@click.option("-v", "--verbose", is_flag=True, help="Show the why behind each hint.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED, metavar="SCRIPT [ARGS]...")
def run(
    profile: str,
    device: str | None,
    python: str | None,
    roots: tuple[str, ...],
    variants: tuple[str, ...],
    no_preflight: bool,
    smoke: bool,
    no_watch: bool,
    on_stall: str,
    log_dir: Path | None,
    json_metrics: Path | None,
    verbose: bool,
    command: tuple[str, ...],
) -> int:
    """Run SCRIPT [ARGS...] (or any command) with the profile's environment, live progress and a summary.

    A non-executable *.sh script runs under bash. Exits with the command's exit status.
    Hints are one line each; -v adds the why behind each. Once the job's Ray cluster answers,
    `ascendfix watch` runs beside it: a stall it names is shown and recorded in run.json.
    """
    from ascendfix.job import launch, metrics, preflight, report
    from ascendfix.profile import jobenv
    from ascendfix.site import Site, parse_roots

    if json_metrics is not None:
        launch.require_folder("--json-metrics", json_metrics)  # bad input: said before anything runs
    prof = manifest.load_profile(profile)
    site = Site(prof, require_device(device), python, parse_roots(roots), manifest.parse_variants(prof, variants))
    prepared = launch.prepare(site, command, preflight.default_seams(smoke), full=not no_preflight)
    pre = prepared.preflight
    for finding in pre.hints:
        render_finding("[yellow]hint[/]", finding, verbose)
    render_env_notes(jobenv.env_notes(site.settings))
    for finding in pre.problems:
        render_finding("[red]problem[/]", finding, verbose)
    write_metrics = launch.metrics_writer(json_metrics) if json_metrics else None  # refused before the job begins
    job = launch.begin(prepared, log_dir)
    total = preflight.total_steps(prepared.overrides)
    status = RichStatus(total) if err().is_terminal and out().is_terminal else None

    def on_step(step: metrics.Step) -> None:
        if status is not None:
            status.update(step, parser)
        if write_metrics is not None:
            write_metrics(step)

    parser = metrics.StepParser(on_step=on_step)
    shown = " ".join(job.record["command"])
    err().print(f"[dim]ascendfix: {escape(shown)} → {escape(str(job.log_dir))}/train.log[/]")

    def on_watch(event: dict) -> None:
        from ascendfix.cli.watch import event_lines

        if event["event"] == "started":
            _notify(status, f"ascendfix: watching the job's Ray cluster at {event['address']}", "dim")
        elif event["event"] == "stall":
            _notify(status, "\n".join(event_lines(event)), None)
            if on_stall == "abort":
                _notify(status, "ascendfix: a stall was named: ending the job (--on-stall abort)")

    result = launch.finish(
        job, prepared.argv, parser, status, lambda m: _notify(status, m), not no_watch, on_stall, on_watch
    )
    if status is not None:
        status.clear()
    run_data = report.Run(str(job.log_dir), parser)
    if run_data.series.steps:
        report_table(err(), report.report_data(run_data), sparks(run_data, ()))
    else:
        err().print("[dim]ascendfix: no verl step lines seen[/]")
    how = f" after {result.forwarded}" + (" and SIGKILL" if result.killed else "") if result.forwarded else ""
    log = escape(str(job.log_dir))
    err().print(f"[dim]ascendfix: exit status {result.exit_status}{how}; log {log}/train.log[/]")
    return result.exit_status


def render_finding(kind: str, finding: Finding, verbose: bool) -> None:
    """One preflight finding on stderr: its line, the fix under it, and with ``-v`` the detail."""
    err().print(f"{kind} ({finding.source}): {escape(finding.message)}")
    for i, line in enumerate(finding.fix.splitlines()):  # a fix of several commands: one a line
        err().print(f"      {'[bold]fix:[/]' if i == 0 else '    '} [cyan]{escape(line)}[/]")
    if verbose and finding.detail:
        err().print(f"      [dim]{escape(finding.detail)}[/]")


def render_env_notes(notes: list[tuple[str, str]]) -> None:
    """Which variables the user's value won, and which must be set per site (stderr)."""
    for kind, message in notes:
        err().print(f"[dim]env[/] {escape(message)}" if kind == "env" else f"[yellow]hint[/] (env): {escape(message)}")


def _notify(status: RichStatus | None, message: str, style: str | None = "yellow") -> None:
    """A line (or, with no style, lines already in markup) on stderr, around the live status line."""
    if status is not None:
        status.clear()
    err().print(f"[{style}]{escape(message)}[/]" if style else message)


@click.command("env")
@profile_option
@device_option()
@click.option("--shell", type=click.Choice(["bash", "json"]), default="bash", show_default=True, callback=note_json)
@json_option
def env_command(profile: str, device: str | None, shell: str, as_json: bool) -> int:
    """Print the profile's environment: eval "$(ascendfix env)" before `ray start` or in a Dockerfile.

    When no device is given or detected, stdout carries `false` (so `eval` fails and a `set -e`
    script stops there) and the reason goes to stderr, exit 2. In a Dockerfile, where no device is
    visible, give `--device npu`.
    """
    import shlex

    from ascendfix.errors import UsageError
    from ascendfix.profile import jobenv

    prof = manifest.load_profile(profile)
    try:
        device = require_device(device)
    except UsageError:
        if not as_json and shell == "bash":
            click.echo("false  # ascendfix env: no device: see the error on stderr")
        raise
    settings = jobenv.resolve_env(prof, device, {})
    ulimit = prof.device(device).ulimit_nofile
    data = {
        "ok": True,
        "profile": prof.name,
        "device": device,
        "env": {s.name: s.value for s in settings if s.value is not None},
        "prepend": [s.name for s in settings if s.prepend],
        "site_specific": [{"name": s.name, "why": s.why} for s in settings if s.value is None],
        "ulimit_nofile": ulimit,
    }

    def bash(_: dict[str, object]) -> None:
        given = shlex.quote(clean(profile).replace("\n", " "))  # as given: the line runs again as it reads
        lines = [f"# ascendfix env --profile {given} --device {device}"]
        for s in settings:
            if s.value is None:
                lines.append(f"# {s.name} must be set per site: {s.why}")
            elif s.prepend:  # in front of what the variable holds, never in its place
                tail = jobenv.prepend_shell(s.name, "")
                lines.append(f'export {s.name}={shlex.quote(s.profile_value or "")}"{tail}"')
            else:
                lines.append(f"export {s.name}={shlex.quote(s.value)}")
        if ulimit:
            lines.append(f'ulimit -n {ulimit} 2>/dev/null || echo "ascendfix: cannot raise ulimit -n to {ulimit}" >&2')
        click.echo("\n".join(lines))

    return render(data, shell == "json" or as_json, bash)
