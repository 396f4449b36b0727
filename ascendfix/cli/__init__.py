"""The command line: one module per command family; this module only wires them.

Every command parses its options, calls the core, and renders the plain data it returns
(``--json``, or for a person). Errors from the core are ``AscendfixError``s and reach the
user as one line on stderr with the error's exit status (2 for bad input, 1 for a refusal
or a failed check), never as a traceback. A command's module is imported only when that
command runs, so each command starts with just what it needs.
"""

from __future__ import annotations

import gc
import importlib

import click

from ascendfix.cli.base import Group

COMMANDS = {
    "profiles": "profiles:profiles",
    "show": "profiles:show",
    "apply": "patches:apply",
    "revert": "patches:revert",
    "status": "patches:status",
    "diff": "patches:diff",
    "doctor": "doctor:doctor",
    "run": "run:run",
    "env": "run:env_command",
    "report": "report:report_command",
    "compare": "report:compare_command",
    "export": "export:export",
    "demo": "demo:demo",
    "upgrade-check": "upgrade:upgrade_check",
    "ray": "ray:ray_group",
    "triage": "triage:triage_command",
    "ckpt": "ckpt:ckpt_group",
}


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


class LazyGroup(Group):
    """Imports a command's module on first use."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands with their whole one-clause summaries (click's own cut them at a width)."""
        commands = [(name, self.get_command(ctx, name)) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl([(name, summary(cmd)) for name, cmd in commands if cmd is not None and not cmd.hidden])

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attr = COMMANDS[name].split(":")
        return getattr(importlib.import_module(f"ascendfix.cli.{module}"), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ascendfix")
def main() -> None:
    """Run verl RL training on Ascend NPUs declaratively: check, patch, launch, report."""


def entry() -> None:
    """The ``ascendfix`` command (console script and ``python -m ascendfix``): :func:`main`, as a process.

    When the command is done the process exits, and the interpreter's final garbage collection
    would walk every object the imports created (several ms a command); frozen, they are
    left to the exit. Tests call :func:`main` directly, where nothing is frozen.
    """
    try:
        main()
    finally:
        gc.freeze()
