"""ascendfix.states.Name behaves as ``class Name(str, enum.Enum)`` (what a type checker sees): each case runs on
a real str enum and on a Name and compares."""

from __future__ import annotations

import copy
import enum
import json
import pickle
import typing

import pytest
from ascendfix import states


class EnumName(str, enum.Enum):
    """The str enum Name stands for: prints as its value on every Python version."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return str.__format__(self, spec)


class EnumColour(EnumName):
    RED = "red"
    DARK_BLUE = "dark-blue"


class Colour(states.Name):
    RED = "red"
    DARK_BLUE = "dark-blue"


@pytest.mark.parametrize(
    "ask",
    [
        lambda c: [str(m) for m in c],
        lambda c: [m.name for m in c],
        lambda c: [m.value for m in c],
        lambda c: [type(m.value) for m in c],
        lambda c: len(c),
        lambda c: c.RED == "red" and "red" == c.RED and c.RED != "blue",
        lambda c: f"{c.RED}|{c.DARK_BLUE:>12}|{c.RED!s}",
        lambda c: repr(c.RED).replace(c.__name__, "C"),
        lambda c: c("dark-blue") is c.DARK_BLUE,
        lambda c: c(c.RED) is c.RED,
        lambda c: isinstance(c.RED, c) and isinstance(c.RED, str),
        lambda c: hash(c.RED) == hash("red"),
        lambda c: {"red": 1}[c.RED],
        lambda c: sorted(c.__members__),
        lambda c: c.__members__["RED"] is c.RED,
        lambda c: c.RED in c,
        lambda c: json.dumps({c.RED: [c.DARK_BLUE]}),
        lambda c: copy.copy(c.RED) is c.RED and copy.deepcopy(c.RED) is c.RED,
        lambda c: c.RED.upper(),
        lambda c: c.DARK_BLUE.startswith("dark"),
        lambda c: "-".join([c.RED, c.DARK_BLUE]),
    ],
)
def test_a_name_behaves_as_a_str_enum(ask: typing.Callable[[type], object]) -> None:
    assert ask(Colour) == ask(EnumColour)


@pytest.mark.parametrize("cls", [Colour, EnumColour], ids=["name", "enum"])
def test_an_unknown_spelling_and_a_reassignment_are_refused(cls: typing.Any) -> None:
    with pytest.raises(ValueError, match="'green' is not a valid"):
        cls("green")
    with pytest.raises(AttributeError):
        cls.RED = "green"


def test_a_member_pickles_to_itself() -> None:
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        assert pickle.loads(pickle.dumps(states.State.APPLIED, protocol)) is states.State.APPLIED


def test_every_name_in_the_package_is_what_its_json_spells() -> None:
    """The contract spellings: each member is its own value, and ``Name(value)`` gives it back."""
    from ascendfix.patching.upgrade import Judgement
    from ascendfix.profile.rules import RuleAction

    for cls in (states.State, states.Action, states.ReasonCode, states.Status, RuleAction, Judgement):
        assert len(cls) >= 2
        for member in cls:
            assert cls(member.value) is member and json.loads(json.dumps(member)) == member.value
