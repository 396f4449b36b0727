"""``ray start`` / ``ray wait``: bring the cluster up the guide's way and check every node sees the same."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from ascendfix.cli.base import (
    device_option,
    err,
    escape,
    json_option,
    out,
    path_type,
    profile_option,
    render,
    wide,
)
from ascendfix.errors import UsageError
from ascendfix.profile import manifest
from ascendfix.profile.device import require_device


@click.group("ray")
def ray_group() -> None:
    """Start this node's Ray with the profile's environment; wait until every node is there and agrees."""


@ray_group.command("start", context_settings={"ignore_unknown_options": True})
@profile_option
@device_option()
@click.option("--no-preflight", is_flag=True, help="Start even if doctor's fail-level checks fail here.")
@click.argument("ray_args", nargs=-1, type=click.UNPROCESSED, metavar="(--head | --address HOST:PORT) [RAY OPTIONS]...")
def ray_start(profile: str, device: str | None, no_preflight: bool, ray_args: tuple[str, ...]) -> None:
    """Run `ray start` with the profile's environment, `ulimit -n` raised and this node's NPUs registered.

    --head adds the guide's --port 6166 --dashboard-host=0.0.0.0 --dashboard-port=8260 unless given;
    on npu, --resources gets {"NPU": N} (N from npu-smi) merged in. Every other option goes to
    `ray start` unchanged, which then replaces this process: --block, signals and the exit status are ray's.
    """
    import shlex

    from ascendfix.cli.run import render_env_notes
    from ascendfix.cluster import start as raystart
    from ascendfix.errors import RefusedError
    from ascendfix.job import preflight
    from ascendfix.profile import jobenv

    raystart.require_ray()
    prof = manifest.load_profile(profile)
    device = require_device(device)
    settings = jobenv.resolve_env(prof, device, os.environ)  # a device the profile lacks is bad input
    plan = raystart.plan(prof, device, ray_args, os.environ)
    if not no_preflight:
        failures = preflight.default_seams().doctor_failures(prof, device) or []
        for message in failures:
            err().print(f"[red]problem[/] (doctor): {escape(message)}")
        if failures:
            raise RefusedError(f"doctor found {len(failures)} problem(s) on this node; fix them or pass --no-preflight")
    render_env_notes(jobenv.env_notes(settings))
    for warning in plan.warnings:
        err().print(f"[yellow]warning:[/] {escape(warning)}")
    if plan.npu_source == "yours":
        err().print("[dim]resources[/] your --resources names NPU: kept as given")
    ulimit = jobenv.raise_nofile(prof.device(device).ulimit_nofile)
    if ulimit["wanted"] and ulimit["after"] < ulimit["wanted"]:
        hard = f"ulimit -n could be raised only to {ulimit['after']} (the hard limit)"
        err().print(f"[yellow]warning:[/] {hard}; the profile wants {ulimit['wanted']}")
    err().print(f"[dim]ascendfix: {escape(shlex.join(plan.argv))}[/]")
    raystart.exec_ray(plan.argv, jobenv.job_environment(settings, os.environ))


@ray_group.command("wait")
@profile_option
@device_option()
@click.option("--address", metavar="HOST:PORT", help="The cluster's head (default: RAY_ADDRESS, else the local one).")
@click.option("--nodes", type=click.IntRange(min=1), metavar="N", help="Wait for N alive nodes.")
@click.option(
    "--per-node", type=click.IntRange(min=1), metavar="K", help="Each with K NPUs (GPUs) [default: the profile's]."
)
@click.option("--for", "script", type=path_type(), help="N and K from the script's trainer.* overrides.")
@click.option("--timeout", type=click.FloatRange(min=0), default=600.0, show_default=True, metavar="SECONDS")
@json_option
def ray_wait(
    profile: str,
    device: str | None,
    address: str | None,
    nodes: int | None,
    per_node: int | None,
    script: Path | None,
    timeout: float,
    as_json: bool,
) -> None:
    """Wait until N nodes with K NPUs each are registered, then check every node sees the same.

    Compares, as a Ray task pinned to each node sees them: the profile's variables, `ulimit -n`, the
    node's NPU (GPU) resource and the patch status. Exit 0 when ready, 1 naming what lacks or differs.
    """
    from ascendfix.cluster import start as raystart
    from ascendfix.cluster import wait as raywait
    from ascendfix.job import preflight

    raystart.require_ray()
    if (nodes is None) == (script is None):
        raise UsageError("ray wait: give --nodes N [--per-node K], or --for SCRIPT")
    if script is not None and per_node is not None:
        raise UsageError(f"--per-node: --for {script} reads it from the script's {raywait.PER_NODE}")
    prof = manifest.load_profile(profile)
    device = require_device(device)
    prof.device(device)
    if script is not None:
        if not script.is_file():
            raise UsageError(f"--for {script}: no such file")
        nodes, per_node = raywait.job_size(preflight.scan_overrides([str(script)], os.environ), f"--for {script}")
    per_node = per_node or prof.device(device).accelerators_per_node
    if per_node is None:
        raise UsageError(f"--per-node: profile {prof.name} has no accelerators_per_node; pass --per-node K")
    unit = raystart.RESOURCE[device]
    live = err().is_terminal and not as_json

    def progress(now: raywait.Arrival) -> None:
        err().file.write(f"\r\x1b[2Kascendfix ray wait: {now.line()}")
        err().file.flush()

    arrived = raywait.wait(address, nodes, per_node, unit, timeout, progress if live else None)
    if live:
        err().file.write("\r\x1b[2K")
    report = raywait.WaitReport(address or "auto", arrived, timeout_s=timeout)
    if arrived.ready:
        status_argv = ["status", "--profile", profile, "--device", device, "--json"]
        report = raywait.check(prof, device, address, arrived, per_node, 60.0, status_argv, timeout)
    render(report, as_json, _render_ray_wait)
    sys.exit(0 if report.ok else 1)


def _render_ray_wait(report) -> None:
    from rich.table import Table

    console = out() if out().is_terminal else wide()
    if not report.arrival.ready:
        console.print(f"[bold red]not ready after {report.timeout_s:g} s:[/] {report.arrival.line()}")
        return
    unit = report.arrival.unit
    table = Table("node", "host", unit, "ulimit -n", "patches", box=None, title="Ray nodes", title_justify="left")
    for node in report.nodes:
        states = sorted({state for state, _ in node.patches.values()})
        table.add_row(
            escape(node.label),
            escape(node.hostname),
            f"{node.resources.get(unit, 0):g}",
            escape(node.ulimit_nofile),
            escape(node.error or ", ".join(states) or "-"),
        )
    console.print(table)
    if report.differences:
        diffs = Table("node", "what", "value there", "other nodes (or wanted)", "why", box=None, title_justify="left")
        diffs.title = "[bold red]nodes that lack something or differ[/]"
        for d in report.differences:
            diffs.add_row(escape(d.node), escape(d.item), escape(d.value), escape(d.others), escape(d.why))
        console.print(diffs)
        console.print(f"[bold red]not ready:[/] {report.arrival.line()}, {len(report.differences)} difference(s)")
    else:
        console.print(f"[green]ready:[/] {report.arrival.line()}, every node sees the same")
