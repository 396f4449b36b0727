"""Run reports and comparisons: parsed steps in, plain dicts (and an optional PNG) out."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from ascendfix.errors import AscendfixError, UsageError
from ascendfix.job import metrics
from ascendfix.job.metrics import Segment, Series, Step, StepParser

SPARK = "▁▂▃▄▅▆▇█"
CURVES = {
    "reward": metrics.REWARD,
    "response_length": metrics.RESPONSE_LENGTH,
    "prompt_length": metrics.PROMPT_LENGTH,
    "timing_s/step": metrics.STEP_TIME,
    "e2e_tps": metrics.E2E,
}
# The guide's 4.2 table (candidate relative to baseline, higher is better for the candidate), then reward.
# metric: (label, lower is better) -- a lower-is-better figure is compared as baseline / candidate.
COMPARED = {
    "timing_s/step": ("端到端时间 step time", True),
    "e2e_tps": ("端到端吞吐 e2e tokens/s", False),
    "update_tps": ("训练吞吐 update tokens/s", False),
    "vllm_tps": ("推理吞吐 vllm tokens/s", False),
    "reward": ("reward mean", False),
}
GUIDE_ROWS = ("timing_s/step", "e2e_tps", "update_tps", "vllm_tps")


@dataclass
class Run:
    """The parsed steps of one run and where they came from: one segment of its log (the latest by default)."""

    label: str
    parser: StepParser
    segment: int | None = None  # 1-based, as ``--segment`` names it; None: the latest

    @cached_property
    def segments(self) -> list[tuple[Segment, Series]]:
        """The log's segments that hold a training step, as they were written, each with its series."""
        every = ((s, Series.of(s.steps.values())) for s in self.parser.ordered)
        return [(segment, series) for segment, series in every if series.steps]

    @property
    def chosen(self) -> int:
        """The segment reported, 1-based."""
        return self.segment or len(self.segments) or 1

    @property
    def series(self) -> Series:
        """The run's training steps (of the chosen segment)."""
        return self.segments[self.chosen - 1][1] if self.segments else Series([])


def load_run(path: Path, segment: int | None = None) -> Run:
    """Parse a log file, a Ray session logs directory (recursively) or a JSONL file; one without a verl
    training step is an AscendfixError (exit 1) naming it. ``segment`` picks one run of a log that holds
    several (a step number that comes again with other values: a resumption); by default the latest."""
    if not path.exists():
        raise UsageError(f"{path}: no such file or directory")
    files = metrics.log_files(path)
    if not files:
        raise UsageError(f"{path}: no log files (*.log, *.out, *.err, *.jsonl, *.txt) in this directory")
    run = Run(str(path), metrics.parse_paths([path]), segment)
    if not run.segments:
        where = "" if path.is_file() else f" in its {len(files)} log file(s)"
        raise AscendfixError(
            f"{path}: no verl training step line (step:N - key:value …){where}; is it the log of a verl run?"
        )
    count = len(run.segments)
    if segment is not None and not 1 <= segment <= count:
        raise UsageError(f"--segment {segment}: {path} holds {count} segment(s); give a number from 1 to {count}")
    return run


def segments_data(run: Run) -> list[dict[str, Any]]:
    """Each segment of the run's log: its number, first and last training step, how many, the file it is in."""
    return [
        {
            "segment": number,
            "first_step": series.steps[0].step,
            "last_step": series.steps[-1].step,
            "steps": len(series.steps),
            "file": segment.origin or None,
        }
        for number, (segment, series) in enumerate(run.segments, 1)
    ]


def reward_key(steps: Sequence[Step]) -> str:
    """``critic/rewards/mean`` when logged, else ``critic/score/mean``."""
    return metrics.REWARD if any(metrics.REWARD in s.values for s in steps) else metrics.SCORE


def _first_last(steps: Sequence[Step], key: str) -> dict[str, float | None]:
    values = [s.get(key) for s in steps if s.get(key) is not None]
    return {"first": values[0] if values else None, "last": values[-1] if values else None}


