"""``--ray [ADDRESS]`` on status, apply and doctor: the same command on every node of a Ray cluster, one table."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from ascendfix.cli.base import escape, out, ray_options, render, wide

if TYPE_CHECKING:
    from ascendfix.cluster.fanout import Table


def on_ray_cluster(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--ray [ADDRESS]`` and ``--ray-timeout``: run the command on every node of a Ray cluster instead."""

    @functools.wraps(command)
    def run(*args: Any, ray_address: str | None = None, ray_timeout: float = 60.0, **kwargs: Any) -> Any:
        if ray_address is None:
            return command(*args, **kwargs)
        from ascendfix.cluster import fanout

        argv = _local_argv(click.get_current_context())
        report = fanout.table(argv, fanout.run(argv, None if ray_address == "auto" else ray_address, ray_timeout))
        return render(report, bool(kwargs.get("as_json")), _render_cluster)

    return ray_options("Run")(run)


def _local_argv(ctx: click.Context) -> list[str]:
    """The command line each node runs: this command's own options, minus --ray, plus --json."""
    argv = [str(ctx.command.name)]
    for param in ctx.command.params:
        value = ctx.params.get(param.name)
        if param.name in ("ray_address", "ray_timeout", "as_json") or value is None or value is False:
            continue
        if isinstance(param, click.Argument):
            argv += [str(v) for v in value] if param.multiple else [str(value)]
        elif isinstance(param, click.Option) and param.is_flag:
            argv.append(param.opts[0])
        else:
            for v in value if param.multiple else [value]:
                argv += [param.opts[0], str(v)]
    return [*argv, "--json"]


def _render_cluster(report: Table) -> None:
    from rich.table import Table

    items = [escape(item) for item in report.items]  # every name and value here is a node's answer
    table = Table("node", "host", *items, "exit", box=None, title=escape(f"ascendfix {' '.join(report.argv[:-1])}"))
    for node in report.nodes:
        row = report.cells.get(node.label, {})
        values = [
            f"[bold red]{escape(value)}[/]" if item in report.differing else escape(value)
            for item in report.items
            for value in [row.get(item, ("(absent)", ""))[0]]
        ]
        if node.error:
            values = [f"[bold red]{escape(node.error)}[/]", *[""] * (len(values) - 1)] if values else []
        code = "-" if node.returncode is None else str(node.returncode)
        table.add_row(escape(node.label), escape(node.hostname), *values, f"[red]{code}[/]" if node.failed else code)
    console = out()
    (console if console.is_terminal else wide()).print(table)  # a log keeps every column
    for node in report.nodes:
        if node.error and not report.items:
            console.print(f"[bold red]{escape(node.label)}:[/] {escape(node.error)}")
    if report.differing:
        console.print(f"[bold red]nodes disagree on:[/] {escape(', '.join(report.differing))}")
        for item in report.differing:
            for node in report.nodes:
                value, detail = report.cells.get(node.label, {}).get(item, ("(absent)", ""))
                if node.label in report.cells:
                    label, shown = escape(node.label), escape(value)
                    console.print(f"  {escape(item)}  [bold]{label}[/]: {shown}  [dim]{escape(detail)}[/]")
    failed = [n.label for n in report.nodes if n.failed]
    if failed:
        console.print(f"[bold red]failed on:[/] {escape(', '.join(failed))}")
    if report.ok:
        console.print(f"[green]all {len(report.nodes)} node(s) agree[/]")
