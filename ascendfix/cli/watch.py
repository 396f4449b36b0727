"""``watch``: follow the jobs on a Ray cluster and name a stalled rank while it is stalled."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import click

from ascendfix.cli.base import escape, exit_code, json_option, out
from ascendfix.errors import SCHEMA

STACK_LINES = 12  # frames shown per stack for a person (the JSON has them all)


@click.command("watch")
@click.option("--address", metavar="HOST:PORT", help="The cluster's head (default: RAY_ADDRESS, else the local one).")
@json_option
def watch(address: str | None, as_json: bool) -> int:
    """Follow the jobs on the Ray cluster and name a stalled rank live, with its Python stack.

    Learns each worker method's durations and quiet stretches from the run itself; when every rank
    of one call has stopped progressing (no CPU, the same stack, its NPU's AICore at 0 % where
    npu-smi answers) past that bound, names the rank(s) that hold it up and the ranks waiting on
    them. A busy long tail is not a stall. Started before any job, waits for the first; ends when
    the jobs it followed have ended. Exit 0 when it named nothing, 1 when it named a stall, 2 when
    no cluster answers. --json prints one event a line.
    """
    from ascendfix.cluster.start import require_ray
    from ascendfix.cluster.watch import follow

    require_ray()
    emit = _json_line if as_json else show_event
    return exit_code(follow.follow(address, emit))


def event_ok(event: dict[str, Any]) -> bool:
    """An event's ``ok``: false for a stall, and for the end of a watch that named one."""
    return event["event"] != "stall" and not (event["event"] == "ended" and event.get("stalls"))


def _json_line(event: dict[str, Any]) -> None:
    click.echo(json.dumps({"schema": SCHEMA, "ok": event_ok(event), **event}), nl=True)


def _ago(since: str) -> str:
    seconds = (datetime.now(timezone.utc) - datetime.fromisoformat(since)).total_seconds()
    return f"{seconds:.0f} s"


def event_lines(event: dict) -> list[str]:
    """One event as rich-markup lines for a person: one line, or a short block for a stall."""
    kind = event["event"]
    if kind == "started":
        return [f"[dim]watching {escape(event['address'])} (a poll every {event['poll_s']:g} s)[/]"]
    if kind == "job":
        what = f"job {escape(event['job_id'])} {event['state']}"
        if event["state"] == "running":
            what += f": {escape(event['entrypoint'][:120])} (driver pid {event['driver_pid']})"
        return [what]
    if kind == "budget":
        return [
            f"[dim]learned {escape(event['method'])}: calls up to {event['usual_s']:g} s; "
            f"a stall after {event['bound_s']:g} s without progress[/]"
        ]
    if kind == "ended":
        why = f" ({escape(event['error'])})" if event.get("error") else ""
        return [f"watch ended: {event['jobs']} job(s) followed, {event['stalls']} stall(s) named{why}"]
    if kind != "stall":
        return [escape(json.dumps(event))]
    lines = [
        f"[bold red]STALL[/] {escape(event['method'])}: no rank has progressed since "
        f"{escape(event['since'])} ({_ago(event['since'])})"
    ]
    for c in event["culprits"]:
        where = f"pid {c['pid']} · {c['node_ip']} · node {c['node_id'][:8]} · {c['actor']}{_npu(c.get('npu'))}"
        lines.append(f"  [bold]culprit[/]  {escape(where)}")
        lines += _stack(c["stack"])
    if not event["culprits"]:
        lines.append("  [bold]culprit[/]  not told apart: every rank waits alike (see their stacks)")
    groups: dict[str, list[dict]] = {}
    for w in event["waiting"]:
        groups.setdefault(w["stack"], []).append(w)
    for stack, ranks in groups.items():
        who = ", ".join(f"{w['actor'] or w['pid']} (pid {w['pid']}, {w['node_ip']})" for w in ranks[:4])
        more = f" and {len(ranks) - 4} more" if len(ranks) > 4 else ""
        lines.append(f"  waiting  {len(ranks)} rank(s) in this stack: {escape(who)}{more}")
        lines += _stack(stack)
    return lines


def _npu(npu: dict | None) -> str:
    """The rank's NPU evidence for its line: ``· NPU 1 AICore 0 %``, or why it was not read."""
    if not npu:
        return ""
    if "aicore_pct" in npu:
        return f" · NPU {npu['id']} AICore {npu['aicore_pct']} %"
    return f" · NPU use not read ({npu.get('error', '?')})"


def _stack(stack: str) -> list[str]:
    frames = stack.splitlines()
    shown = [f"      [dim]{escape(f)}[/]" for f in frames[:STACK_LINES]]
    return shown + ([f"      [dim]… {len(frames) - STACK_LINES} more frames[/]"] if len(frames) > STACK_LINES else [])


def show_event(event: dict) -> None:
    """Print one event for a person, as it happens."""
    for line in event_lines(event):
        out().print(line)
