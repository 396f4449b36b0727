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


def test_headers_and_auth_names_are_secret_and_job_settings_are_not():
    assert all(redact.secret_name(n) for n in ("RAY_JOB_HEADERS", "EXTRA_HEADERS", "OAUTH_CLIENT", "RAY_AUTH_MODE"))
    assert not any(redact.secret_name(n) for n in ("PATH", "ppo_max_token_len_per_gpu", "HCCL_CONNECT_TIMEOUT"))
