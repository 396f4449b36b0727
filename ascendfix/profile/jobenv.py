"""The job's environment: the profile's variables for a device, resolved against the caller's.

``run``, ``env``, ``ray start``, doctor's env check and the Dockerfile all take the job's
variables from here, so every one of them decides alike which value wins (yours over the
profile's; path lists such as LD_LIBRARY_PATH are prepended to, never replaced).
"""

from __future__ import annotations

import resource
from collections.abc import Mapping, Sequence

from ascendfix.profile.records import Profile
from ascendfix.tuples import NamedTuple

ASCENDFIX_ENV = {"PYTHONUNBUFFERED": ("1", "Python output reaches the log (and the live progress) as it is printed.")}


class EnvSetting(NamedTuple):
    """One variable of the job's environment and who decided its value."""

    name: str
    value: str | None
    why: str
    source: str  # profile | user | ascendfix | missing
    profile_value: str | None = None
    prepend: bool = False  # profile_value goes in front of what the variable holds (a path list)


def path_entries(value: str | None) -> list[str]:
    """The non-empty entries of a ``:``-separated path list."""
    return [entry for entry in (value or "").split(":") if entry]


def prepended(prefix: str, current: str | None) -> str:
    """``prefix`` in front of ``current`` (a path list); unchanged when ``current`` already has every entry."""
    have = path_entries(current)
    if current and all(entry in have for entry in path_entries(prefix)):
        return current
    return f"{prefix}:{current}" if current else prefix


def prepend_shell(name: str, prefix: str) -> str:
    """The shell (and Dockerfile ``ENV``) form of prepending: no empty entry when the variable is empty."""
    return f"{prefix}${{{name}:+:${{{name}}}}}"


def resolve_env(profile: Profile, device: str, environ: Mapping[str, str]) -> list[EnvSetting]:
    """The profile's variables for ``device`` plus PYTHONUNBUFFERED; a value set in ``environ`` wins.

    A ``prepend`` variable (LD_LIBRARY_PATH) keeps what ``environ`` holds, with the profile's
    entries put in front unless they are all there already.
    """
    settings = []
    for var in profile.device(device).env:
        if var.prepend and var.value is not None:  # the loader makes a prepended variable carry a value
            current = environ.get(var.name)
            value = prepended(var.value, current)
            source = "user" if value == current else "profile"
            settings.append(EnvSetting(var.name, value, var.why, source, var.value, prepend=True))
            continue
        settings.append(_setting(var.name, var.value, var.why, "profile", environ))
    settings += [_setting(name, value, why, "ascendfix", environ) for name, (value, why) in ASCENDFIX_ENV.items()]
    return settings


def _setting(name: str, value: str | None, why: str, default_source: str, environ: Mapping[str, str]) -> EnvSetting:
    if name in environ:
        return EnvSetting(name, environ[name], why, "user", value)
    return EnvSetting(name, value, why, default_source if value is not None else "missing", value)


def job_environment(settings: Sequence[EnvSetting], environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with the resolved settings added (missing site-specific ones stay unset)."""
    env = dict(environ)
    env.update({s.name: s.value for s in settings if s.value is not None})
    return env


def raise_nofile(wanted: int | None) -> dict[str, int | None]:
    """Raise the open-files limit to ``wanted`` (as far as the hard limit allows); children inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    result: dict[str, int | None] = {"wanted": wanted, "before": soft, "after": soft}
    if wanted is None or soft == resource.RLIM_INFINITY or soft >= wanted:
        return result
    new_hard = hard if hard == resource.RLIM_INFINITY or hard >= wanted else wanted
    for limits in ((wanted, new_hard), (min(wanted, hard), hard)):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, limits)
            break
        except (ValueError, OSError):
            continue
    result["after"] = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return result


def env_notes(settings: Sequence[EnvSetting]) -> list[tuple[str, str]]:
    """``(kind, message)`` for each variable whose value is not simply the profile's: yours won, or unset."""
    notes = []
    for s in settings:
        if s.source == "user" and s.profile_value is not None and s.value != s.profile_value and not s.prepend:
            notes.append(("env", f"{s.name}={s.value or ''} (yours) wins over the profile's {s.profile_value}"))
        elif s.source == "missing":
            notes.append(("hint", f"{s.name} must be set per site: {s.why}"))
    return notes
