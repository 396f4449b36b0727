"""The Dockerfile and constraints generated from the manifest, and the committed docker/Dockerfile."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ascendfix import export, resources
from ascendfix.cli import main
from ascendfix.profile import manifest
from click.testing import CliRunner
from packaging.requirements import Requirement

from tests.dockerfile import COMMITTED, PROFILE, stages

REPO = Path(__file__).resolve().parent.parent
# The build step, word for word as the issue states it.
APPLY = "ascendfix apply --profile verl-796871d --device npu --strict"
DOCTOR = (
    "ascendfix doctor --profile verl-796871d --device npu "
    "--only python,packages,commits,integrity,patches,conflicts --strict"
)


def test_committed_dockerfile_is_what_the_manifest_generates():
    generated = export.dockerfile(manifest.load_profile(PROFILE))
    assert COMMITTED.read_text() == generated, "docker/Dockerfile is stale: run ascendfix export dockerfile > it"


def test_every_data_folder_is_in_the_wheel_and_the_image():
    """A data folder beside the package reaches the wheel (pyproject's force-include) and the image (a COPY line)
    only where it is named: each of resources.DATA_DIRS is, and nothing else is."""
    try:
        import tomllib  # novermin (the tests run on 3.11)
    except ImportError:  # Python 3.10
        import tomli as tomllib
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    forced = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert forced == {name: f"ascendfix/_data/{name}" for name in resources.DATA_DIRS}
    copied = re.findall(r"^COPY (\S+) /opt/ascendfix/(\S+)$", COMMITTED.read_text(), re.M)
    assert [(a, b) for a, b in copied if a == b] == [("ascendfix", "ascendfix"), *((n, n) for n in resources.DATA_DIRS)]
    assert all((REPO / name).is_dir() for name in resources.DATA_DIRS)


def test_cli_prints_the_same_dockerfile(tmp_path, ascendfix_cli):
    result = ascendfix_cli("export", "dockerfile", "--profile", PROFILE, clean_env=True, env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    assert result.stdout == COMMITTED.read_text()


def test_every_pinned_component_appears_with_its_exact_ref():
    profile = manifest.load_profile(PROFILE)
    stack = stages(COMMITTED)["stack"]
    runs = "\n".join(stack["run"])
    for c in profile.components:
        if "npu" not in c.devices:
            continue
        if c.kind == "pypi":
            assert f'"{c.distribution}=={c.version}"' in runs, c.name
        elif c.kind == "git" and (c.editable or c.subdirectory or c.no_deps):
            folder = f"/src/{c.name}"
            ref = c.commit or f"tags/{c.tag}"
            assert f'git clone --filter=blob:none --no-checkout "{c.repo}" {folder}' in runs, c.name
            assert f'git -C {folder} checkout --detach "{ref}"' in runs, c.name
            if c.subdirectory:
                install = f"pip install -v {folder}/{c.subdirectory}"
            elif c.no_deps:
                install = f"pip install -v --no-build-isolation --no-deps {folder}"
            else:
                install = f"pip install -e {folder}"
            assert install in runs, c.name
        elif c.kind == "git":
            assert f'"{c.distribution} @ git+{c.repo}@{c.commit or c.tag}"' in runs, c.name
    assert 'assert v == "3.10"' in runs
    image, _ = export.base_image(profile)
    assert stack["from"] == image == "quay.io/ascend/manylinux:8.3.rc1-910b-manylinux_2_28-py3.10"


def test_refs_are_pinned_never_branches():
    profile = manifest.load_profile(PROFILE)
    tags = {c.tag for c in profile.components if c.tag}
    stack = stages(COMMITTED)["stack"]
    for key, value in stack["args"].items():
        if key.endswith("_COMMIT"):
            assert re.fullmatch(r"[0-9a-f]{7,40}", value), key
        elif key.endswith("_TAG"):
            assert value in tags, key
    assert not re.search(r"@(main|master)\b|--branch", "\n".join(stack["run"]))


def test_verl_is_an_editable_checkout_and_tensordict_goes_last():
    runs = stages(COMMITTED)["stack"]["run"]
    assert any("pip install -e /src/verl" in r for r in runs)
    assert runs[-1] == 'python3 -m pip install "tensordict==0.10.0"'  # guide 7.1; with its deps (pyvers...)
    constraints_step = next(r for r in runs if "/etc/ascendfix/constraints.txt" in r)
    assert "tensordict" not in constraints_step  # verl's own cap would make its install unresolvable
    assert "pip install -e /src/vllm" in next(r for r in runs if "VLLM_TARGET_DEVICE=empty " in r)


def test_the_image_installs_the_stack_in_the_rl_plugin_readmes_order():
    """MindSpeed-RL rl-plugin/README.MD (branch 2.2.0): vllm, vllm-ascend, transformers, MindSpeed, Megatron,
    verl, then the plugin, whose installer edits verl (found through VERL_PATH) and vllm as text."""
    runs = [" ".join(run.split()) for run in stages(COMMITTED)["stack"]["run"]]
    order = ["/src/vllm ", "/src/vllm_ascend", "/src/transformers", "/src/mindspeed ", "megatron-core @", "/src/verl"]
    where = [next(i for i, r in enumerate(runs) if key in r) for key in [*order, "rl-plugin"]]
    assert where == sorted(where)
    plugin = runs[where[-1]]
    assert plugin.endswith("VERL_PATH=/src/verl python3 -m pip install -v /src/mindspeed_rl/rl-plugin")
    assert 'checkout --detach "a6ce810b5d8f1f8aac10a67647cca99ae30090ec"' in plugin  # branch 2.2.0, not tag v2.2.0
    # README.MD:26-28: its requirements, then COMPILE_CUSTOM_KERNELS=1; built against the torch-npu installed
    vllm_ascend = runs[where[1]]
    assert vllm_ascend.endswith("python3 -m pip install -v --no-build-isolation --no-deps /src/vllm_ascend")
    assert " && COMPILE_CUSTOM_KERNELS=1 " in vllm_ascend
    assert "python3 -m pip install -r /tmp/vllm_ascend-requirements.txt" in vllm_ascend
    # README.MD:18-19 and :41-44: vllm's build requirements first; MindSpeed from gitcode, editable
    assert "pip install -r /src/vllm/requirements/build.txt && VLLM_TARGET_DEVICE=empty" in runs[where[0]]
    assert 'git clone --filter=blob:none --no-checkout "https://gitcode.com/Ascend/MindSpeed.git"' in runs[where[3]]
    assert runs[where[3]].endswith("pip install -e /src/mindspeed")
    assert runs[where[2]].endswith("pip install -e /src/transformers")


def test_the_vllm_ascend_step_drops_only_the_torch_npu_pin_and_pips_options(tmp_path):
    run = next(r for r in stages(COMMITTED)["stack"]["run"] if "/src/vllm_ascend/requirements.txt" in r)
    grep = next(part for part in run.split(" && ") if part.startswith("grep "))
    lines = ["# Install torch_npu", "--pre", "--extra-index-url https://example.org/simple", "torch-npu==2.7.1.dev1"]
    lines += ["torch_npu>=2.7", "Torch.NPU", "torch>=2.7.1", "torch-npu-extra", "numba"]
    (tmp_path / "requirements.txt").write_text("\n".join(lines) + "\n")
    command = re.sub(r"/src/vllm_ascend/|/tmp/", f"{tmp_path}/", grep)
    subprocess.run(["bash", "-o", "pipefail", "-c", command], check=True)
    kept = (tmp_path / "vllm_ascend-requirements.txt").read_text().splitlines()
    assert kept == ["# Install torch_npu", "torch>=2.7.1", "torch-npu-extra", "numba"]


def test_the_patched_stage_puts_stack_path_in_front_of_path():
    text = COMMITTED.read_text()
    patched = text.split("AS patched\n", 1)[1]
    assert patched.startswith("# STACK_PATH")
    assert "ARG STACK_PATH=\nENV PATH=${STACK_PATH:+${STACK_PATH}:}${PATH}\n" in patched
    published, bin_dir, _ = export.PUBLISHED_STACKS[PROFILE]
    assert f"--build-arg STACK_IMAGE={published} --build-arg STACK_PATH={bin_dir} ." in text
    assert published == "swr.cn-south-1.myhuaweicloud.com/ascendhub/verl_pt27_25rc3:a2-arm"


def test_the_image_prepends_the_drivers_libraries_and_names_its_os():
    text = COMMITTED.read_text()
    driver = "/usr/local/Ascend/driver/lib64:/usr/local/Ascend/driver/lib64/driver"
    assert f"ENV LD_LIBRARY_PATH={driver}${{LD_LIBRARY_PATH:+:${{LD_LIBRARY_PATH}}}}" in text.splitlines()
    assert "# os AlmaLinux 8 (/etc/os-release): the base image's; the guide's container is Ubuntu 20.04.6" in text


def test_build_step_is_its_own_stage_on_stack_image():
    parsed = stages(COMMITTED)
    assert list(parsed) == ["stack", "patched"]
    patched = parsed["patched"]
    assert patched["from"] == "stack"  # STACK_IMAGE's default: the stage above
    assert "ARG STACK_IMAGE=stack" in COMMITTED.read_text()
    assert patched["run"] == ["python3 -m pip install /opt/ascendfix", APPLY, DOCTOR]


def bundle(tmp_path, monkeypatch, text: str) -> None:
    """Make ``text`` the bundled verl-796871d manifest (export takes bundled profiles only)."""
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / f"{PROFILE}.toml").write_text(text)
    real = resources.data_dir
    monkeypatch.setattr(resources, "data_dir", lambda name: tmp_path / name if name == "manifests" else real(name))


def test_dockerfile_follows_the_manifest(tmp_path, monkeypatch):
    text = (REPO / "manifests" / f"{PROFILE}.toml").read_text()
    moved = text.replace('version = "0.10.0"', 'version = "0.10.1"').replace(
        "796871d7d092f7cbc6a64e7f4a3796f7a2217f5e", "0123456789abcdef0123456789abcdef01234567"
    )
    bundle(tmp_path, monkeypatch, moved)
    result = CliRunner().invoke(main, ["export", "dockerfile", "--profile", PROFILE])
    assert result.exit_code == 0, result.output
    assert "ARG TENSORDICT_VERSION=0.10.1" in result.output
    assert "ARG VERL_COMMIT=0123456789abcdef0123456789abcdef01234567" in result.output
    assert result.output != COMMITTED.read_text()


def test_unknown_cann_python_pair_is_one_clear_error(tmp_path, monkeypatch):
    text = (REPO / "manifests" / f"{PROFILE}.toml").read_text().replace('version = "8.3.RC1"', 'version = "8.2.RC1"')
    bundle(tmp_path, monkeypatch, text)
    result = CliRunner().invoke(main, ["export", "dockerfile", "--profile", PROFILE])
    assert result.exit_code == 2
    assert "no known base image for CANN 8.2.RC1 with Python 3.10" in result.output
    assert "Traceback" not in result.output


def test_constraints_pin_every_component_of_the_device():
    result = CliRunner().invoke(main, ["export", "constraints", "--profile", PROFILE])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line and not line.startswith("#")]
    assert lines == [
        "torch==2.7.1",
        "torch-npu==2.7.1",
        "vllm @ git+https://github.com/vllm-project/vllm.git@38217877aa70041c0115ee367b75197af9cbc5ad",
        "vllm-ascend @ git+https://github.com/vllm-project/vllm-ascend.git@1de16ead8eecfec8903ec1b330b27a4fa2593c35",
        "transformers @ git+https://github.com/huggingface/transformers.git@8365f70e925",
        "mindspeed @ git+https://gitcode.com/Ascend/MindSpeed.git@1cdd0abd75e40936ad31721c092f57c695dd72c4",
        "megatron-core @ git+https://github.com/NVIDIA/Megatron-LM.git@core_v0.12.1",
        "verl @ git+https://github.com/volcengine/verl.git@796871d7d092f7cbc6a64e7f4a3796f7a2217f5e",
        "verl_npu @ git+https://gitcode.com/Ascend/MindSpeed-RL.git@a6ce810b5d8f1f8aac10a67647cca99ae30090ec"
        "#subdirectory=rl-plugin",
    ]  # tensordict is left out: verl's cap would make any install that reaches verl unresolvable
    last = "# install it last (pip then warns of that conflict): pip install tensordict==0.10.0"
    assert last in result.output.splitlines()


def test_constraints_are_lines_pip_takes_as_constraints():
    """pip's rules for a constraints file: a named requirement, no extras, not editable, no options."""
    text = export.constraints(manifest.load_profile(PROFILE))
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        assert not line.startswith("-"), line
        req = Requirement(line)
        assert req.name and not req.extras and req.marker is None, line
        assert (req.url is None) == (str(req.specifier).startswith("==")), line


@pytest.mark.upstream
def test_pip_installs_with_the_constraints(tmp_path):
    """A real ``pip install -c`` (dry run, metadata only): the file parses, and it holds torch-npu at the pin."""
    (tmp_path / "constraints.txt").write_text(export.constraints(manifest.load_profile(PROFILE)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | {"PIP_CONFIG_FILE": os.devnull}
    env |= {"PIP_CERT": os.environ["PIP_CERT"]} if "PIP_CERT" in os.environ else {}
    a2 = ["--platform", "manylinux_2_28_aarch64", "--python-version", "3.10", "--implementation", "cp"]
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps", "--report", "-"]
    cmd += ["-q", "-c", str(tmp_path / "constraints.txt"), "--only-binary=:all:", *a2, "--target", str(tmp_path / "t")]
    result = subprocess.run([*cmd, "torch-npu"], capture_output=True, text=True, env=env, timeout=600)
    if result.returncode != 0 and "No matching distribution" not in result.stderr and "ERROR" not in result.stderr:
        pytest.skip(f"PyPI cannot be reached: {result.stderr.strip()[-300:]}")
    assert result.returncode == 0, result.stderr
    assert "DEPRECATION" not in result.stderr  # pip warns about constraint forms it will drop
    versions = {i["metadata"]["name"]: i["metadata"]["version"] for i in json.loads(result.stdout)["install"]}
    assert versions == {"torch_npu": "2.7.1"}


def test_cuda_constraints_leave_out_npu_only_components():
    result = CliRunner().invoke(main, ["export", "constraints", "--profile", PROFILE, "--device", "cuda", "--json"])
    assert result.exit_code == 0, result.output
    assert "torch==2.7.1" in result.output and "vllm-ascend" not in result.output and "torch-npu" not in result.output


@pytest.mark.parametrize("command", [["export", "dockerfile"], ["export", "constraints"]])
def test_unknown_profile_is_a_usage_error(command):
    result = CliRunner().invoke(main, [*command, "--profile", "no-such-profile"])
    assert result.exit_code == 2 and "unknown profile 'no-such-profile'" in result.output


def test_the_doctor_step_runs_exactly_the_six_checks_it_names():
    only = DOCTOR.split("--only ")[1].split()[0]
    result = CliRunner().invoke(main, ["doctor", "--device", "npu", "--only", only, "--json"])
    assert result.exit_code in (0, 1), result.output
    checks = [c["id"] for c in json.loads(result.stdout)["checks"]]
    assert checks == ["python", "packages", "commits", "integrity", "patches", "conflicts"]


def test_a_team_profile_file_is_refused_with_the_reason(tmp_path):
    (tmp_path / "team.toml").write_text('extends = "verl-796871d"\nname = "team"\n')
    result = CliRunner().invoke(main, ["export", "dockerfile", "--profile", str(tmp_path / "team.toml")])
    assert result.exit_code == 2 and "export dockerfile takes a bundled profile" in result.output
