"""The docs' reference pages are the code's: regenerated here, they must equal what is committed."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from ascendfix.doctor import registry
from ascendfix.doctor.registry import Check
from ascendfix.job import triage
from scripts import reference

REGENERATE = "python3 scripts/reference.py"


def test_the_committed_reference_pages_are_the_codes():
    stale = [name for name, text in reference.pages().items() if _on_disk(name) != text]
    assert not stale, f"docs/reference/{', '.join(stale)} differ from the code: run {REGENERATE} and commit them"


def test_every_reference_page_is_in_the_nav():
    nav = (reference.REPO / "mkdocs.yml").read_text()
    assert {f"reference/{name}" for name in reference.PAGES} <= set(nav.split())


def test_check_names_the_stale_page_and_the_command(tmp_path, monkeypatch, capsys):
    """A doctor check added without regenerating: --check exits 1, names the page and the command."""
    monkeypatch.setattr(reference, "OUT", tmp_path)
    assert reference.main([]) == 0 and reference.main(["--check"]) == 0
    extra = Check("extra", "An extra check", "Host", registry.CHECKS["os"].function)
    monkeypatch.setitem(reference.CHECKS, "extra", extra)
    assert reference.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert "doctor-checks.md" in err and REGENERATE in err and "cli.md" not in err


@pytest.mark.parametrize("page", ["cli.md", "triage-fingerprints.md"])
def test_a_new_option_or_fingerprint_changes_its_page(monkeypatch, page):
    before = reference.pages()[page]
    if page == "cli.md":
        command = reference.cli_main.get_command(click.Context(reference.cli_main), "status")
        monkeypatch.setattr(command, "params", [*command.params, click.Option(["--brand-new"], is_flag=True)])
        assert "--brand-new" in reference.pages()[page]
    else:
        table = triage.fingerprints()
        extra = triage.Fingerprint("EX9999", table[0].pattern, "a cause", "a fix", "a source")
        monkeypatch.setattr(reference.triage, "fingerprints", lambda: (*table, extra))
        assert "EX9999" in reference.pages()[page]
    assert reference.pages()[page] != before


def test_a_patch_key_the_loader_reads_must_be_described(monkeypatch):
    keys = dict(reference.PATCH_KEYS)
    del keys["drop_when"]
    monkeypatch.setattr(reference, "PATCH_KEYS", keys)
    with pytest.raises(SystemExit, match=r"\['drop_when'\] key not described"):
        reference.patch_format_page()


def test_the_script_runs_as_documented():
    done = subprocess.run([sys.executable, "scripts/reference.py", "--check"], cwd=reference.REPO, capture_output=True)
    assert done.returncode == 0, done.stderr


def _on_disk(name: str) -> str | None:
    path = reference.OUT / name
    return path.read_text() if path.is_file() else None


def test_every_error_class_is_drawn_in_errors_py_and_listed_on_the_exit_codes_page():
    """An AscendfixError subclass defined anywhere in the package (found in the source, not by import) is in
    errors.py's drawing and in a module the exit-code page imports."""
    import ast

    from ascendfix import errors

    defined: dict[str, str] = {}  # class name -> module, the errors.py ones first
    known = {"AscendfixError", "UsageError", "RefusedError"}
    trees = {p: ast.parse(p.read_text()) for p in sorted((reference.REPO / "ascendfix").rglob("*.py"))}
    while True:
        found = {
            node.name: ".".join(path.relative_to(reference.REPO / "ascendfix").with_suffix("").parts)
            for path, tree in trees.items()
            for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef)
            and any(isinstance(b, ast.Name) and b.id in known for b in node.bases)
            and path.name != "errors.py"
        }
        if set(found) <= set(defined):
            break
        defined.update(found)
        known |= set(found)
    assert defined, "no error class found outside errors.py"
    for name, module in defined.items():
        assert f"{module}.{name}" in (errors.__doc__ or ""), f"{module}.{name} is not drawn in errors.py"
        assert module in reference.ERROR_MODULES, f"{module} is not in scripts/reference.py's ERROR_MODULES"
