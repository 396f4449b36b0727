"""The rl-plugin installer's edits: re-derived, recognised by doctor as the plugin's, kept by apply/revert.

The fixtures are our own small files, edited as the installer's documented behaviour says
(MindSpeed-RL branch 2.2.0 rl-plugin/setup.py, see ascendfix/profile/rl_plugin.py); the upstream test
runs the same on verl 0.5.0's real files from PyPI.
"""

from __future__ import annotations

import zipfile

import pytest
from ascendfix.doctor import pyenv
from ascendfix.doctor.context import Context
from ascendfix.patching import engine
from ascendfix.profile import manifest, rl_plugin
from ascendfix.site import Distribution, Site

from tests import upstream
from tests.rl_plugin_files import FP8, LINEAR_CE, VERL_INIT, checkout_profile, commits, installer
from tests.stack import DEMO_PROFILE, make_stack


def test_installer_edits_are_rederived_exactly_and_once():
    for path, text in [(rl_plugin.VERL_INIT, VERL_INIT), (rl_plugin.LINEAR_CROSS_ENTROPY, LINEAR_CE)]:
        edited = rl_plugin.installer_edit(path, text.encode())
        assert edited == installer(text, path).encode()
        assert rl_plugin.installer_edit(path, edited) == edited  # a second install changes nothing
        assert rl_plugin.is_installer_edit(path, text.encode(), edited)
        assert rl_plugin.original_of(path, edited) == text.encode()
    fp8 = rl_plugin.installer_edit(rl_plugin.FP8_UTILS, FP8.encode())
    assert fp8 == installer(FP8, rl_plugin.FP8_UTILS).encode()
    assert rl_plugin.original_of(rl_plugin.FP8_UTILS, fp8) == FP8.encode()
    assert rl_plugin.installer_edit("verl/utils/device.py", b"x = 1\n") is None
    other = VERL_INIT + "import verl_npu\n"  # imported, but not as the installer writes it
    assert not rl_plugin.is_installer_edit(rl_plugin.VERL_INIT, VERL_INIT.encode(), other.encode())


def run_commits_on(tmp_path, monkeypatch, files: dict[str, str]):
    verl, profile = checkout_profile(tmp_path, files)
    for rel in (rl_plugin.VERL_INIT, rl_plugin.LINEAR_CROSS_ENTROPY):
        (verl / rel).write_text(installer(files[rel], rel))
    return verl, profile, commits(profile, verl, monkeypatch, plugin_installed=True)


def test_doctor_names_the_plugins_edits_of_a_checkout_and_never_undoes_them(tmp_path, monkeypatch):
    files = {rl_plugin.VERL_INIT: VERL_INIT, rl_plugin.LINEAR_CROSS_ENTROPY: LINEAR_CE}
    verl, profile, result = run_commits_on(tmp_path, monkeypatch, files)
    assert result.status == "ok", result
    [line] = [m for m in result.messages if "rl-plugin installer" in m]
    assert f"{rl_plugin.VERL_INIT}, {rl_plugin.LINEAR_CROSS_ENTROPY}" in line and "(keep them)" in line
    assert "checkout --" not in result.fix and "git" not in result.fix


def test_a_different_edit_of_the_same_file_is_foreign(tmp_path, monkeypatch):
    files = {rl_plugin.VERL_INIT: VERL_INIT, rl_plugin.LINEAR_CROSS_ENTROPY: LINEAR_CE}
    verl, profile = checkout_profile(tmp_path, files)
    (verl / rl_plugin.VERL_INIT).write_text(VERL_INIT + "import verl_npu\n")
    (verl / rl_plugin.LINEAR_CROSS_ENTROPY).write_text(installer(LINEAR_CE, rl_plugin.LINEAR_CROSS_ENTROPY))
    result = commits(profile, verl, monkeypatch, plugin_installed=True)
    assert result.status == "fail"
    assert f"has changes ascendfix did not make: {rl_plugin.VERL_INIT}" in "\n".join(result.messages)
    assert f"checkout -- {rl_plugin.VERL_INIT}" in result.fix
    assert rl_plugin.LINEAR_CROSS_ENTROPY not in result.fix  # the plugin's edit is never offered for undoing


def test_a_node_that_lost_the_plugins_edits_is_caught(tmp_path, monkeypatch):
    files = {rl_plugin.VERL_INIT: VERL_INIT, rl_plugin.LINEAR_CROSS_ENTROPY: LINEAR_CE}
    verl, profile = checkout_profile(tmp_path, files)
    (verl / rl_plugin.LINEAR_CROSS_ENTROPY).write_text(installer(LINEAR_CE, rl_plugin.LINEAR_CROSS_ENTROPY))
    half = commits(profile, verl, monkeypatch, plugin_installed=True)  # __init__.py lost its import block
    assert half.status == "warn"
    assert (
        f"verl_npu is installed but the {rl_plugin.INSTALLER} edits are missing from: verl/__init__.py"
        in (half.messages[0])
    )
    assert "pip install" in half.fix and "rl-plugin" in half.fix
    assert commits(profile, verl, monkeypatch, plugin_installed=False).status == "ok"  # no plugin: nothing lost


