"""The parse cache: the same bytes parsed once, an edit always parsed anew, a bad cache never in the way."""

from __future__ import annotations

import json

import pytest
from ascendfix.errors import UsageError
from ascendfix.profile import manifest, parsecache


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
    first, second = manifest.read_toml(path), manifest.read_toml(path)
    assert first == second and str(first["when"]) == "2026-11-30"
    assert not cache.exists() or not list(cache.glob("*.json"))


def test_a_profile_loads_the_same_from_the_cache(cache, monkeypatch):
    fresh = manifest.load_profile("verl-796871d")
    assert len(list(cache.glob("*.json"))) == 6  # the manifest and its five patch files
    monkeypatch.setattr(manifest, "_parse_toml", lambda path, data: pytest.fail(f"{path} parsed again"))
    assert manifest.load_profile("verl-796871d") == fresh


def test_invalid_toml_is_never_cached(cache, tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("name = \n")
    for _ in range(2):
        with pytest.raises(UsageError, match=r"bad.toml: not valid TOML"):
            manifest.read_toml(path)
    assert not cache.exists() or not list(cache.glob("*.json"))
