"""`ascendfix report` and `compare` on logs, Ray session directories and JSONL."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from ascendfix import cli
from ascendfix.job import report
from click.testing import CliRunner

from tests.verl_lines import GUIDE_STEP1, RAY_PREFIX, REMOTE_PREFIX, run_steps, step_line


def invoke(*args):
    result = CliRunner().invoke(cli.main, list(args))
    return result


def write_log(path: Path, steps: list[dict], prefix: str = RAY_PREFIX, style: str = "repr") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{prefix}{step_line(n, v, style)}\n" for n, v in enumerate(steps, 1)))
    return path


def test_report_on_the_guide_step_line_gives_e2e_8035_and_update_vllm(tmp_path):
    log = tmp_path / "guide.log"
    log.write_text(f"{RAY_PREFIX}{step_line(1, GUIDE_STEP1)}\n")
    result = invoke("report", str(log), "--json")
    assert result.exit_code == 0, result.output
    [data] = json.loads(result.output)["runs"]
    tps = data["throughput"]
    assert round(tps["e2e_tps"], 3) == 8.035 and tps["world_size"] == 128
    assert round(tps["update_tps"], 3) == 26.830  # 2,894,754 / (128 × 842.91)
    assert round(tps["vllm_tps"], 3) == 14.841  # 2,894,754 / (128 × 1523.87)
    assert data["steps_seen"] == 1 and data["steady_steps"] == 0
    assert data["timing_share"]["gen"] == pytest.approx(1523.87 / 2814.45)
    assert data["timing_share_within_gen"] == {"generate_sequences": None, "reshard": None}
    text = invoke("report", str(log))
    assert "e2e 8.035 · update 26.830 · vllm 14.841 (world 128)" in text.output


def test_report_on_a_ray_session_directory(tmp_path):
    steps = run_steps(10, validate_every=5, save_every=10)
    logs = tmp_path / "session_latest" / "logs"
    write_log(logs / "worker-1.out", steps, prefix="")
    write_log(logs / "job-driver-raysubmit_1.log", steps, prefix=REMOTE_PREFIX, style="repr")
    (logs / "gcs_server.out").write_text("nothing to see\n" * 100)
    data = report.report_data(report.load_run(logs))
    assert data["steps_seen"] == 10 and data["steady_steps"] == 7  # not 1, 5 (validated), 10 (validated, saved)
    assert data["parse"]["duplicates"] == 10 and data["parse"]["files"] == 3
    assert data["reward_mean"]["first"] == pytest.approx(0.2841796875)
    assert data["reward_mean"]["last"] == pytest.approx(0.38)
    assert data["response_length"]["median"] == pytest.approx(1300 + 5 * 6)  # steady steps 2,3,4,6,7,8,9


def test_report_extra_metrics_and_jsonl(tmp_path):
    path = tmp_path / "exp.jsonl"
    path.write_text("".join(json.dumps({"step": n, "data": v}) + "\n" for n, v in enumerate(run_steps(4), 1)))
    [data] = json.loads(invoke("report", str(path), "--json", "--metrics", "actor/entropy,missing/key").output)["runs"]
    assert data["metrics"] == {"actor/entropy": pytest.approx(0.44775390625), "missing/key": None}


def test_report_errors_are_one_line(tmp_path, ascendfix_cli):
    result = ascendfix_cli("report", tmp_path / "nope.log", env={"PATH": "/usr/bin:/bin"}, clean_env=True, timeout=None)
    assert (
        result.returncode == 2 and result.stderr.strip() == f"error: {tmp_path / 'nope.log'}: no such file or directory"
    )
    (tmp_path / "empty").mkdir()
    assert invoke("report", str(tmp_path / "empty")).exit_code == 2


# The timing keys of the guide's own step-1 line (its 3.3 log), as verl@796871d prints them.
GUIDE_STEP1_TIMING = {
    "timing_s/generate_sequences": 1311.4302978515625,
    "timing_s/reshard": 205.53201293945312,
    "timing_s/gen": 1549.5419146210188,
    "timing_s/reward": 1.9772784940432757,
    "timing_s/old_log_prob": 484.43600556300953,
    "timing_s/ref": 133.7677788970759,
    "timing_s/adv": 0.17963880999013782,
    "timing_s/update_actor": 644.0539472099626,
    "timing_s/step": 2814.4491687440313,
}


def test_time_shares_count_reshard_inside_gen_and_add_up_to_at_most_100(tmp_path):
    log = tmp_path / "guide.log"
    log.write_text(f"{RAY_PREFIX}{step_line(1, {**GUIDE_STEP1, **GUIDE_STEP1_TIMING})}\n")
    [data] = json.loads(invoke("report", str(log), "--json").output)["runs"]
    shares, within = data["timing_share"], data["timing_share_within_gen"]
    assert list(shares) == ["gen", "old_log_prob", "ref", "update_actor", "other"]
    assert sum(shares.values()) == pytest.approx(1.0) and shares["other"] >= 0  # the old sum was 107%
    assert shares["gen"] == pytest.approx(1549.5419146210188 / 2814.4491687440313)
    assert within["reshard"] == pytest.approx(205.53201293945312 / 2814.4491687440313)
    assert within["reshard"] + within["generate_sequences"] <= shares["gen"]
    text = " ".join(invoke("report", str(log)).output.split())  # the table wraps the row at 80 columns
    assert "gen 55.1% (of which generate_sequences 46.6%, reshard 7.3%) · old_log_prob 17.2%" in text


def test_shares_over_several_steps_are_of_their_total_time(tmp_path):
    a = {"timing_s/step": 100.0, "timing_s/gen": 50.0, "timing_s/old_log_prob": 50.0, "timing_s/ref": 0.0}
    b = {"timing_s/step": 100.0, "timing_s/gen": 50.0, "timing_s/old_log_prob": 0.0, "timing_s/ref": 50.0}
    c = {"timing_s/step": 100.0, "timing_s/gen": 0.0, "timing_s/old_log_prob": 50.0, "timing_s/ref": 50.0}
    shares = report.timing_shares(
        [report.Step(n, v) for n, v in enumerate((a, b, c), 2)], ("gen", "old_log_prob", "ref")
    )
    assert sum(shares.values()) == pytest.approx(1.0)  # medians of per-step ratios would say 150%


def test_a_one_step_log_says_its_figures_are_that_steps(tmp_path):
    log = write_log(tmp_path / "one.log", run_steps(1))
    footer = invoke("report", str(log)).output.rstrip().splitlines()[-1]
    assert "no steady step yet" in footer and "figures are step 1's own, warm-up included" in footer
    assert "medians over steady" not in footer
    more = invoke("report", str(write_log(tmp_path / "six.log", run_steps(6)))).output.rstrip().splitlines()[-1]
    assert more.startswith("figures are medians over 5 steady step(s) (not step 1")


@pytest.mark.parametrize(
    "content",
    [b"", b"Traceback (most recent call last):\n  ...\n", bytes(range(256)) * 40],
    ids=["empty", "no-step-line", "binary"],
)
def test_a_log_without_a_verl_step_line_exits_1_naming_it(tmp_path, content):
    log = tmp_path / "train.log"
    log.write_bytes(content)
    good = write_log(tmp_path / "good.log", run_steps(3))
    for args in (["report", str(log)], ["compare", str(good), str(log)], ["compare", str(log), str(good)]):
        result = invoke(*args)
        assert result.exit_code == 1, (args, result.output)
        assert result.output.strip().splitlines() == [
            f"error: {log}: no verl training step line (step:N - key:value …); is it the log of a verl run?"
        ]
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "worker-1.out").write_bytes(content)
    assert invoke("report", str(folder)).exit_code == 1


def test_sparkline():
    assert report.sparkline([1, 2, 3, 4, 5, 6, 7, 8]) == "▁▂▃▄▅▆▇█"
    assert report.sparkline([1.0, float("nan"), 1.0]) == "▁ ▁"
    assert len(report.sparkline(list(range(1000)), width=40)) == 40


GUIDE_4_2 = {"timing_s/step": 0.29, "e2e_tps": 0.29, "update_tps": 0.12, "vllm_tps": 0.36}


def guide_ratio_logs(tmp_path):
    """An H100 baseline and an A2 candidate whose steps differ exactly by the guide's 4.2 ratios."""
    h100 = run_steps(8)
    a2 = []
    for values in run_steps(8):
        v = dict(values)
        v["timing_s/step"] /= 0.29  # the A2 step takes 1/0.29 as long: H100 step time / A2 step time = 0.29
        v["perf/time_per_step"] /= 0.29
        v["perf/throughput"] *= 0.29  # e2e tokens/s per device
        v["timing_s/update_actor"] /= 0.12  # update tokens/s = tokens / (world × update time)
        v["timing_s/gen"] /= 0.36  # vllm tokens/s = tokens / (world × gen time)
        v["critic/rewards/mean"] += 0.05
        a2.append(v)
    return write_log(tmp_path / "h100.log", h100), write_log(tmp_path / "a2.log", a2)


