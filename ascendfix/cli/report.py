"""``report`` and ``compare``: throughput read from logs, as the guide computes it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click

from ascendfix.cli.base import escape, json_option, out, path_type, render
from ascendfix.cli.progress import num, report_table, sparks

CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@click.command("report")
@click.argument("paths", nargs=-1, required=True, type=path_type())
@json_option
@click.option(
    "--plot", type=path_type(dir_okay=False), help="Write a chart: a .png, .svg or .pdf file (needs matplotlib)."
)
@click.option("--metrics", "extra", default="", help="More metric keys to report, comma-separated.")
@click.option(
    "--segment",
    type=click.IntRange(min=1),
    help="Of a log holding several runs (a resumption logs steps again), report run N (default: the last).",
)
def report_command(paths: tuple[Path, ...], as_json: bool, plot: Path | None, extra: str, segment: int | None) -> int:
    """Report each run: a log file, a Ray session logs directory, or a verl JSONL file."""
    from ascendfix.job import report

    keys = tuple(k.strip() for k in extra.split(",") if k.strip())
    if plot is not None:
        report.plot_format(plot)  # before any log is read
    runs = [report.load_run(p, segment) for p in paths]
    if plot is not None:
        report.plot(runs, plot)

    def human(data: dict[str, Any]) -> None:
        for run, one in zip(runs, data["runs"], strict=True):
            report_table(out(), one, sparks(run, keys))
        if plot is not None:
            out().print(f"plot written to {escape(str(plot))}")

    return render({"ok": True, "runs": [report.report_data(r, keys) for r in runs]}, as_json, human)


@click.command("compare")
@click.argument("baseline", type=path_type())
@click.argument("candidate", type=path_type())
@json_option
def compare_command(baseline: Path, candidate: Path, as_json: bool) -> int:
    """Compare CANDIDATE with BASELINE (e.g. NPU against H100) as the guide's 4.2 table: higher is better.

    Step time reads baseline/candidate, tokens/s candidate/baseline; the raw medians stay beside them.
    """
    from ascendfix.job import report

    def human(data: dict[str, Any]) -> None:
        from rich.table import Table

        caption = escape(
            f"baseline = {baseline}\ncandidate = {candidate}\nrelative: candidate vs baseline, higher is better for "
            "the candidate (the guide's 4.2); step time is baseline/candidate, the rest candidate/baseline; "
            "* a row of the guide's 4.2 table"
        )
        table = Table("metric", "baseline", "candidate", "relative", "as", box=None, caption=caption)
        table.caption_justify = "left"
        for row in data["rows"]:
            table.add_row(
                row["metric"] + (" *" if row["guide"] else ""),
                num(row["baseline"]),
                num(row["candidate"]),
                num(row["relative"], 2),
                row["formula"],
            )
        out().print(table)
        gap = data["reward_difference"]
        out().print(f"reward candidate − baseline over {gap['common_steps']} common steps: ", end="")
        out().print(f"mean {num(gap['mean'])}, max |Δ| {num(gap['max_abs'])}")
        for side in ("baseline", "candidate"):
            out().print(escape(_ran_line(side, data["ran"][side])), soft_wrap=True)

    data = report.compare_data(report.load_run(baseline), report.load_run(candidate))
    return render({"ok": True, **data}, as_json, human)


def _ran_line(side: str, ran: dict | None) -> str:
    """``baseline ran: profile P on cuda, no patches`` from its run.json, or that it has none."""
    if ran is None:
        return f"{side}: no run.json beside its log, so what it ran is not recorded"
    if ran["patches"] is None:
        patches = "patches not recorded"
    else:
        patches = f"patches {', '.join(ran['patches'])}" if ran["patches"] else "no patches"
    where = f"profile {ran['profile'] or '?'} on {ran['device'] or '?'}"
    return CONTROL.sub("", f"{side} ran: {where}, {patches} (its run.json)")
