"""``ckpt check --bytes``: every storage entry's ``torch.save`` zip parsed, and every record's CRC-32 proven.

DCP writes each item as its own ``torch.save`` zip at its entry's offset (``filesystem.py``
``_write_item``); torch's zip writer stores each record uncompressed with its CRC-32, and nothing
checks it on load. :func:`prove_file` takes one data file's entries in file order and, for each:
the end record (plain or zip64) inside the entry, the central directory inside it, each record's
local header and data inside it, before the central directory and one after another; each record
stored, its CRC-32 equal to the one stored; and, for a tensor chunk, its ``data.pkl`` (read through
:func:`ascendfix.checkpoint.pickles.zip_names`, never run) holding one tensor whose storage has the
chunk's dtype (``TensorProperties``) and numel, its ``data/<key>`` record that many bytes.

Bytes are read with ``preadv`` into one reused buffer per file (entries one after another share a
read of up to :data:`BLOCK` bytes; a larger entry is streamed through it), so memory stays bounded;
the CRC is ISA-L's (``isal``: the CPU's carry-less multiply) where it imports, else zlib's. Both
release the GIL, so the caller proves files in parallel threads.
"""

from __future__ import annotations

import math
import os
import struct

from ascendfix.checkpoint import bounded, pickles
from ascendfix.tuples import NamedTuple

try:
    from isal.isal_zlib import crc32
except ImportError:  # no wheel for this platform: the standard library's, about 6x slower
    from zlib import crc32

BLOCK = 8 << 20
MAX_DIRECTORY = 1 << 20  # a record's central directory: torch writes 7 records, about 400 bytes
MAX_DATA_PICKLE = 1 << 16  # one tensor's data.pkl: about 150 bytes
_END = struct.Struct("<4s4H2LH")
_LOCATOR = struct.Struct("<4sLQL")
_END64 = struct.Struct("<4sQ2H2L4Q")
_CENTRAL = struct.Struct("<4s6H3L5H2L")
_LOCAL = struct.Struct("<4s5H3L2H")
_ZIP64_EXTRA = 0x0001

ITEMSIZES = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "complex128": 16, "complex64": 8, "complex32": 4,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint64": 8, "uint32": 4, "uint16": 2, "uint8": 1, "bool": 1,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1,
    "qint8": 1, "quint8": 1, "qint32": 4, "quint4x2": 1, "quint2x4": 1,
}  # fmt: skip
STORAGE_DTYPES = {
    "DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16", "BFloat16Storage": "bfloat16",
    "ComplexDoubleStorage": "complex128", "ComplexFloatStorage": "complex64", "LongStorage": "int64",
    "IntStorage": "int32", "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8",
    "BoolStorage": "bool", "QInt8Storage": "qint8", "QUInt8Storage": "quint8", "QInt32Storage": "qint32",
    "QUInt4x2Storage": "quint4x2", "QUInt2x4Storage": "quint2x4", "Float8_e4m3fnStorage": "float8_e4m3fn",
    "Float8_e5m2Storage": "float8_e5m2", "Float8_e4m3fnuzStorage": "float8_e4m3fnuz",
    "Float8_e5m2fnuzStorage": "float8_e5m2fnuz",
}  # fmt: skip


class Chunk(NamedTuple):
    """What a tensor chunk's record must hold: the tensor's dtype (by name; "" when the metadata gave none)
    and the chunk's sizes."""

    dtype: str
    sizes: tuple


class Found(NamedTuple):
    """One entry that is not proven: its index in the caller's lists, the problem's kind and what is wrong."""

    index: int  # type: ignore[assignment]  # the field shadows tuple.index; its name is the record's
    kind: str
    what: str


class Proof(NamedTuple):
    """One file's answer: the entries wrong, the bytes proven, the entries saved without CRC-32s."""

    bad: list[Found]
    proven: int
    without_crc: int


class _Wrong(Exception):
    """An entry's problem: ``kind`` and what is wrong."""

    def __init__(self, kind: str, what: str):
        super().__init__(what)
        self.kind = kind


class _NoCrc(Exception):
    """The record was saved without its CRC-32 (``torch.serialization.set_crc32_options(False)``)."""


def prove_file(fd: int, starts: list[int], lengths: list[int], chunks: list[Chunk | None]) -> Proof:
    """Prove the entries ``starts``, ``lengths`` (file order, each inside the file; ``chunks``: what each
    must hold, None for a bytes item) of the open data file ``fd``; see the module doc."""
    reader = _Reader(fd)
    bad, proven, without_crc = [], 0, 0
    ends = [s + n for s, n in zip(starts, lengths, strict=True)]
    for i, (start, length) in enumerate(zip(starts, lengths, strict=True)):
        if length <= BLOCK and not reader.holds(start, ends[i]):
            stop, j = ends[i], i + 1
            while j < len(ends) and ends[j] - start <= BLOCK:
                stop, j = max(stop, ends[j]), j + 1
            reader.load(start, stop)
        try:
            _prove(_Entry(reader, start, length), chunks[i])
            proven += length
        except _Wrong as e:
            bad.append(Found(i, e.kind, str(e)))
        except _NoCrc:
            without_crc += 1
        except (struct.error, ValueError, ArithmeticError, LookupError) as e:  # that entry's problem, never the file's
            bad.append(Found(i, "corrupt", f"its zip cannot be read ({type(e).__name__})"))
    return Proof(bad, proven, without_crc)


