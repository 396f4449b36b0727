"""Really build docker/Dockerfile's ascendfix stage with buildah, on a stand-in stack image this test makes.

The real CANN base cannot be pulled here, so the stand-in stack is a Debian bookworm
minbase rootfs (debootstrap, cached under the test cache) with Python 3.11, verl from its
0.5.0 PyPI wheel and torch's two 2.7.1 checkpoint-validation files in dist-packages.
The ``patched`` stage of the committed Dockerfile is built on it unchanged
(``--target patched --build-arg STACK_IMAGE=...``): its pip install of ascendfix reaches
PyPI, its ``ascendfix apply --strict`` patches the stand-in's files, and a stand-in whose
files are not known originals fails the build.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from ascendfix import resources

from tests import upstream

REPO = Path(__file__).resolve().parent.parent
DOCKERFILE = REPO / "docker" / "Dockerfile"
SITE = "usr/local/lib/python3.11/dist-packages"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
GRPO = "verl-grpo-no-interleave"
RAY_TRAINER = "verl/trainer/ppo/ray_trainer.py"
APPLY = "ascendfix apply --profile verl-796871d --device npu --strict"
DOCTOR = (
    "ascendfix doctor --profile verl-796871d --device npu "
    "--only python,packages,commits,integrity,patches,conflicts --strict"
)

MISSING = [tool for tool in ("buildah", "debootstrap") if not shutil.which(tool)]

# The tests install nothing on the host: .ci/run installs buildah and debootstrap, then runs the suite.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.upstream,
    pytest.mark.skipif(bool(MISSING), reason=f"{' and '.join(MISSING)} not installed (see .ci/run)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="buildah --isolation chroot and the Debian bootstrap need root"),
]


def buildah(*args: str, check: bool = True, timeout: int = 900) -> subprocess.CompletedProcess:
    result = subprocess.run(
        ["buildah", "--storage-driver", "vfs", *args], capture_output=True, text=True, timeout=timeout
    )
    if check and result.returncode != 0:
        raise AssertionError(f"buildah {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def rootfs_tar() -> Path:
    """Debian bookworm minbase with python3 and pip, as a tar, made once and cached (about 90 s)."""
    folder = upstream.cache_dir() / "standin"
    folder.mkdir(exist_ok=True)
    tar = folder / "bookworm-python3.tar"
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not tar.exists():
            root = folder / "rootfs"
            shutil.rmtree(root, ignore_errors=True)
            include = "--include=python3,python3-pip,ca-certificates"
            done = subprocess.run(
                ["debootstrap", "--variant=minbase", include, "bookworm", str(root)],
                capture_output=True,
                text=True,
                timeout=1200,
            )
            if done.returncode != 0:
                pytest.skip(f"the Debian bootstrap could not reach a mirror: {done.stderr.strip()[-300:]}")
            # The CANN image's Python is not Debian-managed: pip installs into it directly.
            for marker in root.glob("usr/lib/python3*/EXTERNALLY-MANAGED"):
                marker.unlink()
            subprocess.run(["tar", "-C", str(root), "-cf", str(tar) + ".part", "."], check=True)
            os.replace(str(tar) + ".part", tar)
            shutil.rmtree(root)
    return tar


def standin_site(dest: Path) -> Path:
    """dist-packages of the stand-in: verl installed from its PyPI wheel, torch's two validation files."""
    wheel = upstream.verl_wheel("0.5.0")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target", str(dest), str(wheel)],
        check=True,
    )
    shutil.copytree(upstream.torch_tree("2.7.1"), dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".complete"))
    (dest / "torch" / "__init__.py").write_text("# stand-in: only the files the patches edit\n")
    info = dest / "torch-2.7.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.7.1\n")
    (info / "RECORD").write_text("")
    return dest


@pytest.fixture(scope="module")
def standin_stack(tmp_path_factory):
    """A stand-in stack image in buildah's storage; removed afterwards, with every image the module's builds left.

    The builds' step images stay until then: with ``--layers``, a later build of the same first steps takes
    them from that cache (on the vfs driver every committed step copies the whole rootfs, about 10 s each).
    """
    context = tmp_path_factory.mktemp("standin")
    shutil.copy(rootfs_tar(), context / "rootfs.tar")
    shutil.copy(CA_BUNDLE, context / "ca-certificates.crt")  # this network's trust roots, for pip inside the build
    standin_site(context / "site")
    (context / "Containerfile").write_text(
        f"FROM scratch\nADD rootfs.tar /\nCOPY ca-certificates.crt {CA_BUNDLE}\nCOPY site /{SITE}/\n"
    )
    image = f"localhost/ascendfix-standin:{uuid.uuid4().hex[:12]}"
    buildah("bud", "--isolation", "chroot", "-q", "-t", image, str(context))
    shutil.rmtree(context)
    before = _image_ids()
    try:
        yield image
    finally:
        if new := _image_ids() - before:
            buildah("rmi", "-f", *new, check=False)
        buildah("rmi", "-f", image, check=False)