def timing_shares(steps: Sequence[Step], names: Sequence[str]) -> dict[str, float | None]:
    """Each phase's share of the steps' total step time (None when no step timed it).

    A ratio of sums, not a median of ratios: the shares of phases verl times one after another
    then add up to at most 100%, as they do on each step.
    """
    timed = [s for s in steps if s.get(metrics.STEP_TIME)]
    total = sum(s.values[metrics.STEP_TIME] for s in timed)
    shares: dict[str, float | None] = {}
    for name in names:
        parts = [s.get(f"timing_s/{name}") for s in timed]
        known = [p for p in parts if p is not None and math.isfinite(p)]
        shares[name] = sum(known) / total if known and total and math.isfinite(total) else None
    return shares


def _with_other(shares: dict[str, float | None]) -> dict[str, float | None]:
    """The shares and ``other``: the rest of the step (reward, adv, ...), when every share is known."""
    parts = [v for v in shares.values() if v is not None]
    known = 1.0 - sum(parts) if len(parts) == len(shares) else None
    return {**shares, "other": known}


def report_data(run: Run, extra: Sequence[str] = ()) -> dict[str, Any]:
    """Per-run figures: steps, reward first → last, lengths, timing shares, steady-state tokens/s."""
    series = run.series
    steps, basis = series.steps, series.basis()
    stats = run.parser.stats
    rkey = reward_key(steps)
    data: dict[str, Any] = {
        "run": run.label,
        "segment": run.chosen,
        "segments": segments_data(run),
        "steps_seen": len(steps),
        "first_step": steps[0].step if steps else None,
        "last_step": steps[-1].step if steps else None,
        "total_steps": stats.total_steps,
        "steady_steps": len(series.steady),
        "parse": {
            "files": stats.files,
            "step_lines": stats.step_lines,
            "duplicates": stats.duplicates,
            "skipped": stats.skipped,
        },
        "reward_key": rkey,
        "reward_mean": _first_last(steps, rkey),
        "response_length": {
            **_first_last(steps, metrics.RESPONSE_LENGTH),
            "median": series.steady_median(metrics.RESPONSE_LENGTH),
        },
        "prompt_length": {
            **_first_last(steps, metrics.PROMPT_LENGTH),
            "median": series.steady_median(metrics.PROMPT_LENGTH),
        },
        "timing_s/step": series.steady_median(metrics.STEP_TIME),
        "timing_share": _with_other(timing_shares(basis, metrics.BREAKDOWN)),
        "timing_share_within_gen": timing_shares(basis, metrics.WITHIN_GEN),
        "throughput": series.steady_throughput(),
        "metrics": {key: series.steady_median(key) for key in extra},
    }
    return data


def curve(run: Run, key: str) -> list[tuple[int, float]]:
    """(step, value) pairs of one metric, in step order; ``e2e_tps``-style names map to their verl key."""
    key = CURVES.get(key, key)
    if key == metrics.REWARD:
        key = reward_key(run.series.steps)
    return [(s.step, v) for s in run.series.steps if (v := s.get(key)) is not None]


