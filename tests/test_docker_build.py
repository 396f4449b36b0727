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

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from ascendfix import cli

from tests import upstream

REPO = Path(__file__).resolve().parent.parent
DOCKERFILE = REPO / "docker" / "Dockerfile"
SITE = "usr/local/lib/python3.11/dist-packages"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
GRPO = "verl-grpo-no-interleave"
RAY_TRAINER = "verl/trainer/ppo/ray_trainer.py"
DOCTOR = (
    "ascendfix doctor --profile verl-796871d --device npu "
    "--only python,packages,commits,integrity,patches,conflicts --strict"
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.upstream,
    pytest.mark.skipif(not shutil.which("buildah"), reason="buildah is not installed (apt-get install buildah)"),
    pytest.mark.skipif(not shutil.which("debootstrap"), reason="debootstrap is not installed"),
    pytest.mark.skipif(os.geteuid() != 0, reason="buildah --isolation chroot and debootstrap need root"),
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
                pytest.skip(f"debootstrap could not reach a Debian mirror: {done.stderr.strip()[-300:]}")
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
    """A stand-in stack image in buildah's storage; removed afterwards."""
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
    yield image
    buildah("rmi", "-f", image, check=False)


def build_patched(stack_image: str, context: Path) -> subprocess.CompletedProcess:
    """docker/Dockerfile's ``patched`` stage on ``stack_image``; the image is removed again."""
    image = f"localhost/ascendfix-patched:{uuid.uuid4().hex[:12]}"
    result = buildah(
        "bud",
        "--isolation",
        "chroot",
        "--target",
        "patched",
        "--build-arg",
        f"STACK_IMAGE={stack_image}",
        "-f",
        str(DOCKERFILE),
        "-t",
        image,
        str(context),
        check=False,
    )
    buildah("rmi", "-f", image, check=False)
    return result


def repo_context(dest: Path) -> Path:
    """What the Dockerfile's COPY lines take from the repository root."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, dest / name)
    for name in ("ascendfix", "manifests", "patches"):
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
    result = build_patched(standin_stack, context)
    log = result.stdout + result.stderr
    for pid in ("verl-cuda-probe-off", "torch-shard-overlap-check", "torch-global-plan-check", GRPO):
        assert f"applied         {pid} (applied)" in log, log[-3000:]
    assert "not-applicable  verl-dapo-no-interleave" in log  # a wheel has no recipe/
    assert "4 patch(es) applied" in log
    # The stand-in carries only what the patches edit, so the stage stops at its doctor step, right after
    # apply: until doctor lands on this branch because the command is missing, then because vllm, torch-npu,
    # transformers... are not installed in the stand-in (doctor --strict failing on them is the point).
    assert result.returncode != 0
    assert f'building at STEP "RUN {DOCTOR}"' in log
    assert "No such command 'doctor'" in log if "doctor" not in cli.main.commands else "vllm" in log


def test_a_drifted_stack_fails_the_build(standin_stack, tmp_path):
    result = build_patched(standin_stack, repo_context(tmp_path / "context"))
    log = result.stdout + result.stderr
    assert result.returncode != 0
    assert "error: refused, nothing was changed" in log
    assert f"{GRPO}: {RAY_TRAINER} is not a known original (sha256 differs) and --strict is set" in log
    assert "patch(es) applied" not in log
    assert 'building at STEP "RUN ascendfix apply --profile verl-796871d --device npu --strict"' in log
