"""What every command shares: the error-to-exit-status group, the shared options, and one way to render.

Every command's result carries ``ok``; :func:`render` prints it as JSON (``--json``: ``"schema"`` and
``"ok"`` first) or hands it to the command's human renderer, and decides the exit code from ``ok``.
rich is imported only when something is drawn for a person.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ascendfix.errors import BAD_INPUT, FINDING, INTERNAL, OK, SCHEMA, AscendfixError, error_object
from ascendfix.jsonable import jsonable
from ascendfix.profile.device import DEVICES

if TYPE_CHECKING:
    from rich.console import Console

DEFAULT_PROFILE = "verl-796871d"
F = TypeVar("F", bound=Callable[..., Any])  # a command's function, as an option decorator takes and gives it


def make_console(**kwargs: Any) -> Console:
    """A rich console (``kwargs``: Console's) whose write to a closed pipe raises BrokenPipeError, as
    click's does, for :func:`render` to end with the result's own code (rich's own would exit 1)."""
    from rich.console import Console

    made = Console(highlight=False, **kwargs)

    def pipe_closed() -> None:
        made.quiet = True
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))

    made.on_broken_pipe = pipe_closed  # type: ignore[method-assign]
    return made


@functools.cache
def out() -> Console:
    """The rich console on stdout."""
    return make_console(soft_wrap=True)


@functools.cache
def err() -> Console:
    """The rich console on stderr."""
    return make_console(stderr=True, soft_wrap=True)


def wide() -> Console:
    """A console on stdout as wide as the output needs, for a pipe or a log that keeps every column whole."""
    return make_console(width=400, soft_wrap=True)


# Terminal control in text read from a file (a state.json name, a log file's name, a node's answer):
# ANSI/VT sequences (CSI, OSC, and two-byte ESC forms), then every other C0/C1 control character but
# newline and tab, and the bidirectional overrides that reorder what a line shows.
# (A pattern, not a compiled one: re compiles it on first use, so a command that prints none pays nothing.)
_CONTROL = (
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[ -~]?|\x9b[0-?]*[ -/]*[@-~]"
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]"
)


def clean(text: object) -> str:
    """Text from a file made safe for a terminal: escape sequences and control characters removed."""
    text = str(text)
    if text.isprintable():  # no control or format character at all (most text): nothing to remove
        return text
    return re.sub(_CONTROL, "", text)


def escape(text: str) -> str:
    """User or file text made safe to print with rich markup (and, through :func:`clean`, for a terminal)."""
    from rich.markup import escape as rich_escape

    return rich_escape(clean(text))


def emit_json(data: Any) -> None:
    """Print ``data`` as JSON (:func:`~ascendfix.jsonable.jsonable`) on stdout (no colour, no wrapping)."""
    click.echo(json.dumps(jsonable(data), indent=2, sort_keys=False))


def verdict(result: object) -> bool:
    """A command's result's ``ok`` (its attribute, or a mapping's key): every command's result carries one,
    and a result without one is a bug (TypeError)."""
    ok = result.get("ok") if isinstance(result, Mapping) else getattr(result, "ok", None)
    if not isinstance(ok, bool):
        raise TypeError(f"a command's result ({type(result).__name__}) carries no ok")
    return ok


def exit_code(result: object) -> int:
    """The exit code a result stands for (:data:`~ascendfix.errors.EXIT_CODES`): 0 when it is ``ok``, else 1."""
    return OK if verdict(result) else FINDING


def answer(result: object) -> dict[str, Any]:
    """A result's ``--json`` object: ``"schema"`` and ``"ok"`` first, then the result's own fields."""
    data = jsonable(result)
    if not isinstance(data, dict):
        raise TypeError(f"a command's result ({type(result).__name__}) is not a JSON object")
    return {"schema": SCHEMA, "ok": verdict(result), **data}


class Unwritten(AscendfixError):
    """The answer could not be written to standard output (a full disk: the environment, exit 2); a closed
    pipe (``| head``) instead ends the command quietly with the result's own exit code."""

    exit_code = BAD_INPUT

    def __init__(self, error: OSError, code: int) -> None:
        super().__init__(f"cannot write the answer to standard output: {error.strerror or error}")
        self.closed = error.errno == errno.EPIPE
        self.code = code


# What a write to stdout fails with when the output is the trouble: not an answer's own file.
_WRITE_ERRNOS = {errno.EPIPE, errno.ENOSPC, errno.EIO, errno.EFBIG, errno.EDQUOT, errno.EROFS, errno.EBADF}


def _written(code: int) -> None:
    """Flush stdout; a failure there is :class:`Unwritten` with the result's ``code``."""
    try:
        sys.stdout.flush()
    except OSError as e:
        raise Unwritten(e, code) from None


