"""docker/Dockerfile's stack stage resolves: its PyPI pins exist for the A2, and its pip steps resolve.

Nothing is built or installed. The steps are resolved for linux aarch64 / CPython 3.10 (the A2 image's
platform) from real metadata on PyPI (the only index the Dockerfile names) and, for the git components,
stand-in wheels this test writes: empty packages whose Requires-Dist are the pinned commits' own
requirements (tests/stack_requirements.toml, with their sources). A requirement that no named index
serves, like vllm-ascend's ``torch-npu==2.7.1.dev20250724``, fails the resolution. uv's resolver does
the resolving (pip's backtracks for over 15 minutes on this graph; the two follow the same standards),
pip answers the single-wheel questions. Results are cached in the test cache by their inputs.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import NamedTuple

import pytest
from ascendfix.profile import manifest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests import upstream
from tests.dockerfile import COMMITTED, PROFILE, stages

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REQUIREMENTS = tomllib.loads((Path(__file__).parent / "stack_requirements.toml").read_text())
INDEX = "https://pypi.org/simple"
PLATFORM = ["--platform", "manylinux_2_28_aarch64", "--platform", "manylinux2014_aarch64"]
TARGET = [*PLATFORM, "--python-version", "3.10", "--implementation", "cp"]
# The A2 image's marker environment, for the requirements this test checks itself.
MARKERS = {
    "implementation_name": "cpython",
    "implementation_version": "3.10.18",
    "os_name": "posix",
    "platform_machine": "aarch64",
    "platform_python_implementation": "CPython",
    "platform_release": "",
    "platform_system": "Linux",
    "platform_version": "",
    "python_full_version": "3.10.18",
    "python_version": "3.10",
    "sys_platform": "linux",
    "extra": "",
}
OFFLINE = re.compile(r"Network is unreachable|Failed to establish|timed out|Name or service not known|dns error")
UV_PLATFORM = ["--python-platform", "aarch64-manylinux_2_28", "--python-version", "3.10"]

pytestmark = [pytest.mark.upstream]


class Step(NamedTuple):
    """One ``pip install`` of the stack stage, as the Dockerfile runs it."""

    requirements: tuple[str, ...]  # what it installs: pins, stand-ins (``name==version``), a file's lines
    deps: bool  # False: --no-deps
    isolated: bool  # False: --no-build-isolation
    builds: tuple[str, ...]  # the stand-ins it builds from source


def _pip_env(tmp: Path) -> dict[str, str]:
    """pip with no site configuration (this machine's pip.conf adds local indexes and constraints)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k == "PIP_CERT"}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "TMPDIR": str(tmp)}


def standin_wheels(folder: Path) -> Path:
    """An empty wheel per git component, carrying its pinned commit's requirements."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in REQUIREMENTS.items():
        dist = re.sub(r"[-_.]+", "_", name)
        version = f"{data['version']}+standin"  # never a version an index has
        meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        meta += "".join(f"Requires-Dist: {r}\n" for r in data["requires"])
        info = f"{dist}-{version}.dist-info"
        with zipfile.ZipFile(folder / f"{dist}-{version}-py3-none-any.whl", "w") as wheel:
            wheel.writestr(f"{info}/METADATA", meta)
            wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: ascendfix-tests\nRoot-Is-Purelib: true\n")
            wheel.writestr(f"{info}/RECORD", "")
    return folder


def _standin(name: str) -> str:
    return f"{name}=={REQUIREMENTS[name]['version']}+standin"


def stack_steps(text: str, root: Path) -> tuple[list[Step], Path | None]:
    """The stack stage's pip steps, in order, and its constraints file (written under ``root``).

    Shell steps that write files (the constraints file, a filtered requirements file) run for real,
    with their absolute paths moved under ``root``; each checkout's requirements file is the one the
    pinned commit has (tests/stack_requirements.toml).
    """
    path = root / "Dockerfile"
    path.write_text(text)
    stage = stages(path)["stack"]
    profile = manifest.load_profile(PROFILE)
    folders = {f"/src/{c.name}": c.distribution for c in profile.components if c.kind == "git"}
    for folder, dist in folders.items():
        c = next(c for c in profile.components if c.distribution == dist)
        if c.requirements and "requirements_file" in REQUIREMENTS.get(dist, {}):
            file = root / folder.lstrip("/") / c.requirements
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(REQUIREMENTS[dist]["requirements_file"])
    constraint = re.search(r"PIP_CONSTRAINT=(\S+)", text)
    constraints = root / constraint.group(1).lstrip("/") if constraint else None

    def moved(value: str) -> str:
        return re.sub(r"(?<![\w.])/(src|tmp|etc)/", lambda m: f"{root}/{m.group(1)}/", value)

    steps = []
    for run in stage["run"]:
        for segment in re.split(r"\s+&&\s+", run):
            words = shlex.split(re.sub(r"^(?:[A-Z_]+=(?:\$\([^)]*\)|\S)+\s+)+", "", segment))  # less VAR=... words
            if words[:4] == ["python3", "-m", "pip", "install"]:
                steps.append(_step(words[4:], folders, moved))
            elif words and words[0] in ("mkdir", "printf", "grep"):
                (root / "tmp").mkdir(exist_ok=True)
                subprocess.run(["bash", "-o", "pipefail", "-c", moved(segment)], check=True)
    return steps, constraints


def _step(args: list[str], folders: dict[str, str], moved) -> Step:
    requirements, builds, deps, isolated = [], [], True, True
    words = iter(args)
    for word in words:
        if word in ("-v", "-e"):
            continue
        if word == "--no-deps":
            deps = False
        elif word == "--no-build-isolation":
            isolated = False
        elif word == "-r":
            file = Path(moved(next(words)))
            for line in file.read_text().splitlines():
                line = line.split(" #")[0].strip()
                if line and not line.startswith("#"):
                    assert not line.startswith("-"), f"{file}: pip option {line!r} left in a requirements file"
                    requirements.append(line)
        elif word.split("/rl-plugin")[0] in folders or " @ git+" in word:
            dist = folders.get(word.split("/rl-plugin")[0]) or word.split(" @ ")[0]
            requirements.append(_standin(dist))
            builds.append(dist)
        else:
            requirements.append(word)
    return Step(tuple(requirements), deps, isolated, tuple(builds))


def uv() -> list[str]:
    """The uv command (the test extra installs it)."""
    if importlib.util.find_spec("uv") is not None:
        return [sys.executable, "-m", "uv"]
    if shutil.which("uv"):
        return ["uv"]
    pytest.skip("uv is not installed (pip install -e '.[test]' installs it)")


def resolve(
    requirements: list[str], constraints: Path | None, standins: Path, tmp: Path, prefer: dict | None = None
) -> dict:
    """The resolution for the A2 image: ``{"ok": bool, "installed": {name: version}, "error": str}``,
    cached in the test cache by its inputs. ``prefer``: versions already installed, kept where they fit
    (uv prefers the pins of the output file it compiles over), as pip keeps installed ones."""
    cons = constraints.read_text() if constraints else ""
    inputs = [requirements, cons, UV_PLATFORM, REQUIREMENTS, prefer]
    key = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:24]
    cache = upstream.cache_dir() / "stack-resolve"
    cache.mkdir(exist_ok=True)
    hit = cache / f"{key}.json"
    if hit.exists():
        return json.loads(hit.read_text())
    wanted, resolved = tmp / f"in-{key}.txt", tmp / f"out-{key}.txt"
    wanted.write_text("\n".join(requirements) + "\n")
    resolved.write_text("".join(f"{name}=={version}\n" for name, version in (prefer or {}).items()))
    cmd = [*uv(), "pip", "compile", "--no-config", "--quiet", *UV_PLATFORM, "--index-url", INDEX]
    cmd += ["--find-links", str(standins), "--cache-dir", str(upstream.cache_dir() / "uv"), "--no-header"]
    cmd += ["--no-annotate", *(["-c", str(constraints)] if constraints else []), "-o", str(resolved), str(wanted)]
    env = {k: v for k, v in _pip_env(tmp).items() if not k.startswith("UV_")}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0 and OFFLINE.search(done.stderr):
        pytest.skip(f"PyPI cannot be reached: {done.stderr.strip()[-300:]}")
    installed = {}
    if done.returncode == 0:
        for line in resolved.read_text().splitlines():
            name, sep, version = line.partition("==")
            if sep:
                installed[canonicalize_name(name.strip())] = version.strip()
    result = {"ok": done.returncode == 0, "installed": installed, "error": done.stderr.strip()[-3000:]}
    if done.returncode == 0 or "No solution found" in done.stderr:  # an answer about the inputs, never a mishap
        with open(cache / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            hit.write_text(json.dumps(result))
    return result


def unmet(requirements: list[str], installed: dict[str, str], accepted: set[tuple[str, str]], who: str) -> list[str]:
    """The requirements ``installed`` does not satisfy, less those the profile accepts (requirer, requirement)."""
    problems = []
    for line in requirements:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate(MARKERS):
            continue
        have = installed.get(canonicalize_name(req.name))
        if have is not None and req.specifier.contains(Version(have), prereleases=True):
            continue
        if (canonicalize_name(who), str(req)) in accepted:
            continue
        problems.append(f"{who} requires {line}, but {have or 'nothing'} is installed")
    return problems


def stack_problems(text: str, root: Path) -> list[str]:
    """Everything that keeps the stack stage of Dockerfile ``text`` from installing, as pip would see it."""
    steps, constraints = stack_steps(text, root)
    standins = standin_wheels(root / "standins")
    profile = manifest.load_profile(PROFILE)
    accepted = {(canonicalize_name(a.requirer), str(Requirement(a.requirement))) for a in profile.accepted_conflicts}
    problems = []
    overrides = _overrides(steps, profile)
    with_deps = [r for s in steps if s.deps and s not in overrides for r in s.requirements]
    everything = resolve(with_deps, constraints, standins, root)
    if not everything["ok"]:
        problems.append(f"the stack's pip steps do not resolve: {everything['error']}")
    installed = dict(everything["installed"])
    for step in overrides:  # installed last over a cap: pip keeps what is installed where it can
        last = resolve(list(step.requirements), constraints, standins, root, prefer=installed)
        if not last["ok"]:
            problems.append(f"{' '.join(step.requirements)} does not install last: {last['error']}")
        installed.update(last["installed"])
    for step in steps:
        if not step.deps:  # installed over what the steps with deps resolved
            for line in step.requirements:
                req = Requirement(line)
                installed[canonicalize_name(req.name)] = str(next(iter(req.specifier)).version)
    for i, step in enumerate(steps):
        for dist in step.builds:
            build = REQUIREMENTS[dist].get("build_requires", [])
            if step.isolated:  # pip builds it in a fresh environment, under the same constraints
                env = resolve(build, constraints, standins, root)
                if not env["ok"]:
                    problems.append(f"{dist}'s isolated build environment does not resolve: {env['error']}")
            else:  # built against what the earlier steps installed
                before = [r for s in steps[:i] if s.deps for r in s.requirements]
                have = resolve(before, constraints, standins, root)["installed"] if before else {}
                problems += unmet(build, have, accepted, dist)
        if not step.deps and everything["ok"]:
            for dist in step.builds:
                problems += unmet(REQUIREMENTS[dist]["requires"], installed, accepted, dist)
            for line in step.requirements:
                if canonicalize_name(Requirement(line).name) not in map(canonicalize_name, step.builds):
                    problems += unmet(_requires_of(line, root), installed, accepted, Requirement(line).name)
    if everything["ok"]:  # the environment the stage leaves: only the accepted conflicts
        for dist, data in REQUIREMENTS.items():
            if canonicalize_name(dist) in installed:
                problems += unmet(data["requires"], installed, accepted, dist)
    return list(dict.fromkeys(problems))


def _overrides(steps: list[Step], profile) -> list[Step]:
    """Steps with deps that install, after its requirer, a distribution an accepted conflict caps."""
    capped = {}
    for a in profile.accepted_conflicts:
        capped[canonicalize_name(Requirement(a.requirement).name)] = canonicalize_name(a.requirer)
    found, seen = [], set()
    for step in steps:
        names = {canonicalize_name(Requirement(r).name) for r in step.requirements}
        if step.deps and any(capped.get(n) in seen for n in names):
            found.append(step)
        seen |= {canonicalize_name(d) for d in step.builds if step.deps}
    return found


def _requires_of(pin: str, tmp: Path) -> list[str]:
    """The Requires-Dist of a PyPI pin's A2 wheel (its metadata only)."""
    report = tmp / "pin-report.json"
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--dry-run", "--no-deps", "--ignore-installed"]
    cmd += ["--report", str(report), "--target", str(tmp / "target"), *TARGET, "--only-binary=:all:"]
    cmd += ["--index-url", INDEX, pin]
    subprocess.run(cmd, check=True, capture_output=True, env=_pip_env(tmp), timeout=600)
    meta = json.loads(report.read_text())["install"][0]["metadata"]
    return [r for r in meta.get("requires_dist") or [] if "extra ==" not in r]


def pypi_pins(text: str, root: Path) -> list[str]:
    """Every ``name==version`` of PyPI the stack stage's pip steps install (stand-ins left out)."""
    steps, _ = stack_steps(text, root)
    pins = {r for s in steps for r in s.requirements if re.fullmatch(r"[A-Za-z0-9._-]+==[^,;\s]+", r)}
    return sorted(pins - {_standin(dist) for s in steps for dist in s.builds})


def has_a2_wheel(pin: str, tmp: Path) -> bool:
    """Whether PyPI has a linux aarch64 CPython 3.10 wheel of ``pin`` (cached in the test cache)."""
    cache = upstream.cache_dir() / "stack-pins.json"
    known = json.loads(cache.read_text()) if cache.exists() else {}
    if pin not in known:
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--dry-run", "--no-deps", "--ignore-installed"]
        cmd += ["--target", str(tmp / "target"), *TARGET, "--only-binary=:all:", "--index-url", INDEX, pin]
        done = subprocess.run(cmd, capture_output=True, text=True, env=_pip_env(tmp), timeout=600)
        if done.returncode != 0 and "No matching distribution" not in done.stderr:
            pytest.skip(f"PyPI cannot be reached: {done.stderr.strip()[-300:]}")
        known[pin] = done.returncode == 0
        cache.write_text(json.dumps(known, indent=1, sort_keys=True))
    return known[pin]


def test_every_pypi_pin_of_the_stack_has_an_a2_wheel(tmp_path):
    pins = pypi_pins(COMMITTED.read_text(), tmp_path)
    assert pins == ["tensordict==0.10.0", "torch-npu==2.7.1", "torch==2.7.1"]
    missing = [pin for pin in pins if not has_a2_wheel(pin, tmp_path)]
    assert missing == []


def test_the_pin_vllm_ascend_names_has_no_a2_wheel_on_pypi(tmp_path):
    # the reason the stage builds vllm-ascend against torch-npu 2.7.1 (the profile's accepted conflict)
    assert not has_a2_wheel("torch-npu==2.7.1.dev20250724", tmp_path)


def test_vllm_ascends_requirements_file_loses_only_the_torch_npu_pin_and_its_options(tmp_path):
    steps, _ = stack_steps(COMMITTED.read_text(), tmp_path)
    filtered = (tmp_path / "tmp" / "vllm_ascend-requirements.txt").read_text().splitlines()
    kept = [line for line in filtered if line.strip() and not line.startswith("#")]
    assert kept == [r for r in REQUIREMENTS["vllm-ascend"]["requires"] if not r.startswith("torch-npu")]
    step = next(s for s in steps if "vllm-ascend" in s.builds)
    assert not step.deps and not step.isolated


@pytest.mark.slow
def test_the_stack_stage_resolves(tmp_path):
    assert stack_problems(COMMITTED.read_text(), tmp_path) == []


@pytest.mark.slow
def test_a_requirement_no_named_index_serves_fails(tmp_path):
    # vllm-ascend as a plain git install (the stage before this fix): pip wants the torch-npu dev build
    text = COMMITTED.read_text()
    runs = [chunk.split("\n#")[0] for chunk in text.split("\nRUN ")]
    run = next(run for run in runs if "/src/vllm_ascend" in run)
    plain = "COMPILE_CUSTOM_KERNELS=1 python3 -m pip install "
    plain += '"vllm-ascend @ git+${VLLM_ASCEND_REPO}@${VLLM_ASCEND_COMMIT}"'
    problems = stack_problems(text.replace(run, plain, 1), tmp_path)
    assert problems and all("torch-npu==2.7.1.dev20250724" in p for p in problems), problems
