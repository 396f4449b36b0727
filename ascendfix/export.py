"""A profile as build inputs: the Dockerfile of its NPU training image, and a pip constraints file.

Both are generated from the manifest and nothing else, so a committed copy can be
checked against it. The Dockerfile has two stages: ``stack`` installs the pinned
components on the CANN base image, and ``patched`` -- built on ``STACK_IMAGE``, by
default that stack -- installs ascendfix and runs the build step (apply, then doctor,
both strict), so any drift between the stack and the manifest fails the image build.
"""

from __future__ import annotations

import re

from ascendfix import resources
from ascendfix.errors import UsageError
from ascendfix.profile.jobenv import prepend_shell
from ascendfix.profile.manifest import bundled_profiles, find_manifest
from ascendfix.profile.records import Component, Profile

IMAGE_DEVICE = "npu"
STACK_STAGE = "stack"
PATCHED_STAGE = "patched"
SOURCE_DIR = "/src"

# (CANN version, Python version) -> the published A2 (910B) base image with both, and where it comes from.
CANN_IMAGES = {
    ("8.3.RC1", "3.10"): (
        "quay.io/ascend/manylinux:8.3.rc1-910b-manylinux_2_28-py3.10",
        "built by github.com/Ascend/cann-container-image (manylinux/8.3.rc1-910b-manylinux_2_28-py3.10/Dockerfile): "
        "CANN 8.3.RC1 toolkit + 910B kernels + NNAL on manylinux_2_28 (AlmaLinux 8, glibc 2.28), "
        "Python 3.10.18 in /usr/local/python3.10.18; the Ubuntu 22.04 CANN 8.3.RC1 images ship Python 3.11 only",
    ),
}

# The guide's own image (2.3: "verl 镜像已发布"), a base for the patched step instead of the stack stage:
# profile -> (pull address, the bin folder of its Python environment, where that comes from).
PUBLISHED_STACKS = {
    "verl-796871d": (
        "swr.cn-south-1.myhuaweicloud.com/ascendhub/verl_pt27_25rc3:a2-arm",
        "/root/miniconda3/envs/verl_pt27_25rc3/bin",
        "MindSpeed-RL a6ce810b docs/verl_docker.md:28; its Python is the conda env of :140-160",
    ),
}

# How MindSpeed-RL's rl-plugin README (a6ce810b, the guide's 2.3 reference) installs each distribution.
README = "MindSpeed-RL a6ce810b rl-plugin/README.MD"
INSTALL_SOURCES = {
    "torch-npu": f"{README}:8-10",
    "vllm": f"{README}:14-19",
    "vllm-ascend": f"{README}:22-28; vllm-ascend 1de16ead Dockerfile:48-53",
    "transformers": f"{README}:31-35",
    "mindspeed": f"{README}:40-44",
    "megatron-core": f"{README}:47-48",
    "verl": f"{README}:51-56",
    "verl_npu": f"{README}:60-73",
}

# Environment a component's build needs, beyond the pins, as that README installs the stack: vllm builds
# for no device, vllm-ascend compiles its custom kernels (with CANN's devlib stubs on the library path, as
# vllm-ascend's own Dockerfile does), and the rl-plugin installer is told where the verl checkout is (it
# edits verl's files there).
INSTALL_ENV = {
    "vllm": "VLLM_TARGET_DEVICE=empty",
    "vllm-ascend": "COMPILE_CUSTOM_KERNELS=1 "
    "LD_LIBRARY_PATH=${LD_LIBRARY_PATH}:${ASCEND_TOOLKIT_HOME}/$(uname -m)-linux/devlib",
    "verl_npu": f"VERL_PATH={SOURCE_DIR}/verl",
}


def _arg(component: Component, what: str) -> str:
    """The build-arg name of one pinned field, e.g. VLLM_ASCEND_COMMIT."""
    return f"{re.sub(r'[^A-Za-z0-9]', '_', component.name).upper()}_{what}"


_PINNED_FIELDS = ("version", "distribution", "repo", "commit", "tag", "subdirectory")


def _components(profile: Profile, device: str) -> list[Component]:
    """The device's components; a pinned field that is not one printable line (a newline would inject lines
    into the constraints file or the Dockerfile) is refused, naming it."""
    profile.device(device)
    components = [c for c in profile.components if device in c.devices]
    for c in components:
        for field in _PINNED_FIELDS:
            value = getattr(c, field, None)
            if isinstance(value, str) and not value.isprintable():
                raise UsageError(
                    f"{profile.source}: components.{c.name}.{field}: {value!r} is not one line of printable "
                    "text; write the pin on one line"
                )
    return components