class _Reader:
    """A data file read through one reused buffer: the window ``[at, at + filled)`` of the file."""

    def __init__(self, fd: int):
        self.fd = fd
        self.view = memoryview(bytearray(BLOCK))
        self.at, self.filled = 0, 0

    def holds(self, start: int, stop: int) -> bool:
        return self.at <= start and stop <= self.at + self.filled

    def load(self, start: int, stop: int) -> None:
        bounded.progress()
        self.at, self.filled = start, self._read_into(start, stop - start)

    def _read_into(self, start: int, count: int) -> int:
        got = 0
        while got < count:
            n = os.preadv(self.fd, [self.view[got:count]], start + got)
            if n <= 0:
                break
            got += n
        return got


class _Entry:
    """One entry's bytes (positions relative to its start): from the reader's window when it holds them,
    else read (small reads) or streamed through the reader's buffer (the CRC of a large record)."""

    def __init__(self, reader: _Reader, start: int, length: int):
        self.reader, self.start, self.length = reader, start, length
        self.windowed = reader.holds(start, start + length)

    def read(self, at: int, count: int) -> bytes | memoryview:
        if at < 0 or count < 0 or at + count > self.length:
            raise _Wrong(
                "corrupt", f"its zip points outside the entry (bytes {at:,}-{at + count:,} of {self.length:,})"
            )
        if self.windowed:
            base = self.start - self.reader.at + at
            return self.reader.view[base : base + count]
        data = os.pread(self.reader.fd, count, self.start + at)
        if len(data) != count:
            raise _Wrong("corrupt", "the file ended inside it")
        return data

    def crc(self, at: int, count: int) -> int:
        if self.windowed:
            return crc32(self.read(at, count))
        value, done = 0, 0
        self.reader.at, self.reader.filled = 0, 0  # the window is reused for streaming
        while done < count:
            step = min(BLOCK, count - done)
            bounded.progress()
            got = self.reader._read_into(self.start + at + done, step)
            if got != step:
                raise _Wrong("corrupt", "the file ended inside it")
            value = crc32(self.reader.view[:step], value)
            done += step
        return value


class _Record(NamedTuple):
    name: str
    crc: int
    size: int
    header: int  # its local header's position in the entry


def _prove(entry: _Entry, chunk: Chunk | None) -> None:
    records, directory = _directory(entry)
    reached = 0
    sizes = {}
    pickle = None
    for record in sorted(records, key=lambda r: r.header):
        if record.header < reached:
            raise _Wrong("corrupt", f"record {record.name} overlaps the one before it")
        magic, _, _, _, _, _, _, _, _, name_length, extra_length = _LOCAL.unpack(entry.read(record.header, 30))
        if magic != b"PK\x03\x04":
            raise _Wrong("corrupt", f"no local header where record {record.name} should start")
        data = record.header + 30 + name_length + extra_length
        if bytes(entry.read(record.header + 30, name_length)).decode("utf-8", "replace") != record.name:
            raise _Wrong("corrupt", f"record {record.name}'s local header names another record")
        if data + record.size > directory:
            raise _Wrong("corrupt", f"record {record.name} runs into the central directory")
        crc = entry.crc(data, record.size)
        if crc != record.crc:
            if record.crc == 0:
                raise _NoCrc()
            detail = f"record {record.name}: CRC-32 {crc:08x}, torch stored {record.crc:08x} (its bytes changed)"
            raise _Wrong("crc-mismatch", detail)
        reached = data + record.size
        sizes[record.name] = record.size
        if record.name.endswith("/data.pkl") and record.name.count("/") == 1 and chunk is not None:
            if record.size > MAX_DATA_PICKLE:
                raise _Wrong("corrupt", f"its data.pkl is {record.size:,} bytes, too large for one tensor's")
            pickle = (record.name, bytes(entry.read(data, record.size)))
    if chunk is not None:
        if pickle is None:
            raise _Wrong("corrupt", "no data.pkl: not a torch.save record of a tensor")
        _tensor_matches(pickle[0], pickle[1], sizes, chunk)