def render(result: Any, as_json: bool, human: Callable[[Any], None]) -> int:
    """The one way a command shows its result and ends: :func:`answer` as JSON with ``--json``, else
    ``human(result)``; the exit code is the result's (:func:`exit_code`), for the command to return
    (:class:`Group` exits with it). An answer stdout does not take is :class:`Unwritten`."""
    code = exit_code(result)
    try:
        if as_json:
            emit_json(answer(result))
        else:
            human(result)
    except OSError as e:
        if e.filename is not None or e.errno not in _WRITE_ERRNOS:
            raise
        raise Unwritten(e, code) from None
    _written(code)
    return code


def summary(command: click.Command) -> str:
    """A command's one-line help in ``--help``: its ``short_help``, else its docstring's first clause, whole.

    The clause ends at the first ``; `` or sentence end outside parentheses (``e.g.`` and ``i.e.`` end
    none), so a summary is never cut mid-parenthesis; the list wraps it rather than cutting it.
    """
    if command.short_help:
        return command.short_help
    text = " ".join((command.help or "").strip().split("\n\n")[0].split())
    depth = 0
    for at, char in enumerate(text):
        depth += (char == "(") - (char == ")")
        if depth or text[at + 1 : at + 2] not in (" ", ""):
            continue
        if char == ";" or char in ".?" and not text[: at + 1].endswith(("e.g.", "i.e.")):
            return text[: at + 1 if char in ".?" else at]
    return text


