"""Parsing verl step lines as they really appear, and the guide's throughput figures."""

from __future__ import annotations

import json
import math

import pytest
from ascendfix.job import metrics
from ascendfix.job.metrics import Series, StepParser, parse_line, throughput

from tests.verl_lines import GUIDE_STEP1, GUIDE_TOKENS, RAY_PREFIX, REMOTE_PREFIX, run_steps, step_line


def test_guide_step_one_gives_e2e_8035_and_update_vllm_by_hand():
    step = parse_line(RAY_PREFIX + step_line(1, GUIDE_STEP1))
    tps = throughput(step)
    # By hand: (1329.16 + 84.30) × 128 × 16 / 128 / 2814.45 = 8.035
    assert round(tps["e2e_tps"], 3) == 8.035
    assert tps["world_size"] == 128
    # 2,894,754 / (128 × 842.91) = 26.830 and 2,894,754 / (128 × 1523.87) = 14.841
    assert tps["update_tps"] == pytest.approx(26.830, abs=5e-4)
    assert tps["vllm_tps"] == pytest.approx(14.841, abs=5e-4)
    assert step.get(metrics.TOKENS) == GUIDE_TOKENS


@pytest.mark.parametrize(
    "prefix",
    [
        "",
        RAY_PREFIX,
        REMOTE_PREFIX,
        "(TaskRunner pid=11069) ",
        "\x1b[36m(main_task pid=77)\x1b[0m ",
    ],
)
def test_prefixes_are_ignored(prefix):
    step = parse_line(prefix + step_line(7, {"critic/rewards/mean": 0.5, "timing_s/step": 12.0}))
    assert step.step == 7
    assert step.values == {"critic/rewards/mean": 0.5, "timing_s/step": 12.0}


def test_repeated_suffix_crlf_and_bytes():
    line = (RAY_PREFIX + step_line(3, {"a/b": 1.5}) + " [repeated 7x across cluster]\r\n").encode()
    step = parse_line(line)
    assert (step.step, step.values) == (3, {"a/b": 1.5})


def test_three_decimals_numpy_reprs_nan_inf_and_exponents():
    assert parse_line(step_line(2, {"x": 0.12345}, style="3f")).values == {"x": 0.123}
    assert parse_line(step_line(2, {"x": 0.5}, style="np")).values == {"x": 0.5}
    step = parse_line("step:4 - a:nan - b:inf - c:-inf - d:1e-07 - e:np.int64(12) - f:True")
    assert math.isnan(step.values["a"]) and step.values["b"] == math.inf and step.values["c"] == -math.inf
    assert step.values["d"] == 1e-07 and step.values["e"] == 12.0 and step.values["f"] == 1.0


@pytest.mark.parametrize(
    "line",
    [
        "step:5 - timing_s/gen:14.2 - timing_s/st",  # truncated inside a key
        "step:5 - timing_s/gen:",  # truncated after the colon
        "step:5 - critic/rewards/mean:abc",
        "step:5",
        "step:5 - \xff\xfe",
    ],
)
def test_malformed_step_lines_are_flagged_not_raised(line):
    assert parse_line(line.encode("latin-1")) is False


@pytest.mark.parametrize(
    "line",
    ["Setting global step to 5", "global_step:5 - x:1", "(WorkerDict pid=1) step:5 done", "", "Training Progress: 3%"],
)
def test_other_lines_are_not_step_lines(line):
    assert parse_line(line) is None


def test_parser_keeps_a_step_once_and_prefers_the_whole_record():
    parser = StepParser()
    whole = step_line(2, GUIDE_STEP1)
    parser.feed(RAY_PREFIX + whole[:200].rsplit(" - ", 1)[0])  # a truncated but parsable copy
    parser.feed(RAY_PREFIX + whole)
    parser.feed(whole)  # the raw copy from worker-*.out
    parser.feed("step:9 - a:")  # garbage
    assert list(parser.steps) == [2]
    assert len(parser.steps[2].values) == len(GUIDE_STEP1)
    assert (parser.stats.step_lines, parser.stats.duplicates, parser.stats.skipped) == (4, 2, 1)


def test_on_step_fires_once_per_new_step_and_total_steps_is_read():
    seen = []
    parser = StepParser(on_step=lambda s: seen.append(s.step))
    parser.feed(RAY_PREFIX + "Total training steps: 300")
    for n in (1, 1, 2):
        parser.feed(step_line(n, {"timing_s/step": 1.0}))
    assert seen == [1, 2]
    assert parser.stats.total_steps == 300


