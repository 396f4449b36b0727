"""The test support layer: shared fixtures, and the one way the tests run ``ascendfix`` as a process.

Every test gets its own cache folder (``XDG_CACHE_HOME``, which :mod:`ascendfix.resources` reads), in
the test process and in every ``ascendfix`` it starts: no test reads or writes the user's
``~/.cache/ascendfix``. The upstream files the tests download stay in their own cache (tests/upstream.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests import cli, upstream

GET_PYTHON310 = (
    "no working Python 3.10 here (the container's Python): install one (`pyenv install 3.10`, or your "
    "distribution's python3.10 package), or name it in ASCENDFIX_TEST_PYTHON310"
)

# Every Ray node the tests start binds to loopback. `--node-ip-address 127.0.0.1` alone is not
# enough: Ray replaces a loopback address with the host's own (ray._private.services
# .resolve_ip_for_localhost) unless multi-host clusters are off, which Ray reads once, at import.
# The in-process ray.cluster_utils nodes and the commands the tests start inherit this;
# tests/test_ray_start.py turns it back on for its `ray start` nodes, which run in a network
# namespace that has nothing but loopback.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
# Ray >= 2.5x turns token authentication on for a new local cluster (ray.init, cluster_utils) when
# RAY_AUTH_MODE is unset, and writes a token to ~/.ray/auth_token: into the home of whoever runs the tests,
# where every later head on the machine finds it. The tests' clusters run without it; a test of token
# mode sets RAY_AUTH_MODE and HOME itself.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


# Hypothesis profiles ($HYPOTHESIS_PROFILE): "suite", the default, with no deadline per example (the suite's
# workers share the machine's cores, so one example's time says nothing about the code); "thorough", ten
# times the examples, for a change to a transform. The fast-validate equivalence tests set their own count.
settings.register_profile("suite", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", settings.get_profile("suite"), max_examples=600)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "suite"))

# Under pytest-xdist (pyproject's addopts: 2 workers), the slow tests of the modules whose real jobs prove a bound
# in seconds (ray smoke's --timeout, ray wait's, a stuck rank's gloo timeout, watch's learned bound) run on one
# worker, one after another, as the "jobs" group: two of them side by side on this project's 2-core machine
# overran those bounds. The other worker takes the rest, ray smoke's fault fabric (tests/test_ray_faults.py,
# mostly waiting on its dropped links) first. A slow test marked ``beside_jobs`` (a real job that proves no bound in
# seconds and shares no module fixture: a refusal in one line, say) runs on the other worker, beside the group.
JOBS = "jobs"
JOB_MODULES = tuple(
    f"tests/test_{name}.py" for name in ("cluster", "ray", "ray_smoke", "ray_start", "triage", "triage_jobs", "watch")
)
# The groups measured longest (a full run in one process, 2026-12-03): handed out first, in this order.
LONGEST = (JOBS, "tests/test_ray_faults.py", "tests/test_docker_build.py", "tests/test_ckpt_check.py")


def _shares_a_module_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a fixture its module builds once for several tests (a Ray cluster, a venv)."""
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info else ()
    return any(d.scope != "function" and d.baseid.endswith(".py") for fixturedefs in defs for d in fixturedefs)


def _group(item: pytest.Item) -> str:
    """The test's xdist group (its own node id: none): ``JOBS`` for the slow tests of ``JOB_MODULES`` (those
    marked ``beside_jobs`` aside) and the tests there sharing a module fixture, its module for another test sharing
    a module fixture."""
    module = item.nodeid.split("::", 1)[0]
    shares = _shares_a_module_fixture(item)
    if module in JOB_MODULES and (
        shares or (item.get_closest_marker("slow") and not item.get_closest_marker("beside_jobs"))
    ):
        return JOBS
    return module if shares else item.nodeid


