"""The one JSON serializer: records in, plain data out, and no repr for what has no JSON form."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import pytest
from ascendfix.jsonable import jsonable
from ascendfix.states import State


class Pin(NamedTuple):
    name: str
    where: Path


@dataclass(frozen=True)
class Note:
    state: State
    pins: tuple[Pin, ...]
    tags: frozenset[str]


class Contract(NamedTuple):
    secret: str

    def to_json(self) -> dict:
        return {"shown": "only this"}


def test_records_become_plain_data():
    note = Note(State.DRIFTED, (Pin("verl", Path("/opt/verl")),), frozenset({"b", "a"}))
    data = jsonable({"note": note, State.APPLIED: [Contract("x")]})
    assert data == {
        "note": {"state": "drifted", "pins": [{"name": "verl", "where": "/opt/verl"}], "tags": ["a", "b"]},
        "applied": [{"shown": "only this"}],
    }
    assert {type(data["note"]["state"]), *map(type, data)} == {str}  # a State as its plain spelling
    assert json.loads(json.dumps(data)) == data


def test_what_has_no_json_form_is_refused_not_written_as_a_repr():
    with pytest.raises(TypeError, match="object has no JSON form"):
        jsonable({"x": object()})
    with pytest.raises(TypeError, match="a tuple key"):
        jsonable({(1, 2): "pair"})
