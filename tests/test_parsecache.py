"""The parse cache: the same bytes parsed once, an edit always parsed anew, a bad cache never in the way."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from ascendfix import resources
from ascendfix.errors import UsageError
from ascendfix.profile import manifest, parsecache, schema


def _has_nobody() -> bool:
    try:
        return pwd.getpwnam("nobody").pw_uid == 65534
    except KeyError:
        return False


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "ascendfix" / "toml"


def counting_parser():
    calls = []

    def parse(data: bytes) -> dict:
        calls.append(data)
        return {"text": data.decode(), "n": [1, 2.5, True]}

    return parse, calls


def test_the_same_bytes_are_parsed_once_and_edits_always_count(cache):
    parse, calls = counting_parser()
    assert parsecache.parsed(b"a", parse) == {"text": "a", "n": [1, 2.5, True]}
    assert parsecache.parsed(b"a", parse) == {"text": "a", "n": [1, 2.5, True]}
    assert calls == [b"a"]
    assert parsecache.parsed(b"b", parse)["text"] == "b"  # other bytes: another digest, parsed
    assert calls == [b"a", b"b"]
    assert len(list(cache.glob("*.json"))) == 2 and not list(cache.glob(".*"))


def test_a_damaged_or_foreign_entry_is_parsed_again_and_replaced(cache):
    parse, calls = counting_parser()
    parsecache.parsed(b"a", parse)
    (entry,) = cache.glob("*.json")
    for damaged in (b"{trunc", b"[]", json.dumps({"sha256": "0" * 64, "data": {"text": "evil"}}).encode()):
        entry.write_bytes(damaged)
        assert parsecache.parsed(b"a", parse)["text"] == "a"
    assert len(calls) == 4
    assert json.loads(entry.read_bytes())["data"]["text"] == "a"


def test_an_unwritable_cache_is_skipped(cache):
    cache.parent.mkdir(parents=True)
    cache.write_text("a file where the folder should be")
    parse, calls = counting_parser()
    assert parsecache.parsed(b"a", parse)["text"] == "a"
    assert parsecache.parsed(b"a", parse)["text"] == "a"
    assert len(calls) == 2
    assert not [p for p in cache.parent.iterdir() if p.name != "toml"]  # no temp file left


def test_values_json_cannot_hold_are_parsed_every_time(cache, tmp_path):
    path = tmp_path / "dates.toml"
    path.write_text("when = 2026-11-30\nfar = inf\n")
    first, second = schema.read_toml(path), schema.read_toml(path)
    assert first == second and str(first["when"]) == "2026-11-30"
    assert not cache.exists() or not list(cache.glob("*.json"))


def test_a_profile_loads_the_same_from_the_cache(cache, monkeypatch):
    fresh = manifest.load_profile("verl-796871d")
    assert len(list(cache.glob("*.json"))) == 1 + len(fresh.patches)  # the manifest and its patch files
    monkeypatch.setattr(schema, "_parse_toml", lambda path, data: pytest.fail(f"{path} parsed again"))
    assert manifest.load_profile("verl-796871d") == fresh


def test_invalid_toml_is_never_cached(cache, tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("name = \n")
    for _ in range(2):
        with pytest.raises(UsageError, match=r"bad.toml: not valid TOML"):
            schema.read_toml(path)
    assert not cache.exists() or not list(cache.glob("*.json"))


# --- an entry or a folder another user could have written is never used ---------------------------

EVIL = "__import__('os').system('id > /tmp/owned')"


def planted_entry(data: bytes) -> tuple[str, bytes]:
    """The entry name for ``data`` and a planted parse of it: verl-cuda-probe-off writing code."""
    real = schema._parse_toml(Path("x.toml"), data)
    real["transform"]["value"] = EVIL
    digest = parsecache.sha256_bytes(data)
    return f"{digest}.json", json.dumps({"sha256": digest, "data": real}).encode()


PROBE_PATCH = resources.data_dir("patches") / "verl-cuda-probe-off.toml"

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None or not _has_nobody(),
    reason="needs root and setpriv to act as a second user (nobody)",
)


def as_nobody(code: str, *args: str) -> None:
    """Run Python ``code`` as the user nobody (a real second user)."""
    subprocess.run(
        ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups", sys.executable, "-c", code, *args],
        check=True,
        capture_output=True,
    )


PLANT = """
import os, sys
folder, name, data = sys.argv[1], sys.argv[2], sys.argv[3].encode()
os.makedirs(folder, exist_ok=True)
with open(os.path.join(folder, name), "wb") as f:
    f.write(data)
