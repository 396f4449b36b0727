"""Run the checks concurrently, each isolated and under one deadline."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from ascendfix.doctor.context import Context
from ascendfix.doctor.model import DoctorReport, Finding, Result, fail
from ascendfix.doctor.registry import CHECKS, Check
from ascendfix.errors import AscendfixError, UsageError


def select(only: Iterable[str] = ()) -> list[Check]:
    """The checks to run: all, or those named (a UsageError names the valid ids)."""
    only = list(only)
    unknown = [name for name in only if name not in CHECKS]
    if unknown:
        raise UsageError(f"--only {unknown[0]}: unknown check (valid ids: {', '.join(CHECKS)})")
    return [c for c in CHECKS.values() if not only or c.id in only]


def _isolated(check: Check, ctx: Context) -> Finding:
    """The check's finding; any exception becomes a failed finding carrying the error."""
    try:
        finding = check.function(ctx)
    except AscendfixError as e:  # e.g. --python names an interpreter that cannot run the probe
        return fail(str(e))
    except Exception as e:  # a check must never crash doctor
        return fail(f"the check crashed: {type(e).__name__}: {e}")
    return finding


def run(ctx: Context, only: Iterable[str] = ()) -> DoctorReport:
    """Every selected check's Result, in registry order.

    Checks run in daemon threads: one that is still running at the deadline (``ctx.timeout``
    seconds after the start) is reported as failed, and cannot keep the process alive. A target
    interpreter that cannot answer the probe (``--python`` names no Python) is a UsageError.
    """
    checks = select(only)
    findings: dict[str, Finding] = {}
    threads = []
    for check in checks:

        def work(check: Check = check) -> None:
            findings[check.id] = _isolated(check, ctx)

        thread = threading.Thread(target=work, name=f"doctor-{check.id}", daemon=True)
        thread.start()
        threads.append((check, thread))
    deadline = time.monotonic() + ctx.timeout
    for _, thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    results = []
    for check, _ in threads:
        finding = findings.get(check.id) or fail(f"the check did not finish within {ctx.timeout:g} s")
        results.append(
            Result(check.id, check.title, finding.status, list(finding.messages), finding.fix, finding.details)
        )
    if isinstance(ctx.site.probe_error, UsageError):  # --python names no usable interpreter: one error, not one each
        raise ctx.site.probe_error
    return DoctorReport(ctx.profile.name, ctx.device, results, ctx.device_reason)