def sparkline(values: Sequence[float], width: int = 40) -> str:
    """A one-line unicode chart; long series are averaged into ``width`` buckets, nan shows as a blank."""
    if len(values) > width:
        buckets = [values[len(values) * i // width : len(values) * (i + 1) // width] for i in range(width)]
        values = [math.nan if (m := metrics.median(b)) is None else m for b in buckets]
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return " " * len(values)
    low, high = min(finite), max(finite)
    span = high - low or 1.0
    return "".join(SPARK[round((v - low) / span * (len(SPARK) - 1))] if math.isfinite(v) else " " for v in values)


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or not den or not math.isfinite(num) or not math.isfinite(den):
        return None
    return num / den


def compare_data(baseline: Run, candidate: Run) -> dict[str, Any]:
    """The candidate against the baseline, oriented as the guide's 4.2 table: higher is better for the candidate.

    Each row keeps both raw steady medians; ``relative`` is baseline/candidate for step time
    (so 0.29 means the candidate takes 1/0.29 times as long) and candidate/baseline for the
    tokens/s figures and reward. Also the per-step reward gap (candidate − baseline).
    """
    a, b = baseline, candidate
    ra, rb = report_data(a), report_data(b)

    def figures(r: dict[str, Any], run: Run) -> dict[str, float | None]:
        reward = run.series.steady_median(r["reward_key"])
        tokens = {k: r["throughput"][k] for k in GUIDE_ROWS[1:]}
        return {"timing_s/step": r["timing_s/step"], **tokens, "reward": reward}

    fa, fb = figures(ra, a), figures(rb, b)
    rows = []
    for key, (label, lower_is_better) in COMPARED.items():
        relative = _ratio(fa[key], fb[key]) if lower_is_better else _ratio(fb[key], fa[key])
        rows.append(
            {
                "metric": key,
                "label": label,
                "baseline": fa[key],
                "candidate": fb[key],
                "relative": relative,
                "formula": "baseline/candidate" if lower_is_better else "candidate/baseline",
                "guide": key in GUIDE_ROWS,
            }
        )
    from ascendfix.job.launch import what_ran

    ran = {"baseline": what_ran(Path(a.label)), "candidate": what_ran(Path(b.label))}
    reward_a, reward_b = dict(curve(a, "reward")), dict(curve(b, "reward"))
    common = sorted(set(reward_a) & set(reward_b))
    gaps = [reward_b[s] - reward_a[s] for s in common]
    finite = [g for g in gaps if math.isfinite(g)]
    return {
        "baseline": ra["run"],
        "candidate": rb["run"],
        "orientation": "candidate relative to baseline, higher is better for the candidate (the guide's 4.2)",
        "rows": rows,
        "ran": ran,  # what each side's run.json says it ran (None: no run.json beside its log)
        "reward_difference": {
            "common_steps": len(common),
            "mean": sum(finite) / len(finite) if finite else None,
            "max_abs": max((abs(g) for g in finite), default=None),
            "steps": [{"step": s, "difference": g} for s, g in zip(common, gaps, strict=True)],
        },
    }


PLOT_FORMATS = ("png", "svg", "pdf")  # what matplotlib writes with no extra package, named by the extension


def plot_format(file: Path) -> str:
    """The chart format ``file``'s extension names (:data:`PLOT_FORMATS`); any other is bad input."""
    ext = file.suffix[1:].lower()
    if ext not in PLOT_FORMATS:
        given = f"'.{ext}'" if ext else "no extension"
        names = ", ".join(f".{f}" for f in PLOT_FORMATS)
        raise UsageError(f"--plot {file}: {given} is not a chart format; end the name with {names}")
    return ext


def plot(runs: Sequence[Run], file: Path) -> Path:
    """Write a chart (:func:`plot_format`: PNG, SVG or PDF): reward mean, response length, step time and
    e2e tokens/s against the step number."""
    fmt = plot_format(file)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'ascendfix[plot]'") from None
    titles = {
        "reward": "reward mean",
        "response_length": "response length (tokens)",
        "timing_s/step": "step time (s)",
        "e2e_tps": "e2e tokens/s per device",
    }
    fig, axes = plt.subplots(2, 2, figsize=(12, 8), sharex=True)
    for ax, (key, title) in zip(axes.flat, titles.items(), strict=True):
        for run in runs:
            points = curve(run, key)
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.2, label=Path(run.label).name or run.label)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("step")
    axes[0][0].legend(loc="best", fontsize="small")
    fig.tight_layout()
    try:
        fig.savefig(file, format=fmt, dpi=110)
    except OSError as e:
        raise UsageError(f"{file}: cannot write the plot: {e.strerror}") from None
    finally:
        plt.close(fig)
    return file
