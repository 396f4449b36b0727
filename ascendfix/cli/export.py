"""``export dockerfile`` and ``export constraints``: build inputs generated from a profile."""

from __future__ import annotations

import click

from ascendfix import export as exporting
from ascendfix.cli.base import Listing, device_option, json_option, profile_option, render
from ascendfix.profile import manifest


def _echo(text: str) -> None:
    click.echo(text, nl=False)


@click.group(cls=Listing)
def export() -> None:
    """Generate build inputs from a profile: the image's Dockerfile, a pip constraints file."""


@export.command("dockerfile")
@profile_option
@json_option
def export_dockerfile(profile: str, as_json: bool) -> int:
    """Print the Dockerfile of the profile's NPU image (stack stage, then the ascendfix build step)."""
    prof = manifest.load_profile(profile)
    text = exporting.dockerfile(prof)
    image, origin = exporting.base_image(prof)
    data = {"ok": True, "profile": prof.name, "base_image": image, "origin": origin, "dockerfile": text}
    return render(data, as_json, lambda d: _echo(d["dockerfile"]))


@export.command("constraints")
@profile_option
@device_option(help="Whose components to pin.", default="npu", show_default=True)
@json_option
def export_constraints(profile: str, device: str, as_json: bool) -> int:
    """Print a pip constraints file: name==version and name @ git+URL@commit lines."""
    prof = manifest.load_profile(profile)
    data = {"ok": True, "profile": prof.name, "device": device, "constraints": exporting.constraints(prof, device)}
    return render(data, as_json, lambda d: _echo(d["constraints"]))
