"""Loading profiles and patches: TOML files in (an ``extends`` chain, the patch files), validated records out.

What the records are is :mod:`~ascendfix.profile.records`; each field is read through
:mod:`~ascendfix.profile.schema`'s :class:`~ascendfix.profile.schema.Table`, and a profile's
``[[rules]]`` by :func:`~ascendfix.profile.rules.parse_rule`.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from ascendfix import resources
from ascendfix.errors import UsageError
from ascendfix.profile.device import DEVICES
from ascendfix.profile.records import (
    DEFAULT_VARIANT,
    AcceptedConflict,
    Component,
    Device,
    EnvVar,
    HandEdit,
    Hint,
    Model,
    Patch,
    PatchFile,
    Profile,
    Superseded,
    Variant,
)
from ascendfix.profile.rules import parse_rule
from ascendfix.profile.schema import (
    Table,
    check_relative_path,
    contained_file,
    devices_field,
    is_hex,
    is_id,
    is_override,
    read_toml,
    type_name,
)

COMPONENT_KINDS = ("python", "pypi", "git", "system")
ENV_CHECKS = ("interface",)
MAX_EXTENDS = 16  # profiles in an extends chain
# Checks of a patch's drop_when that upgrade-check runs on a candidate release (``drop_probe``).
DROP_PROBES = {
    "no-site": "the patch's transform finds no site left in its files",
    "sub-quadratic-scan": "torch's own overlap check, run on the release's code, does less than 8x the work "
    "for 4x the chunks of the benchmark's expert layout (slower than n² growth)",
}


def load_patch(path: Path) -> Patch:
    """Read and validate one patch file."""
    top = Table(path, read_toml(path), "")
    pid = top.text("id")
    if not is_id(pid):
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
            if not is_hex(digest, 64, 64):
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
            if not is_id(vname) or vname == DEFAULT_VARIANT:
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


def _hand_edits(top: Table, folder: Path) -> tuple[HandEdit, ...]:
    """``[[hand_edits]]``: each the guide's section, its text, and the transform (a form with no marker) it is."""
    edits = []
    for t in top.tables("hand_edits", required=False):
        guide = t.text("guide")
        if not all(part.isdigit() for part in guide.split(".")):
            t.fail(t.field("guide"), f"{guide!r} is not a section of the guide (e.g. 5.1)")
        edits.append(HandEdit(guide, t.text("text").strip(), _variant(t.table("transform"), "hand-edit", "", folder)))
        t.done()
    return tuple(edits)


def _superseded(t: Table | None) -> Superseded | None:
    if t is None:
        return None
    since = t.text("since")
    if not all(part.isdigit() for part in since.split(".")):
        t.fail(t.field("since"), f"{since!r} is not a release number (e.g. 0.9.0)")
    superseded = Superseded(since, t.text("why"), t.text("fix"))
    t.done()
    return superseded


def _variant(ttable: Table, name: str, why: str, folder: Path) -> Variant:
    """A variant's transform and checked parameters; a file it names resolved inside ``folder``."""
    from ascendfix.transforms import registry
    from ascendfix.transforms.base import MAX_FILE_BYTES

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
            params[key] = contained_file(ttable, ttable.field(key), params[key], folder, MAX_FILE_BYTES)
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
        raise UsageError(f"{path}: extends: expected a profile name or a path, got {type_name(parent_ref)}")
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


def _component(name: str, t: Table) -> Component:
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
        if c.commit is not None and not is_hex(c.commit, 7, 40):
            t.fail(t.field("commit"), f"{c.commit!r} is not a git commit (7 to 40 lowercase hex digits)")
    t.done()
    return c


def _device(name: str, t: Table, path: Path) -> Device:
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
    top = Table(path, data, "")
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
    rules = tuple(parse_rule(rt) for rt in top.tables("rules", required=False))
    if len({r.id for r in rules}) != len(rules):
        top.fail("rules", "two rules have the same id")
    patches = _patches_of(top, devices, dirs)
    vtable = top.table("variants", required=False)
    variants = _variant_choices(vtable, patches, own.get("variants", {})) if vtable is not None else {}
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


def _patches_of(top: Table, devices: dict[str, Device], dirs: tuple[Path, ...]) -> dict[str, Patch]:
    """The patches the devices name, each loaded once from the first of ``dirs`` that has it; refused when an id
    is no patch id or has no file, when a patch is named for a device its file does not allow, or when two
    patches edit one file."""
    patches: dict[str, Patch] = {}
    for dname, device in devices.items():
        for pid in device.patches:
            if pid in patches:
                patch = patches[pid]
            else:
                if not isinstance(pid, str) or not is_id(pid):  # a path would leave the patches/ folders
                    top.fail(f"devices.{dname}.patches", f"{str(pid)[:80]!r} is not a patch id (a-z, 0-9 and '-')")
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
    return patches


def _variant_choices(vtable: Table, patches: dict[str, Patch], own: dict[str, Any]) -> dict[str, str]:
    """The profile's ``[variants]``: patch id -> the variant it chooses (``own``: the manifest's own table)."""
    variants = {}
    for pid, choice in vtable.data.items():
        if pid not in patches:
            if pid in own:  # an inherited choice for a patch this profile dropped is simply moot
                vtable.fail(vtable.field(pid), f"not a patch of this profile (its patches: {', '.join(patches)})")
            continue
        names = [v.name for v in patches[pid].variants]
        if choice not in names:
            vtable.fail(vtable.field(pid), f"unknown variant {choice!r} (expected one of {', '.join(names)})")
        variants[pid] = choice
    vtable.seen.update(vtable.data)
    return variants


def _hint(t: Table) -> Hint:
    override = t.text("override")
    if not is_override(override):
        t.fail(t.field("override"), f"{override!r} is not a Hydra override (key.sub=value, or key.sub)")
    hint = Hint(override, t.text("why"), t.text("guide", required=False), devices_field(t))
    t.done()
    return hint


def _devices(t: Table) -> tuple[str, ...]:
    return t.strings("devices", required=False, choices=DEVICES) or DEVICES


def parse_variants(profile: Profile, values: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``--variant ID=NAME`` values, checked against the profile's patches."""
    chosen = {}
    for value in values:
        pid, sep, name = value.partition("=")
        if not sep or pid not in profile.patches:
            raise UsageError(f"--variant {value!r}: expected ID=NAME with a patch of {profile.name}")
        names = [v.name for v in profile.patches[pid].variants]
        if name not in names:
            raise UsageError(f"--variant {value!r}: {pid} has the variants {', '.join(names)}")
        chosen[pid] = name
    return chosen
