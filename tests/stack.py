"""The demo workspace as a test fixture (see ascendfix/demo.py), with helpers to compare trees."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ascendfix import demo
from ascendfix.profile import manifest

# The demo profile as an object, for tests that call the engine directly.
DEMO_PROFILE = manifest.load_profile("verl-796871d")._replace(
    name="verl-796871d-demo",
    variants={"torch-shard-overlap-check": "skip", "torch-global-plan-check": "skip"},
)
DEMO_PATCHES = DEMO_PROFILE.devices["npu"].patches  # what the demo applies, in the profile's order
PATCHED = [(patch.package, f.path) for patch in DEMO_PROFILE.patches.values() for f in patch.files]


@dataclass
class Stack:
    verl: Path
    torch: Path
    profile: Path  # verl-796871d with the skip variant of the torch patches (the stand-ins are not real torch)

    def root(self, package: str) -> Path:
        return {"verl": self.verl, "torch": self.torch}[package]

    def file(self, package: str, rel: str) -> Path:
        return self.root(package) / rel

    def snapshot(self) -> dict[tuple[str, str], bytes]:
        return {(pkg, rel): self.file(pkg, rel).read_bytes() for pkg, rel in PATCHED if self.file(pkg, rel).exists()}

    def roots(self) -> dict[str, Path]:
        return {"verl": self.verl, "torch": self.torch}

    def root_args(self) -> list[str]:
        return ["--profile", str(self.profile), "--root", f"verl={self.verl}", "--root", f"torch={self.torch}"]


def make_stack(base: Path, checkout: bool = True) -> Stack:
    """The demo's fake verl checkout (or site-packages layout) and torch site-packages under ``base``."""
    workspace = demo.build(base, checkout)
    return Stack(workspace.verl, workspace.torch, workspace.profile)


def select(stack: Stack, device: str | None = "npu", only=(), profile=DEMO_PROFILE):
    """The engine's selection of ``profile``'s patches (all, or ``only``) for ``device`` over the stack's roots."""
    from ascendfix.patching import engine
    from ascendfix.site import Site

    return engine.select(Site(profile, device, roots=stack.roots()), tuple(only))


UNSET = object()


def fake_preflight(mp, doctor=(), states=UNSET, importable=UNSET, markers=UNSET, seams=None) -> None:
    """Make preflight see this machine's stack as given, through ``mp`` (a ``pytest.MonkeyPatch``):
    doctor's failures (None: doctor cannot run), the patch states (None: unknown; default: every patch
    of the site's device applied), whether the rules' modules are importable and carry their markers
    (None: unknown), and the outside seams (default: none, so no Ray cluster of the machine is asked)."""
    from ascendfix.job import preflight
    from ascendfix.site import Site

    def all_applied(site):
        return {pid: ("applied", "") for pid in site.profile.devices[site.device].patches}

    failures = None if doctor is None else [preflight.Finding("doctor", message) for message in doctor]
    mp.setattr(preflight, "doctor_failures", lambda site, overrides=None: failures)
    mp.setattr(preflight, "patch_states", lambda site: all_applied(site) if states is UNSET else states)
    if importable is not UNSET:
        mp.setattr(Site, "importable", lambda self, names: {name: importable for name in names})
    if markers is not UNSET:
        mp.setattr(Site, "markers", lambda self, pairs: {pair: markers for pair in pairs})
    mp.setattr(preflight, "default_seams", lambda smoke=False: seams or preflight.Seams())