def _find(components: list[Component], kind: str, name: str | None = None) -> Component | None:
    return next((c for c in components if c.kind == kind and name in (None, c.name)), None)


def _late(profile: Profile, components: list[Component]) -> set[str]:
    """Distributions installed last, over a cap of something installed before: those an accepted conflict
    names, unless its requirer is itself installed without deps (then the requirer gives way, and the pin
    stays where it is)."""
    given_way = {_normalize(c.distribution) for c in components if c.no_deps}
    names = set()
    for conflict in profile.accepted_conflicts:
        if _normalize(conflict.requirer) not in given_way:
            names.add(_requirement_name(conflict.requirement))
    return names


def _requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return _normalize(match.group(1)) if match else ""


def _conflicts_of(profile: Profile, c: Component) -> list:
    """The accepted conflicts whose requirer is component ``c``."""
    return [a for a in profile.accepted_conflicts if _normalize(a.requirer) == _normalize(c.distribution or "")]


def _normalize(name: str | None) -> str:
    """A distribution's name as PEP 503 compares it ("" for a component that has none)."""
    return re.sub(r"[-_.]+", "-", name or "").lower()


def base_image(profile: Profile) -> tuple[str, str]:
    """The CANN base image for the profile's CANN and Python pins, and where it comes from."""
    components = _components(profile, IMAGE_DEVICE)
    cann = _find(components, "system", "cann")
    python = _find(components, "python")
    if cann is None or python is None:
        raise UsageError(f"{profile.source}: components: the image needs a 'cann' system component and a python one")
    key = (cann.version, python.version)
    if key not in CANN_IMAGES:
        known = ", ".join(f"CANN {c} + Python {p}" for c, p in CANN_IMAGES)
        raise UsageError(
            f"{profile.source}: components.cann / components.python: no known base image for CANN {key[0]} "
            f"with Python {key[1]} (known: {known}); add it to ascendfix/export.py CANN_IMAGES"
        )
    return CANN_IMAGES[key]


def constraints(profile: Profile, device: str = IMAGE_DEVICE) -> str:
    """A pip constraints file (``pip install -c FILE``): ``name==version`` for PyPI pins, ``name @ git+URL@ref``
    for git ones. pip takes no editable, extras or unnamed lines there; a distribution installed last, over
    an accepted conflict, is left out, with the command that installs it."""
    components = _components(profile, device)
    late = _late(profile, components)
    lines = [
        f"# pip constraints of profile {profile.name} ({device}), generated by",
        f"# `ascendfix export constraints --profile {profile.name} --device {device}`. Use: pip install -c FILE ...",
    ]
    last = []
    for c in components:
        if c.no_deps:
            for conflict in _conflicts_of(profile, c):
                lines.append(
                    f"# {c.distribution} requires {conflict.requirement} (an accepted conflict): install its "
                    f"{c.requirements} without that line, then it with --no-build-isolation --no-deps"
                )
        if c.kind == "pypi" and _normalize(c.distribution) in late:
            last.append(c)
        elif c.kind == "pypi":
            lines.append(f"{c.distribution}=={c.version}")
        elif c.kind == "git":
            subdirectory = f"#subdirectory={c.subdirectory}" if c.subdirectory else ""
            lines.append(f"{c.distribution} @ git+{c.repo}@{c.commit or c.tag}{subdirectory}")
    for c in last:
        for conflict in profile.accepted_conflicts:
            if _requirement_name(conflict.requirement) == _normalize(c.distribution):
                lines.append(
                    f"# {c.distribution} is left out: {conflict.requirer} requires {conflict.requirement} "
                    "(an accepted conflict), which a constraint would make unresolvable"
                )
        lines.append(f"# install it last (pip then warns of that conflict): pip install {c.distribution}=={c.version}")
    return "\n".join(lines) + "\n"


def _prepended_env(profile: Profile) -> list[str]:
    """``ENV`` lines for the NPU device's prepended variables: in front of the base image's value, never in place."""
    lines = []
    for var in profile.devices[IMAGE_DEVICE].env if IMAGE_DEVICE in profile.devices else ():
        if var.prepend and var.value is not None:  # the manifest gives every prepended variable a value
            lines.append(f"ENV {var.name}={prepend_shell(var.name, var.value)}")
    return lines


