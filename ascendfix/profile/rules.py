"""Rules for settings that break each other: plain data in, plain data out.

A profile's ``[[rules]]`` each name conditions over the job's effective environment, its
Hydra overrides, the command it runs, what the target interpreter can import (and what a
module's file holds: a :data:`MARKERS` entry) and the patches' states. A rule whose
conditions all hold is a :class:`Hit`: ``refuse`` stops ``ascendfix run``, ``warn`` only
says so. A condition the facts cannot decide (no overrides known, no patch states) leaves
its rule undecided, never fired. Overrides are verl's trainer's: a rule about them does not
apply to a command that runs none of verl's trainers, and one only about them needs the
command (doctor, which sees none, leaves it undecided). Nothing here prints, imports a
package or reads a file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ascendfix.profile.device import DEVICES
from ascendfix.profile.schema import Table, devices_field, is_command, is_id, is_override
from ascendfix.states import Name, State
from ascendfix.tuples import NamedTuple


class RuleAction(Name):
    """What a rule that holds does (``action`` in the profile)."""

    REFUSE = "refuse"
    WARN = "warn"


REFUSE, WARN = RuleAction
TRUE_WORDS = ("true", "1", "yes")


def _imports_plugin(source: bytes) -> bool:
    from ascendfix.profile import rl_plugin  # loaded when a rule asks, not with every profile

    return rl_plugin.imports_plugin(source)


class Marker(NamedTuple):
    """Something a module's file holds, that a rule can ask about (``marker = NAME`` in a module condition)."""

    file: str  # relative to the module's package folder
    what: str  # in words, for messages
    test: Callable[[bytes], bool]


MARKERS = {
    "rl-plugin-import": Marker("__init__.py", "the rl-plugin's import verl_npu block", _imports_plugin),
}


class Condition(NamedTuple):
    """One test over one subject: an env variable, Hydra override keys (any of them), the command
    (any of the modules or scripts it names), a module, a patch.

    ``default`` stands for the value when the variable or override is unset (for an override:
    verl's own config default, which the job gets when it does not set the key).
    """

    env: str | None = None
    overrides: tuple[str, ...] = ()
    command: tuple[str, ...] = ()
    module: str | None = None
    patch: str | None = None
    contains: str | None = None
    equals: str | None = None
    not_equals: str | None = None
    truthy: bool | None = None
    is_set: bool | None = None
    importable: bool | None = None
    marker: str | None = None
    present: bool | None = None
    state: str | None = None
    applied: bool | None = None
    default: str | None = None

    def describe(self) -> str:
        """The condition in words, e.g. ``PYTORCH_NPU_ALLOC_CONF contains 'expandable_segments:True'``."""
        subject = self.env or " or ".join(self.overrides) or self.module or self.patch or "?"
        if self.command:
            return f"the command runs {' or '.join(self.command)}"
        if self.marker is not None:
            marker = MARKERS[self.marker]
            return f"{subject}'s {marker.file} {'has' if self.present else 'lacks'} {marker.what}"
        if self.module is not None:
            return f"{subject} is {'' if self.importable else 'not '}importable"
        if self.patch is not None:
            if self.applied is not None:
                return f"patch {subject} is {'' if self.applied else 'not '}applied"
            return f"patch {subject} is {self.state}"
        if self.is_set is not None:
            test = "is set" if self.is_set else "is unset"
        elif self.truthy is not None:
            test = "is true" if self.truthy else "is not true"
        elif self.equals is not None:
            test = f"= {self.equals!r}"
        elif self.not_equals is not None:
            test = f"is not {self.not_equals!r}"
        else:
            test = f"contains {self.contains!r}"
        unset = f" (unset counts as {self.default!r})" if self.default is not None else ""
        return f"{subject} {test}{unset}"


class Rule(NamedTuple):
    """A combination that breaks a job, why, who says so, and what to do."""

    id: str
    action: RuleAction
    when: tuple[Condition, ...]
    why: str
    source: str
    fix: str | None = None
    devices: tuple[str, ...] = DEVICES


class Facts(NamedTuple):
    """What is known about the job. ``None`` means unknown (the rules that need it stay undecided).

    ``runs``: the modules and scripts of the profile's that the command runs; ``trainer``:
    whether one of them is verl's trainer (False: the rules about overrides do not apply);
    ``markers``: ``{(module, marker): whether its file has it}``.
    """

    env: Mapping[str, str]
    overrides: Mapping[str, str] | None = None
    importable: Mapping[str, bool] | None = None
    patch_states: Mapping[str, str] | None = None
    runs: frozenset[str] | None = None
    trainer: bool | None = None
    markers: Mapping[tuple[str, str], bool | None] | None = None


class Hit(NamedTuple):
    """A rule whose conditions all hold, with the values that made them hold."""

    rule: str
    action: RuleAction
    message: str
    why: str
    source: str
    fix: str | None


class Outcome(NamedTuple):
    """The rules that fired, and those the facts could not decide."""

    hits: list[Hit]
    undecided: list[str]

    @property
    def refusals(self) -> list[Hit]:
        """The hits that stop a launch."""
        return [h for h in self.hits if h.action == REFUSE]


def _truthy(value: str) -> bool:
    return value.strip().strip("'\"").lower() in TRUE_WORDS


def _value_test(cond: Condition, value: str | None) -> bool:
    if value is None:
        value = cond.default
    if cond.is_set is not None:
        return (value is not None) == cond.is_set
    if value is None:
        return cond.truthy is False  # unset is "not true", and never equals or contains anything
    if cond.truthy is not None:
        return _truthy(value) == cond.truthy
    if cond.equals is not None:
        return value.strip().strip("'\"") == cond.equals
    if cond.not_equals is not None:
        return value.strip().strip("'\"") != cond.not_equals
    return cond.contains is not None and cond.contains in value


