"""The profile's patches, as the engine sees them (read-only: no recovery, no writes)."""

from __future__ import annotations

from ascendfix.doctor.context import Context
from ascendfix.doctor.model import Finding, fail, ok, skip, warn
from ascendfix.patching import engine, journal
from ascendfix.states import State


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
    statuses = engine.evaluate(engine.Selection(ctx.profile, ctx.device, chosen, targets, {}))
    lines = [f"{s.id}: {s.state}" + (f" ({s.reason})" if s.reason else "") for s in statuses]
    states = {s.state for s in statuses}
    apply = ctx.site.command("apply")
    if states <= {State.APPLIED}:
        return ok(f"all {len(statuses)} patches applied", *lines)
    blocking = (State.NOT_APPLIED, State.PARTIAL, State.DRIFTED)
    if states & set(blocking):
        todo = sum(1 for s in statuses if s.state in blocking)
        return fail(f"{todo} of {len(statuses)} patches not applied", *lines, fix=apply)
    return warn("some patches cannot be applied here", *lines, fix=apply)