def dockerfile(profile: Profile) -> str:
    """The Dockerfile of the profile's NPU image: the ``stack`` stage, then the ascendfix build step.

    Only bundled profiles: the build step copies ascendfix's own manifests/ and patches/ into
    the image, so a team's profile file would not be there to apply.
    """
    if profile.name not in bundled_profiles() or find_manifest(profile.name).resolve() != profile.source.resolve():
        raise UsageError(
            f"{profile.source}: export dockerfile takes a bundled profile ({', '.join(bundled_profiles())}); "
            "bundle a team profile into manifests/ first"
        )
    components = _components(profile, IMAGE_DEVICE)
    image, origin = base_image(profile)
    python = _find(components, "python")
    assert python is not None  # every bundled profile pins its Python (tests/test_export.py builds each)
    late_names = _late(profile, components)
    pypi = [c for c in components if c.kind == "pypi"]
    git = [c for c in components if c.kind == "git"]
    late = [c for c in pypi if _normalize(c.distribution) in late_names]
    pinned = [c for c in pypi if c not in late]
    name = profile.name
    lines = [
        f"# The A2 training image of profile {name}.",
        f"# Generated by `ascendfix export dockerfile --profile {name}` from the manifest; do not edit",
        "# (change the manifest and export again: a test fails when this file and the manifest disagree).",
        "#",
        "# Build from the repository root (see docker/README.md):",
        f"#   docker build --platform linux/arm64 -f docker/Dockerfile -t {name}:npu .",
        "# Only the ascendfix build step, on a stack image built elsewhere:",
        f"#   docker build -f docker/Dockerfile --target {PATCHED_STAGE} --build-arg STACK_IMAGE=IMAGE .",
    ]
    if name in PUBLISHED_STACKS:
        published, bin_dir, where = PUBLISHED_STACKS[name]
        lines += [
            f"# On the guide's published image (guide 2.3; {where}):",
            f"#   docker build -f docker/Dockerfile --target {PATCHED_STAGE} \\",
            f"#     --build-arg STACK_IMAGE={published} --build-arg STACK_PATH={bin_dir} .",
        ]
    lines += [
        "#",
        f"# Base image: {image}",
        f"#   {origin}.",
    ]
    for c in components:
        if c.name == "os":
            guide = f"; the guide's container is {c.guide_value}" if c.guide_value else ""
            lines.append(f"# {c.name} {c.version} ({c.source}): the base image's{guide}; doctor compares it.")
        elif c.kind == "system" and c.name != "cann":
            lines.append(
                f"# {c.name} {c.version} ({c.source}): not installed by this image; doctor checks it where it runs."
            )
    lines += [
        "",
        f"ARG CANN_IMAGE={image}",
        f"ARG STACK_IMAGE={STACK_STAGE}",
        "",
        f"# ---- {STACK_STAGE}: CANN + Python {python.version} + the pinned components, exactly as the manifest says",
        f"FROM ${{CANN_IMAGE}} AS {STACK_STAGE}",
    ]
    for c in pypi:
        lines.append(f"ARG {_arg(c, 'VERSION')}={c.version}")
    for c in git:
        lines.append(f"ARG {_arg(c, 'REPO')}={c.repo}")
        lines.append(f"ARG {_arg(c, 'COMMIT' if c.commit else 'TAG')}={c.commit or c.tag}")
    sources = [INSTALL_SOURCES[c.distribution] for c in pinned if c.distribution in INSTALL_SOURCES]
    lines += [
        'SHELL ["/bin/bash", "-o", "pipefail", "-c"]',
        "ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_CONSTRAINT=/etc/ascendfix/constraints.txt",
        *_prepended_env(profile),
        f'RUN python3 -c \'import sys; v = "%d.%d" % sys.version_info[:2]; '
        f'assert v == "{python.version}", "Python " + v + ", expected {python.version}"\'',
        "# PyPI pins as constraints, so no later install can move them",
        "RUN mkdir -p /etc/ascendfix && printf '%s\\n' \\",
        *[f'      "{c.distribution}==${{{_arg(c, "VERSION")}}}" \\' for c in pinned],
        "      > /etc/ascendfix/constraints.txt",
        *([f"# from PyPI ({'; '.join(sources)})"] if sources else []),
        "RUN python3 -m pip install " + " ".join(f'"{c.distribution}==${{{_arg(c, "VERSION")}}}"' for c in pinned),
    ]
    for c in git:
        lines += _git_install(profile, c)
    for c in late:
        reasons = "; ".join(
            f"{a.requirer} requires {a.requirement}"
            for a in profile.accepted_conflicts
            if _requirement_name(a.requirement) == _normalize(c.distribution)
        )
        lines += [
            f"# accepted conflict ({reasons}): {c.distribution} goes last, with its own requirements"
            + (f", as the guide's {c.guide} installs it" if c.guide else ""),
            "# (--no-deps would leave out what it needs); pip warns of the conflict and installs it",
            f'RUN python3 -m pip install "{c.distribution}==${{{_arg(c, "VERSION")}}}"',
        ]
    from ascendfix.doctor import registry  # the build step's checks: doctor's Python environment group

    only = ",".join(registry.image_checks())
    lines += [
        "",
        f"# ---- {PATCHED_STAGE}: the ascendfix build step, on {STACK_STAGE} or on --build-arg STACK_IMAGE=IMAGE",
        "# The build fails when a patch target is not a known original, or the stack drifted from the manifest.",
        f"FROM ${{STACK_IMAGE}} AS {PATCHED_STAGE}",
        "# STACK_PATH: the bin folder of the stack's Python environment, when it is not first on PATH (a conda env)",
        "ARG STACK_PATH=",
        "ENV PATH=${STACK_PATH:+${STACK_PATH}:}${PATH}",
        "COPY pyproject.toml README.md /opt/ascendfix/",
        "COPY ascendfix /opt/ascendfix/ascendfix",
        *(f"COPY {name} /opt/ascendfix/{name}" for name in resources.DATA_DIRS),
        "RUN python3 -m pip install /opt/ascendfix",
        f"RUN ascendfix apply --profile {name} --device {IMAGE_DEVICE} --strict",
        f"RUN ascendfix doctor --profile {name} --device {IMAGE_DEVICE} --only {only} --strict",
    ]
    return "\n".join(lines) + "\n"


