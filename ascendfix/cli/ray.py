"""``ray start`` / ``ray wait`` / ``ray smoke``: bring the cluster up the guide's way, check every node sees
the same, and run one real collective across every node before the job."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ascendfix.cli.base import (
    SECONDS,
    Listing,
    device_option,
    err,
    escape,
    json_option,
    make_console,
    out,
    path_type,
    profile_option,
    render,
    wide,
)
from ascendfix.errors import UsageError
from ascendfix.profile import manifest
from ascendfix.profile.device import require_device
from ascendfix.states import Status

if TYPE_CHECKING:
    from ascendfix.cluster.smoke.report import SmokeReport
    from ascendfix.cluster.wait import WaitReport
    from ascendfix.profile.records import Profile


@click.group("ray", cls=Listing)
def ray_group() -> None:
    """Start this node's Ray with the profile's environment, wait until every node agrees, smoke-test the links."""


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
    from ascendfix.site import Site

    prof = manifest.load_profile(profile)
    device = require_device(device)
    settings = jobenv.resolve_env(prof, device, os.environ)  # a device the profile lacks is bad input
    plan = raystart.plan(prof, device, ray_args, os.environ)
    raystart.require_ray()  # after the options: bad input is named first
    if not no_preflight:
        failures = preflight.doctor_failures(Site(prof, device)) or []
        for finding in failures:
            err().print(f"[red]problem[/] (doctor): {escape(finding.message)}")
        if failures:
            raise RefusedError(f"doctor found {len(failures)} problem(s) on this node; fix them or pass --no-preflight")
    render_env_notes(jobenv.env_notes(settings))
    for warning in plan.warnings:
        err().print(f"[yellow]warning:[/] {escape(warning)}")
    if plan.npu_source == "yours":
        err().print("[dim]resources[/] your --resources names NPU: kept as given")
    ulimit = jobenv.raise_nofile(prof.device(device).ulimit_nofile)
    wanted, after = ulimit["wanted"], ulimit["after"]
    if wanted and after is not None and after < wanted:
        hard = f"ulimit -n could be raised only to {after} (the hard limit)"
        err().print(f"[yellow]warning:[/] {hard}; the profile wants {wanted}")
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
@click.option("--timeout", type=SECONDS, default=600.0, show_default=True, metavar="SECONDS")
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
) -> int:
    """Wait until N nodes with K NPUs each are registered, then check every node sees the same.

    Compares, as a Ray task pinned to each node sees them: the profile's variables, `ulimit -n`, the
    node's NPU (GPU) resource and the patch status. Exit 0 when ready, 1 naming what lacks or differs.
    """
    from ascendfix.cluster import start as raystart
    from ascendfix.cluster import wait as raywait
    from ascendfix.job import preflight

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
    assert nodes is not None  # given, or read from --for (exactly one of them, checked above)
    per_node = per_node or prof.device(device).accelerators_per_node
    if per_node is None:
        raise UsageError(f"--per-node: profile {prof.name} has no accelerators_per_node; pass --per-node K")
    unit = raystart.RESOURCE[device]
    raystart.require_ray()  # after the options: bad input is named first
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
    return render(report, as_json, _render_ray_wait)


def _render_ray_wait(report: WaitReport) -> None:
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
        differ = sum(d.why == "differs" for d in report.differences)
        lacks = len(report.differences) - differ
        counts = [f"{lacks} shortfall(s)"] * bool(lacks) + [f"{differ} difference(s)"] * bool(differ)
        console.print(f"[bold red]not ready:[/] {report.arrival.line()}, {', '.join(counts)}")
    else:
        console.print(f"[green]ready:[/] {report.arrival.line()}, every node sees the same")


@ray_group.command("smoke")
@profile_option
@device_option()
@click.option("--address", metavar="HOST:PORT", help="The cluster's head (default: RAY_ADDRESS, else the local one).")
@click.option("--nodes", type=click.IntRange(min=1), metavar="N", help="The cluster must have N alive nodes.")
@click.option("--for", "script", type=path_type(), help="N and the NPUs (GPUs) per node from the script's trainer.*.")
@click.option(
    "--backend",
    type=click.Choice(["gloo", "device", "all"]),
    default="all",
    show_default=True,
    help="gloo: the node checks and the CPU channel; device: the hccl (nccl) channel; all: both.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=300.0,
    show_default=True,
    metavar="SECONDS",
    help="The whole smoke's wall time (the device collective needs 150 s of it for HCCL to name a broken peer).",
)
@click.option("--size", "size_mb", type=click.FloatRange(min=0.001), default=64.0, show_default=True, metavar="MB")
@click.option(
    "--min-busbw",
    type=click.FloatRange(min=0, min_open=True),
    metavar="GBPS",
    help="Fail a node whose hccl (nccl) all_reduce bus bandwidth is below GBPS GB/s "
    "[default on npu: half the NPU ports' speed that hccn_tool reports; none on cuda].",
)
@json_option
def ray_smoke(
    profile: str,
    device: str | None,
    address: str | None,
    nodes: int | None,
    script: Path | None,
    backend: str,
    timeout: float,
    size_mb: float,
    min_busbw: float | None,
    as_json: bool,
) -> int:
    """Check every node's NICs, then run real collectives across every node: a node that fails is named.

    Per node: the interface each *_SOCKET_IFNAME (or HCCL_IF_IP) selects is up with an address, and
    the route to the head leaves by it; on npu, HCCL's ports are reserved, and hccn_tool's port, IP
    and TLS switch of every NPU. With --for, the job's placement (one STRICT_PACK group per node, as
    verl asks). Then gloo all_reduce, one rank per node, and hccl (nccl) all_reduce, all_gather,
    reduce_scatter and all_to_all over three sizes, one rank per NPU (GPU), checked and timed (bus
    bandwidth as nccl-tests computes it). The gloo channel, and the device one when it fails, stalls
    or is below the floor (--min-busbw), is then tried pair by pair to name the node whose link is bad.
    --timeout bounds it all: a pair it left no time for is untried, not failed, and the report then says
    which, the nodes the failing pairs point at, and the --timeout that would try them.
    Exit 0 when every node and collective passed, 1 naming each node that did not.
    """
    from ascendfix.cluster import start as raystart
    from ascendfix.cluster.smoke import driver as raysmoke

    prof = manifest.load_profile(profile)
    device = require_device(device)
    nodes, per_node = _job_size(prof, device, nodes, script)
    raystart.require_ray()  # after the options: bad input is named first
    place = per_node if script is not None else None
    report = raysmoke.smoke(prof, device, address, nodes, per_node, backend, timeout, size_mb, place, min_busbw)
    return render(report, as_json, _render_ray_smoke)


def _job_size(prof: Profile, device: str, nodes: int | None, script: Path | None) -> tuple[int, int | None]:
    """--nodes N (the profile's accelerators per node), or both from --for SCRIPT."""
    from ascendfix.cluster import wait as raywait
    from ascendfix.job import preflight

    if (nodes is None) == (script is None):
        raise UsageError("ray smoke: give --nodes N, or --for SCRIPT")
    prof.device(device)
    if nodes is not None:
        return nodes, prof.device(device).accelerators_per_node
    assert script is not None  # exactly one of the two (checked above)
    if not script.is_file():
        raise UsageError(f"--for {script}: no such file")
    return raywait.job_size(preflight.scan_overrides([str(script)], os.environ), f"--for {script}")


SMOKE_WIDTH = 100


def _render_ray_smoke(report: SmokeReport) -> None:
    from rich.table import Table

    console = out() if out().is_terminal else wide()
    narrow = make_console(width=min(console.width, SMOKE_WIDTH))  # the tables fit 100 columns
    marks = {Status.OK: "[green]ok[/]", Status.WARN: "[yellow]warn[/]", Status.FAIL: "[red]fail[/]"}
    for node in report.nodes:
        table = Table(box=None, show_header=False, title_justify="left", pad_edge=False)
        table.title = f"[bold]{escape(node.label)}[/] {escape(node.hostname)}"
        table.add_column("status", no_wrap=True)
        table.add_column("item", no_wrap=True, max_width=28)
        table.add_column("value", max_width=24, overflow="fold")
        table.add_column("detail", overflow="fold")
        for c in node.checks:
            table.add_row(marks.get(c.status, escape(c.status)), escape(c.item), escape(c.value), escape(c.message))
        narrow.print(table)
    if report.collectives:
        done = Table("backend", "op", "bytes", "", "busbw GB/s", "slowest node", box=None, title_justify="left")
        done.title = "Collectives"
        for run in report.collectives:
            bw = "-" if run.busbw_gbps is None else f"{run.busbw_gbps:.2f}"
            mark = marks[Status.OK if run.ok else Status.FAIL]
            done.add_row(run.backend, run.op, str(run.bytes), mark, bw, escape(run.slowest or "-"))
        narrow.print(done)
    if report.busbw_floor:
        floor = report.busbw_floor
        console.print(f"busbw floor: {floor.busbw_gbps:g} GB/s ({escape(floor.source)})")
    problems = report.problems
    for p in problems:
        if p.node_id:
            where = f"{p.ip} {p.node_id[:8]} ({p.hostname}) {p.item}"
            console.print(f"[red]problem[/] {escape(where)}: {escape(p.message)}")
        else:
            console.print(f"[red]problem:[/] {escape(p.message)}")
    if report.ok:
        console.print(f"[green]smoke passed:[/] {len(report.nodes)} node(s), {len(report.collectives)} collective(s)")
    else:
        failed = sum(not n.ok for n in report.nodes)
        console.print(f"[bold red]smoke failed:[/] {failed} of {len(report.nodes)} node(s), {len(problems)} problem(s)")
