"""triage's table of fingerprints (``codes.toml``): loading it, and finding which one a line matches.

A line is searched only for the fingerprints whose literal needles it holds (plus the few
patterns that have none), most specific first.
"""

from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ascendfix.errors import UsageError

CODES = Path(__file__).with_name("codes.toml")


@dataclass(frozen=True)
class Fingerprint:
    """One kind of failure: its code, the regex that finds it, and what to do about it."""

    code: str
    pattern: re.Pattern[str]
    cause: str
    fix: str
    source: str
    needles: tuple[str, ...] = ()  # a line it matches holds one of these; () when the pattern has none
    after: bytes = b""  # fires only below a line that holds this (within LOOKBACK bytes)
    above: re.Pattern[str] | None = None  # searched in the lines just above: its groups stamp, node, rank
    info: bool = False  # also fires on an INFO/DEBUG line (Ray logs its OOM kills and pending requests so)
    handled: re.Pattern[bytes] | None = None  # the line right above its `after` line says the exception was handled
    role: str = ""  # "consequence": it follows another failure (a lost peer, a launcher's SIGTERM), never first;
    # "report": a launcher's entry for a rank's exit (its pid and exit code, not why): the rank's own lines name it
    below: re.Pattern[str] | None = None  # searched in the entry below the line: its last match's code and message
    discount: re.Pattern[bytes] | None = None  # a line it fires on that also matches this is no failure, ...
    discount_why: str = ""  # ... for this reason, said in the output
    where: re.Pattern[str] | None = None  # in the line and the entry below: groups node, pid where it happened


@functools.cache
def fingerprints(path: Path = CODES) -> tuple[Fingerprint, ...]:
    """The table of fingerprints, most specific first."""
    if sys.version_info >= (3, 11):
        import tomllib  # novermin (guarded: Python 3.10 reads tomli, the same parser)
    else:  # pragma: no cover - exercised on the container's Python 3.10
        import tomli as tomllib
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))
        return tuple(
            Fingerprint(
                e["code"],
                re.compile(e["pattern"]),
                e["cause"],
                e["fix"],
                e["source"],
                needles(e["pattern"]),
                e.get("after", "").encode(),
                re.compile(e["above"], re.S) if "above" in e else None,
                bool(e.get("info", False)),
                re.compile(e["handled"].encode()) if "handled" in e else None,
                _role(e.get("role", "")),
                re.compile(e["below"], re.M) if "below" in e else None,
                re.compile(e["discount"].encode()) if "discount" in e else None,
                e["discount_why"] if "discount" in e else "",
                re.compile(e["where"]) if "where" in e else None,
            )
            for e in table["fingerprint"]
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError, re.error) as e:
        raise UsageError(f"{path}: not a valid fingerprint table: {e}") from None


ROLES = ("", "consequence", "report")


def _role(value: str) -> str:
    if value not in ROLES:
        raise ValueError(f"role {value!r} is none of {ROLES[1:]}")
    return value


def needles(pattern: str) -> tuple[str, ...]:
    """The literal text each top-level alternative of ``pattern`` starts with, when every one has 3 characters
    or more (a line the pattern matches holds one of them); else ()."""
    found = []
    for alternative in _alternatives(pattern):
        text, i = re.sub(r"^\(\?<[=!](?:\\.|[^)\\])*\)", "", alternative), 0  # a lookbehind: what it checks is before
        text = re.sub(r"^\(\?(?:P<\w+>|:)", "", text)
        literal = []
        while i < len(text):
            if text[i] == "\\" and i + 1 < len(text) and not text[i + 1].isalnum():
                literal.append(text[i + 1])
                i += 2
            elif text[i] in _SPECIAL:
                break
            else:
                literal.append(text[i])
                i += 1
        if i < len(text) and text[i] in "*?{":
            literal = literal[:-1]  # a quantifier makes the last character optional
        if len(literal) < 3:
            return ()
        found.append("".join(literal))
    return tuple(found)


_SPECIAL = frozenset(".^$*+?{}[]()|\\")


def _alternatives(pattern: str) -> list[str]:
    """``pattern`` split at its top-level ``|``."""
    parts, depth, in_class, start, i = [], 0, False, 0, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            parts.append(pattern[start:i])
            start = i + 1
        i += 1
    return [*parts, pattern[start:]]


class Table:
    """The fingerprints, and which of them a line can match, by the needles it holds."""

    def __init__(self, fingerprints: tuple[Fingerprint, ...]):
        self.fingerprints = fingerprints
        self.always = tuple(i for i, fp in enumerate(fingerprints) if not fp.needles)
        self.afters = tuple(sorted({fp.after for fp in fingerprints if fp.after}))
        owners: dict[str, set[int]] = {}
        for i, fp in enumerate(fingerprints):
            for n in fp.needles:
                owners.setdefault(n, set()).add(i)
        literals = sorted(owners, key=len, reverse=True)
        # a literal found stands for every needle inside it too (the search reports the longest at a place); it
        # looks at every place, so a needle that starts inside another and runs on ("… request", "request {")
        # is found at its own
        self.owners = {lit: sorted({i for n in literals if n in lit for i in owners[n]}) for lit in literals}
        alternatives = "|".join(map(re.escape, literals))
        self.any_needle = re.compile(f"(?=({alternatives}))" if literals else "(?!)")  # literals only: fast

    def match(self, text: str, info: bool = False) -> tuple[int, re.Match[str]] | None:
        """The first fingerprint (by index) that matches ``text``, and its match; on an INFO line
        (``info``) only the fingerprints that fire there."""
        maybe = list(self.always)
        found = {m.group(1) for m in self.any_needle.finditer(text)}
        if found:
            maybe = sorted({*maybe, *(i for lit in found for i in self.owners[lit])})
        for i in maybe:
            fp = self.fingerprints[i]
            if info and not fp.info:
                continue
            m = fp.pattern.search(text)
            if m is not None:
                return i, m
        return None
