"""The live line under a job's output on a terminal, and the run summary table."""

from __future__ import annotations

import time
from typing import Any

from ascendfix.cli.base import err, escape


def num(value: float | None, digits: int = 3) -> str:
    """A figure for a table: fixed digits, or '-' when unknown."""
    return "-" if value is None else f"{value:.{digits}f}"


class RichStatus:
    """The live line under the job's output on a terminal's stderr: cleared before each chunk, redrawn
    after it at most ten times a second, and on idle ticks (so the elapsed time moves)."""

    def __init__(self, total: int | None):
        self.total, self.text = total, "waiting for the first step"
        self.shown: str | None = None  # the line on screen
        self.started = self.last_draw = time.monotonic()

    def update(self, step: Any, parser: Any) -> None:
        """Show ``step``: its number (of the total), reward, step time and throughput."""
        from ascendfix.job import metrics

        total = parser.stats.total_steps or self.total
        reward = step.get(metrics.REWARD)
        parts = [
            f"step {step.step}" + (f"/{total}" if total else ""),
            f"reward {num(reward if reward is not None else step.get(metrics.SCORE))}",
            f"{num(step.get(metrics.STEP_TIME), 1)} s/step",
            f"{num(metrics.throughput(step)['e2e_tps'], 2)} tok/s/dev",
        ]
        self.text = " · ".join(parts)

    def clear(self) -> None:
        """Erase the line (before the job's next output)."""
        if self.shown is not None:
            err().file.write("\r\x1b[2K")
            self.shown = None

    def draw(self) -> None:
        """Paint the line, at most ten times a second."""
        from rich.text import Text

        now = time.monotonic()
        if self.shown is None and now - self.last_draw < 0.1:
            return
        elapsed = int(now - self.started)
        line = Text.from_markup(f"[bold cyan]ascendfix[/] {escape(self.text)}")
        line.append(f" · {elapsed // 3600}h{elapsed // 60 % 60:02d}m")
        line.truncate(max(err().width - 1, 10))
        if line.plain == self.shown:
            return
        self.clear()
        err().print(line, end="")
        err().file.flush()
        self.shown, self.last_draw = line.plain, now


def report_table(console: Any, data: dict[str, Any], sparks: dict[str, str]) -> None:
    """One run's report (``report.report_data``) as a two-column table."""
    from rich.table import Table

    table = Table(box=None, show_header=False, title=f"[bold]{escape(data['run'])}[/]", title_justify="left")
    table.add_column(style="dim")
    table.add_column()
    p = data["parse"]
    span = "" if not data["steps_seen"] else f" (step {data['first_step']} → {data['last_step']}"
    span += f" of {data['total_steps']})" if span and data["total_steps"] else (")" if span else "")
    table.add_row("steps seen", f"{data['steps_seen']}{span}, {data['steady_steps']} steady")
    table.add_row(
        "parsed",
        (f"{p['files']} file(s), " if p["files"] else "")
        + f"{p['step_lines']} step lines, {p['duplicates']} duplicates, {p['skipped']} skipped",
    )

    r = data["reward_mean"]
    table.add_row("reward mean", f"{num(r['first'])} → {num(r['last'])}  {sparks.get('reward', '')}")
    for key in ("response_length", "prompt_length"):
        v = data[key]
        table.add_row(
            key.replace("_", " "),
            f"{num(v['first'], 1)} → {num(v['last'], 1)} (median {num(v['median'], 1)})  {sparks.get(key, '')}",
        )
    shares = []
    for name, share in data["timing_share"].items():
        within = [f"{part} {percent(v)}" for part, v in data["timing_share_within_gen"].items() if v is not None]
        shares.append(
            f"{name} {percent(share)}" + (f" (of which {', '.join(within)})" if name == "gen" and within else "")
        )
    table.add_row("step time", f"{num(data['timing_s/step'], 2)} s  {sparks.get('timing_s/step', '')}")
    table.add_row("time share", " · ".join(shares))
    t = data["throughput"]
    world = "-" if t["world_size"] is None else f"{t['world_size']:.0f}"
    table.add_row(
        "tokens/s/device",
        f"e2e {num(t['e2e_tps'])} · update {num(t['update_tps'])} · vllm {num(t['vllm_tps'])} (world {world})"
        f"  {sparks.get('e2e_tps', '')}",
    )
    for key, value in data["metrics"].items():
        table.add_row(escape(key), f"{num(value)}  {sparks.get(key, '')}")
    console.print(table)
    console.print(f"[dim]{basis_note(data)}[/]")
    if len(data["segments"]) > 1:
        console.print(escape(segments_note(data)), soft_wrap=True)


def segments_note(data: dict[str, Any]) -> str:
    """Which segment of a log holding several runs (a resumption) the figures are of, and the others."""
    parts = []
    for seg in data["segments"]:
        where = f" in {seg['file']}" if seg["file"] else ""
        mark = " (reported)" if seg["segment"] == data["segment"] else ""
        parts.append(f"{seg['segment']}: steps {seg['first_step']}–{seg['last_step']}{where}{mark}")
    return (
        f"this log holds {len(data['segments'])} runs (a step logged again with other values: "
        + "a resumed or restarted run): "
        + "; ".join(parts)
        + "; figures are of segment "
        + f"{data['segment']}, --segment N for another"
    )


def percent(share: float | None) -> str:
    """A share as a percentage, or '-' when unknown."""
    return "-" if share is None else f"{share * 100:.1f}%"


def basis_note(data: dict[str, Any]) -> str:
    """What the figures are taken over: the steady steps, or every step seen when there is none yet."""
    steady, seen = data["steady_steps"], data["steps_seen"]
    shares = "time shares are of their total step time"
    first = "step 1" if data["first_step"] in (1, None) else f"step {data['first_step']}, the resumed run's first"
    if steady:
        return f"figures are medians over {steady} steady step(s) (not {first}, not validating or saving); {shares}"
    over = f"step {data['first_step']}'s own" if seen == 1 else f"medians over all {seen} steps seen"
    return f"no steady step yet (not {first}, not validating or saving): figures are {over}, warm-up included; {shares}"


def sparks(run: Any, extra: tuple[str, ...]) -> dict[str, str]:
    """Sparklines of the report's curves that have more than one point."""
    from ascendfix.job import report

    keys = ("reward", "response_length", "prompt_length", "timing_s/step", "e2e_tps", *extra)
    curves = {k: report.curve(run, k) for k in keys}
    return {k: report.sparkline([v for _, v in c]) for k, c in curves.items() if len(c) > 1}