def _name_pattern(distribution: str) -> str:
    """An extended regex for a requirement line naming ``distribution`` (any spelling of its name)."""
    return re.sub(r"[-_.]+", "[-_.]", _normalize(distribution)) + "([^a-z0-9._-]|$)"


def _git_install(profile: Profile, c: Component) -> list[str]:
    """The RUN step of one git component: checkout, its requirements file, then it, as its source says."""
    ref = f"${{{_arg(c, 'COMMIT')}}}" if c.commit else f"tags/${{{_arg(c, 'TAG')}}}"
    env = f"{INSTALL_ENV[c.distribution]} " if c.distribution in INSTALL_ENV else ""
    source = f" ({INSTALL_SOURCES[c.distribution]})" if c.distribution in INSTALL_SOURCES else ""
    if not (c.subdirectory or c.editable or c.no_deps or c.requirements):
        url_ref = f"${{{_arg(c, 'COMMIT')}}}" if c.commit else f"${{{_arg(c, 'TAG')}}}"
        return [
            f"# {c.distribution} from git{source}",
            f'RUN {env}python3 -m pip install "{c.distribution} @ git+${{{_arg(c, "REPO")}}}@{url_ref}"',
        ]
    folder = f"{SOURCE_DIR}/{c.name}"
    if c.subdirectory:
        what, install = f"checkout at {folder}, {c.distribution} installed from its {c.subdirectory}/", "-v "
        target = f"{folder}/{c.subdirectory}"
    elif c.no_deps:
        what, install, target = f"checkout at {folder}", "-v --no-build-isolation --no-deps ", folder
    else:
        what, install, target = f"editable checkout at {folder}", "-e ", folder
    lines = [f"# {c.name}: {what}{source}"]
    steps = [
        f'git clone --filter=blob:none --no-checkout "${{{_arg(c, "REPO")}}}" {folder}',
        f'git -C {folder} checkout --detach "{ref}"',
    ]
    conflicts = _conflicts_of(profile, c) if c.no_deps else []
    for conflict in conflicts:
        lines.append(f"# accepted conflict: {c.distribution} requires {conflict.requirement} (see the profile's why)")
    if c.requirements and conflicts:
        dropped = "|".join(_name_pattern(_requirement_name(a.requirement)) for a in conflicts)
        filtered = f"/tmp/{c.name}-requirements.txt"
        lines.append(
            f"# its {c.requirements} without pip's options and the line(s) of: "
            + ", ".join(a.requirement for a in conflicts)
        )
        steps += [
            f"grep -viE '^[[:space:]]*(--|{dropped})' {folder}/{c.requirements} > {filtered}",
            f"python3 -m pip install -r {filtered}",
        ]
    elif c.requirements:
        steps.append(f"python3 -m pip install -r {folder}/{c.requirements}")
    steps.append(f"{env}python3 -m pip install {install}{target}")
    return lines + ["RUN " + " \\\n    && ".join(steps)]
