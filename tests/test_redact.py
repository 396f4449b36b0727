"""run.json records no secret: credentials by scheme, in query strings, in header arguments and in HEADERS/AUTH
variables, as the real ``run`` writes them."""

from __future__ import annotations

import json

import pytest
from ascendfix.job import redact

LEAKS = {
    "RAY_JOB_HEADERS": '{"Authorization": "Bearer ray-bearer"}',
    "RAY_ADDRESS": "http://head:8265/?access_token=ray-query&x=1",
    "RAY_AUTH_MODE": "auth-mode-secret",
    "HF_ENDPOINT": "https://mirror/?token=hf-query",
    "VLLM_EXTRA": "Basic dmxsbTpwdw==",
}


def test_run_json_holds_no_bearer_query_or_header_secret(job, run_cli):
    proc = run_cli(
        job, "run", "--device", "npu", "--no-preflight", "train.sh", "-H", "Authorization: Bearer arg-bearer",
        "--header=X-Api-Key: arg-key", "+data.url=https://h/d?sig=arg-sig&page=2", **LEAKS,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (folder,) = (job / "ascendfix-runs").iterdir()
    text = (folder / "run.json").read_text()
    for secret in ("ray-bearer", "ray-query", "auth-mode-secret", "hf-query", "dmxsbTpwdw", "arg-bearer", "arg-key"):
        assert secret not in text, secret
    assert "arg-sig" not in text
    record = json.loads(text)
    assert record["environment"]["RAY_JOB_HEADERS"] == "<redacted>"
    assert record["environment"]["RAY_ADDRESS"] == "http://head:8265/?access_token=<redacted>&x=1"
    assert record["environment"]["HF_ENDPOINT"] == "https://mirror/?token=<redacted>"
    assert record["command"][-4:-1] == ["-H", "Authorization: <redacted>", "--header=X-Api-Key: <redacted>"]
    assert record["overrides"]["data.url"] == "https://h/d?sig=<redacted>&page=2"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("Bearer abc.def-ghi", "Bearer <redacted>"),
        ("curl -H 'Authorization: Basic dXNlcjpwdw=='", "curl -H 'Authorization: Basic <redacted>'"),
        ("https://x/y?page=2&api_key=k&q=", "https://x/y?page=2&api_key=<redacted>&q="),
        ("max_num_batched_tokens=8192", "max_num_batched_tokens=8192"),
        ("https://x/y?page=2", "https://x/y?page=2"),
    ],
)
def test_secrets_inside_values(value, shown):
    assert redact.redact_value(value) == shown


# Every shape a secret takes inside one argument: (the argument, what run.json and the terminal show).
SHAPES = [
    ('{"env_vars":{"WANDB_API_KEY": "wk-1"}}', '{"env_vars":{"WANDB_API_KEY": "<redacted>"}}'),  # JSON value
    (
        '{"env_vars": {"HF_TOKEN":"hf_1","RAY_DEDUP_LOGS":"0"}}',
        '{"env_vars": {"HF_TOKEN":"<redacted>","RAY_DEDUP_LOGS":"0"}}',
    ),
    ('{\\"password\\": \\"pw 1\\"}', '{\\"password\\": \\"<redacted>\\"}'),  # escaped quotes, a space inside
    ("{'api_key': 'k1'}", "{'api_key': '<redacted>'}"),  # a Python mapping
    ('{"n": 3, "secret": 42}', '{"n": 3, "secret": "<redacted>"}'),  # a number: still JSON
    (
        '{"cmd": "WANDB_API_KEY=wk-2 python x.py"}',
        '{"cmd": "WANDB_API_KEY=<redacted> python x.py"}',
    ),  # KEY=VALUE in JSON
    ('{"headers": {"Authorization": "Bearer t0k"}}', '{"headers": {"Authorization": "<redacted>"}}'),
    ('{"url": "https://u:pw@host/x"}', '{"url": "https://<redacted>@host/x"}'),  # URL credentials in JSON
    ("postgres://me:pw@db:5432/x", "postgres://<redacted>@db:5432/x"),
    ("a=1 PGPASSWORD=pw3 b=2", "a=1 PGPASSWORD=<redacted> b=2"),
    ('{"--password": "x", "x": "--api-key=ak"}', '{"--password": "<redacted>", "x": "--api-key=<redacted>"}'),
    # not secrets: left as they are
    ("trainer.logger=['console','wandb']", "trainer.logger=['console','wandb']"),
    ("/opt/token:/usr/bin", "/opt/token:/usr/bin"),
    ('{"max_num_batched_tokens": 8192}', '{"max_num_batched_tokens": 8192}'),
]


@pytest.mark.parametrize(("value", "shown"), SHAPES)
def test_a_secret_in_any_argument_shape_is_redacted(value, shown):
    assert redact.redact_value(value) == shown
    assert redact.redact_argv(["--runtime-env-json", value]) == ["--runtime-env-json", shown]


def test_a_long_argument_is_redacted_in_linear_time():
    for value in ("a" * 200_000 + "=", "k:" * 100_000, 'k: "' * 50_000, "a.b-c_" * 40_000 + ":"):
        assert redact.redact_value(value) == value  # quadratic: minutes (no timing asserted: it would not end)


def test_ray_job_submit_runtime_env_json_reaches_neither_run_json_nor_the_terminal(job, run_cli):
    env_json = '{"env_vars": {"WANDB_API_KEY": "wandb-leak", "HF_TOKEN": "hf-leak"}, "pip": ["x"]}'
    proc = run_cli(job, "run", "--device", "npu", "--no-preflight", "train.sh", "--runtime-env-json", env_json)
    assert proc.returncode == 0, proc.stderr
    (folder,) = (job / "ascendfix-runs").iterdir()
    text = (folder / "run.json").read_text()
    for leak in ("wandb-leak", "hf-leak"):
        assert leak not in text and leak not in proc.stderr and leak not in proc.stdout.replace(env_json, "")
    shown = '{"env_vars": {"WANDB_API_KEY": "<redacted>", "HF_TOKEN": "<redacted>"}, "pip": ["x"]}'
    assert json.loads(text)["command"][-2:] == ["--runtime-env-json", shown]


def test_headers_and_auth_names_are_secret_and_job_settings_are_not():
    assert all(redact.secret_name(n) for n in ("RAY_JOB_HEADERS", "EXTRA_HEADERS", "OAUTH_CLIENT", "RAY_AUTH_MODE"))
    assert not any(redact.secret_name(n) for n in ("PATH", "ppo_max_token_len_per_gpu", "HCCL_CONNECT_TIMEOUT"))
