"""verl step lines as the real trainer prints them, for the metrics, report and run tests.

The values follow verl's ``compute_data_metrics`` / ``compute_timing_metrics`` /
``compute_throughout_metrics`` key names and ``LocalLogger``'s ``step:N - key:value`` format.
"""

from __future__ import annotations

import pprint

RAY_PREFIX = "\x1b[36m(TaskRunner pid=11069)\x1b[0m "
REMOTE_PREFIX = "\x1b[36m(TaskRunnerV1 pid=2207, ip=10.0.0.12)\x1b[0m "

# The guide's step 1: 128 prompts × 16 samples, mean response 1329.16 and prompt 84.30 tokens,
# 2814.45 s on 128 NPUs. (1329.1552734375 + 84.298828125) × 2048 = 2,894,754 tokens exactly.
GUIDE_TOKENS = 2894754
GUIDE_STEP1 = {
    "training/global_step": 1,
    "training/epoch": 0,
    "actor/entropy": 0.44775390625,
    "actor/pg_loss": -0.0031138,
    "actor/lr": 1e-06,
    "critic/score/mean": 0.2841796875,
    "critic/score/max": 1.0,
    "critic/rewards/mean": 0.2841796875,
    "critic/advantages/mean": -0.00213623046875,
    "response_length/mean": 1329.1552734375,
    "response_length/max": 8192.0,
    "response_length/clip_ratio": 0.0478515625,
    "prompt_length/mean": 84.298828125,
    "prompt_length/max": 197.0,
    "timing_s/gen": 1523.87,
    "timing_s/reward": 12.04,
    "timing_s/old_log_prob": 201.33,
    "timing_s/ref": 187.62,
    "timing_s/adv": 3.11,
    "timing_s/update_actor": 842.91,
    "timing_s/step": 2814.45,
    "timing_per_token_ms/gen": 0.5597,
    "perf/total_num_tokens": GUIDE_TOKENS,
    "perf/time_per_step": 2814.45,
    "perf/throughput": GUIDE_TOKENS / (2814.45 * 128),
    "perf/max_memory_allocated_gb": 51.2,
}


def step_line(step: int, values: dict, style: str = "repr") -> str:
    """``step:N - key:value ...``: ``repr`` as verl ≥ 0.5.0 (pprint), ``3f`` as ≤ 0.4.1, ``np`` as numpy ≥ 2."""
    parts = [f"step:{step}"]
    for key, value in values.items():
        if style == "3f":
            text = f"{value:.3f}"
        elif style == "np" and isinstance(value, float):
            text = f"np.float64({value!r})"
        else:
            text = pprint.pformat(value)
        parts.append(f"{key}:{text}")
    return " - ".join(parts)


def run_steps(count: int, world: int = 128, validate_every: int = 0, save_every: int = 0) -> list[dict]:
    """Plausible step values for steps 1..count; step 1 is the guide's, later ones steadier and faster."""
    steps = []
    for n in range(1, count + 1):
        if n == 1:
            values = dict(GUIDE_STEP1)
        else:
            values = dict(GUIDE_STEP1)
            gen, update = 1400.0 + 10 * (n % 3), 800.0 + 5 * (n % 2)
            step_time = gen + update + 400.0
            tokens = 2_800_000 + 1000 * n
            values.update(
                {
                    "training/global_step": n,
                    "critic/score/mean": 0.28 + 0.01 * n,
                    "critic/rewards/mean": 0.28 + 0.01 * n,
                    "response_length/mean": 1300.0 + 5 * n,
                    "timing_s/gen": gen,
                    "timing_s/update_actor": update,
                    "timing_s/step": step_time,
                    "perf/total_num_tokens": tokens,
                    "perf/time_per_step": step_time,
                    "perf/throughput": tokens / (step_time * world),
                }
            )
        if validate_every and n % validate_every == 0:
            values["timing_s/testing"] = 600.0
            values["timing_s/step"] += 600.0
            values["perf/time_per_step"] = values["timing_s/step"]
            values["perf/throughput"] = values["perf/total_num_tokens"] / (values["timing_s/step"] * world)
        if save_every and n % save_every == 0:
            values["timing_s/save_checkpoint"] = 900.0
        steps.append(values)
    return steps