def _image_ids() -> set[str]:
    return {image["id"] for image in json.loads(buildah("images", "-a", "--json").stdout or "[]")}


def build_patched(stack_image: str, context: Path) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    """docker/Dockerfile's ``patched`` stage on ``stack_image``: the result, and the image of each step this build
    ran (not one it took from the cache), by command.

    ``--layers`` keeps every finished step as an image, so a build that stops at a later step still
    shows what the earlier ones left; :func:`standin_stack` removes them all at the module's end.
    """
    before = _image_ids()
    args = ["--isolation", "chroot", "--layers", "--target", "patched", "--build-arg", f"STACK_IMAGE={stack_image}"]
    result = buildah("bud", *args, "-f", str(DOCKERFILE), str(context), check=False)
    new = _image_ids() - before
    steps = {}
    for image in new:
        history = buildah(
            "inspect", "--type", "image", "--format", "{{range .Docker.History}}{{.CreatedBy}}\n{{end}}", image
        )
        created = history.stdout.strip().splitlines()[-1]  # "|1 STACK_PATH= /bin/sh -c CMD" with build args
        steps[re.sub(r"^\|\d+ (?:\S+=\S* )*", "", created).removeprefix("/bin/sh -c ")] = image
    return result, steps


@contextlib.contextmanager
def container_of(image: str) -> Iterator[Callable[..., subprocess.CompletedProcess]]:
    """One container of ``image`` (made once: on vfs that copies the rootfs), and a function running a command
    in it; the container is removed afterwards."""
    container = buildah("from", "--pull=never", image).stdout.strip()
    try:
        yield lambda *command: buildah("run", "--isolation", "chroot", container, "--", *command, check=False)
    finally:
        buildah("rm", container, check=False)


def repo_context(dest: Path) -> Path:
    """What the Dockerfile's COPY lines take from the repository root."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, dest / name)
    for name in ("ascendfix", *resources.DATA_DIRS):
        shutil.copytree(REPO / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "_data"))
    return dest


def test_build_step_patches_the_stack(standin_stack, tmp_path):
    # The stand-in's verl is the 0.5.0 wheel, not checkout 796871d: its ray_trainer.py has the same three
    # sites but other bytes. This build context declares that file a known original of the GRPO patch, so
    # --strict accepts it; every other file the step patches is the real known original.
    context = repo_context(tmp_path / "context")
    digest = hashlib.sha256((upstream.verl_tree("0.5.0") / RAY_TRAINER).read_bytes()).hexdigest()
    with open(context / "patches" / f"{GRPO}.toml", "a") as f:
        f.write(f'\n[[files.preimages]]\nsha256 = "{digest}"\nlabel = "verl 0.5.0 wheel (stand-in stack)"\n')
    result, steps = build_patched(standin_stack, context)
    log = result.stdout + result.stderr
    for pid in ("verl-cuda-probe-off", GRPO):
        assert f"applied         {pid} (applied)" in log, log[-3000:]
    for pid in ("torch-shard-overlap-check", "torch-global-plan-check"):  # torch keeps validating
        assert f"applied         {pid} [fast-validate] (applied)" in log, log[-3000:]
    assert "4 patch(es) applied" in log
    # What the apply step left in the image: every NPU patch applied, the DAPO recipe absent from a wheel.
    with container_of(steps[APPLY]) as run_in:
        status = run_in("ascendfix", "status", "--profile", "verl-796871d", "--device", "npu", "--json")
        assert status.returncode == 0, status.stdout + status.stderr
        states = {p["id"]: p["state"] for p in json.loads(status.stdout)["patches"]}
        assert states == {
            "verl-cuda-probe-off": "applied",
            "torch-shard-overlap-check": "applied",
            "torch-global-plan-check": "applied",
            GRPO: "applied",
            "verl-dapo-no-interleave": "not-applicable",
        }
        assert "# ascendfix: verl-cuda-probe-off" in run_in("cat", f"/{SITE}/verl/utils/device.py").stdout
    # The stand-in carries only what the patches edit, so the stage then stops at its doctor step: vllm,
    # torch-npu, transformers... are not installed in it, and its Python is 3.11 (doctor --strict failing on
    # a stack that is not the manifest's is the point).
    assert result.returncode != 0
    assert f'building at STEP "RUN {DOCTOR}"' in log
    assert "vllm is not installed (the profile pins 38217877aa70041c0115ee367b75197af9cbc5ad)" in log


def test_a_drifted_stack_fails_the_build(standin_stack, tmp_path):
    result, steps = build_patched(standin_stack, repo_context(tmp_path / "context"))
    log = result.stdout + result.stderr
    assert APPLY not in steps  # the apply step left no image
    assert result.returncode != 0
    assert "error: refused, nothing was changed" in log
    assert f"{GRPO}: {RAY_TRAINER} is not a known original (sha256 differs) and --strict is set" in log
    assert "patch(es) applied" not in log
    assert f'building at STEP "RUN {APPLY}"' in log
