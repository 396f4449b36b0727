"""The committed docker/Dockerfile, and a Dockerfile read stage by stage (test_export, test_stack_install)."""

from __future__ import annotations

import re
from pathlib import Path

from dockerfile_parse import DockerfileParser

REPO = Path(__file__).resolve().parent.parent
COMMITTED = REPO / "docker" / "Dockerfile"
PROFILE = "verl-796871d"


def stages(path: Path) -> dict[str, dict]:
    """Each stage of a Dockerfile: its FROM, its ARG defaults (global ones too), its RUN lines with ARGs expanded."""
    parser = DockerfileParser(path=str(path))
    global_args: dict[str, str] = {}
    result: dict[str, dict] = {}
    current = None
    for item in parser.structure:
        instruction, value = item["instruction"], item["value"]
        if instruction == "FROM":
            image, _, name = value.partition(" AS ")
            current = result[name.strip()] = {"from": _expand(image.strip(), global_args), "args": {}, "run": []}
        elif instruction == "ARG":
            key, _, default = value.partition("=")
            (current["args"] if current else global_args)[key] = default
        elif instruction == "RUN" and current is not None:
            current["run"].append(_expand(value, current["args"]))
    return result


def _expand(text: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), m.group(0)), text)
