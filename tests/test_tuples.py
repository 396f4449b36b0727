"""ascendfix.tuples.NamedTuple behaves as typing.NamedTuple: each case runs on both and compares."""

from __future__ import annotations

import copy
import pickle
import typing

import pytest
from ascendfix import tuples


def _classes(base: typing.Any) -> tuple[type, type, type]:
    class Chunk(base):
        """A chunk."""

        offsets: tuple[int, ...]
        sizes: tuple[int, ...]
        name: str = "w"
        rank: int = 0

        def volume(self) -> int:
            total = 1
            for size in self.sizes:
                total *= size
            return total

    class Empty(base):
        pass

    class Shown(base):
        value: int

        def __repr__(self) -> str:
            return f"<{self.value}>"

    return Chunk, Empty, Shown


TYPING = _classes(typing.NamedTuple)
OURS = _classes(tuples.NamedTuple)
# pickle finds a class by its module and name
TypingChunk, OurChunk = TYPING[0], OURS[0]
TypingChunk.__qualname__ = TypingChunk.__name__ = "TypingChunk"
OurChunk.__qualname__ = OurChunk.__name__ = "OurChunk"


def _both(make: typing.Callable[[type], object]) -> tuple[object, object]:
    """``make`` on typing's class and on ours, each result or its exception's type (and message, where
    collections.namedtuple writes its own rather than Python's for a call)."""
    results = []
    for cls in (TypingChunk, OurChunk):
        try:
            results.append(make(cls))
        except TypeError as exc:
            results.append((TypeError, str(exc) if str(exc).startswith("Expected") else ""))
        except ValueError as exc:
            results.append((ValueError, str(exc)))
    return results[0], results[1]


@pytest.mark.parametrize(
    "make",
    [
        lambda c: tuple(c((0, 1), (2, 3))),
        lambda c: tuple(c((0,), (4,), "b")),
        lambda c: tuple(c((0,), (4,), "b", 3)),
        lambda c: tuple(c(sizes=(1,), offsets=(2,), rank=5)),
        lambda c: tuple(c((0,), sizes=(4,))),
        lambda c: c((0,))._fields,  # missing a field: TypeError
        lambda c: c((0,), (1,), "x", 1, 2),  # one too many
        lambda c: c((0,), (1,), offsets=(2,)),  # given twice
        lambda c: c((0,), (1,), colour=1),  # no such field
        lambda c: c._fields,
        lambda c: c._field_defaults,
        lambda c: c.__match_args__,
        lambda c: c((0,), (2, 3)).volume(),
        lambda c: c((0,), (2, 3)).sizes,
        lambda c: c((0,), (2, 3))[1],
        lambda c: c((0,), (2, 3))._asdict(),
        lambda c: tuple(c((0,), (2, 3))._replace(rank=7, name="q")),
        lambda c: c((0,), (2, 3))._replace(colour=1),
        lambda c: tuple(c._make([(1,), (2,), "n", 4])),
        lambda c: c._make([(1,), (2,)]),
        lambda c: repr(c((0,), (2, 3))).split("(", 1)[1],
        lambda c: c((0,), (2, 3)) == ((0,), (2, 3), "w", 0),
        lambda c: hash(c((0,), (2, 3))) == hash(((0,), (2, 3), "w", 0)),
        lambda c: isinstance(c((0,), (2,)), tuple),
        lambda c: c.__doc__,
        lambda c: c.sizes.__doc__,
        lambda c: hasattr(c((0,), (2,)), "__dict__"),
    ],
)
def test_a_named_tuple_behaves_as_typings(make: typing.Callable[[type], object]) -> None:
    ours_and_typings = _both(make)
    assert ours_and_typings[1] == ours_and_typings[0]


def test_it_pickles_copies_and_matches_as_typings() -> None:
    for cls in (TypingChunk, OurChunk):
        chunk = cls((0, 4), (4, 4), "x", 2)
        globals()[cls.__name__] = cls
        for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
            again = pickle.loads(pickle.dumps(chunk, protocol))
            assert again == chunk and type(again) is cls
        assert copy.copy(chunk) == chunk and copy.deepcopy(chunk) == chunk
        match chunk:
            case cls(offsets, sizes, name):
                assert (offsets, sizes, name) == ((0, 4), (4, 4), "x")
            case _:
                pytest.fail("no match")


def test_a_class_keeps_its_own_repr_and_a_subclass_is_plain() -> None:
    for Chunk, Empty, Shown in (TYPING, OURS):
        assert repr(Shown(3)) == "<3>" and tuple(Empty()) == ()

        class Named(Chunk):  # type: ignore[valid-type,misc]
            def label(self) -> str:
                return f"{self.name}@{self.rank}"

        assert Named((0,), (1,), "k", 2).label() == "k@2" and Named._fields == Chunk._fields


@pytest.mark.parametrize("base", [typing.NamedTuple, tuples.NamedTuple], ids=["typing", "ours"])
def test_refusals_are_typings(base: typing.Any) -> None:
    with pytest.raises(TypeError):

        class Late(base):
            first: int = 0
            second: int

    with pytest.raises(AttributeError):

        class Overwrites(base):
            value: int

            def _asdict(self) -> dict:
                return {}
