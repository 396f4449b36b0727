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
    "watch": "watch:watch",
}


class LazyGroup(Group):
    """Imports a command's module on first use."""

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