"""


@pytest.fixture
def shared(monkeypatch):
    """A folder both root and nobody can reach (pytest's tmp_path is root's own)."""
    base = Path(tempfile.mkdtemp(prefix="ascendfix-cache-"))
    base.chmod(0o755)
    monkeypatch.setenv("XDG_CACHE_HOME", str(base / "xdg"))
    yield base
    shutil.rmtree(base, ignore_errors=True)


@needs_root
def test_a_cache_folder_another_user_made_is_never_read_nor_written(shared):
    (shared / "xdg").mkdir()
    os.chown(shared / "xdg", 65534, 65534)
    name, evil = planted_entry(PROBE_PATCH.read_bytes())
    folder = shared / "xdg" / "ascendfix" / "toml"
    as_nobody(PLANT, str(folder), name, evil.decode())
    assert folder.stat().st_uid == 65534
    patch = manifest.load_patch(PROBE_PATCH)
    assert dict(patch.variants[0].params)["value"] == "False"
    assert sorted(p.name for p in folder.iterdir()) == [name]  # nothing of ours was put in it
    assert (folder / name).read_bytes() == evil


@needs_root
def test_an_entry_in_a_world_writable_folder_is_never_used(shared):
    folder = shared / "xdg" / "ascendfix" / "toml"
    folder.mkdir(parents=True)
    folder.chmod(0o777)  # ours, but anyone may have written in it
    name, evil = planted_entry(PROBE_PATCH.read_bytes())
    as_nobody(PLANT, str(folder), name, evil.decode())
    assert dict(manifest.load_patch(PROBE_PATCH).variants[0].params)["value"] == "False"


@needs_root
def test_an_entry_of_another_user_in_our_folder_is_never_used(shared):
    folder = shared / "xdg" / "ascendfix" / "toml"
    folder.mkdir(parents=True, mode=0o700)
    name, evil = planted_entry(PROBE_PATCH.read_bytes())
    (folder / name).write_bytes(evil)
    os.chown(folder / name, 65534, 65534)
    assert dict(manifest.load_patch(PROBE_PATCH).variants[0].params)["value"] == "False"


def test_an_entry_writable_by_others_or_reached_through_a_symlink_is_never_used(cache, tmp_path):
    cache.mkdir(parents=True, mode=0o700)
    name, evil = planted_entry(PROBE_PATCH.read_bytes())
    (cache / name).write_bytes(evil)
    (cache / name).chmod(0o666)
    assert dict(manifest.load_patch(PROBE_PATCH).variants[0].params)["value"] == "False"
    (cache / name).unlink()
    (tmp_path / "elsewhere.json").write_bytes(evil)
    (cache / name).symlink_to(tmp_path / "elsewhere.json")
    assert dict(manifest.load_patch(PROBE_PATCH).variants[0].params)["value"] == "False"


def test_a_symlinked_cache_folder_is_never_used(cache, tmp_path):
    (tmp_path / "other").mkdir(mode=0o700)
    name, evil = planted_entry(PROBE_PATCH.read_bytes())
    (tmp_path / "other" / name).write_bytes(evil)
    cache.parent.mkdir(parents=True)
    cache.symlink_to(tmp_path / "other")
    assert dict(manifest.load_patch(PROBE_PATCH).variants[0].params)["value"] == "False"
    assert sorted(p.name for p in (tmp_path / "other").iterdir()) == [name]


def test_the_temp_file_is_never_followed_through_a_leftover_symlink(cache, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    parse, _ = counting_parser()
    digest = parsecache.sha256_bytes(b"a")
    cache.mkdir(parents=True, mode=0o700)
    (cache / f".{digest}.json.{os.getpid()}.tmp").symlink_to(victim)
    assert parsecache.parsed(b"a", parse)["text"] == "a"
    assert victim.read_text() == "untouched"
    assert [p.name for p in cache.iterdir()] == [f"{digest}.json"]
    mode = (cache / f"{digest}.json").stat().st_mode
    assert stat.S_IMODE(mode) == 0o600 and stat.S_IMODE(cache.stat().st_mode) == 0o700


def test_the_digest_is_sha256_before_and_after_hashlib_is_loaded(monkeypatch):
    """fsutil hashes with CPython's own sha256 until something loads hashlib (OpenSSL), then with hashlib's:
    the same digests either way, the cache's keys and the journals' records alike."""
    import hashlib

    from ascendfix import fsutil

    samples = [b"", b"abc", bytes(range(256)) * 300, "verl \u00e9\n".encode()]
    expected = [hashlib.sha256(data).hexdigest() for data in samples]
    assert [fsutil.sha256_bytes(data) for data in samples] == expected  # hashlib loaded: OpenSSL's
    monkeypatch.delitem(sys.modules, "hashlib")
    assert fsutil._own_sha256 is not None  # CPython 3.10 and 3.11 build their own
    assert [fsutil.sha256_bytes(data) for data in samples] == expected
    assert "hashlib" not in sys.modules  # CPython's own answered


def test_status_loads_no_hashlib(ascendfix_cli):
    """The modules status and apply import, and a digest taken, load no OpenSSL through hashlib (3 ms of every
    start): a status hashes a few small files (the profile's, the patched ones) with CPython's own sha256."""
    code = (
        "import sys\nfrom ascendfix.cli import patches\nfrom ascendfix.transforms import registry\n"
        "from ascendfix.fsutil import sha256_bytes\nsha256_bytes(b'x')\nprint('hashlib' in sys.modules)"
    )
    result = ascendfix_cli(code=code)
    assert result.returncode == 0 and result.stdout.strip() == "False", result.stderr
