"""The profile's patches, as the engine sees them (read-only: no recovery, no writes)."""

from __future__ import annotations

from pathlib import Path

from ascendfix.doctor.context import Context
from ascendfix.doctor.model import Finding, fail, ok, skip, warn
from ascendfix.patching import evaluate, journal
from ascendfix.states import ReasonCode, State


def check_patches(ctx: Context) -> Finding:
    """Each patch of the device: applied, or what stands in the way."""
    chosen = ctx.profile.patches_for(ctx.device)
    if not chosen:
        return skip(f"the profile applies no patch on {ctx.device}")
    targets = ctx.targets()
    roots = dict.fromkeys(t.root for t in targets.values() if t.root is not None)
    interrupted = [root for root in roots if journal.has_journal(root)]
    if interrupted:
        where = ", ".join(map(str, interrupted))
        return fail(
            f"an ascendfix run was interrupted in {where}",
            fix=ctx.site.command("status") + "  # rolls it back",
        )
    statuses = evaluate.statuses(evaluate.Selection(ctx.profile, ctx.device, chosen, targets, {}))
    lines = [_line(s) for s in statuses]
    states = {s.state for s in statuses}
    apply = ctx.site.command("apply")
    if states <= {State.APPLIED}:
        return ok(f"all {len(statuses)} patches applied", *lines)
    blocking = (State.NOT_APPLIED, State.HAND_EDITED, State.PARTIAL, State.DRIFTED)
    fix = "\n".join(dict.fromkeys(_fix(s, apply) for s in statuses if s.state != State.APPLIED))
    if states & set(blocking):
        todo = sum(1 for s in statuses if s.state in blocking)
        return fail(f"{todo} of {len(statuses)} patches not applied", *lines, fix=fix)
    return warn("some patches cannot be applied here", *lines, fix=fix)


def _fix(status: evaluate.PatchStatus, apply: str) -> str:
    """The one fix for a patch, the engine's (as ``status`` gives it): apply where apply takes the file
    (not applied, or hand-edited: apply adopts it), else the fix of what stands in its way."""
    if status.state in (State.NOT_APPLIED, State.HAND_EDITED, State.NOT_APPLICABLE) or not status.hint:
        return apply
    return f"{status.id}: {status.hint}"


def _line(status: evaluate.PatchStatus) -> str:
    """One bullet a patch: its state, and the reason once (a hand edit: the guide's section and the file names)."""
    if status.state == State.HAND_EDITED and status.guide:
        names = ", ".join(Path(f.path).name for f in status.files if f.state == State.HAND_EDITED)
        return f"{status.id}: hand-edited as the guide's {status.guide} says ({names}); apply adopts it"
    return f"{status.id}: {_state_word(status)}" + (f" ({status.reason})" if status.reason else "")


def _state_word(status: evaluate.PatchStatus) -> str:
    """The state as doctor words it: a package that is not there is "not found", not "drifted"."""
    if status.reason_code == ReasonCode.PACKAGE_NOT_FOUND:
        return "not found"
    return f"{status.state} (the guide's {status.guide})" if status.guide else str(status.state)