def check(cond: Condition, facts: Facts) -> tuple[bool | None, str]:
    """Whether ``cond`` holds (None: unknown), and what was seen."""
    if cond.env is not None:
        value = facts.env.get(cond.env)
        return _value_test(cond, value), f"{cond.env}={value}" if value is not None else f"{cond.env} unset"
    if cond.overrides:
        if facts.overrides is None:
            return None, ""
        present = [k for k in cond.overrides if k in facts.overrides]
        if cond.is_set is not None:  # any of the keys set
            seen = ", ".join(f"{k}={facts.overrides[k]}" for k in present) or "none set"
            return bool(present) == cond.is_set, seen
        key = present[0] if present else cond.overrides[0]
        value = facts.overrides.get(key)
        seen = f"{key}={value}" if value is not None else f"{key} unset (default {cond.default})"
        return _value_test(cond, value), seen
    if cond.command:
        if facts.runs is None:
            return None, ""
        ran = [name for name in cond.command if name in facts.runs]
        return bool(ran), f"the command runs {ran[0]}" if ran else ""
    if cond.marker is not None and cond.module is not None:
        found = (facts.markers or {}).get((cond.module, cond.marker))
        if found is None:
            return None, ""
        marker = MARKERS[cond.marker]
        return found == cond.present, f"{cond.module}'s {marker.file} {'has' if found else 'lacks'} {marker.what}"
    if cond.module is not None:
        if facts.importable is None or cond.module not in facts.importable:
            return None, ""
        found = facts.importable[cond.module]
        return found == cond.importable, f"{cond.module} {'importable' if found else 'not importable'}"
    if facts.patch_states is None or cond.patch is None or cond.patch not in facts.patch_states:
        return None, ""
    state = facts.patch_states[cond.patch]
    in_effect = State.APPLIED if state == State.HAND_EDITED else state  # the guide's hand edit works as the patch
    if cond.applied is not None:
        return (in_effect == State.APPLIED) == cond.applied, f"{cond.patch} is {state}"
    return in_effect == cond.state, f"{cond.patch} is {state}"


def evaluate(rules: tuple[Rule, ...] | list[Rule], facts: Facts, device: str | None = None) -> Outcome:
    """Each rule (for ``device``, when given) against the facts: hits and undecided rule ids."""
    outcome = Outcome([], [])
    for rule in rules:
        if device is not None and device not in rule.devices:
            continue
        if facts.trainer is False and any(c.overrides for c in rule.when):
            continue  # the command runs none of verl's trainers: its overrides are not verl's
        if facts.trainer is None and all(c.overrides for c in rule.when):
            outcome.undecided.append(rule.id)  # only about the job's command, which is not known
            continue
        seen, unknown, holds = [], False, True
        for cond in rule.when:
            result, what = check(cond, facts)
            if result is None:
                unknown = True
            elif not result:
                holds = False
                break
            else:
                seen.append(what)
        if not holds:
            continue
        if unknown:
            outcome.undecided.append(rule.id)
            continue
        message = f"{rule.id}: {'; '.join(seen)}: {' '.join(rule.why.split())}"
        outcome.hits.append(Hit(rule.id, rule.action, message, rule.why, rule.source, rule.fix))
    return outcome


def modules(rules: tuple[Rule, ...] | list[Rule]) -> list[str]:
    """The modules the rules ask about (to locate in the target interpreter)."""
    return sorted({c.module for r in rules for c in r.when if c.module is not None})


def markers(rules: tuple[Rule, ...] | list[Rule]) -> list[tuple[str, str]]:
    """The ``(module, marker)`` pairs the rules ask about (to read in the module's file)."""
    return sorted(
        {(c.module, c.marker) for r in rules for c in r.when if c.module is not None and c.marker is not None}
    )


def commands(rules: tuple[Rule, ...] | list[Rule]) -> list[str]:
    """The modules and scripts the rules' command conditions name (to look for in the job's command)."""
    return sorted({name for r in rules for c in r.when for name in c.command})


CONDITION_SUBJECTS = ("env", "override", "command", "module", "patch")


def parse_rule(t: Table) -> Rule:
    """One ``[[rules]]`` table of a profile, validated."""
    rid = t.text("id")
    if not is_id(rid):
        t.fail(t.field("id"), f"{rid!r} is not a rule id (lowercase letters, digits and '-')")
    action = t.text("action")
    if action not in tuple(RuleAction):
        t.fail(t.field("action"), f"unknown action {action!r} (expected one of {', '.join(RuleAction)})")
    when = tuple(_condition(ct) for ct in t.tables("when"))
    if not when:
        t.fail(t.field("when"), "a rule needs at least one condition")
    fix = t.text("fix", required=False)
    rule = Rule(rid, RuleAction(action), when, t.text("why"), t.text("source"), fix, devices_field(t))
    t.done()
    return rule


def _condition(t: Table) -> Condition:
    subjects = [s for s in CONDITION_SUBJECTS if s in t.data]
    if len(subjects) != 1:
        t.fail(t.where, f"name exactly one of {', '.join(CONDITION_SUBJECTS)}")
    subject = subjects[0]
    if subject in ("override", "command"):
        keys = t.get(subject, (str, list))
        keys = (keys,) if isinstance(keys, str) else t.strings(subject)
        for i, key in enumerate(keys):
            if subject == "override" and (not is_override(key) or "=" in key or key[0] in "+~"):
                t.fail(f"{t.field('override')}[{i}]", f"{key!r} is not a Hydra key (key.sub)")
            if subject == "command" and not is_command(key):
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
