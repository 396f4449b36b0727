"""Profiles and patches: TOML files in, validated immutable records (NamedTuples) out.

A profile (``manifests/*.toml``) pins the software stack of one training job, the
environment each device needs and the patches it applies. A patch (``patches/*.toml``)
is declarative data: which files of which package, which transform with which
parameters, and why. Nothing in either file is ever evaluated as code.
"""

from __future__ import annotations

import copy
import re
import stat
import sys
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple

from ascendfix import resources
from ascendfix.errors import UsageError
from ascendfix.profile import parsecache
from ascendfix.profile.device import DEVICES
from ascendfix.profile.rules import MARKERS, Condition, Rule, RuleAction
from ascendfix.states import State

COMPONENT_KINDS = ("python", "pypi", "git", "system")
ENV_CHECKS = ("interface",)
PATCH_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
COMMIT = re.compile(r"^[0-9a-f]{7,40}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
HINT_OVERRIDE = re.compile(r"^\+{0,2}[A-Za-z_][\w-]*(\.[\w-]+)+(=\S.*)?$")
COMMAND = re.compile(r"^[A-Za-z_][\w-]*([./][\w-]+)*(\.py)?$")
# Checks of a patch's drop_when that upgrade-check runs on a candidate release (``drop_probe``).
DROP_PROBES = {
    "no-site": "the patch's transform finds no site left in its files",
    "sub-quadratic-scan": "torch's own overlap check, run on the release's code, does less than 8x the work "
    "for 4x the chunks of the benchmark's expert layout (slower than n² growth)",
}


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

    @property
    def beyond_guide(self) -> bool:
        """Whether the guide does not set this variable (then ``source`` says who does)."""
        return self.guide is None


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

    def build(self):
        """The transform instance."""
        from ascendfix.transforms import registry

        return registry.build(self.transform, {k: list(v) if isinstance(v, tuple) else v for k, v in self.params})


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


class _Table:
    """A TOML table being validated: typed getters that name file and field on error."""

    def __init__(self, path: Path, data: Any, where: str):
        self.path, self.where = path, where
        if not isinstance(data, dict):
            self.fail(where or "(top level)", f"expected a table, got {_type(data)}")
        self.data = data
        self.seen: set[str] = set()

    def fail(self, field: str, reason: str) -> None:
        raise UsageError(f"{self.path}: {field}: {reason}")

    def field(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def get(self, key: str, kind: type | tuple[type, ...], required: bool = True, default: Any = None) -> Any:
        self.seen.add(key)
        if key not in self.data:
            if required:
                self.fail(self.field(key), "missing required field")
            return default
        value = self.data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            names = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
            self.fail(self.field(key), f"expected {names}, got {_type(value)}")
        return value

    def text(self, key: str, required: bool = True) -> str | None:
        value = self.get(key, str, required)
        if value is not None and not value.strip():
            self.fail(self.field(key), "must not be empty")
        return value

    def strings(self, key: str, required: bool = True, choices: tuple[str, ...] | None = None) -> tuple[str, ...]:
        values = self.get(key, list, required, default=[])
        for i, value in enumerate(values):
            if not isinstance(value, str):
                self.fail(f"{self.field(key)}[{i}]", f"expected a string, got {_type(value)}")
            if choices and value not in choices:
                self.fail(f"{self.field(key)}[{i}]", f"unknown value {value!r} (expected one of {', '.join(choices)})")
        return tuple(values)

    def table(self, key: str, required: bool = True) -> _Table | None:
        value = self.get(key, dict, required)
        return None if value is None else _Table(self.path, value, self.field(key))

    def tables(self, key: str, required: bool = True) -> list[_Table]:
        values = self.get(key, list, required, default=[])
        return [_Table(self.path, v, f"{self.field(key)}[{i}]") for i, v in enumerate(values)]

    def children(self) -> list[tuple[str, _Table]]:
        """Each key of this table whose value is itself a table."""
        return [(key, _Table(self.path, value, self.field(key))) for key, value in self.data.items()]

    def done(self) -> None:
        """Reject keys nobody asked for: a typo must not pass silently."""
        unknown = sorted(set(self.data) - self.seen)
        if unknown:
            allowed = ", ".join(sorted(self.seen))
            self.fail(self.field(unknown[0]), f"unknown key (allowed here: {allowed})")


_TYPE_NAMES = {str: "a string", int: "an integer", bool: "true or false", list: "an array", dict: "a table"}


def _type(value: Any) -> str:
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def read_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file (the same bytes once: :mod:`~ascendfix.profile.parsecache`); failure: one UsageError line."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory, expected a .toml file") from None
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {e.strerror}") from None
    return parsecache.parsed(data, lambda data: _parse_toml(path, data))


def _parse_toml(path: Path, data: bytes) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib  # novermin (guarded: Python 3.10 reads tomli, the same parser)
    else:  # pragma: no cover - exercised on the container's Python 3.10
        import tomli as tomllib
    try:
        parsed = tomllib.loads(data.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: not valid TOML: {e}") from None
    except RecursionError:
        parsed = None
    if parsed is None or _deeper_than(parsed, MAX_NESTING):
        raise UsageError(f"{path}: arrays or tables nested deeper than {MAX_NESTING} levels; no profile needs that")
    return parsed


MAX_NESTING = 32  # of arrays and tables in a TOML file (every later step walks them recursively)
MAX_EXTENDS = 16  # profiles in an extends chain


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` (parsed TOML) nests arrays and tables more than ``limit`` deep (walked without recursion)."""
    todo = [(value, 1)]
    while todo:
        node, depth = todo.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                if depth >= limit:
                    return True
                todo.append((child, depth + 1))
    return False


def check_relative_path(table: _Table, field: str, value: str, within: str = "its package root") -> str:
    """A relative path (to a package's root, or ``within`` another folder): no absolute paths, no '..',
    forward slashes, no control characters."""
    pure = PurePosixPath(value)
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        table.fail(field, f"path {value!r} holds a control character")
    if not value or pure.is_absolute() or "\\" in value or ".." in pure.parts or value.startswith("~"):
        table.fail(field, f"path {value!r} must stay inside {within} (relative, no '..')")
    return str(pure)


def _contained_file(table: _Table, field: str, value: str, folder: Path, limit: int) -> str:
    """The real path of ``value``, a file beside the patch file: relative to ``folder`` and inside it
    (a symlink too), a regular file of at most ``limit`` bytes."""
    rel = check_relative_path(table, field, value, within="the patch folder")
    home = folder.resolve()
    try:
        real = (home / rel).resolve()
        st = real.stat()
    except OSError as e:
        table.fail(field, f"{value!r}: {e.strerror} (looked in {home})")
    if not real.is_relative_to(home):
        table.fail(field, f"{value!r} leads to {real}, outside the patch folder {home}")
    if not stat.S_ISREG(st.st_mode):
        table.fail(field, f"{value!r} is not a regular file")
    if st.st_size > limit:
        table.fail(field, f"{value!r} is {st.st_size} bytes, over the {limit}-byte limit")
    return str(real)


def load_patch(path: Path) -> Patch:
    """Read and validate one patch file."""
    top = _Table(path, read_toml(path), "")
    pid = top.text("id")
    if not PATCH_ID.match(pid):
        top.fail("id", f"{pid!r} is not a patch id (lowercase letters, digits and '-')")
    if path.stem != pid:
        top.fail("id", f"{pid!r} does not match the file name {path.name!r}; name the file {pid}.toml")
    package = top.text("package")
    devices = top.strings("devices", choices=DEVICES)
    files = []
    for ftable in top.tables("files"):
        rel = check_relative_path(ftable, ftable.field("path"), ftable.text("path"))
        sites = ftable.get("sites", int, required=False, default=1)
        if sites < 1:
            ftable.fail(ftable.field("sites"), "must be at least 1")
        preimages = []
        for ptable in ftable.tables("preimages", required=False):
            digest = ptable.text("sha256").lower()
            if not SHA256.match(digest):
                ptable.fail(ptable.field("sha256"), "expected 64 hex digits")
            preimages.append((digest, ptable.text("label")))
            ptable.done()
        files.append(PatchFile(rel, sites, ftable.get("only_in_checkout", bool, False, False), tuple(preimages)))
        ftable.done()
    if not files:
        top.fail("files", "a patch must name at least one file")
    if len({f.path for f in files}) != len(files):
        top.fail("files", "the same path is listed twice")
    variants_table = top.table("variants", required=False)
    if variants_table is None:
        variants = [_variant(top.table("transform"), DEFAULT_VARIANT, "", path.parent)]
    else:
        if "transform" in top.data:
            top.fail("transform", "a patch has either [transform] or [variants.<name>], not both")
        variants = []
        for vname, vtable in variants_table.children():
            if not PATCH_ID.match(vname) or vname == DEFAULT_VARIANT:
                vtable.fail(vtable.where, f"{vname!r} is not a variant name (lowercase letters, digits and '-')")
            variants.append(_variant(vtable.table("transform"), vname, vtable.text("why"), path.parent))
            vtable.done()
        variants_table.seen.update(variants_table.data)
        if not variants:
            top.fail("variants", "name at least one variant")
    patch = Patch(
        id=pid,
        package=package,
        devices=devices,
        files=tuple(files),
        variants=tuple(variants),
        why=top.text("why"),
        references=top.strings("references", required=False),
        drop_when=top.text("drop_when"),
        source=path,
        caveat=top.text("caveat", required=False),
        superseded=_superseded(top.table("superseded", required=False)),
        drop_probe=top.text("drop_probe", required=False),
        hand_edits=_hand_edits(top, path.parent),
    )
    if patch.drop_probe is not None and patch.drop_probe not in DROP_PROBES:
        top.fail("drop_probe", f"unknown probe {patch.drop_probe!r} (known: {', '.join(DROP_PROBES)})")
    top.done()
    return patch


def _hand_edits(top: _Table, folder: Path) -> tuple[HandEdit, ...]:
    """``[[hand_edits]]``: each the guide's section, its text, and the transform (a form with no marker) it is."""
    edits = []
    for t in top.tables("hand_edits", required=False):
        guide = t.text("guide")
        if not all(part.isdigit() for part in guide.split(".")):
            t.fail(t.field("guide"), f"{guide!r} is not a section of the guide (e.g. 5.1)")
        edits.append(HandEdit(guide, t.text("text").strip(), _variant(t.table("transform"), "hand-edit", "", folder)))
        t.done()
    return tuple(edits)


def _superseded(t: _Table | None) -> Superseded | None:
    if t is None:
        return None
    since = t.text("since")
    if not all(part.isdigit() for part in since.split(".")):
        t.fail(t.field("since"), f"{since!r} is not a release number (e.g. 0.9.0)")
    superseded = Superseded(since, t.text("why"), t.text("fix"))
    t.done()
    return superseded


def _variant(ttable: _Table, name: str, why: str, folder: Path) -> Variant:
    """A variant's transform and checked parameters; a file it names resolved inside ``folder``."""
    from ascendfix.transforms import registry

    tname = ttable.text("name")
    params = {k: v for k, v in ttable.data.items() if k != "name"}
    ttable.seen.update(params)
    transform = registry.get(tname)
    if transform is None:
        ttable.fail(ttable.field("name"), f"unknown transform {tname!r} (known: {', '.join(registry.names())})")
    problem = registry.check_params(transform, params)
    if problem:
        ttable.fail(ttable.field(problem[0]), problem[1])
    for key in registry.FILE_PARAMS:
        if key in params:
            params[key] = _contained_file(ttable, ttable.field(key), params[key], folder, registry.MAX_FILE_BYTES)
    ttable.done()
    frozen = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in params.items()))
    return Variant(name, tname, frozen, why)


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge tables; any other value in ``override`` replaces the base's."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _resolve_extends(path: Path, data: dict[str, Any], chain: tuple[Path, ...]) -> tuple[dict, tuple[Path, ...]]:
    """Follow ``extends`` to the root; return the merged data and each manifest's folder, child first."""
    parent_ref = data.get("extends")
    if parent_ref is None:
        return data, (path.parent,)
    if not isinstance(parent_ref, str):
        raise UsageError(f"{path}: extends: expected a profile name or a path, got {_type(parent_ref)}")
    parent_path = find_manifest(parent_ref, relative_to=path.parent)
    if parent_path.resolve() in chain:
        raise UsageError(f"{path}: extends: {parent_ref!r} leads back to itself")
    if len(chain) >= MAX_EXTENDS:
        raise UsageError(f"{path}: extends: more than {MAX_EXTENDS} profiles deep; extend one nearer the root")
    parent_data, dirs = _resolve_extends(parent_path, read_toml(parent_path), chain + (parent_path.resolve(),))
    child = {k: v for k, v in data.items() if k != "extends"}
    merged = _merge({k: v for k, v in parent_data.items() if k != "name"}, child)
    for device, table in (child.get("devices") or {}).items():
        if isinstance(table, dict):
            parent_device = (parent_data.get("devices") or {}).get(device) or {}
            merged["devices"][device]["patches"] = _device_patches(path, device, parent_ref, parent_device, table)
            merged["devices"][device].pop("add_patches", None)
            merged["devices"][device].pop("drop_patches", None)
    return merged, (path.parent,) + dirs


def _device_patches(path: Path, device: str, parent_ref: str, parent: dict, child: dict) -> list[str]:
    """An extending profile's patch list for ``device``: the parent's, plus ``add_patches``, minus
    ``drop_patches``; a whole ``patches`` list must keep every parent patch it does not drop."""
    where = f"{path}: devices.{device}"
    inherited = list(parent.get("patches") or [])
    lists = {}
    for key in ("patches", "add_patches", "drop_patches"):
        value = child.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise UsageError(f"{where}.{key}: expected an array of patch ids")
        lists[key] = value
    stray = [pid for pid in lists["drop_patches"] if pid not in inherited]
    if stray:
        raise UsageError(f"{where}.drop_patches: {stray[0]!r} is not a patch of {parent_ref} on {device}")
    if "patches" in child:
        left_out = [p for p in inherited if p not in lists["patches"] and p not in lists["drop_patches"]]
        if left_out:
            raise UsageError(
                f"{where}.patches: leaves out {', '.join(left_out)} of {parent_ref}; use add_patches = [...] "
                "to add to the parent's list, and drop_patches = [...] to drop a patch on purpose"
            )
    chosen = lists["patches"] if "patches" in child else inherited
    chosen = list(dict.fromkeys([*chosen, *lists["add_patches"]]))
    return [p for p in chosen if p not in lists["drop_patches"]]


def bundled_profiles() -> list[str]:
    """Names of the profiles that ship with ascendfix."""
    return sorted(p.stem for p in resources.data_dir("manifests").glob("*.toml"))


def find_manifest(ref: str, relative_to: Path | None = None) -> Path:
    """A manifest path from a bundled profile name or a file path."""
    candidate = Path(ref).expanduser()
    if relative_to is not None and not candidate.is_absolute():
        candidate = relative_to / candidate
    if ref.endswith(".toml") or "/" in ref or candidate.is_file():
        if not candidate.is_file():
            raise UsageError(f"{ref}: no such manifest file")
        return candidate
    bundled = resources.data_dir("manifests") / f"{ref}.toml"
    if bundled.is_file():
        return bundled
    raise UsageError(
        f"unknown profile {ref!r}: bundled profiles are {', '.join(bundled_profiles())}; "
        "or pass the path of a manifest file"
    )


def _find_patch(pid: str, manifest_dirs: tuple[Path, ...]) -> Path | None:
    for folder in manifest_dirs:
        candidate = folder / "patches" / f"{pid}.toml"
        if candidate.is_file():
            return candidate
    bundled = resources.data_dir("patches") / f"{pid}.toml"
    return bundled if bundled.is_file() else None


def _component(name: str, t: _Table) -> Component:
    kind = t.text("kind")
    if kind not in COMPONENT_KINDS:
        t.fail(t.field("kind"), f"unknown kind {kind!r} (expected one of {', '.join(COMPONENT_KINDS)})")
    c = Component(
        name=name,
        kind=kind,
        why=t.text("why"),
        version=t.text("version", required=kind in ("python", "pypi", "system")),
        distribution=t.text("distribution", required=kind in ("pypi", "git")),
        repo=t.text("repo", required=kind == "git"),
        commit=t.text("commit", required=False),
        tag=t.text("tag", required=False),
        editable=t.get("editable", bool, False, False),
        source=t.text("source", required=False),
        devices=t.strings("devices", required=False) or DEVICES,
        subdirectory=t.text("subdirectory", required=False),
        requirements=t.text("requirements", required=False),
        no_deps=t.get("no_deps", bool, False, False),
        guide=t.text("guide", required=False),
        guide_value=t.text("guide_value", required=False),
    )
    for key in ("subdirectory", "requirements"):
        if getattr(c, key) is not None:
            check_relative_path(t, t.field(key), getattr(c, key))
    if kind != "git" and (c.requirements is not None or c.no_deps):
        t.fail(t.field("requirements" if c.requirements is not None else "no_deps"), "only a git component has this")
    for i, d in enumerate(c.devices):
        if d not in DEVICES:
            t.fail(f"{t.field('devices')}[{i}]", f"unknown device {d!r} (expected one of {', '.join(DEVICES)})")
    if kind == "git":
        if (c.commit is None) == (c.tag is None):
            t.fail(t.field("commit"), "a git component needs exactly one of 'commit' or 'tag'")
        if c.commit is not None and not COMMIT.match(c.commit):
            t.fail(t.field("commit"), f"{c.commit!r} is not a git commit (7 to 40 lowercase hex digits)")
    t.done()
    return c


def _device(name: str, t: _Table, path: Path) -> Device:
    env = []
    env_table = t.table("env", required=False)
    for var, vt in env_table.children() if env_table else []:
        check = vt.text("check", required=False)
        if check is not None and check not in ENV_CHECKS:
            vt.fail(vt.field("check"), f"unknown check {check!r} (expected one of {', '.join(ENV_CHECKS)})")
        var_entry = EnvVar(
            var,
            vt.text("why"),
            vt.text("value", required=False),
            check,
            vt.get("prepend", bool, False, False),
            vt.text("guide", required=False),
            vt.text("guide_value", required=False),
            vt.text("source", required=False),
        )
        if var_entry.prepend and var_entry.value is None:
            vt.fail(vt.field("prepend"), "a prepended variable needs a value")
        env.append(var_entry)
        vt.done()
    if env_table:
        env_table.seen.update(env_table.data)
    ulimit = t.get("ulimit_nofile", int, required=False)
    if ulimit is not None and ulimit < 1:
        t.fail(t.field("ulimit_nofile"), "must be a positive integer")
    per_node = t.get("accelerators_per_node", int, required=False)
    if per_node is not None and per_node < 1:
        t.fail(t.field("accelerators_per_node"), "must be a positive integer")
    ray = t.table("ray", required=False)
    device = Device(
        name,
        t.text("description"),
        tuple(env),
        t.strings("patches", required=False),
        ulimit,
        t.text("ulimit_guide", required=False),
        ray.text("head", required=False) if ray else None,
        ray.text("worker", required=False) if ray else None,
        ray.text("guide", required=False) if ray else None,
        per_node,
    )
    if ray:
        ray.done()
    t.done()
    return device


def load_profile(ref: str) -> Profile:
    """Load a bundled profile by name, or a manifest file by path, fully validated."""
    path = find_manifest(ref)
    own = read_toml(path)
    data, dirs = _resolve_extends(path, copy.deepcopy(own), (path.resolve(),))
    top = _Table(path, data, "")
    schema = top.get("schema", int)
    if schema != 1:
        top.fail("schema", f"unsupported schema {schema} (this ascendfix reads schema 1)")
    name = top.text("name")
    description = top.text("description")
    components_table = top.table("components")
    components = tuple(_component(n, ct) for n, ct in components_table.children())
    components_table.seen.update(components_table.data)
    devices_table = top.table("devices")
    devices = {}
    for dname, dt in devices_table.children():
        if dname not in DEVICES:
            top.fail(f"devices.{dname}", f"unknown device (expected one of {', '.join(DEVICES)})")
        devices[dname] = _device(dname, dt, path)
    devices_table.seen.update(devices_table.data)
    conflicts = []
    for ct in top.tables("accepted_conflicts", required=False):
        conflicts.append(AcceptedConflict(ct.text("requirer"), ct.text("requirement"), ct.text("why")))
        ct.done()
    hints = tuple(_hint(ht) for ht in top.tables("hints", required=False))
    trainer_table = top.table("trainer", required=False)
    trainer: tuple[str, ...] = ()
    if trainer_table is not None:
        trainer = trainer_table.strings("commands")
        if not trainer:
            trainer_table.fail(trainer_table.field("commands"), "name at least one module or script")
        trainer_table.text("source")
        trainer_table.done()
    model_table = top.table("model", required=False)
    model = None
    if model_table is not None:
        model = Model(model_table.text("name"), model_table.get("parameters", int), model_table.text("source"))
        if model.parameters <= 0:
            model_table.fail(model_table.field("parameters"), "a positive count of parameters")
        model_table.done()
    rules = tuple(_rule(rt) for rt in top.tables("rules", required=False))
    if len({r.id for r in rules}) != len(rules):
        top.fail("rules", "two rules have the same id")
    patches: dict[str, Patch] = {}
    for dname, device in devices.items():
        for pid in device.patches:
            if pid in patches:
                patch = patches[pid]
            else:
                patch_path = _find_patch(pid, dirs)
                if patch_path is None:
                    top.fail(f"devices.{dname}.patches", f"no patch file for {pid!r} (looked in patches/ folders)")
                patch = patches[pid] = load_patch(patch_path)
            if dname not in patch.devices:
                top.fail(
                    f"devices.{dname}.patches",
                    f"{pid!r} must not be applied on {dname} (its patch file allows {', '.join(patch.devices)})",
                )
    seen_files: dict[tuple[str, str], str] = {}
    for patch in patches.values():
        for f in patch.files:
            other = seen_files.setdefault((patch.package, f.path), patch.id)
            if other != patch.id:
                top.fail("devices", f"patches {other!r} and {patch.id!r} both edit {f.path}; one patch per file")
    variants = {}
    vtable = top.table("variants", required=False)
    for pid, choice in vtable.data.items() if vtable else []:
        if pid not in patches:
            if pid in own.get("variants", {}):  # an inherited choice for a patch this profile dropped is simply moot
                vtable.fail(vtable.field(pid), f"not a patch of this profile (its patches: {', '.join(patches)})")
            continue
        names = [v.name for v in patches[pid].variants]
        if choice not in names:
            vtable.fail(vtable.field(pid), f"unknown variant {choice!r} (expected one of {', '.join(names)})")
        variants[pid] = choice
    if vtable:
        vtable.seen.update(vtable.data)
    top.seen.add("extends")
    top.done()
    own_rules = "rules" in own
    for i, rule in enumerate(rules):
        for j, cond in enumerate(rule.when):
            if cond.patch is not None and cond.patch not in patches and own_rules:
                top.fail(f"rules[{i}].when[{j}].patch", f"{cond.patch!r} is not a patch of this profile")
    # an inherited rule about a patch this profile dropped can never hold
    rules = tuple(r for r in rules if all(c.patch is None or c.patch in patches for c in r.when))
    return Profile(
        name, description, path, components, devices, tuple(conflicts), patches, variants, hints, rules, trainer, model
    )


def _hint(t: _Table) -> Hint:
    override = t.text("override")
    if not HINT_OVERRIDE.match(override):
        t.fail(t.field("override"), f"{override!r} is not a Hydra override (key.sub=value, or key.sub)")
    hint = Hint(override, t.text("why"), t.text("guide", required=False), _devices(t))
    t.done()
    return hint


def _devices(t: _Table) -> tuple[str, ...]:
    return t.strings("devices", required=False, choices=DEVICES) or DEVICES


CONDITION_SUBJECTS = ("env", "override", "command", "module", "patch")


def _rule(t: _Table) -> Rule:
    rid = t.text("id")
    if not PATCH_ID.match(rid):
        t.fail(t.field("id"), f"{rid!r} is not a rule id (lowercase letters, digits and '-')")
    action = t.text("action")
    if action not in tuple(RuleAction):
        t.fail(t.field("action"), f"unknown action {action!r} (expected one of {', '.join(RuleAction)})")
    when = tuple(_condition(ct) for ct in t.tables("when"))
    if not when:
        t.fail(t.field("when"), "a rule needs at least one condition")
    fix = t.text("fix", required=False)
    rule = Rule(rid, RuleAction(action), when, t.text("why"), t.text("source"), fix, _devices(t))
    t.done()
    return rule


def _condition(t: _Table) -> Condition:
    subjects = [s for s in CONDITION_SUBJECTS if s in t.data]
    if len(subjects) != 1:
        t.fail(t.where, f"name exactly one of {', '.join(CONDITION_SUBJECTS)}")
    subject = subjects[0]
    if subject in ("override", "command"):
        keys = t.get(subject, (str, list))
        keys = (keys,) if isinstance(keys, str) else t.strings(subject)
        for i, key in enumerate(keys):
            if subject == "override" and (not HINT_OVERRIDE.match(key) or "=" in key or key[0] in "+~"):
                t.fail(f"{t.field('override')}[{i}]", f"{key!r} is not a Hydra key (key.sub)")
            if subject == "command" and not COMMAND.match(key):
                t.fail(f"{t.field('command')}[{i}]", f"{key!r} is not a module (a.b) or a script path (dir/x.py)")
    else:
        keys = (t.text(subject),)
    allowed = {
        "env": ("contains", "equals", "not_equals", "is_set", "default"),
        "override": ("contains", "equals", "not_equals", "truthy", "is_set", "default"),
        "command": (),
        "module": ("importable", "marker", "present"),
        "patch": ("state", "applied"),
    }[subject]
    tests = [k for k in t.data if k not in CONDITION_SUBJECTS]
    for key in tests:
        if key not in allowed:
            t.fail(t.field(key), f"unknown key for a {subject} condition (allowed: {', '.join(allowed) or 'none'})")
    if allowed and not [k for k in tests if k != "default"]:
        t.fail(t.where, f"a {subject} condition needs one of {', '.join(k for k in allowed if k != 'default')}")
    marker = t.text("marker", required=False)
    if marker is not None and marker not in MARKERS:
        t.fail(t.field("marker"), f"unknown marker {marker!r} (known: {', '.join(MARKERS)})")
    if subject == "module" and ("marker" in t.data) != ("present" in t.data):
        t.fail(t.where, "a marker condition needs both marker and present")
    if subject == "module" and "marker" in t.data and "importable" in t.data:
        t.fail(t.field("importable"), "a module condition tests importable or a marker, not both")
    if subject == "patch" and "state" in t.data and "applied" in t.data:
        t.fail(t.field("applied"), "a patch condition tests state or applied, not both")
    state = t.text("state", required=False)
    if state is not None and state not in tuple(State):
        t.fail(t.field("state"), f"unknown state {state!r} (expected one of {', '.join(State)})")
    cond = Condition(
        env=keys[0] if subject == "env" else None,
        overrides=keys if subject == "override" else (),
        command=keys if subject == "command" else (),
        module=keys[0] if subject == "module" else None,
        patch=keys[0] if subject == "patch" else None,
        contains=t.text("contains", required=False),
        equals=t.get("equals", str, required=False),
        not_equals=t.get("not_equals", str, required=False),
        truthy=t.get("truthy", bool, required=False),
        is_set=t.get("is_set", bool, required=False),
        importable=t.get("importable", bool, required=False),
        marker=marker,
        present=t.get("present", bool, required=False),
        state=State(state) if state is not None else None,
        applied=t.get("applied", bool, required=False),
        default=t.get("default", str, required=False),
    )
    t.done()
    return cond


def parse_variants(profile: Profile, values: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``--variant PATCH_ID=NAME`` values, checked against the profile's patches."""
    chosen = {}
    for value in values:
        pid, sep, name = value.partition("=")
        if not sep or pid not in profile.patches:
            raise UsageError(f"--variant {value!r}: expected PATCH_ID=NAME with a patch of {profile.name}")
        names = [v.name for v in profile.patches[pid].variants]
        if name not in names:
            raise UsageError(f"--variant {value!r}: {pid} has the variants {', '.join(names)}")
        chosen[pid] = name
    return chosen


def to_json(obj: Any) -> Any:
    """A tree of records (NamedTuples) as plain JSON-ready data."""
    if hasattr(obj, "_asdict"):
        return {k: to_json(v) for k, v in obj._asdict().items()}
    if isinstance(obj, (list, tuple)):
        return [to_json(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_json(v) for k, v in obj.items()}
    if isinstance(obj, Path):
        return str(obj)
    return obj