def _directory(entry: _Entry) -> tuple[list[_Record], int]:
    """The records the central directory lists, and where the directory starts."""
    if entry.length < _END.size:
        raise _Wrong("corrupt", "too short for a zip's end record")
    end = entry.length - _END.size
    magic, disk, first, count, total, size, at, comment = _END.unpack(entry.read(end, _END.size))
    if magic != b"PK\x05\x06" or comment or disk or first or count != total:
        raise _Wrong("corrupt", "no plain zip end record at its end")
    if 0xFFFF in (count, total) or 0xFFFFFFFF in (size, at):
        magic, _, end, _ = _LOCATOR.unpack(entry.read(end - _LOCATOR.size, _LOCATOR.size))
        if magic != b"PK\x06\x07":
            raise _Wrong("corrupt", "a zip64 end record without its locator")
        magic, _, _, _, _, _, _, total, size, at = _END64.unpack(entry.read(end, _END64.size))
        if magic != b"PK\x06\x06":
            raise _Wrong("corrupt", "no zip64 end record where its locator points")
    if at + size > end:
        raise _Wrong("corrupt", f"its central directory (bytes {at:,}-{at + size:,}) overlaps its end record")
    if size > MAX_DIRECTORY or total > size // _CENTRAL.size:
        raise _Wrong("corrupt", f"a central directory of {total:,} records in {size:,} bytes: not torch's")
    listing = bytes(entry.read(at, size))
    records, pos = [], 0
    for _ in range(total):
        if pos + _CENTRAL.size > len(listing):
            raise _Wrong("corrupt", "its central directory runs past its end")
        fields = _CENTRAL.unpack_from(listing, pos)
        magic, method, crc, compressed, size_, name_length, extra_length, comment_length = (
            fields[0], fields[4], fields[7], fields[8], fields[9], fields[10], fields[11], fields[12]
        )  # fmt: skip
        header = fields[16]
        if magic != b"PK\x01\x02":
            raise _Wrong("corrupt", "its central directory is not a list of zip records")
        name_at = pos + _CENTRAL.size
        name = listing[name_at : name_at + name_length].decode("utf-8", "replace")
        extra = listing[name_at + name_length : name_at + name_length + extra_length]
        size_, compressed, header = _zip64(extra, size_, compressed, header)
        if method != 0 or compressed != size_:
            raise _Wrong("corrupt", f"record {name} is compressed: torch stores its records")
        records.append(_Record(name, crc, size_, header))
        pos = name_at + name_length + extra_length + comment_length
        if pos > len(listing):
            raise _Wrong("corrupt", "its central directory runs past its end")
    return records, at


def _zip64(extra: bytes, size: int, compressed: int, header: int) -> tuple[int, int, int]:
    """The sizes and header position, from the zip64 extra field where the central record says 0xFFFFFFFF."""
    if 0xFFFFFFFF not in (size, compressed, header):
        return size, compressed, header
    pos = 0
    while pos + 4 <= len(extra):
        kind, length = struct.unpack_from("<2H", extra, pos)
        if kind == _ZIP64_EXTRA:
            values = list(struct.unpack_from(f"<{min(length // 8, 3)}Q", extra, pos + 4))
            fields = [size, compressed, header]
            for k in range(3):
                if fields[k] == 0xFFFFFFFF and values:
                    fields[k] = values.pop(0)
            return fields[0], fields[1], fields[2]
        pos += 4 + length
    raise _Wrong("corrupt", "a zip64 record without its zip64 sizes")


_PICKLES: dict[bytes, tuple] = {}  # a data.pkl's bytes -> what it holds (a layout's chunks share a few)


def _tensor_matches(name: str, data: bytes, sizes: dict[str, int], chunk: Chunk) -> None:
    """The chunk record's data.pkl holds one tensor of the chunk's dtype, numel and sizes, stored whole."""
    held = _PICKLES.get(data)
    if held is None:
        held = _PICKLES[data] = _read_pickle(data)
    if held[0] != "tensor":
        raise _Wrong(held[0], held[1])
    _, storage, shape = held
    dtype = STORAGE_DTYPES.get(storage.kind, "")
    if chunk.dtype and dtype != chunk.dtype:
        detail = f"its data.pkl holds a {storage.kind} ({dtype or 'untyped'}), the metadata says {chunk.dtype}"
        raise _Wrong("wrong-dtype", detail)
    numel = math.prod(chunk.sizes)
    if storage.numel != numel or tuple(shape) != tuple(chunk.sizes):
        detail = f"its data.pkl holds {storage.numel:,} elements, shape {list(shape)}; the chunk is {list(chunk.sizes)}"
        raise _Wrong("wrong-size", detail)
    member = name[: -len("data.pkl")] + f"data/{storage.key}"
    if sizes.get(member) != numel * storage.itemsize:
        detail = f"record {member} is {sizes.get(member, 0):,} bytes; {numel:,} × {storage.itemsize} expected"
        raise _Wrong("wrong-size", detail)


def _read_pickle(data: bytes) -> tuple:
    """``("tensor", storage, shape)``, or ``(kind, what is wrong)``."""
    storages: list = []
    try:
        obj = pickles.loads(data, pickles.zip_names(), storages)
    except pickles.UnsafePickle as e:
        return "unsafe-pickle", f"its data.pkl: {e}"
    except pickles.Unreadable as e:
        return "corrupt", f"its data.pkl: {e}"
    if not isinstance(obj, pickles.TensorRef) or obj.storage is None or len(storages) != 1:
        return "corrupt", "its data.pkl holds no single tensor"
    if type(obj.size) is not tuple or not all(type(v) is int for v in obj.size):
        return "corrupt", "its data.pkl's tensor has no int shape"
    return "tensor", obj.storage, obj.size
