""":class:`NamedTuple`: ``typing.NamedTuple``, cheaper to define; every named tuple in the package is one.

A type checker sees ``typing.NamedTuple`` itself, and a class is written as one (``class Found(NamedTuple):``,
fields annotated, defaults after the fields without, methods in the body); it behaves as one: a tuple,
``_fields``, ``_field_defaults``, ``_asdict()``, ``_replace()``, ``_make()``, ``__match_args__``, the same
``repr``, pickled and copied by its fields, made and read at the same speed. What differs is what defining
the class costs, which a command pays at start-up for each named tuple on its path (``status`` imports
about forty): ``typing.NamedTuple`` checks every annotation and ``collections.namedtuple`` compiles a
``__new__`` for each class, about 0.7 M instructions a class; this reads only the annotations' names (never
their values, so a module may use ``from __future__ import annotations``) and compiles one ``__new__`` for
each number of fields, renaming its parameters for each class, about a fifth of that.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["NamedTuple"]

if TYPE_CHECKING:
    from typing import NamedTuple
else:
    from _collections import _tuplegetter  # the field descriptor collections.namedtuple uses
    from types import FunctionType

    _tuple_new = tuple.__new__
    _CONSTRUCTORS = {}  # by number of fields: a compiled ``__new__`` whose parameters are renamed for each class

    def _constructor(fields, defaults):
        """A ``__new__`` taking ``fields`` by position or keyword, the last of them defaulting to ``defaults``:
        collections.namedtuple's own, compiled once for each number of fields rather than once for each class."""
        template = _CONSTRUCTORS.get(len(fields))
        if template is None:
            names = "".join(f"_{i}, " for i in range(len(fields)))
            scope = {"_tuple_new": _tuple_new}
            exec(f"def __new__(_cls, {names}): return _tuple_new(_cls, ({names}))", scope)
            template = _CONSTRUCTORS[len(fields)] = scope["__new__"]
        code = template.__code__.replace(co_varnames=("_cls", *fields))
        return FunctionType(code, template.__globals__, "__new__", defaults or None)

    def _make(cls, iterable):
        """A named tuple from an iterable of its fields' values, in order."""
        values = _tuple_new(cls, iterable)
        if len(values) != len(cls._fields):
            raise TypeError(f"Expected {len(cls._fields)} arguments, got {len(values)}")
        return values

    def _asdict(self):
        """The fields and their values, as a dict."""
        return dict(zip(self._fields, self, strict=True))

    def _replace(self, **changes):
        """A copy with ``changes`` made to some fields."""
        values = self._make(map(changes.pop, self._fields, self))
        if changes:
            raise ValueError(f"Got unexpected field names: {list(changes)!r}")
        return values

    def _getnewargs(self):
        return tuple(self)

    def _repr(self):
        pairs = ", ".join(f"{name}={value!r}" for name, value in zip(self._fields, self, strict=True))
        return f"{type(self).__name__}({pairs})"

    class _Maker(type):
        """Makes each class that names :class:`NamedTuple` as its base a tuple class with its annotations as
        fields; a subclass of such a class is a plain subclass, as with ``typing.NamedTuple``."""

        def __new__(mcls, name, bases, namespace):
            if bases != (NamedTuple,):
                return super().__new__(mcls, name, bases, namespace)
            fields = tuple(namespace.get("__annotations__", ()))
            defaults = {}
            for field in fields:
                if field in namespace:
                    defaults[field] = namespace.pop(field)
                elif defaults:
                    raise TypeError(f"{name}: field {field} without a default follows a field with one")
            made = {
                "__slots__": (),
                "_fields": fields,
                "_field_defaults": defaults,
                "__new__": _constructor(fields, tuple(defaults.values())),
                "_make": classmethod(_make),
                "_asdict": _asdict,
                "_replace": _replace,
                "__getnewargs__": _getnewargs,
            }
            overwritten = sorted(made.keys() & namespace.keys())
            if overwritten:
                raise AttributeError(f"{name}: cannot overwrite NamedTuple attribute {overwritten[0]}")
            namespace.update(made)
            namespace.setdefault("__match_args__", fields)
            namespace.setdefault("__repr__", _repr)
            for index, field in enumerate(fields):
                namespace[field] = _tuplegetter(index, f"Alias for field number {index}")
            return super().__new__(mcls, name, (tuple,), namespace)

    NamedTuple = type.__new__(_Maker, "NamedTuple", (), {"__module__": __name__, "__doc__": __doc__})
