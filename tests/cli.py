"""The one way the tests run ``ascendfix`` as a process: :func:`command` builds its command line and
environment, :func:`run` runs it to the end, :func:`start` starts it (a process to watch, signal or feed).

conftest's ``ascendfix_cli`` and ``ascendfix_popen`` fixtures are :func:`run` and :func:`start`; support
modules that cannot take fixtures (tests/cluster.py, tests/machine.py) import them from here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parent.parent


def command(
    *args: object,
    python: object = sys.executable,
    env: dict[str, str] | None = None,
    clean_env: bool = False,
    prefix: Sequence[str] = (),
    code: str | None = None,
    cache: Path | str | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The argv and environment of ``ascendfix ARGS``: ``python -m ascendfix`` of this checkout.

    ``python``: the interpreter; ``env``: variables added to the test's environment (or, with ``clean_env``,
    the whole environment but PYTHONPATH and the cache folder); ``prefix``: words before the command
    (``unshare -n``); ``code``: Python run with ``-c`` (ARGS its ``sys.argv[1:]``) instead of the module, for
    a test that changes something before it calls the CLI; ``cache``: the ``XDG_CACHE_HOME`` (default: the
    test's own).
    """
    base = {} if clean_env else dict(os.environ)
    folder = str(cache if cache is not None else os.environ["XDG_CACHE_HOME"])
    full = {**base, **(env or {}), "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": folder}
    entry = ["-c", code] if code is not None else ["-m", "ascendfix"]
    return [*prefix, str(python), *entry, *map(str, args)], full


def run(
    *args: object,
    cwd: Path | str | None = None,
    timeout: float = 300,
    preexec_fn: Callable[[], object] | None = None,
    **how,
) -> subprocess.CompletedProcess:
    """``ascendfix ARGS`` run to the end, its output captured (text); ``how``: :func:`command`'s keywords."""
    argv, env = command(*args, **how)
    return subprocess.run(
        argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout, preexec_fn=preexec_fn
    )


def start(
    *args: object,
    cwd: Path | str | None = None,
    stdin: int | IO | None = None,
    stdout: int | IO | None = None,
    stderr: int | IO | None = None,
    text: bool = False,
    start_new_session: bool = False,
    preexec_fn: Callable[[], object] | None = None,
    **how,
) -> subprocess.Popen:
    """``ascendfix ARGS`` started, not waited for; ``how``: :func:`command`'s keywords, the rest Popen's."""
    argv, env = command(*args, **how)
    return subprocess.Popen(
        argv,
        env=env,
        cwd=cwd,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        text=text,
        start_new_session=start_new_session,
        preexec_fn=preexec_fn,
    )
