"""Each storage entry's zip frame: the quick look at both ends of every ``torch.save`` record in a ``.distcp``.

DCP writes every item (a tensor chunk, or a pickled bytes item) as its own ``torch.save`` zip at the
entry's offset (``filesystem.py`` ``_write_item``; Megatron's torch_dist writer calls the same
function), so an entry starts with a zip local header (``PK\\x03\\x04``) and ends with the zip's end
of central directory record (``PK\\x05\\x06``, 22 bytes, no comment). :func:`frame_problems` reads
those two places, which catches a zero fill (an interrupted ``rsync --inplace``, a sparse
preallocation) and a lost tail; it proves no byte between them (``--bytes`` does,
:mod:`ascendfix.checkpoint.proof`). Entries one after another in the file (a writer's order) share a
read: the end record of one and the header of the next are 26 adjacent bytes, so a file of N entries
takes N + 1 small reads, checked with a few strided byte comparisons; only a file with a bad frame is
read again entry by entry, to name them.
"""

from __future__ import annotations

import os
from itertools import repeat
from operator import add

from ascendfix.tuples import NamedTuple

LOCAL_HEADER = b"PK\x03\x04"
END_RECORD = b"PK\x05\x06"
END_RECORD_SIZE = 22
MIN_RECORD = 30 + END_RECORD_SIZE  # a local header and an end record, nothing else
_HEAD = len(LOCAL_HEADER)


class Bad(NamedTuple):
    """One entry whose frame is wrong: its index in the caller's lists, and what is wrong."""

    index: int  # type: ignore[assignment]  # the field shadows tuple.index; its name is the record's
    what: str


def frame_problems(fd: int, starts: list[int], lengths: list[int]) -> list[Bad]:
    """The entries (``starts``, ``lengths``: in file order, each inside the file) whose zip frame is wrong."""
    count = len(starts)
    if not count:
        return []
    ends = list(map(add, starts, lengths))
    if starts[1:] == ends[:-1] and min(lengths) >= MIN_RECORD:  # one after another: N + 1 reads, checked in C
        seams = list(map(os.pread, repeat(fd), repeat(_SEAM), [e - END_RECORD_SIZE for e in ends[:-1]]))
        joined = b"".join(seams)
        if (
            len(joined) == _SEAM * (count - 1)
            and os.pread(fd, _HEAD, starts[0]) == LOCAL_HEADER
            and os.pread(fd, 4, ends[-1] - END_RECORD_SIZE) == END_RECORD
            and all(joined[k::_SEAM] == byte * (count - 1) for k, byte in _SEAM_BYTES)
        ):
            return []
    heads = list(map(os.pread, repeat(fd), repeat(_HEAD), starts))
    tails = list(map(os.pread, repeat(fd), repeat(END_RECORD_SIZE), [e - END_RECORD_SIZE for e in ends]))
    bad = []
    for i in range(count):
        what = _wrong(heads[i], tails[i], lengths[i])
        if what:
            bad.append(Bad(i, what))
    return bad


_SEAM = END_RECORD_SIZE + _HEAD  # one record's end record and the next one's header magic
_SEAM_BYTES = [(k, END_RECORD[k : k + 1]) for k in range(4)] + [
    (END_RECORD_SIZE + k, LOCAL_HEADER[k : k + 1]) for k in range(_HEAD)
]


def _wrong(head: bytes, tail: bytes, length: int) -> str:
    if length < MIN_RECORD:
        return f"{length} bytes: too short to be a torch.save record (at least {MIN_RECORD})"
    if head != LOCAL_HEADER:
        zeros = not head.strip(b"\0")
        if zeros and not tail.strip(b"\0"):
            return "zeros at both ends where its zip record should be (a zero fill or a sparse preallocation)"
        return "zeros where its zip header should be (a zero fill?)" if zeros else "no zip header at its offset"
    if tail[:4] != END_RECORD:
        if not tail.strip(b"\0"):
            return "zeros where its zip end record should be (a lost write at its end?)"
        return "no zip end record at its end (cut short, or the entry's length is wrong)"
    return ""