class Listing(click.Group):
    """A group whose ``--help`` lists each command with its whole one-clause :func:`summary` (click's own
    cut them at a width): the top-level group and the ``ray``, ``ckpt`` and ``export`` families."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands with their whole one-clause summaries."""
        commands = [(name, self.get_command(ctx, name)) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl([(name, summary(cmd)) for name, cmd in commands if cmd is not None and not cmd.hidden])


class Group(Listing):
    """The one place a command's exit status is decided (the table is :data:`ascendfix.errors.EXIT_CODES`):
    the exit code a command returns (0 when it returns None), and every AscendfixError as its one line and
    exit status; with ``--json``, also the error object (:func:`~ascendfix.errors.error_object`) on stdout,
    so a pipe into ``jq`` reads an answer.

    A usage error of click's own (an unknown option, a missing argument) keeps click's usage text and
    exit 2; with ``--json`` anywhere on the command line, the error object is on stdout too.

    An answer stdout does not take (:class:`Unwritten`) is one line, exit 2; a reader that went away
    (``| head``) ends the command quietly with its result's code, as ``cat`` does.

    An OSError that reaches here (a path that is too long or otherwise unusable, wherever a command
    first touches it) is one line too: exit 2 for a name the system refuses, else 1. Any other exception
    is a bug: one line saying so, the traceback in a crash log (:func:`crash_log`), exit 3.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Remember whether the command line holds ``--json``, for the answer to click's own usage errors."""
        ctx.meta[_JSON_WORD] = "--json" in args[: args.index("--") if "--" in args else len(args)]
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            code = super().invoke(ctx)
            _written(code if isinstance(code, int) else OK)
        except Unwritten as e:
            _unwritten(ctx, e)
        except click.exceptions.UsageError as e:  # click's own bad input (an unknown option): exit 2, its usage
            if ctx.meta.get(WANTS_JSON) or ctx.meta.get(_JSON_WORD):
                click.echo(json.dumps(error_object(clean(e.format_message()).replace("\n", " "), e.exit_code)))
            raise
        except AscendfixError as e:
            _fail(ctx, str(e), e.exit_code)
        except OSError as e:
            if e.errno == errno.EPIPE:
                _pipe_closed(ctx)
            bad_name = e.errno in (errno.ENAMETOOLONG, errno.EINVAL, errno.EILSEQ)
            where = f"{_shorten(str(e.filename))}: " if e.filename is not None else ""
            _fail(ctx, f"{where}{e.strerror or e}", BAD_INPUT if bad_name else FINDING)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as e:  # a bug: never a traceback on the terminal, never mistaken for a finding
            log = crash_log(e)
            saved = f"the traceback is in {log}" if log else "no crash log could be written"
            _fail(ctx, f"internal error: a bug in ascendfix ({type(e).__name__}); {saved}", INTERNAL)
        if isinstance(code, int) and code:
            ctx.exit(code)
        return code


def _pipe_closed(ctx: click.Context, code: int = FINDING) -> None:
    """stdout's reader went away (``| head -3``): nothing is left to say to it; exit quietly with ``code``
    (the result's, when a result was being shown; else 1)."""
    _silence(sys.stdout)
    ctx.exit(code)


def _unwritten(ctx: click.Context, error: Unwritten) -> None:
    """The answer did not reach stdout: a closed pipe ends quietly with the result's code; any other
    failure (a full disk) is one line on stderr, exit 2."""
    if error.closed:
        _pipe_closed(ctx, error.code)
    _silence(sys.stdout)
    _fail(ctx, str(error), error.exit_code, answer=False)


def _silence(stream: Any) -> None:
    """Point ``stream``'s descriptor at the null device, so that what Python still holds for it, and its
    flush at exit, fail no more (Python's note on SIGPIPE)."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _fail(ctx: click.Context, message: str, exit_code: int, answer: bool = True) -> None:
    """Print the one line (and, unless ``answer`` is False, the JSON object under ``--json``) and exit;
    a stdout or stderr that takes nothing more ends the command quietly with the same code."""
    message = clean(message).replace("\n", " ")
    try:
        if answer and ctx.meta.get(WANTS_JSON):  # on one line: a JSON Lines stream (watch) ends with it whole
            click.echo(json.dumps(error_object(message, exit_code)))
            sys.stdout.flush()
    except OSError:
        _silence(sys.stdout)
    try:
        # click, not rich: the one line any command may end with costs no rich import
        click.echo(f"{click.style('error:', fg='red', bold=True)} {message}", err=True)
        sys.stderr.flush()
    except OSError:
        _silence(sys.stderr)
    ctx.exit(exit_code)


def crash_log(error: BaseException) -> Path | None:
    """Write ``error``'s traceback to a new file in the private folder ``<cache>/crashes/`` (fsutil's: no link
    followed, this user's own, 0600); its path, or None when nothing could be written."""
    import os
    import sys
    import time
    import traceback

    from ascendfix.fsutil import open_private_folder, write_private
    from ascendfix.job.redact import redact_argv
    from ascendfix.resources import cache_dir

    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    header = f"ascendfix {' '.join(map(clean, redact_argv(sys.argv[1:])))}\n{time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n\n"
    name = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
    folder = open_private_folder(cache_dir() / "crashes", create=True)
    if folder is None:
        return None
    try:
        write_private(folder, name, (header + text).encode("utf-8", "replace"))
    except OSError:
        return None
    finally:
        os.close(folder)
    return cache_dir() / "crashes" / name


def _shorten(text: str, keep: int = 120) -> str:
    """``text``, its middle cut out when it is longer than ``keep`` characters."""
    return text if len(text) <= keep else f"{text[: keep // 2]}…{text[-keep // 2 :]} ({len(text)} characters)"


WANTS_JSON = "ascendfix.json"
_JSON_WORD = "ascendfix.json-word"  # the command line holds --json (before any --)


def note_json(ctx: click.Context, _param: click.Parameter, value: Any) -> Any:
    """Remember on the shared context that the answer must be JSON (errors included)."""
    if value in (True, "json"):
        ctx.meta[WANTS_JSON] = True
    return value


def profile_option(func: F) -> F:
    """``--profile``: a bundled profile's name or a manifest file."""
    return click.option("--profile", default=DEFAULT_PROFILE, show_default=True, help="Profile name or manifest path.")(
        func
    )


def device_option(help: str = "npu or cuda (default: detected).", **kwargs: Any) -> Callable[[F], F]:
    """``--device npu|cuda``."""
    return click.option("--device", type=click.Choice(DEVICES), help=help, **kwargs)


# Every timeout option's type: a number of seconds above 0 (0 or less is click's usage error, exit 2).
SECONDS = click.FloatRange(min=0, min_open=True)


def ray_options(what: str) -> Callable[[F], F]:
    """``--ray [ADDRESS]`` (``auto``: the local cluster's address) and ``--ray-timeout``; ``what`` ends --ray's help."""

    def add(func: F) -> F:
        func = click.option(
            "--ray-timeout",
            type=SECONDS,
            default=60.0,
            show_default=True,
            metavar="SECONDS",
            help="Per-node answer limit.",
        )(func)
        return click.option(
            "--ray",
            "ray_address",
            is_flag=False,
            flag_value="auto",
            default=None,
            metavar="[ADDRESS]",
            help=f"{what} on every alive node of this Ray cluster (default: the local one's) and compare.",
        )(func)

    return add


def json_option(func: F) -> F:
    """``--json``: print plain data instead of the human rendering."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON.", callback=note_json)(func)


def target_options(func: F) -> F:
    """``--python`` and ``--root PKG=DIR``: where the packages are."""
    func = click.option("--python", "python", metavar="PATH", help="Target interpreter (default: this one).")(func)
    return click.option(
        "--root", "roots", multiple=True, metavar="PKG=DIR", help="Directory holding PKG's files (repeatable)."
    )(func)


def only_option(what: str = "patch", metavar: str = "ID") -> Callable[[F], F]:
    """``--only``: restrict to these ids (repeatable)."""
    return click.option("--only", multiple=True, metavar=metavar, help=f"Only this {what} (repeatable).")


def variant_option(func: F) -> F:
    """``--variant PATCH_ID=NAME``: override the profile's choice of variant."""
    return click.option(
        "--variant", "variants", multiple=True, metavar="PATCH_ID=NAME", help="Use this variant of a patch."
    )(func)


def path_type(**kwargs: Any) -> click.Path:
    """A click path parameter that yields a ``Path``."""
    return click.Path(path_type=Path, **kwargs)
