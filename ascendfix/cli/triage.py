"""``triage``: after a failure, the first one named, with its cause and fix; the rest counted."""

from __future__ import annotations

from pathlib import Path

import click

from ascendfix.cli.base import escape, json_option, out, path_type, render


@click.command("triage")
@click.argument("logdir", required=False, type=path_type())
@json_option
def triage_command(logdir: Path | None, as_json: bool) -> int:
    """Name the first failure in LOGDIR (default: the Ray session's logs) and count what followed.

    Reads Ray session logs, ascendfix run folders, CANN plog folders and a collected dmesg -T or
    kern.log. Exits 1 when something failed or a file could not be read, 0 when nothing did.
    """
    from ascendfix.job import triage

    result = triage.triage(logdir or triage.DEFAULT_LOGDIR)

    def human(data: triage.Triage) -> None:
        console = out()
        read = f"{data.files} files ({data.bytes_read / 2**20:.1f} MB) in {data.logs}"
        for path, why in data.skipped:
            console.print(f"[bold yellow]not read[/]  {escape(path)}: {escape(why)}")
        if data.skipped:
            unread = f"{len(data.skipped)} files or folders could not be read: run triage as a user who can read them"
            console.print(f"[yellow]{escape(unread)}[/]")
        for node, seconds in data.clock_skew.items():
            side = "behind" if seconds > 0 else "ahead of"
            skew = f"clock skew: node {node}'s stamps are {abs(seconds):.0f} s {side} the other nodes'"
            console.print(f"[yellow]{escape(skew)} for the same collective; its times are corrected[/]")
        for d in data.discounted:
            console.print(f"[dim]discounted  {escape(d.code)} at {escape(d.file)}:{d.line}: {escape(d.why)}[/]")
        first = data.first
        if first is None:
            console.print(f"no failure found: read {escape(read)}")
            return
        where = [first.time.isoformat(sep=" ") if first.time else "time unknown"]
        where += [f"node {first.node or '?'}", f"pid {first.pid if first.pid is not None else '?'}"]
        if first.rank is not None:
            where.append(f"rank {first.rank}")
        console.print(f"[bold red]first failure[/]  {escape(' · '.join(where))}")
        console.print(f"  [bold]{escape(first.code)}[/]  {escape(first.message)}")
        console.print(f"  at {escape(first.file)}:{first.line}")
        console.print(f"  [bold]cause[/]   {escape(first.fingerprint.cause)}")
        console.print(f"  [bold]fix[/]     {escape(first.fingerprint.fix)}")
        console.print(f"  [dim]source  {escape(first.fingerprint.source)}[/]")
        counts = ", ".join(f"{code} ×{n}" for code, n in data.by_code.items())
        then = f"then {data.later} more, its likely consequences" if data.later else "nothing failed after it"
        console.print(f"{then}; lines by code: {escape(counts)}")
        console.print(f"[dim]read {escape(read)}[/]")

    return render(result, as_json, human)
