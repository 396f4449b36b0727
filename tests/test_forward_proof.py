"""Bytes from a state folder are written back only when a known original, or the forward transform of one,
reproduces them byte for byte: the red team's attacks, on real torch files and the verl 0.5.0 wheel in one
site-packages, as root would meet them at the command line."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from ascendfix.patching import journal
from ascendfix.profile import manifest
from ascendfix.site import Site

from tests import upstream
from tests.cli import run

pytestmark = pytest.mark.upstream

SHARDS = upstream.SHARD_INTERNALS
PATCH = "torch-shard-overlap-check"


@pytest.fixture(params=["2.10.0", "2.7.0"])
def site(request, tmp_path):
    """A site-packages holding the torch release's two validation files and verl 0.5.0, as pip lays them out."""
    root = tmp_path / "site-packages"
    shutil.copytree(upstream.torch_tree(request.param) / "torch", root / "torch")
    shutil.copytree(upstream.verl_tree("0.5.0") / "verl", root / "verl")
    return root


def cli(site, *args):
    roots = ["--root", f"torch={site}", "--root", f"verl={site}"]
    return run(*args, *roots, timeout=300)


def fast_validate(stock: bytes) -> bytes:
    """What ascendfix writes over ``stock``: the profile's fast-validate variant."""
    patch = manifest.load_profile("verl-796871d").patches[PATCH]
    variant = next(v for v in patch.variants if v.name == "fast-validate")
    return variant.build().apply(stock, PATCH).code


def with_payload(patched: bytes, flag) -> bytes:
    """``patched`` with code in a default argument of its first marked ``_ascendfix_*`` helper."""
    head = b"def _ascendfix_boxes(offsets, sizes, dims):"
    assert head in patched
    evil = f"def _ascendfix_boxes(offsets, sizes, dims, _=open({str(flag)!r}, 'w')):".encode()
    return patched.replace(head, evil, 1)


def refused(result, *words):
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    line = result.stderr.strip()
    assert "\n" not in line and line.startswith("error: "), line
    for word in words:
        assert word in line, line


def test_an_interrupted_apply_whose_undo_copy_hides_a_payload_is_refused_by_status(site, tmp_path):
    stock = (site / SHARDS).read_bytes()
    evil = with_payload(fast_validate(stock), tmp_path / "PWNED")
    state = site / ".ascendfix"
    (state / "undo" / SHARDS).parent.mkdir(parents=True)
    (state / "undo" / SHARDS).write_bytes(evil)
    entry = {"rel": SHARDS, "before": journal.digest(evil), "after": journal.digest(stock)}
    data = {"schema": journal.SCHEMA, "op": "apply", "txid": "ab" * 8, "roots": [str(site)], "files": [entry]}
    (state / "journal.json").write_text(json.dumps(data))
    refused(cli(site, "status", "--device", "npu"), "cannot be proven", SHARDS)
    assert (site / SHARDS).read_bytes() == stock
    assert (state / "journal.json").exists()  # the folder that tried it is kept, for whoever looks
    assert not (tmp_path / "PWNED").exists()


def test_a_swapped_backup_with_a_payload_is_not_what_revert_writes(site, tmp_path):
    stock = (site / SHARDS).read_bytes()
    assert cli(site, "apply", "--device", "npu").returncode == 0
    evil = with_payload((site / SHARDS).read_bytes(), tmp_path / "PWNED")
    (site / ".ascendfix" / "backup" / SHARDS).write_bytes(evil)
    state = site / ".ascendfix" / "state.json"
    data = json.loads(state.read_text())
    data["files"][SHARDS]["original_sha256"] = journal.digest(evil)
    state.write_text(json.dumps(data))
    result = cli(site, "revert")
    assert result.returncode == 0, result.stderr
    assert (site / SHARDS).read_bytes() == stock  # undone through the markers of the file on disk


def test_run_preflight_does_not_write_a_planted_undo_copy(site, tmp_path):
    from ascendfix.errors import RefusedError
    from ascendfix.job import preflight

    stock = (site / SHARDS).read_bytes()
    patched = fast_validate(stock)
    (site / SHARDS).write_bytes(patched)
    evil = with_payload(patched, tmp_path / "PWNED")
    state = site / ".ascendfix"
    (state / "undo" / SHARDS).parent.mkdir(parents=True)
    (state / "undo" / SHARDS).write_bytes(evil)
    entry = {"rel": SHARDS, "before": journal.digest(evil), "after": journal.digest(patched)}
    data = {"schema": journal.SCHEMA, "op": "switch", "txid": "cd" * 8, "roots": [str(site)], "files": [entry]}
    (state / "journal.json").write_text(json.dumps(data))
    at = Site(manifest.load_profile("verl-796871d"), "npu", roots={"torch": site, "verl": site})
    with pytest.raises(RefusedError, match="cannot be proven"):
        preflight.patch_states(at)
    assert (site / SHARDS).read_bytes() == patched


def test_doctor_integrity_does_not_call_a_payload_in_a_marked_helper_ours(site, tmp_path):
    from ascendfix.doctor.ours import without_patches

    profile = manifest.load_profile("verl-796871d")
    stock = (site / SHARDS).read_bytes()
    assert without_patches(profile, SHARDS, fast_validate(stock)) == (stock, [PATCH])
    evil = with_payload(fast_validate(stock), tmp_path / "PWNED")
    restored, found = without_patches(profile, SHARDS, evil)
    assert found == [] and restored == evil


def test_a_recovery_that_writes_a_proven_undo_copy_says_what_it_wrote(site):
    stock = (site / SHARDS).read_bytes()
    patched = fast_validate(stock)
    (site / SHARDS).write_bytes(patched)  # killed after the write, before the commit marker
    state = site / ".ascendfix"
    (state / "undo" / SHARDS).parent.mkdir(parents=True)
    (state / "undo" / SHARDS).write_bytes(stock)
    entry = {"rel": SHARDS, "before": journal.digest(stock), "after": journal.digest(patched)}
    data = {"schema": journal.SCHEMA, "op": "apply", "txid": "ef" * 8, "roots": [str(site)], "files": [entry]}
    (state / "journal.json").write_text(json.dumps(data))
    result = cli(site, "status", "--device", "npu", "--json")
    assert (site / SHARDS).read_bytes() == stock
    report = json.loads(result.stdout)
    notes = report["recovered"]
    assert len(notes) == 1 and SHARDS in notes[0] and "rolled back" in notes[0] and "its original (torch 2." in notes[0]
    text = cli(site, "status", "--device", "npu")
    assert "rolled back" not in text.stderr  # said once, by the command that did it


@pytest.mark.parametrize("mode", [0o1777, 0o775])
def test_a_state_folder_others_can_write_is_refused(site, mode):
    assert cli(site, "apply", "--device", "npu").returncode == 0
    os.chmod(site / ".ascendfix", mode)
    before = (site / SHARDS).read_bytes()
    refused(cli(site, "revert"), ".ascendfix", "writable by")
    assert (site / SHARDS).read_bytes() == before


def test_a_state_folder_owned_by_another_user_is_refused(site):
    assert cli(site, "apply", "--device", "npu").returncode == 0
    os.chown(site / ".ascendfix", 4242, 4242)
    refused(cli(site, "status", "--device", "npu"), ".ascendfix", "owned by uid 4242")
