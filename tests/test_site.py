"""The Site a command builds once: one start of the target interpreter per command, whatever asks."""

from __future__ import annotations

import sys

import pytest
from ascendfix.profile import manifest
from ascendfix.site import Site

PROFILE = manifest.load_profile("verl-796871d")


@pytest.fixture
def counted_python(tmp_path):
    """A target interpreter (this one, behind a wrapper script) that counts how often it starts."""
    count = tmp_path / "starts"
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\necho start >> "{count}"\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper, lambda: len(count.read_text().splitlines()) if count.exists() else 0


@pytest.mark.parametrize(
    "args",
    [
        ["doctor", "--device", "npu"],
        ["status", "--device", "npu"],
        ["run", "--device", "npu", "true"],
        ["run", "--no-preflight", "--device", "npu", "true"],
    ],
    ids=["doctor", "status", "run", "run --no-preflight"],
)
def test_a_command_starts_the_target_interpreter_once(counted_python, ascendfix_cli, tmp_path, args):
    python, starts = counted_python
    verb, *rest = args
    logs = ["--log-dir", str(tmp_path / "logs")] if verb == "run" else []
    result = ascendfix_cli(verb, "--python", python, *logs, *rest, cwd=tmp_path)
    assert result.returncode in (0, 1), result.stdout + result.stderr  # doctor fails here: no Ascend stack
    assert starts() == 1


def test_the_site_asks_another_interpreter_everything_at_once(counted_python):
    python, starts = counted_python
    site = Site(PROFILE, "npu", str(python), environ={})
    assert site.targets["verl"].given is False
    assert site.importable(["verl"]) == {"verl": site.targets["verl"].root is not None}
    assert site.probe(everything=True).python == sys.executable  # markers, distributions: already asked
    assert starts() == 1


def test_an_interpreter_that_cannot_answer_is_one_error_for_everyone(tmp_path):
    broken = tmp_path / "python"
    broken.write_text('#!/bin/sh\necho started >> "$0.starts"\nexit 3\n')
    broken.chmod(0o755)
    site = Site(PROFILE, "npu", str(broken))
    for _ in range(2):
        with pytest.raises(Exception, match="the interpreter failed to run the probe"):
            site.probe(everything=True)
    assert (tmp_path / "python.starts").read_text().count("started") == 1


def test_the_jobs_environment_is_resolved_once_against_the_sites_own():
    site = Site(PROFILE, "npu", environ={"HCCL_CONNECT_TIMEOUT": "7200", "PATH": "/bin"})
    assert site.job_env is site.job_env
    assert site.job_env["HCCL_CONNECT_TIMEOUT"] == "7200"  # yours wins over the profile's
    assert site.job_env["PYTHONUNBUFFERED"] == "1"


def test_a_given_root_is_a_typed_fact_not_prose(tmp_path):
    site = Site(PROFILE, "npu", roots={"verl": tmp_path}, environ={})
    (verl,) = site.locate(["verl"]).values()
    assert (verl.root, verl.given) == (tmp_path, True)
