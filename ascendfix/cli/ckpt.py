"""``ckpt check``: prove a distributed checkpoint complete before the job loads it (no torch needed)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ascendfix.cli.base import Listing, clean, json_option, path_type, ray_options, render
from ascendfix.errors import UsageError

if TYPE_CHECKING:
    from ascendfix.checkpoint.report import CheckReport
    from ascendfix.checkpoint.verify.run import VerifyReport
    from ascendfix.cluster.fanout import NodeAnswer


@click.group("ckpt", cls=Listing)
def ckpt_group() -> None:
    """Distributed checkpoints: check one offline, on this node or on every node."""


@ckpt_group.command("check")
@click.argument("folder", type=path_type(), metavar="DIR")
@click.option(
    "--config",
    type=path_type(),
    metavar="HF_CONFIG_JSON",
    help="The HF model's config.json: check its layer and expert counts against the tensors.",
)
@click.option(
    "--bytes",
    "prove",
    is_flag=True,
    help="Prove every byte too: each record's zip, its data.pkl's dtype and size, and torch's CRC-32s.",
)
@ray_options("Check")
@json_option
def check_command(
    folder: Path, config: Path | None, prove: bool, ray_address: str | None, ray_timeout: float, as_json: bool
) -> int:
    """Check the DCP checkpoint in DIR: .metadata (never run), every tensor's chunks, every file, size and
    record frame.

    DIR may be verl's trainer.default_local_dir (the save latest_checkpointed_iteration.txt names),
    global_step_N, global_step_N/actor or the dist_ckpt folder itself; an mbridge save (HF safetensors)
    is checked as one. A Megatron checkpoint's metadata.json (backend torch_dist) and common.pt are
    checked too. Exit 0 when nothing is wrong, 1 with one line per problem, 2 on bad input.
    """
    from ascendfix.checkpoint import megatron, verl

    if not folder.is_dir():
        raise UsageError(f"{folder}: not a folder (give the checkpoint's folder, or verl's save folder)")
    model = megatron.read_config(config) if config is not None else None
    if ray_address is not None:
        return _on_cluster(folder, config, None if ray_address == "auto" else ray_address, ray_timeout, as_json, prove)
    report = verl.check_save(folder, model, config_given=config is not None, prove=prove)
    return render(report, as_json, _render_report)


@ckpt_group.command("verify")
@click.argument("source", type=path_type())
@click.argument("converted", type=path_type())
@ray_options("Verify")
@json_option
def verify_command(source: Path, converted: Path, ray_address: str | None, ray_timeout: float, as_json: bool) -> int:
    """Prove CONVERTED holds exactly the weights of SOURCE, byte for byte, without torch.

    \b
    Both directions, told from the formats:
      ascendfix ckpt verify Qwen3-235B-A22B/ qwen3_235b_mcore/     HF -> Megatron (verl's converter)
      ascendfix ckpt verify global_step_100/actor merged_hf/       Megatron -> HF (verl's model merger)
      ascendfix ckpt verify Qwen3-235B-A22B/ qwen3_235b_mcore/ --ray   on every node of the Ray cluster

    The architecture comes from the Hugging Face config.json (Qwen3-MoE and Qwen3 dense; any other is
    refused); the reviewed mapping says where each HF tensor lies in the Megatron checkpoint. ckpt check
    runs on the Megatron side first; then every source tensor's bytes are compared with the mapped region
    of the converted side, and every converted region must be covered once. *._extra_state items are
    ignored by name. Exit 0 proven, 1 with the problems named, 2 on bad input.

    With --ray each alive node verifies at the same paths: the nodes that see the same files (shared
    storage) each compare a share of the bytes; a node with its own copy (node-local storage) verifies
    all of it; a save split over the nodes' own disks (each its ranks' files, .metadata on rank 0's) is
    verified as one, each node comparing the files it holds, .metadata sent to the others (never a
    weight byte). One report; each problem names its node.
    """
    from ascendfix.checkpoint.verify import run

    if ray_address is not None:
        run.folders(source, converted)  # bad input here is one line, before any node is asked
        return _verify_on_cluster(source, converted, None if ray_address == "auto" else ray_address, ray_timeout,
                                  as_json)  # fmt: skip
    report = run.verify(source, converted)
    return render(report, as_json, _render_verify)


def _verify_on_cluster(source: Path, converted: Path, address: str | None, timeout: float, as_json: bool) -> int:
    """Round one: what each node holds; for a save split across the nodes' disks, its ``.metadata`` from the node
    that holds it; then each node verifies its part; one report, problems by node."""
    from ascendfix.checkpoint.verify import nodes
    from ascendfix.cluster import fanout

    argv = [os.path.abspath(source), os.path.abspath(converted)]  # a node's task runs in a folder of its own
    listed = {a.node_id: a for a in fanout.run(argv, address, timeout, local=nodes.node_files)}
    plan = nodes.plan({i: a.data["held"] for i, a in listed.items() if not a.failed and isinstance(a.data, dict)})
    metadata = ""
    if plan["split"] is not None:
        sent = fanout.run([*argv, plan["split"]["whole"]], address, timeout, local=nodes.node_metadata)
        metadata = next((a.data["metadata"] for a in sent if not a.failed and a.node_id == plan["split"]["whole"]
                         and isinstance(a.data, dict) and isinstance(a.data.get("metadata"), str)), "")  # fmt: skip
    answers = fanout.run([*argv, json.dumps(plan), metadata], address, timeout, local=nodes.node_verify)
    verified = [(a, a.data) for a in answers if isinstance(a.data, dict) and a.data.get("part") is not None]
    seen = {a.label: a.data["held"] for a in listed.values() if not a.failed and isinstance(a.data, dict)}
    result = nodes.merge([(a.label, data) for a, data in verified], seen)
    rows = []
    for a in answers:
        first = listed.get(a.node_id)
        shown = first if first is not None and first.error else a  # a node that could not list its files
        data = a.data if isinstance(a.data, dict) else {}
        rows.append(
            {
                "node": a.label,
                "node_id": a.node_id,
                "address": a.address,
                "hostname": a.hostname,
                "returncode": shown.returncode,
                "error": shown.error,
                "part": data.get("part"),
                "files": data.get("files"),
                "proven_bytes": data.get("proven_bytes"),
            }
        )
    ok = not result["problems"] and bool(verified) and not any(r["error"] for r in rows)
    result = {**result, "source": str(source), "converted": str(converted), "ok": ok, "nodes": rows}
    return render(result, as_json, _render_verify_cluster)


def _render_verify_cluster(result: dict[str, Any]) -> None:
    from ascendfix.checkpoint.verify.run import VerifyReport
    from ascendfix.checkpoint.verify.sides import Found

    table = [("node", "host", "part", "proven", "exit")]
    for n in result["nodes"]:
        part = n["part"]
        if part is None:
            share = "-"
        elif n.get("files") is not None:
            share = f"its {len(n['files'])} file(s) of the split save"
        else:
            share = f"{part[0] + 1}/{part[1]} of copy {part[2] + 1}"
        proven = "-" if n["proven_bytes"] is None else _size(n["proven_bytes"])
        table.append((n["node"], n["hostname"], share, proven, clean(n["error"]) or str(n["returncode"])))
    widths = [max(len(clean(row[i])) for row in table) for i in range(len(table[0]))]
    for row in table:
        click.echo("  ".join(clean(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    if "direction" not in result:
        click.echo(click.style("✗ no node verified", fg="red", bold=True))
        return
    problems = [Found(**{k: v for k, v in p.items() if k != "node"}) for p in result["problems"]]
    fields = {k: result[k] for k in VerifyReport._fields if k != "problems"}
    _render_verify(VerifyReport(**fields, problems=problems), [p["node"] for p in result["problems"]])
    if not result["ok"] and not problems:
        click.echo(click.style("✗ not every node answered: the table above says which", fg="red", bold=True))


_SHOWN_PER_KIND = 5


def _render_verify(report: VerifyReport, nodes: list[str] | None = None) -> None:
    by_kind: dict[str, list] = {}
    for i, p in enumerate(report.problems):
        by_kind.setdefault(p.kind, []).append((p, nodes[i] if nodes else ""))
    for kind, found in by_kind.items():
        click.echo(click.style(f"{kind} ({len(found)})", fg="red", bold=True))
        for p, node in found[:_SHOWN_PER_KIND]:
            where = clean(p.region or p.tensor or p.file)
            source = f" <- {clean(p.source_tensor)}" if p.source_tensor and p.source_tensor != p.tensor else ""
            file = f" [{clean(p.file)}]" if p.file and p.file != where else ""
            by = f" (node {clean(node)})" if node else ""
            click.echo(f"  {where}{source}{file}{by}")
            click.echo(f"    {clean(p.detail)}")
        if len(found) > _SHOWN_PER_KIND:
            click.echo(f"  (and {len(found) - _SHOWN_PER_KIND} more; --json lists every one)")
    arrow = "HF -> Megatron" if report.direction == "hf-to-mcore" else "Megatron -> HF"
    counts = f"{report.tensors:,} tensors, {_size(report.proven_bytes)} proven byte for byte"
    ignored = f"; {len(report.ignored)} _extra_state item(s) ignored by name" if report.ignored else ""
    head = f"{clean(report.converted)} ({arrow}, {clean(report.architecture)})"
    if report.ok:
        click.echo(f"{click.style('✓', fg='green')} {head}: {counts}{ignored}")
    else:
        click.echo(
            f"{click.style('✗', fg='red', bold=True)} {head}: {len(report.problems)} problem(s); {counts}{ignored}"
        )


def _render_report(report: CheckReport) -> None:
    for p in report.problems:
        click.echo(f"{click.style('✗', fg='red')} {p.kind:14} {clean(p.subject)}: {clean(p.detail)}")
    for p in report.warnings:
        click.echo(f"{click.style('!', fg='yellow')} {p.kind:14} {clean(p.subject)}: {clean(p.detail)}")
    counts = f"{report.tensors:,} tensors, {report.chunks:,} chunks, {report.files:,} files, {_size(report.bytes)}"
    name = clean(report.checkpoint)
    if report.ok:
        if report.proven_bytes is None:
            proof = " (each record's zip frame read; its bytes not proven: --bytes proves them)"
        else:
            proof = f", {_size(report.proven_bytes)} proven against torch's CRC-32s"
        click.echo(f"{click.style('✓', fg='green')} {name}: {counts}, complete{proof}")
    else:
        click.echo(f"{click.style('✗', fg='red', bold=True)} {name}: {counts}: {len(report.problems)} problem(s)")


def _size(count: int) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"


def _on_cluster(
    folder: Path, config: Path | None, address: str | None, timeout: float, as_json: bool, prove: bool
) -> int:
    """Every node checks the folder at the same path and lists its files; one table, and the files that differ.
    With ``prove``, a second round: each node proves its share of the data files, where they lie."""
    from ascendfix.checkpoint import views
    from ascendfix.cluster import fanout

    argv = [str(folder), "" if config is None else str(config), ""]
    answers = fanout.run(argv, address, timeout, local=views.node_view)
    seen = {a.label: a.data.get("view", {}) for a in answers if isinstance(a.data, dict)}
    proven = None
    if prove:
        held = {a.node_id: a.data.get("identities", {}) for a in answers if isinstance(a.data, dict)}
        answers = fanout.run(argv[:2] + [json.dumps(views.shares(held))], address, timeout, local=views.node_view)
        proven = sum(a.data.get("proven_bytes") or 0 for a in answers if isinstance(a.data, dict))
    differing = views.differences(seen)
    folders = {a.data.get("checkpoint") for a in answers if isinstance(a.data, dict)}
    ok = not differing and len(folders) <= 1 and not any(a.failed for a in answers)
    result = {
        "checkpoint": next(iter(folders)) if len(folders) == 1 else str(folder),
        "ok": ok,
        "proven_bytes": proven,
        "nodes": [
            {
                "node": a.label,
                "node_id": a.node_id,
                "address": a.address,
                "hostname": a.hostname,
                "returncode": a.returncode,
                "error": a.error,
                "result": {k: v for k, v in a.data.items() if k != "view"} if isinstance(a.data, dict) else None,
                "view": views.digest(seen[a.label]) if a.label in seen else None,
            }
            for a in answers
        ],
        "differing": [{"file": name, "sizes": sizes} for name, sizes in differing],
    }

    def human(_: dict[str, Any]) -> None:
        _render_cluster(answers, seen, differing, ok)
        if len(folders) > 1:
            click.echo(
                click.style(f"nodes checked different saves: {', '.join(sorted(map(clean, folders)))}", fg="red")
            )
        if proven is not None:
            click.echo(f"{_size(proven)} proven against torch's CRC-32s, each file by one node that holds it")

    return render(result, as_json, human)


def _render_cluster(
    answers: list[NodeAnswer],
    seen: dict[str, dict[str, int]],
    differing: list[tuple[str, dict[str, int | None]]],
    ok: bool,
) -> None:
    from ascendfix.checkpoint import views

    rows = [("node", "host", "files", "bytes", "problems", "view", "exit")]
    for a in answers:
        data = a.data if isinstance(a.data, dict) else {}
        problems = data.get("problems")
        rows.append(
            (
                a.label,
                a.hostname,
                str(data.get("files", "-")),
                _size(data["bytes"]) if "bytes" in data else "-",
                clean(a.error) if a.error else str(len(problems)) if problems is not None else "-",
                views.digest(seen[a.label]) if a.label in seen else "-",
                "-" if a.returncode is None else str(a.returncode),
            )
        )
    widths = [max(len(clean(row[i])) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(clean(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    for a in answers:
        problems = a.data.get("problems") if isinstance(a.data, dict) else None
        for p in (p for p in problems or () if isinstance(p, dict)):
            subject = p.get("tensor") or p.get("file") or ""
            click.echo(f"  {clean(a.label)}: {clean(p.get('kind'))} {clean(subject)}: {clean(p.get('detail'))}")
    if differing:
        click.echo(click.style(f"nodes see different files ({len(differing)}):", fg="red", bold=True))
        for name, sizes in differing[:20]:
            shown = "; ".join(
                f"{node}: {'(absent)' if size is None else f'{size:,} bytes'}" for node, size in sizes.items()
            )
            click.echo(f"  {clean(name)}  {clean(shown)}")
        if len(differing) > 20:
            click.echo(f"  (and {len(differing) - 20} more)")
    if ok:
        click.echo(click.style(f"all {len(answers)} node(s) see the same complete checkpoint", fg="green"))
