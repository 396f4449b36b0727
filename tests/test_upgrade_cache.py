"""upgrade-check's caches (``wheels/``, ``metadata/``) are held to the parse cache's rules: nothing reached through
another user's folder or link, entries written atomically, an unreadable entry a miss, a wheel used only while its
hash is the one recorded when it was downloaded. pip is replaced by a stand-in that serves the real verl 0.5.0
wheel from the test cache, so nothing here needs the package index."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from ascendfix.errors import AscendfixError
from ascendfix.patching import index

from tests import upstream

pytestmark = pytest.mark.upstream

TARGET = index.WheelTarget(index.PLATFORMS["npu"], "3.10")
WHEEL = "verl-0.5.0-py2.py3-none-any.whl"


@pytest.fixture
def pip(tmp_path, monkeypatch):
    """A pip that 'downloads' the real verl 0.5.0 wheel into -d, and answers --report with fixed requirements."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    calls = []

    def fake(args):
        calls.append(args)
        if args[0] == "download":
            shutil.copy(upstream.verl_wheel("0.5.0"), os.path.join(args[args.index("-d") + 1], WHEEL))
        else:
            report = args[args.index("--report") + 1]
            metadata = {"requires_dist": ["torch==2.7.1", "ray>=2.41"]}
            Path(report).write_text(json.dumps({"install": [{"metadata": metadata}]}))
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(index, "_pip", fake)
    return calls


def folder(tmp_path, kind="wheels"):
    return tmp_path / "xdg" / "ascendfix" / kind / TARGET.key


def test_a_wheel_is_kept_with_its_hash_and_reused(pip, tmp_path):
    told = []
    first = index.fetch("verl", "0.5.0", TARGET, told.append)
    assert first.read_bytes() == upstream.verl_wheel("0.5.0").read_bytes()
    assert told == [f"fetching verl==0.5.0 ({' or '.join(TARGET.platforms)}, Python 3.10) with pip download"]
    assert index.fetch("verl", "0.5.0", TARGET, told.append) == first and len(pip) == 1 and len(told) == 1
    assert oct(folder(tmp_path).stat().st_mode & 0o777) == "0o700"


def test_a_planted_or_truncated_wheel_is_a_miss_and_fetched_again(pip, tmp_path):
    wheel = index.fetch("verl", "0.5.0", TARGET)
    real = wheel.read_bytes()
    wheel.write_bytes(real[: len(real) // 2])  # a download cut short, or another wheel put in its place
    assert index.fetch("verl", "0.5.0", TARGET).read_bytes() == real and len(pip) == 2


def test_a_wheel_in_a_folder_others_can_write_is_never_used(pip, tmp_path):
    index.fetch("verl", "0.5.0", TARGET)
    os.chmod(folder(tmp_path), 0o777)
    with pytest.raises(AscendfixError, match="not a private folder of yours"):
        index.fetch("verl", "0.5.0", TARGET)


def test_a_dangling_link_in_the_cache_makes_no_file_where_it_points(pip, tmp_path):
    folder(tmp_path).mkdir(parents=True, mode=0o700)
    target = tmp_path / "elsewhere" / "planted.whl"
    target.parent.mkdir()
    (folder(tmp_path) / WHEEL).symlink_to(target)
    wheel = index.fetch("verl", "0.5.0", TARGET)
    assert not target.exists() and not wheel.is_symlink()
    assert wheel.read_bytes() == upstream.verl_wheel("0.5.0").read_bytes()


def test_a_linked_cache_folder_is_not_followed(pip, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    folder(tmp_path).parent.mkdir(parents=True, mode=0o700)
    folder(tmp_path).symlink_to(elsewhere)
    with pytest.raises(AscendfixError, match="not a private folder"):
        index.fetch("verl", "0.5.0", TARGET)
    assert os.listdir(elsewhere) == []


@pytest.mark.parametrize("entry", [b'["torch==2.7', b"", b"\xff\xfe", b'{"not": "a list"}'])
def test_an_unreadable_metadata_entry_is_a_miss_and_rewritten_whole(pip, tmp_path, entry):
    folder(tmp_path, "metadata").mkdir(parents=True, mode=0o700)
    (folder(tmp_path, "metadata") / "verl-0.5.0.json").write_bytes(entry)
    assert index.pinned_requires("verl", "0.5.0", TARGET) == ("torch==2.7.1", "ray>=2.41")
    assert json.loads((folder(tmp_path, "metadata") / "verl-0.5.0.json").read_text()) == ["torch==2.7.1", "ray>=2.41"]
    assert index.pinned_requires("verl", "0.5.0", TARGET) == ("torch==2.7.1", "ray>=2.41") and len(pip) == 1
