"""What a profile is: the immutable records (NamedTuples) a validated manifest and its patches become.

A profile (``manifests/*.toml``) pins the software stack of one training job, the
environment each device needs and the patches it applies. A patch (``patches/*.toml``)
is declarative data: which files of which package, which transform with which
parameters, and why. :mod:`~ascendfix.profile.manifest` loads them; nothing in either file
is ever evaluated as code.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ascendfix.errors import UsageError
from ascendfix.profile.device import DEVICES
from ascendfix.profile.rules import Rule
from ascendfix.tuples import NamedTuple

if TYPE_CHECKING:
    from ascendfix.transforms.base import Transform


class Component(NamedTuple):
    """One pinned piece of the stack and how to recognise it on a machine."""

    name: str
    kind: str
    why: str
    version: str | None = None
    distribution: str | None = None
    repo: str | None = None
    commit: str | None = None
    tag: str | None = None
    editable: bool = False
    source: str | None = None
    devices: tuple[str, ...] = DEVICES
    subdirectory: str | None = None  # where in the repository the distribution's project is
    requirements: str | None = None  # a requirements file of the checkout, installed before the component
    no_deps: bool = False  # installed --no-build-isolation --no-deps, against what is already installed
    guide: str | None = None  # the deployment guide's section that names this component
    guide_value: str | None = None  # the guide's own value, where the pin deliberately differs


class EnvVar(NamedTuple):
    """A variable the job needs; ``value`` None means the site must choose it.

    ``prepend``: ``value`` is a ``:``-separated list put in front of what the variable
    already holds (``LD_LIBRARY_PATH``), never in place of it. ``guide`` is the deployment
    guide's section that sets the variable; a variable without one is beyond the guide and
    names its ``source`` (upstream file at a pinned commit, an issue, vendor docs).
    """

    name: str
    why: str
    value: str | None = None
    check: str | None = None
    prepend: bool = False
    guide: str | None = None
    guide_value: str | None = None
    source: str | None = None


class Device(NamedTuple):
    """What one kind of accelerator needs: environment, limits, and the patches it takes."""

    name: str
    description: str
    env: tuple[EnvVar, ...]
    patches: tuple[str, ...]
    ulimit_nofile: int | None = None
    ulimit_guide: str | None = None
    ray_head: str | None = None  # the ``ray start`` command lines of the guide, for show and env
    ray_worker: str | None = None
    ray_guide: str | None = None
    accelerators_per_node: int | None = None  # what `ray start` registers when the node itself cannot say


class AcceptedConflict(NamedTuple):
    """A requirement that the installed stack knowingly violates."""

    requirer: str
    requirement: str
    why: str


class Model(NamedTuple):
    """The model the profile trains: its name and parameter count (what sizes a checkpoint), with its source."""

    name: str
    parameters: int
    source: str


class Hint(NamedTuple):
    """A Hydra override the profile recommends (``key=value``, or a bare ``key`` that should be set)."""

    override: str
    why: str
    guide: str | None = None
    devices: tuple[str, ...] = DEVICES


class PatchFile(NamedTuple):
    """One file a patch edits, relative to the directory that holds the package."""

    path: str
    sites: int = 1
    only_in_checkout: bool = False
    preimages: tuple[tuple[str, str], ...] = ()  # (sha256, label) of known originals

    def preimage_label(self, sha256: str) -> str | None:
        """The label of a known original with this hash, or None."""
        return next((label for digest, label in self.preimages if digest == sha256), None)


class Variant(NamedTuple):
    """One way to carry out a patch: a transform and its parameters."""

    name: str
    transform: str
    params: tuple[tuple[str, Any], ...]
    why: str = ""

    def build(self) -> Transform:
        """The transform instance, built once per variant (a transform holds only its parameters)."""
        key = (self.transform, repr(self.params))
        built = _BUILT.get(key)
        if built is None:
            from ascendfix.transforms import registry

            params = {k: list(v) if isinstance(v, tuple) else v for k, v in self.params}
            built = _BUILT[key] = registry.build(self.transform, params)
        return built


_BUILT: dict[tuple[str, str], Transform] = {}  # (transform, its parameters) -> the instance


DEFAULT_VARIANT = "default"


class HandEdit(NamedTuple):
    """The guide's own edit of a patch's sites, as a team types it by hand: a known state that apply adopts."""

    guide: str  # the guide's section ("5.1")
    text: str  # the guide's text of the edit (its code, or its words where it shows only a picture)
    form: Variant  # the transform whose forward is the hand edit (no marker) and whose inverse undoes it


class Superseded(NamedTuple):
    """From which release of the patch's package a better lever than the patch exists, and what it is."""

    since: str
    why: str  # completes "<package> <version> ..."
    fix: str


class Patch(NamedTuple):
    """A declarative edit of upstream code, with its rationale.

    A patch has one ``[transform]`` (its variant is called ``default``) or several named
    ``[variants.<name>]``, of which the profile chooses one (the first by default).
    """

    id: str
    package: str
    devices: tuple[str, ...]
    files: tuple[PatchFile, ...]
    variants: tuple[Variant, ...]
    why: str
    references: tuple[str, ...]
    drop_when: str
    source: Path
    caveat: str | None = None  # warned on apply (e.g. a setting the patch does not go with)
    superseded: Superseded | None = None  # doctor's hazards check warns from that release on
    drop_probe: str | None = None  # a key of DROP_PROBES: drop_when, checked on a release
    hand_edits: tuple[HandEdit, ...] = ()  # the guide's hand edits of these files (``[[hand_edits]]``)


class Profile(NamedTuple):
    """A validated manifest with its patches resolved."""

    name: str
    description: str
    source: Path
    components: tuple[Component, ...]
    devices: dict[str, Device]
    accepted_conflicts: tuple[AcceptedConflict, ...]
    patches: dict[str, Patch]
    variants: dict[str, str]  # patch id -> the variant the profile chooses
    hints: tuple[Hint, ...] = ()
    rules: tuple[Rule, ...] = ()
    trainer: tuple[str, ...] = ()  # the modules that run verl's trainer: its overrides' rules and hints apply there
    model: Model | None = None

    def variant(self, pid: str, override: dict[str, str] | None = None) -> Variant:
        """The variant of patch ``pid`` to apply: ``override``, else the profile's choice, else the first."""
        patch = self.patches[pid]
        name = (override or {}).get(pid) or self.variants.get(pid) or patch.variants[0].name
        return next(v for v in patch.variants if v.name == name)

    def device(self, name: str) -> Device:
        """The device called ``name``; a UsageError naming the ones the profile defines otherwise."""
        if name not in self.devices:
            raise UsageError(f"--device {name}: profile {self.name} defines only {', '.join(self.devices)}")
        return self.devices[name]

    def component(self, name: str) -> Component | None:
        """The component called ``name``, if the profile pins one."""
        return next((c for c in self.components if c.name == name), None)

    def patches_for(self, device: str) -> tuple[Patch, ...]:
        """The patches the profile applies on ``device``, in manifest order."""
        return tuple(self.patches[pid] for pid in self.devices[device].patches)
