"""A pickle's opcodes walked before it is loaded: what a hostile or corrupt pickle could make the loader do.

The C unpickler trusts its input's sizes: one ``LONG_BINPUT 2**28`` (9 bytes) grows its memo to
gigabytes, and a key nested a million tuples deep overflows the C stack when the dict hashes it (a
segfault, no message). :func:`scan` walks the opcodes (``pickletools.genops``) and tracks the stack's
nesting, and refuses (:class:`Unreadable`) a memo index beyond the
puts made so far (or one never put), nesting deeper than :data:`MAX_DEPTH`, and more than
:data:`MAX_ELEMENTS` objects; a string's bytes are in the pickle itself, so they are bounded by its size,
and ``PosixPath`` takes strings only (:mod:`ascendfix.checkpoint.pickles`). It runs in Python, so it
is for the small pickles (``common.pt``'s, each record's ``data.pkl``, a small ``.metadata``, up to
:data:`SCANNED_BYTES`); a checkpoint's large ``.metadata`` is loaded inside a bounded child
(:mod:`ascendfix.checkpoint.bounded`).
"""

from __future__ import annotations

import pickletools

from ascendfix.errors import AscendfixError

SCANNED_BYTES = 1 << 20
MAX_DEPTH = 100  # a checkpoint's records nest about 10 deep
MAX_ELEMENTS = 4 * SCANNED_BYTES

_PUTS = {"PUT", "BINPUT", "LONG_BINPUT"}
_GETS = {"GET", "BINGET", "LONG_BINGET"}
_FILLS = {"APPEND", "APPENDS", "SETITEM", "SETITEMS", "ADDITEMS", "BUILD"}  # the container stays on the stack


class Unreadable(AscendfixError):
    """The pickle is malformed, truncated, or not a pickle."""


def scan(data: bytes) -> None:
    """Raise Unreadable when the pickle ``data`` could take the loader's memory or stack (see the module doc)."""
    stack: list[int] = []  # the nesting depth of each stack item (marks: -1)
    memo: dict[int, int] = {}
    elements = 0
    try:
        for op, arg, at in pickletools.genops(data):
            name = op.name
            if name == "MEMOIZE":
                memo[len(memo)] = stack[-1] if stack else 0
                continue
            if name in _PUTS:
                if not isinstance(arg, int) or arg > len(memo):
                    raise Unreadable(f"a memo index {arg} beyond its {len(memo)} puts (byte {at})")
                memo[arg] = stack[-1] if stack else 0
                continue
            if name in _GETS:
                if arg not in memo:
                    raise Unreadable(f"a memo index {arg} never put (byte {at})")
                stack.append(memo[arg])
                continue
            depth = _pop(stack, op)
            elements += len(op.stack_after)
            if elements > MAX_ELEMENTS:
                raise Unreadable(f"more than {MAX_ELEMENTS:,} objects in a pickle of {len(data):,} bytes")
            for kind in op.stack_after:
                stack.append(-1 if kind is pickletools.markobject else depth)
            if depth > MAX_DEPTH:
                raise Unreadable(f"objects nested more than {MAX_DEPTH} deep (byte {at})")
    except (ValueError, IndexError, KeyError, TypeError) as e:
        raise Unreadable(f"not a readable pickle ({str(e)[:100]})") from None


def _pop(stack: list[int], op: pickletools.OpcodeInfo) -> int:
    """Pop what ``op`` takes; the depth of what it makes: one more than the deepest thing it took (0: none),
    or, for an op that fills the container below its arguments, that container's depth if deeper."""
    deepest = -1
    kinds = op.stack_before[1:] if op.name in _FILLS else op.stack_before
    for kind in reversed(kinds):
        if kind is pickletools.stackslice:
            while stack and stack[-1] != -1:
                deepest = max(deepest, stack.pop())
        elif kind is pickletools.markobject:
            if not stack or stack.pop() != -1:
                raise ValueError(f"{op.name} without its mark")
        else:
            if not stack:
                raise ValueError(f"{op.name} on an empty stack")
            deepest = max(deepest, stack.pop())
    if op.name in _FILLS:
        if not stack:
            raise ValueError(f"{op.name} on an empty stack")
        return max(stack.pop(), deepest + 1)
    return deepest + 1