def test_compare_reads_like_the_guides_table(tmp_path):
    h100, a2 = guide_ratio_logs(tmp_path)
    result = invoke("compare", str(h100), str(a2), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    rows = {r["metric"]: r for r in data["rows"]}
    assert [r["metric"] for r in data["rows"] if r["guide"]] == list(GUIDE_4_2)
    for metric, ratio in GUIDE_4_2.items():
        assert rows[metric]["relative"] == pytest.approx(ratio), metric
    assert rows["timing_s/step"]["formula"] == "baseline/candidate"
    assert rows["e2e_tps"]["formula"] == "candidate/baseline"
    base = report.report_data(report.load_run(h100))
    assert rows["timing_s/step"]["baseline"] == pytest.approx(base["timing_s/step"])  # raw values stay
    assert rows["timing_s/step"]["candidate"] == pytest.approx(base["timing_s/step"] / 0.29)
    assert rows["vllm_tps"]["baseline"] == pytest.approx(base["throughput"]["vllm_tps"])
    assert data["baseline"] == str(h100) and data["candidate"] == str(a2)
    gap = data["reward_difference"]
    assert gap["common_steps"] == 8 and gap["mean"] == pytest.approx(0.05) and gap["max_abs"] == pytest.approx(0.05)
    text = invoke("compare", str(h100), str(a2)).output
    assert "higher is better for the candidate" in text and "step time is baseline/candidate" in text
    step_row = next(line for line in text.splitlines() if line.strip().startswith("timing_s/step *"))
    assert " 0.29 " in step_row and "baseline/candidate" in step_row and "3.45" not in step_row
    assert "reward candidate − baseline over 8 common steps: mean 0.050" in text


def test_compare_same_run_is_all_ones(tmp_path):
    a = write_log(tmp_path / "a.log", run_steps(5))
    data = report.compare_data(report.load_run(a), report.load_run(a))
    assert [r["relative"] for r in data["rows"]] == pytest.approx([1.0] * 5)


def test_plot_writes_a_png_against_step_numbers(tmp_path):
    pytest.importorskip("matplotlib")
    steps = run_steps(12, validate_every=5)
    log = tmp_path / "shuffled.log"
    order = [5, 0, 11, 3, 2, 7, 1, 9, 4, 10, 8, 6]
    log.write_text("".join(f"{RAY_PREFIX}{step_line(n + 1, steps[n])}\n" for n in order))
    run = report.load_run(log)
    assert [s for s, _ in report.curve(run, "reward")] == list(range(1, 13))  # step order, not line order
    png = tmp_path / "run.png"
    result = invoke("report", str(log), "--plot", str(png))
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_plot_without_matplotlib_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    log = write_log(tmp_path / "a.log", run_steps(3))
    result = invoke("report", str(log), "--plot", str(tmp_path / "x.png"))
    assert result.exit_code == 2 and "pip install 'ascendfix[plot]'" in result.output


@pytest.mark.parametrize("name", ["x.txt", "x"])
def test_plot_to_a_file_no_chart_format_names_is_one_line_exit_2(name, tmp_path, ascendfix_cli):
    """``--plot /tmp/x.txt`` was a bug (matplotlib's "Format 'txt' is not supported", exit 3): the name is
    checked before any log is read or matplotlib imported, and the line names the formats there are."""
    log = write_log(tmp_path / "a.log", run_steps(3))
    result = ascendfix_cli("report", log, "--plot", tmp_path / name)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert f"--plot {tmp_path / name}:" in result.stderr and ".png, .svg, .pdf" in result.stderr
    assert not (tmp_path / name).exists() and result.stdout == ""


def test_plot_writes_the_format_its_name_ends_with(tmp_path, ascendfix_cli):
    pytest.importorskip("matplotlib")
    log = write_log(tmp_path / "a.log", run_steps(3))
    assert ascendfix_cli("report", log, "--plot", tmp_path / "run.SVG").returncode == 0
    assert b"<svg" in (tmp_path / "run.SVG").read_bytes()[:400]


def resumed(steps: list[dict], factor: float = 1.1) -> list[dict]:
    """The same steps as a resumed run logs them again: other timings, so other values."""
    return [{**v, "timing_s/step": v["timing_s/step"] * factor, "critic/rewards/mean": 0.5} for v in steps]


def resumed_log(path: Path, crashed_at: int = 7, saved_at: int = 5, last: int = 12) -> Path:
    """One log holding a run that crashed after step ``crashed_at`` (last save at ``saved_at``) and its
    resumption (``resume_mode=auto``), which logs its validation at ``saved_at`` and goes on from there."""
    first = run_steps(crashed_at)
    again = resumed(run_steps(last))[saved_at:]
    lines = [f"{RAY_PREFIX}{step_line(n, v)}" for n, v in enumerate(first, 1)]
    lines.append("Traceback (most recent call last):\nRuntimeError: the node went away")
    lines.append(f"{RAY_PREFIX}{step_line(saved_at, {'val-core/openai/gsm8k/reward/mean@1': 0.61})}")
    lines += [f"{RAY_PREFIX}{step_line(n, v)}" for n, v in enumerate(again, saved_at + 1)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_log_holding_a_run_and_its_resumption_reports_the_last_segment_and_names_the_first(tmp_path):
    log = resumed_log(tmp_path / "train.log")
    result = invoke("report", str(log), "--json")
    assert result.exit_code == 0, result.output
    [data] = json.loads(result.output)["runs"]
    assert data["segment"] == 2
    assert [(s["segment"], s["first_step"], s["last_step"], s["steps"]) for s in data["segments"]] == [
        (1, 1, 7, 7),
        (2, 6, 12, 7),
    ]
    assert (data["first_step"], data["last_step"], data["steps_seen"]) == (6, 12, 7)
    assert data["reward_mean"]["first"] == 0.5
    assert data["parse"]["duplicates"] == 1  # the resumption's validation line at step 5 shares no metric
    first = report.report_data(report.load_run(log, 1))
    assert (first["segment"], first["first_step"], first["last_step"]) == (1, 1, 7)
    assert data["timing_s/step"] == pytest.approx(first["timing_s/step"] * 1.1, rel=0.01)
    text = " ".join(invoke("report", str(log)).output.split())
    assert "this log holds 2 runs" in text and "1: steps 1–7" in text and "2: steps 6–12" in text
    assert "figures are of segment 2, --segment N for another" in text
    assert "step 6 → 12" in text and "6 steady" in text  # the resumed run's first step is its warm-up
    assert "(not step 6, the resumed run's first, not validating or saving)" in text
    chosen = json.loads(invoke("report", str(log), "--segment", "1", "--json").output)["runs"][0]
    assert chosen["segment"] == 1 and chosen["last_step"] == 7
    bad = invoke("report", str(log), "--segment", "3")
    assert bad.exit_code == 2 and "--segment 3:" in bad.output and "holds 2 segment(s)" in bad.output


def test_a_ray_session_folder_with_a_run_and_its_resumption_keeps_each_copy_with_its_run(tmp_path):
    """A persistent cluster: each run has its driver log and the raw copy in its TaskRunner's worker-*.out."""
    import os

    logs = tmp_path / "session_latest" / "logs"
    first, second = run_steps(7), resumed(run_steps(12))[5:]
    write_log(logs / "job-driver-raysubmit_b.log", first, prefix=REMOTE_PREFIX)
    write_log(logs / "worker-0a.out", first, prefix="")
    driver = logs / "job-driver-raysubmit_a.log"
    driver.write_text("".join(f"{REMOTE_PREFIX}{step_line(n, v)}\n" for n, v in enumerate(second, 6)))
    (logs / "worker-0b.out").write_text("".join(f"{step_line(n, v)}\n" for n, v in enumerate(second, 6)))
    for name, when in (("job-driver-raysubmit_b.log", 1000), ("worker-0a.out", 1000)):
        os.utime(logs / name, (when, when))  # the crashed run's files were last written first
    [data] = json.loads(invoke("report", str(logs), "--json").output)["runs"]
    assert [(s["first_step"], s["last_step"]) for s in data["segments"]] == [(1, 7), (6, 12)]
    assert data["segment"] == 2 and data["steps_seen"] == 7 and data["parse"]["duplicates"] == 14


def test_the_same_steps_printed_twice_are_one_segment(tmp_path):
    npu = run_steps(3)
    same = write_log(tmp_path / "ray" / "worker-1.out", npu, prefix="")  # the raw copy Ray keeps: duplicates
    write_log(tmp_path / "ray" / "driver.log", npu)
    data = json.loads(invoke("report", str(same.parent), "--json").output)["runs"][0]
    assert data["steps_seen"] == 3 and data["parse"]["duplicates"] == 3 and len(data["segments"]) == 1
    twice = tmp_path / "twice.log"  # one file that prints every line twice (tee into the same log)
    twice.write_text("".join(f"{step_line(n, v)}\n{step_line(n, v)}\n" for n, v in enumerate(npu, 1)))
    data = json.loads(invoke("report", str(twice), "--json").output)["runs"][0]
    assert data["steps_seen"] == 3 and len(data["segments"]) == 1


def test_an_unfinished_line_is_capped_and_the_step_after_it_still_counts(tmp_path):
    """tqdm's bars end in \\r, never \\n: a log can hold one line of hundreds of MB."""
    import tracemalloc

    from ascendfix.job import metrics

    bar = b"\rProcessed prompts:  37%|###7      | 757/2048 [04:11<07:08,  3.01it/s]"
    log = tmp_path / "bars.log"
    with open(log, "wb") as f:
        for _ in range(48 * (1 << 20) // (len(bar) * 1000)):
            f.write(bar * 1000)
        f.write(b"\r" + step_line(1, run_steps(1)[0]).encode() + b"\n")
        f.write((step_line(2, run_steps(2)[1]) + "\n").encode())
        f.write(bar * 50_000)  # and the file ends inside a bar
    parser = metrics.StepParser()
    tracemalloc.start()
    parser.feed_file(log)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert sorted(parser.steps) == [1, 2]
    assert peak < 16 << 20  # a few 4 MiB chunks, not the 48 MB line (it held 3 copies of the line)
    assert len(metrics.partial_line(b"x" * (3 << 20), 0)) == metrics.MAX_PARTIAL_LINE
    assert metrics.partial_line(b"done\nrest", 5) == b"rest"


def test_two_runs_in_one_folder_are_two_segments_each_named_by_its_file(tmp_path):
    import os

    npu = run_steps(3)
    h100 = [{**values, "timing_s/step": values["timing_s/step"] / 3.4} for values in npu]
    a = write_log(tmp_path / "runs" / "npu" / "train.log", npu)
    write_log(tmp_path / "runs" / "h100" / "train.log", h100)
    os.utime(a, (1000, 1000))
    [data] = json.loads(invoke("report", str(tmp_path / "runs"), "--json").output)["runs"]
    assert [Path(s["file"]).parent.name for s in data["segments"]] == ["npu", "h100"]
    assert data["segment"] == 2 and data["timing_s/step"] == pytest.approx(
        report.report_data(report.load_run(a))["timing_s/step"] / 3.4
    )
