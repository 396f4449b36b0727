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
        command = getattr(importlib.import_module(f"ascendfix.cli.{module}"), attr)
        _resume_collector()
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ascendfix")
def main() -> None:
    """Run verl RL training on Ascend NPUs declaratively: check, patch, launch, report."""


_collector_paused = False  # entry() paused the garbage collector for the start-up's imports


def _resume_collector() -> None:
    """Once the command's module is imported: what the imports made (modules, classes, functions) lives as long
    as the process, so it is frozen, and the collector runs again over what the command itself makes, every
    20,000 new objects rather than 700 (the modules a command imports as it goes, libcst's or
    ``importlib.metadata``'s, make thousands that are no garbage either)."""
    global _collector_paused
    if _collector_paused:
        _collector_paused = False
        gc.freeze()
        gc.set_threshold(20_000, 10, 10)
        gc.enable()


def entry() -> None:
    """The ``ascendfix`` command (console script and ``python -m ascendfix``, through
    :func:`ascendfix.__main__.run`, which pauses the collector before click's import): :func:`main`, as a process.

    The imports make thousands of objects that live as long as the process and hold no garbage, and
    the collector would walk them again and again while they are made (7% of what ``status`` executed):
    it is paused until the command's module is in (:func:`_resume_collector`). When the
    command is done the process exits, and the interpreter's final garbage collection would walk
    every object again; frozen, they are left to the exit. Tests call :func:`main` directly, where
    the collector is never paused and nothing is frozen.
    """
    global _collector_paused
    gc.disable()
    _collector_paused = True
    try:
        main()
    finally:
        gc.freeze()
