"""The rl-plugin fixture files: our own small verl files, and the installer's edits of them written out
by hand as its documented behaviour says (MindSpeed-RL branch 2.2.0 rl-plugin/setup.py); shared by the
rl-plugin tests and doctor's."""

from __future__ import annotations

from pathlib import Path

from ascendfix.doctor import pyenv
from ascendfix.doctor.context import Context
from ascendfix.profile import manifest, records, rl_plugin
from ascendfix.site import Distribution, Site

from tests import machine

VERL_INIT = '"""verl."""\n\nfrom .protocol import DataProto\n\n__version__ = "0.5.0.dev"\n'
LINEAR_CE = "import torch\n\nfrom . import kernels\n\n\ndef linear_cross_entropy(x):\n    return kernels.run(x)\n"
FP8 = "from typing import Any, Callable, Optional\n\n\ndef scales(xs: list[int]) -> list[int]:\n    return xs\n"


def installer(text: str, path: str) -> str:
    """The installer's edit, written out by hand for the fixture files (not through the module under test)."""
    if path == rl_plugin.VERL_INIT:
        return text + (
            "\n# NPU acceleration support added by mindspeed-rl plugin\n"
            "from verl.utils.device import is_npu_available\n\n"
            'if is_npu_available:\n    import verl_npu\n    print("NPU acceleration enabled for verl")\n'
        )
    if path == rl_plugin.LINEAR_CROSS_ENTROPY:
        return text.replace("\nfrom . import kernels\n", "\n# from . import kernels\n")
    return text.replace("Callable, Optional\n", "Callable, Optional, List\n").replace("list[int]", "List[int]")


def checkout_profile(tmp_path: Path, files: dict[str, str]) -> tuple[Path, records.Profile]:
    """A git checkout of verl holding ``files``, and a profile that pins it."""
    verl = tmp_path / "verl-src"
    head = machine.git_project(verl, "verl", files)
    path = tmp_path / "profile.toml"
    path.write_text(f'extends = "verl-796871d"\nname = "fixture"\n[components.verl]\ncommit = "{head}"\n')
    return verl, manifest.load_profile(str(path))


def commits(profile, verl: Path, monkeypatch, plugin_installed: bool):
    """Doctor's commits check of the checkout, with the rl-plugin's distribution installed (or not), and no
    other distribution: what the test machine happens to have installed (a transformers, say) is not read."""
    commit = profile.component("mindspeed_rl").commit
    plugin = Distribution("0.0.1", {"vcs_info": {"commit_id": commit}}, None)
    monkeypatch.setattr(Context, "installed", lambda self, d: plugin if plugin_installed and d == "verl_npu" else None)
    return pyenv.check_commits(Context(Site(profile, "npu", roots={"verl": verl}, environ={}), "test"))