def test_validation_only_step_zero_is_not_a_training_step():
    parser = StepParser()
    parser.feed(RAY_PREFIX + "step:0 - val-core/openai/gsm8k/reward/mean@1:0.71")
    for n, values in enumerate(run_steps(3), start=1):
        parser.feed(step_line(n, values))
    series = Series.of(parser.steps.values())
    assert 0 in parser.steps and [s.step for s in series.steps] == [1, 2, 3]


def test_steady_state_excludes_step_one_validation_and_save():
    steps = run_steps(8, validate_every=4, save_every=6)
    parser = StepParser()
    for n, values in enumerate(steps, start=1):
        parser.feed(step_line(n, values))
    series = Series.of(parser.steps.values())
    assert [s.step for s in series.steady] == [2, 3, 5, 7]
    # step times: gen 1400 + 10 (n % 3), update 800 + 5 (n % 2), + 400
    # n=2: 1420+800+400=2620, n=3: 1400+805+400=2605, n=5: 1420+805+400=2625, n=7: 1410+805+400=2615
    assert series.steady_median(metrics.STEP_TIME) == pytest.approx((2615 + 2620) / 2)
    tps = series.steady_throughput()
    assert tps["world_size"] == 128
    by_hand = sorted((2_800_000 + 1000 * n) / (t * 128) for n, t in [(2, 2620), (3, 2605), (5, 2625), (7, 2615)])
    assert tps["e2e_tps"] == pytest.approx((by_hand[1] + by_hand[2]) / 2)


def test_files_and_directories_dedupe_across_driver_log_and_worker_out(tmp_path):
    logs = tmp_path / "session_latest" / "logs"
    logs.mkdir(parents=True)
    steps = run_steps(5)
    driver = "".join(f"noise line {i}\n{RAY_PREFIX}{step_line(n, v)}\n" for i, (n, v) in enumerate(enumerate(steps, 1)))
    (tmp_path / "driver.log").write_text("Total training steps: 5\n" + driver)
    (logs / "worker-abc-01000000-123.out").write_text("".join(step_line(n, v) + "\n" for n, v in enumerate(steps, 1)))
    (logs / "worker-abc-01000000-123.err").write_text("step:3 - x:" + "\n")
    (logs / "raylet.out").write_bytes(b"\x00\x01binary garbage step: \xff\n" * 3)
    parser = metrics.parse_paths([tmp_path])
    assert sorted(parser.steps) == [1, 2, 3, 4, 5]
    assert parser.stats.files == 4 and parser.stats.duplicates == 5 and parser.stats.total_steps == 5
    assert parser.stats.skipped == 1


def test_chunk_boundaries_do_not_lose_or_split_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(metrics, "_CHUNK", 97)
    path = tmp_path / "train.log"
    steps = run_steps(20)
    path.write_text("".join(f"{RAY_PREFIX}{step_line(n, v)}\nother step: words\n" for n, v in enumerate(steps, 1)))
    parser = metrics.parse_paths([path])
    assert sorted(parser.steps) == list(range(1, 21))
    assert parser.steps[20].values == pytest.approx(steps[19])
    assert parser.stats.skipped == 0


def test_file_logger_jsonl(tmp_path):
    path = tmp_path / "exp.jsonl"
    lines = [json.dumps({"step": n, "data": v}) for n, v in enumerate(run_steps(3), 1)]
    lines.insert(1, '{"step": 9, "data": {"x": null, "y": "text"}}')
    lines.append('{"step": 4, "da')  # truncated
    path.write_text("\n".join(lines) + "\n")
    parser = metrics.parse_paths([path])
    assert sorted(parser.steps) == [1, 2, 3, 9]
    assert math.isnan(parser.steps[9].values["x"]) and "y" not in parser.steps[9].values
    assert parser.stats.skipped == 1
    assert round(throughput(parser.steps[1])["e2e_tps"], 3) == 8.035


def test_a_jsonl_line_nested_past_the_limit_is_one_skipped_line(tmp_path):
    path = tmp_path / "exp.jsonl"
    deep = '{"step": 2, "data": {"x": ' + "[" * 100_000 + "]" * 100_000 + "}}"
    path.write_text(json.dumps({"step": 1, "data": {"x": 1.0}}) + "\n" + deep + "\n")
    parser = metrics.parse_paths([path])  # no RecursionError
    assert sorted(parser.steps) == [1] and parser.stats.skipped == 1