def pytest_itemcollected(item: pytest.Item) -> None:
    """Under pytest-xdist: each test's group marked as it is collected, before any collection hook runs (xdist
    names a test by its group in its own ``pytest_collection_modifyitems``, which pytest may call before a
    conftest's): the tests sharing a module's fixture on one worker (built once), the real jobs one at a time."""
    group = _group(item) if hasattr(item.config, "workerinput") else item.nodeid
    if group != item.nodeid:
        item.add_marker(pytest.mark.xdist_group(group))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist: the costliest groups handed out first (pyproject's ``--no-loadscope-reorder`` keeps
    this order)."""
    if not hasattr(config, "workerinput"):  # not an xdist worker: the order is the files'
        return
    scope = {item.nodeid: _group(item) for item in items}
    cost: dict[str, list[int]] = {}
    for item in items:  # a group's cost: measured longest, then its slow tests, then its tests
        group = scope[item.nodeid]
        counts = cost.setdefault(group, [len(LONGEST) - LONGEST.index(group) if group in LONGEST else 0, 0, 0])
        counts[1] += item.get_closest_marker("slow") is not None
        counts[2] += 1
    items.sort(key=lambda item: [-n for n in cost[scope[item.nodeid]]])  # stable: a group stays together


@pytest.fixture
def copy_tree(tmp_path):
    """Copy a cached upstream tree into this test's own folder (tests may write to it)."""

    def copy(src: Path, name: str = "root") -> Path:
        dest = tmp_path / name
        shutil.copytree(src, dest, ignore=shutil.ignore_patterns(".complete"))
        return dest

    return copy


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A folder of this test's own directly in /tmp, removed afterwards: Ray's socket paths must stay under
    107 bytes, and a pytest-xdist worker's ``tmp_path`` is longer (``.../pytest-N/popen-gw0/...``)."""
    folder = Path(tempfile.mkdtemp(prefix="afr-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def upstream_files():
    """The upstream helper module (downloads on first use)."""
    return upstream


@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory):
    """A cache folder for what runs before any test's own (module and session fixtures)."""
    before = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("session-cache"))
    yield
    if before is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = before


@pytest.fixture(autouse=True)
def own_cache(tmp_path_factory, monkeypatch) -> Path:
    """This test's own ascendfix cache folder (parsed TOML, fetched wheels), never the user's."""
    folder = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(folder))
    return folder / "ascendfix"


@pytest.fixture(scope="session")
def ascendfix_cli():
    """``ascendfix ARGS`` run as a process, as a user runs it: ``python -m ascendfix`` of this checkout.

    ``python``: the interpreter to run it with; ``env``: variables added to the test's environment
    (or, with ``clean_env``, the whole environment but PYTHONPATH and the test's cache folder);
    ``prefix``: words before the command (``unshare -n``); ``preexec_fn``: run in the child before it
    starts (a resource limit); ``code``, ``cache``: see :func:`tests.cli.command`. Returns the
    CompletedProcess (text).
    """
    return cli.run


@pytest.fixture(scope="session")
def ascendfix_popen():
    """The same ``ascendfix ARGS``, started and not waited for: a :class:`subprocess.Popen` to watch,
    signal or feed. Takes ``ascendfix_cli``'s keywords, and Popen's ``stdin``, ``stdout``, ``stderr``,
    ``text`` and ``start_new_session``.
    """
    return cli.start


@pytest.fixture
def stack(tmp_path):
    """The demo workspace (tests/stack.py: a verl checkout and torch stand-ins) in this test's own folder."""
    from tests.stack import make_stack

    return make_stack(tmp_path)


@pytest.fixture
def job(tmp_path) -> Path:
    """The fake verl job and its train.sh (tests/fake_job.py) in this test's own folder."""
    from tests.fake_job import write_job

    return write_job(tmp_path)


@pytest.fixture
def run_cli(ascendfix_cli):
    """``ascendfix ARGS`` in the job's folder, in :func:`tests.fake_job.cli_env` with ``extra`` variables."""
    from tests.fake_job import cli_env

    return lambda tmp_path, *args, **extra: ascendfix_cli(
        *args, cwd=tmp_path, clean_env=True, env=cli_env(tmp_path, **extra), timeout=120
    )


def find_python310() -> Path | None:
    """A Python 3.10 that runs: ``$ASCENDFIX_TEST_PYTHON310``, else ``python3.10`` on PATH, else pyenv's."""
    candidates = [os.environ.get("ASCENDFIX_TEST_PYTHON310"), shutil.which("python3.10")]
    candidates += sorted(str(p) for p in (Path.home() / ".pyenv" / "versions").glob("3.10.*/bin/python3.10"))
    for candidate in filter(None, candidates):
        try:
            answer = subprocess.run(
                [candidate, "-c", "import sys; print(sys.version_info[:2] == (3, 10))"],
                capture_output=True,
                text=True,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if answer.stdout.strip() == "True":
            return Path(candidate)
    return None


@pytest.fixture(scope="session")
def python310() -> Path:
    """A working Python 3.10 interpreter; the test is skipped, saying how to get one, when there is none."""
    found = find_python310()
    if found is None:
        pytest.skip(GET_PYTHON310)
    return found
