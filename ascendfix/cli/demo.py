"""``demo``: the main job end to end on a built-in workspace (no Ascend hardware needed)."""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ascendfix.cli.base import escape, out, path_type
from ascendfix.cli.patches import render_statuses
from ascendfix.errors import RefusedError, UsageError

if TYPE_CHECKING:
    from ascendfix.demo import DemoStep

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


@click.command()
@click.option("--dir", "folder", type=path_type(file_okay=False), help="Keep the demo here.")
def demo(folder: Path | None) -> None:
    """Run the main job end to end on a built-in demo workspace (no Ascend hardware needed)."""
    from ascendfix import demo as workspaces

    base = folder.resolve() if folder else Path(tempfile.mkdtemp(prefix="ascendfix-demo-"))
    if folder is not None:
        _refuse_unless_new(folder)
    failed = None
    try:
        try:
            workspace = workspaces.build(base)
        except OSError as e:  # something appeared meanwhile: nothing is written over it
            raise UsageError(
                f"demo --dir {folder}: cannot write the workspace ({e}); give a new or empty folder"
            ) from None
        out().print(f"[bold]ascendfix demo[/] — profile verl-796871d-demo, device npu, workspace {escape(str(base))}")
        number = 0
        for step in workspaces.steps(workspace):
            number += bool(step.title)
            _show(number, step)
            sys.stdout.flush()
            if step.failed and failed is None:
                failed = f"demo: step {number} failed: {step.failed}"
    finally:
        if folder is None:
            shutil.rmtree(base, ignore_errors=True)
    if failed:
        raise RefusedError(CONTROL.sub("", failed))
    if folder is None:
        out().print("\nDone; the temporary workspace is removed. To keep one and try the commands yourself:")
        out().print("  ascendfix demo --dir ascendfix-demo")
        return
    roots = f"--root verl={workspace.verl} --root torch={workspace.torch}"
    out().print(f"\nDone; the workspace stays in {escape(str(base))}. Try it:")
    out().print(escape(f"  ascendfix apply --profile {workspace.profile} --device npu {roots}"), soft_wrap=True)


def _refuse_unless_new(folder: Path) -> None:
    """``--dir`` must be absent (in a folder that exists) or an empty folder (not a link): the demo writes its
    files and never over any."""
    if os.path.islink(folder):
        raise UsageError(f"demo --dir {folder}: a symbolic link; give a new or empty folder")
    try:
        names = sorted(os.listdir(folder))
    except FileNotFoundError:
        parent = folder.absolute().parent
        if not parent.is_dir():
            raise UsageError(f"demo --dir {folder}: its parent folder {parent} is missing; create it first") from None
        return
    except OSError as e:
        raise UsageError(f"demo --dir {folder}: cannot read it ({e.strerror}); give a new or empty folder") from None
    if names:
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        raise UsageError(
            f"demo --dir {folder}: holds files ({shown}): give a new or empty folder; the demo never writes over files"
        )


def _show(number: int, step: DemoStep) -> None:
    console = out()
    for line in step.output.splitlines():  # a step's continuation: what `ascendfix run` said
        console.print(f"[dim]   {escape(CONTROL.sub('', line))}[/]", soft_wrap=True)
    if step.failed:
        console.print(f"   [red]failed[/]: {escape(CONTROL.sub('', step.failed))}", soft_wrap=True)
    if not step.title:
        return
    console.print(f"\n[bold]{number}. {step.title}[/]" + (f"  ({escape(step.command)})" if step.command else ""))
    for note in step.notes:
        console.print(f"[dim]   {escape(note)}[/]")
    if step.statuses:
        render_statuses(step.statuses)
    for line in step.diff.splitlines():
        if line.startswith(("+", "-")) and not line.startswith(("+++", "---")):
            console.print(f"  [{'green' if line[0] == '+' else 'red'}]{escape(line)}[/]")
    if step.figures:
        f = step.figures
        console.print(f"   step 1, as the guide computes it: e2e {f['e2e_tps']:.3f} tokens/s per device")
        console.print(f"   (world {f['world_size']}, update {f['update_tps']:.3f}, vllm {f['vllm_tps']:.3f})")
