"""`ascendfix report` and `compare` on logs, Ray session directories and JSONL."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ascendfix import cli
from ascendfix.job import report
from click.testing import CliRunner

from tests.verl_lines import GUIDE_STEP1, RAY_PREFIX, REMOTE_PREFIX, run_steps, step_line

ROOT = Path(__file__).resolve().parent.parent


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
    [data] = json.loads(result.output)
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
    [data] = json.loads(invoke("report", str(path), "--json", "--metrics", "actor/entropy,missing/key").output)
    assert data["metrics"] == {"actor/entropy": pytest.approx(0.44775390625), "missing/key": None}


def test_report_errors_are_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "ascendfix", "report", str(tmp_path / "nope.log")],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
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
    [data] = json.loads(invoke("report", str(log), "--json").output)
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


def test_report_refuses_to_merge_two_runs_in_one_folder(tmp_path):
    npu = run_steps(3)
    h100 = [{**values, "timing_s/step": values["timing_s/step"] / 3.4} for values in npu]
    write_log(tmp_path / "runs" / "npu" / "train.log", npu)
    write_log(tmp_path / "runs" / "h100" / "train.log", h100)
    result = invoke("report", str(tmp_path / "runs"))
    assert result.exit_code == 2
    assert "step 1 has different values in" in result.output and "report each file on its own" in result.output
    assert "h100/train.log" in result.output and "npu/train.log" in result.output
    same = write_log(tmp_path / "ray" / "worker-1.out", npu, prefix="")  # the raw copy Ray keeps: duplicates
    write_log(tmp_path / "ray" / "driver.log", npu)
    data = json.loads(invoke("report", str(same.parent), "--json").output)[0]
    assert data["steps_seen"] == 3 and data["parse"]["duplicates"] == 3
