"""Launching a job with a profile's environment: resolved env, run.json, process group, signals, tee.

The child's bytes go to this process's stdout/stderr unchanged and to ``train.log``; each
complete line is also fed to a :class:`~ascendfix.job.metrics.StepParser`. Nothing here prints
anything else: a live status line is drawn by the ``StatusLine`` the caller passes in, and what
the caller must say (a signal forwarded, a log that could no longer be written) goes to ``notify``.
Once the job has started, nothing ascendfix fails to write harms it: its output is still drained
and shown, and its own exit status is returned.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import os
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from ascendfix.errors import RefusedError, UsageError
from ascendfix.job.beside import Beside
from ascendfix.job.metrics import MAX_PARTIAL_LINE, Step, StepParser
from ascendfix.job.redact import job_variables, redact_argv, redact_overrides, redact_variable
from ascendfix.jsonable import jsonable, loads
from ascendfix.profile.jobenv import EnvSetting, raise_nofile
from ascendfix.site import Site

GRACE_S = 30.0
_LINK = "a symbolic link: ascendfix does not write through links"
_PIPE_SIZE = 1 << 20


def run_record(
    profile: str,
    device: str,
    argv: Sequence[str],
    settings: Sequence[EnvSetting],
    env: Mapping[str, str],
    log_dir: Path,
) -> dict[str, Any]:
    """What run.json records before the launch: command, profile, the env decisions, and the job's own
    variables (the profile's and those of the libraries it runs), every secret redacted."""
    return {
        "command": redact_argv(argv),
        "cwd": os.getcwd(),
        "profile": profile,
        "device": device,
        "log_dir": str(log_dir),
        "started": now(),
        "env": [
            s._replace(
                value=redact_variable(s.name, s.value), profile_value=redact_variable(s.name, s.profile_value)
            )._asdict()
            for s in settings
        ],
        "environment": job_variables(env, own=[s.name for s in settings]),
    }


def command_for(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> list[str]:
    """The argv to execute. ``train.sh`` names the script in this folder when no command on PATH has
    that name (``ascendfix run train.sh`` as the README says it); a non-executable ``*.sh`` runs
    under bash; another file that is not executable, or a command that is neither a file nor on
    ``PATH``, or a folder, is a UsageError saying so (before any log folder exists)."""
    if not argv:
        raise UsageError("run: give the command or script to run")
    name = argv[0]
    first = Path(name)
    path = (environ if environ is not None else os.environ).get("PATH", os.defpath)
    if first.is_dir() and ("/" in name or shutil.which(name, path=path) is None):
        raise UsageError(f"{argv[0]}: is a folder: give the training script")
    if first.is_file() and not os.access(first, os.X_OK):
        if first.suffix == ".sh":
            return ["bash", *argv]
        raise UsageError(f"{argv[0]}: not executable (chmod +x {argv[0]}, or run: ascendfix run bash {argv[0]})")
    if "/" not in name and first.is_file() and shutil.which(name, path=path) is None:
        name = f"./{name}"
    elif "/" in name and not first.exists() or "/" not in name and shutil.which(name, path=path) is None:
        raise UsageError(f"{argv[0]}: command not found")
    return [name, *argv[1:]]


def new_log_dir(base: Path = Path("ascendfix-runs")) -> Path:
    """A fresh ``<base>/<UTC time>`` folder (0700), ``-2``, ``-3``... when another run took that second."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    base.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        folder = base / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            folder.mkdir(mode=0o700)
            return folder
        except FileExistsError:
            n += 1


def write_run_json(log_dir: Path, record: Mapping[str, Any]) -> Path:
    """Write ``<log-dir>/run.json`` atomically, 0600: a private temp file (``O_EXCL|O_NOFOLLOW``, after a
    leftover is removed) renamed into place, so nothing planted in the folder is followed."""
    path = log_dir / "run.json"
    tmp = path.with_suffix(".json.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(jsonable(record), indent=2) + "\n")
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):  # nothing half-written is left (a full disk, say)
            tmp.unlink()
        raise
    return path


def _record(log_dir: Path, record: Mapping[str, Any], notify: Callable[[str], None] | None) -> None:
    """Write run.json while the job runs or once it ended; when it cannot be, ``notify`` says so, one line."""
    try:
        write_run_json(log_dir, record)
    except OSError as e:
        if notify is not None:
            notify(f"ascendfix: {log_dir / 'run.json'}: cannot write: {e.strerror or e}; the run is not recorded there")


_MAX_RUN_JSON = 1 << 20


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def what_ran(log: Path) -> dict[str, Any] | None:
    """What the ``run.json`` beside ``log`` (a train.log, or its folder) says the run ran: profile,
    device, command and the patches applied (``id`` or ``id (variant)``; None when it did not record
    them). None when there is no readable run.json there (a log ascendfix did not write)."""
    path = (log if log.is_dir() else log.parent) / "run.json"
    try:
        if path.is_symlink() or not path.is_file():
            return None
        with open(path, "rb") as f:
            data = loads(f.read(_MAX_RUN_JSON))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    patches = data.get("patches")
    applied = None
    if isinstance(patches, list) and all(isinstance(p, dict) for p in patches):
        states = [p.get("state") for p in patches]
        if None not in states or not patches:
            applied = [
                f"{p.get('id')}" + (f" ({p.get('variant')})" if p.get("variant") not in (None, "default") else "")
                for p in patches
                if p.get("state") == "applied"
            ]
    command = data.get("command")
    return {
        "run_json": str(path),
        "profile": _text(data.get("profile")),
        "device": _text(data.get("device")),
        "command": " ".join(c for c in command if isinstance(c, str)) if isinstance(command, list) else None,
        "patches": applied,
    }


def now() -> str:
    """The current UTC time, ISO 8601."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def require_folder(option: str, path: Path) -> None:
    """A UsageError when the folder that would hold ``path`` is not there (as a shell's ``>`` would say)."""
    if not path.parent.is_dir():
        raise UsageError(f"{option} {path}: no such folder {path.parent}; create it first")


def metrics_writer(path: Path) -> Callable[[Step], None]:
    """A callback appending each new step to a JSONL file in verl's ``file`` logger format (emptied now): a plain
    file, opened once, never through a symlink (like ``run``'s other files); a UsageError when it cannot be."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        why = f"is {_LINK}" if e.errno == errno.ELOOP else f"cannot write: {e.strerror}"
        raise UsageError(f"--json-metrics {path}: {why}; give a plain file's path") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UsageError(f"--json-metrics {path}: not a plain file; give a plain file's path")
    os.ftruncate(fd, 0)
    out = os.fdopen(fd, "a")

    def write(step: Step) -> None:
        out.write(json.dumps({"step": step.step, "data": step.values}) + "\n")
        out.flush()

    return write


class StatusLine(Protocol):
    """A live status line drawn around the child's output (by the CLI): ``clear`` before each chunk,
    ``draw`` after a chunk that ended a line and on idle ticks; ``draw`` decides how often to paint."""

    def clear(self) -> None: ...

    def draw(self) -> None: ...


@dataclass
class LaunchResult:
    """How the job ended."""

    exit_status: int
    forwarded: str | None = None  # the signal forwarded to the job, if any
    killed: bool = False  # SIGKILLed after the grace period


def launch(
    argv: Sequence[str],
    env: Mapping[str, str],
    log_dir: Path,
    parser: StepParser,
    status: StatusLine | None = None,
    grace_s: float = GRACE_S,
    notify: Callable[[str], None] | None = None,
    beside: Beside | None = None,
) -> LaunchResult:
    """Run ``argv`` in its own process group, tee its output to ``<log-dir>/train.log``, forward signals.

    SIGINT and SIGTERM are passed to the job's process group; a second one, or the end of the
    grace period, sends SIGKILL; ``notify`` is told each time what is being done. The exit
    status is the job's (128 + N when signal N ended it). ``beside``: the watch, started when the
    job's Ray cluster answers; when it asks for it (``abort``), the job gets SIGTERM as from a signal.
    """
    log = _Log(log_dir / "train.log", open_log(log_dir), notify)
    try:
        proc = subprocess.Popen(
            list(argv), env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )
    except FileNotFoundError:
        log.close()
        raise UsageError(f"{argv[0]}: command not found") from None
    except PermissionError:
        log.close()
        raise UsageError(f"{argv[0]}: not executable (chmod +x it, or run it as: bash {argv[0]})") from None
    result = LaunchResult(exit_status=0)
    deadline: list[float] = []

    def forward(signum: int, _frame: Any) -> None:
        if result.forwarded is not None:
            _killpg(proc.pid, signal.SIGKILL)
            result.killed = True
            if notify is not None:
                notify("ascendfix: SIGKILL sent to the job's process group")
            return
        result.forwarded = signal.Signals(signum).name
        _killpg(proc.pid, signum)
        deadline.append(time.monotonic() + grace_s)
        if notify is not None:
            notify(
                f"ascendfix: {result.forwarded} forwarded to the job's process group; waiting up to {grace_s:g} s "
                "for it to end, then SIGKILL (Ctrl-C again to kill it now)"
            )

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            _pump(proc, log, parser, status, deadline, result, beside, lambda: forward(signal.SIGTERM, None))
        finally:
            log.close()
        code = proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if beside is not None:
            beside.close()
    result.exit_status = 128 - code if code < 0 else code
    return result


def open_log(log_dir: Path) -> BinaryIO:
    """``<log-dir>/train.log`` for appending (0600), never through a symlink; a UsageError when it cannot be."""
    path = log_dir / "train.log"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UsageError(f"{path}: is {_LINK}; remove it") from None
        raise UsageError(f"{path}: cannot write the job's log: {e.strerror}") from None
    return os.fdopen(fd, "ab")


class _Log:
    """The job's ``train.log``, written chunk by chunk: when a write fails (a full disk), ``notify`` is told
    once which file, and the job's output is kept there no longer (it still goes to the terminal)."""

    def __init__(self, path: Path, file: BinaryIO, notify: Callable[[str], None] | None):
        self.path, self.file, self.notify = path, file, notify
        self.lost = False

    def write(self, chunk: bytes) -> None:
        """Append ``chunk``, unbuffered; a failure stops the log, never the job."""
        if self.lost:
            return
        try:
            self.file.write(chunk)
            self.file.flush()
        except OSError as e:
            self.lost = True
            with contextlib.suppress(OSError):
                self.file.close()
            if self.notify is not None:
                self.notify(
                    f"ascendfix: {self.path}: cannot write: {e.strerror or e}; the job's output is no longer kept "
                    "there (it still goes to the terminal)"
                )

    def close(self) -> None:
        """Close the file; what is lost is already said."""
        with contextlib.suppress(OSError):
            self.file.close()


def _killpg(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        pass


def _pump(
    proc: subprocess.Popen,
    log: _Log,
    parser: StepParser,
    status: StatusLine | None,
    deadline: list[float],
    result: LaunchResult,
    beside: Beside | None = None,
    stop_job: Callable[[], None] = lambda: None,
) -> None:
    """Copy the child's stdout/stderr to ours and to the log until both close (or the child is gone);
    read the watch beside it (``stop_job`` when it asks to abort)."""
    sel = selectors.DefaultSelector()
    assert proc.stdout is not None and proc.stderr is not None  # launched with stdout=PIPE, stderr=PIPE
    sinks = {proc.stdout.fileno(): sys.stdout.buffer, proc.stderr.fileno(): sys.stderr.buffer}
    partial = {fd: b"" for fd in sinks}
    for fd in sinks:
        sel.register(fd, selectors.EVENT_READ)
        with contextlib.suppress(OSError, AttributeError):  # Linux only: fewer, larger reads from a chatty job
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
    exited_at: float | None = None
    watch_fd: int | None = None
    while any(fd in sel.get_map() for fd in sinks):
        if beside is not None:
            if watch_fd is None and (watch_fd := beside.tick()) is not None:
                sel.register(watch_fd, selectors.EVENT_READ)
            if beside.abort and result.forwarded is None:
                stop_job()
        if deadline and not result.killed and time.monotonic() > deadline[0]:
            _killpg(proc.pid, signal.SIGKILL)
            result.killed = True
        if exited_at is None and proc.poll() is not None:
            exited_at = time.monotonic()
        if exited_at is not None and time.monotonic() - exited_at > 2.0:
            break  # the job is gone; only a daemon it left behind still holds the pipes
        ready = sel.select(timeout=0.2)
        if not ready and status is not None and not any(partial.values()):
            status.draw()
        for key, _ in ready:
            fd = key.fd
            if fd == watch_fd:
                if beside is not None and not beside.read():
                    sel.unregister(fd)
                continue
            chunk = os.read(fd, _PIPE_SIZE)
            if not chunk:
                sel.unregister(fd)
                continue
            if status is not None:
                status.clear()
            sinks[fd].write(chunk)
            sinks[fd].flush()
            log.write(chunk)
            data = partial[fd] + chunk
            cut = data.rfind(b"\n") + 1
            parser.feed_lines(data[:cut])
            partial[fd] = data[cut:] if len(data) - cut <= MAX_PARTIAL_LINE else b""
            if status is not None and not partial[fd]:
                status.draw()
    for registered in list(sel.get_map()):
        sel.unregister(registered)
    sel.close()
    for rest in partial.values():
        parser.feed_lines(rest)


@dataclass(frozen=True)
class Prepared:
    """A job checked and resolved, not yet started: what ``run`` shows before it launches."""

    site: Site  # the profile on its device, interpreter and roots, with the --variant choices and environment
    argv: list[str]
    overrides: dict[str, str]
    preflight: Any  # a preflight.Preflight


def prepare(site: Site, command: Sequence[str], seams: Any = None, full: bool = True) -> Prepared:
    """The job's argv, overrides and preflight findings, on ``site`` (preflight's ``seams``: its defaults
    when None).

    ``full`` False (``--no-preflight``) skips doctor and the patch states' readiness, never the
    refusals that protect the run's correctness (settings that break each other).
    """
    from ascendfix.job import preflight as checks

    argv = command_for(command, site.environ)
    found = checks.run_preflight(site, argv, seams or checks.Seams(), full=full)  # reads the script once
    return Prepared(site, argv, found.overrides, found)


def patches_ran(prepared: Prepared) -> list[dict[str, Any]]:
    """run.json's record of the device's patches: id, the chosen variant, the state preflight saw (None: unknown)."""
    site, states = prepared.site, prepared.preflight.patch_states
    return [
        {
            "id": pid,
            "variant": site.profile.variant(pid, site.variants).name,
            "state": None if states is None else states.get(pid),
        }
        for pid in site.profile.device(site.device or "").patches
    ]


@dataclass
class Job:
    """A started job's log folder, environment and run.json record (updated when it ends)."""

    log_dir: Path
    env: dict[str, str]
    record: dict[str, Any]


def begin(prepared: Prepared, log_dir: Path | None) -> Job:
    """Refuse on preflight problems; else create the log folder, raise ``ulimit -n``, write run.json."""
    pre = prepared.preflight
    if pre.problems:
        hint = "fix them or pass --no-preflight" if pre.full else "fix them (--no-preflight does not skip these)"
        raise RefusedError(f"preflight found {len(pre.problems)} problem(s); {hint}")
    try:
        if log_dir is None:
            log_dir = new_log_dir()
        else:
            log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"{e.filename}: cannot create the log directory: {e.strerror}") from None
    site = prepared.site
    device = site.profile.device(site.device or "")
    ulimit = raise_nofile(device.ulimit_nofile)
    env = site.job_env
    record = run_record(site.profile.name, device.name, prepared.argv, site.settings, env, log_dir)
    record.update(ulimit_nofile=ulimit, overrides=redact_overrides(prepared.overrides), patches=patches_ran(prepared))
    record["preflight"] = "full" if pre.full else "correctness only (--no-preflight)"
    record["preflight_hints"] = jsonable(pre.hints)
    open_log(log_dir).close()  # a log that cannot be written stops the run here, before run.json
    try:
        write_run_json(log_dir, record)
    except OSError as e:
        raise UsageError(f"{log_dir / 'run.json'}: cannot write: {e.strerror or e}") from None
    return Job(log_dir, env, record)


def stall_lines(event: dict) -> list[str]:
    """A named stall as ``watch.log`` lines, one per culprit, in Python logging's form (local time), for triage."""
    since = datetime.datetime.fromisoformat(event["since"]).astimezone()
    stamp = since.strftime("%Y-%m-%d %H:%M:%S,000")
    waits = f"{len(event['waiting'])} rank(s) wait"
    frames = {w["stack"].split("\n", 1)[0] for w in event["waiting"]}
    waits += f" in {frames.pop()}" if len(frames) == 1 else ""
    lines = []
    for c in event["culprits"] or [
        {"actor": "(not told apart)", "pid": "?", "node_ip": "?", "node_id": "", "stack": ""}
    ]:
        stack = " <- ".join(c["stack"].splitlines()[:6])
        lines.append(
            f"{stamp} ERROR ascendfix watch: STALL in {event['method']}: no rank progressed since {event['since']}; "
            f"culprit {c['actor']} [PID: {c['pid']}] IP: {c['node_ip']} node {c['node_id'][:8]}: {stack}; {waits}"
        )
    return lines


def _log_stall(log_dir: Path, event: dict) -> None:
    fd = os.open(log_dir / "watch.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "a") as f:
        f.write("".join(line.replace("\n", " ") + "\n" for line in stall_lines(event)))


def finish(
    job: Job,
    argv: Sequence[str],
    parser: StepParser,
    status: StatusLine | None = None,
    notify: Callable[[str], None] | None = None,
    watch: bool = False,
    on_stall: str = "report",
    on_watch: Callable[[dict], None] | None = None,
) -> LaunchResult:
    """Launch ``argv`` for ``job``, then complete its run.json with how it ended.

    ``watch``: run ``ascendfix watch`` beside the job once its Ray cluster answers; each stall it names
    goes into run.json's ``stalls`` at once, each event to ``on_watch``; ``on_stall`` ``abort`` ends the job.
    """
    beside: Beside | None = None
    if watch:
        job.record.update(watch={"address": None, "on_stall": on_stall}, stalls=[])

        def on_event(event: dict) -> None:
            if event["event"] == "started":
                job.record["watch"]["address"] = event.get("address")
            if event["event"] == "stall":
                job.record["stalls"].append(event)
                with contextlib.suppress(OSError):
                    _log_stall(job.log_dir, event)
                if beside is not None:  # set below, before the watch can say anything
                    beside.abort = beside.abort or on_stall == "abort"
                if on_stall == "abort":
                    job.record["aborted"] = "a stall was named (--on-stall abort)"
                _record(job.log_dir, job.record, notify)
            if on_watch is not None:
                on_watch(event)

        beside = Beside(job.env, on_event)
    result = launch(argv, job.env, job.log_dir, parser, status, notify=notify, beside=beside)
    job.record.update(ended=now(), **jsonable(result), steps=len(parser.steps))
    _record(job.log_dir, job.record, notify)
    return result