def test_apply_and_revert_leave_the_plugins_edits_byte_for_byte(tmp_path):
    stack = make_stack(tmp_path / "stack")
    init = stack.file("verl", rl_plugin.VERL_INIT)
    lce = stack.file("verl", rl_plugin.LINEAR_CROSS_ENTROPY)
    init.write_text(installer(VERL_INIT, rl_plugin.VERL_INIT))
    lce.parent.mkdir(parents=True, exist_ok=True)
    lce.write_text(installer(LINEAR_CE, rl_plugin.LINEAR_CROSS_ENTROPY))
    before = (init.read_bytes(), lce.read_bytes())
    applied = engine.apply(engine.select(Site(DEMO_PROFILE, "npu", roots=stack.roots())))
    assert {s.action for s in applied} == {"applied"}
    assert (init.read_bytes(), lce.read_bytes()) == before
    engine.revert(engine.select(Site(DEMO_PROFILE, None, roots=stack.roots())))
    assert (init.read_bytes(), lce.read_bytes()) == before


@pytest.mark.upstream
def test_doctor_on_verls_real_files_edited_as_the_installer_does(tmp_path, monkeypatch):
    with zipfile.ZipFile(upstream.verl_wheel("0.5.0")) as zf:
        files = {rel: zf.read(rel).decode() for rel in (rl_plugin.VERL_INIT, rl_plugin.LINEAR_CROSS_ENTROPY)}
    assert "\nfrom . import kernels\n" in files[rl_plugin.LINEAR_CROSS_ENTROPY]
    verl, profile, result = run_commits_on(tmp_path, monkeypatch, files)
    assert result.status == "ok", result
    assert any("rl-plugin installer" in m and "(keep them)" in m for m in result.messages)


def test_integrity_names_the_plugins_edit_of_a_wheel_install(tmp_path, monkeypatch):
    import base64
    import hashlib
    import os

    site = tmp_path / "site-packages"
    dist_info = site / "verl-0.5.0.dist-info"
    dist_info.mkdir(parents=True)
    rows = []
    for rel, text in [(rl_plugin.VERL_INIT, VERL_INIT), (rl_plugin.LINEAR_CROSS_ENTROPY, LINEAR_CE)]:
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        rows.append(f"{rel},sha256={digest},{len(text)}")
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(installer(text, rel) if rel == rl_plugin.VERL_INIT else text + "# edited\n")
    (dist_info / "RECORD").write_text("\n".join(rows) + "\n")
    os.utime(dist_info / "RECORD", ns=(1, 1))  # installed before the edits
    info = Distribution("0.5.0", None, str(dist_info))
    monkeypatch.setattr(Context, "installed", lambda self, d: info if d == "verl" else None)
    result = pyenv.check_integrity(Context(Site(manifest.load_profile("verl-796871d"), "npu", environ={}), "test"))
    assert result.status == "fail"  # the other file was edited by someone else
    text = "\n".join(result.messages)
    assert f"verl 0.5.0: 1 file(s) differ from the wheel's RECORD: {rl_plugin.LINEAR_CROSS_ENTROPY}" in text
    assert f"verl 0.5.0: changed by the {rl_plugin.INSTALLER} exactly as it edits them: verl/__init__.py" in text


GUARDED_TRY = (
    "\nif is_npu_available:\n    try:\n        import verl_npu as plugin\n    except ImportError:\n        pass\n"
)


@pytest.mark.parametrize(
    ("tail", "active"),
    [
        (rl_plugin.IMPORT_BLOCK, True),  # the installer's own block
        ("\nfrom verl.utils import device\nif device.is_npu_available:\n    from verl_npu import plugin\n", True),
        (GUARDED_TRY, True),
        ("\nfrom .utils.device import is_npu_available\nif is_npu_available:\n    import verl_npu\n", True),
        ("\nfrom .utils import device\nif device.is_npu_available:\n    import verl_npu\n", True),
        ("\nimport verl_npu\n", False),  # not under is_npu_available: not the plugin's block
        ("\nif is_cuda_available:\n    import verl_npu\n", False),
        ("", False),
    ],
)
def test_the_plugin_is_active_when_verl_imports_it_under_is_npu_available(tail, active):
    assert rl_plugin.imports_plugin((VERL_INIT + tail).encode()) is active


def test_an_unparsable_init_counts_only_with_the_installers_block_verbatim():
    broken = "def (:\n"
    assert rl_plugin.imports_plugin((broken + rl_plugin.IMPORT_BLOCK).encode())
    assert not rl_plugin.imports_plugin(broken.encode())


def test_the_site_reads_the_block_in_the_verl_that_runs(tmp_path):
    site = Site(manifest.load_profile("verl-796871d"), "npu", roots={"verl": tmp_path})
    (tmp_path / "verl").mkdir()
    init = tmp_path / "verl" / "__init__.py"
    pair = ("verl", "rl-plugin-import")
    init.write_text(VERL_INIT)
    assert site.markers([pair]) == {pair: False}
    init.write_text(VERL_INIT + rl_plugin.IMPORT_BLOCK)
    assert site.markers([pair]) == {pair: True}
    init.unlink()
    init.symlink_to(tmp_path / "elsewhere.py")
    assert site.markers([pair]) == {pair: None}  # unknown, never read


@pytest.mark.parametrize(
    "tail",
    [
        "\nfrom .utils.device import is_npu_available\nif is_npu_available:\n    import verl_npu\n",
        "\nfrom .utils import device\nif device.is_npu_available:\n    import verl_npu\n",
    ],
)
def test_a_relative_import_of_the_probe_is_the_plugins_block_too(tail):
    """verl's own __init__.py imports relatively: a block written that way is the plugin's edit, nothing else."""
    original = VERL_INIT.encode()
    current = original + tail.encode()
    assert rl_plugin.adds_import_block(original, current)
    assert rl_plugin.original_of("verl/__init__.py", current, lambda b: b == original) == original
