"""Read torch's checkpoint pickles without torch and without running their code.

A pickle names the classes and functions it wants called. :class:`_Unpickler` looks each name up
in an allow-list that maps it to a plain stand-in defined here (records that only hold what the
pickle sets on them, and functions that only return their arguments): a name outside the list is
refused (:class:`UnsafePickle`), so nothing the file names is ever imported or called. torch's own
reader is a bare ``pickle.load``.

The list is what torch 2.5 to 2.14 pickle in a ``.metadata`` file (torch.distributed.checkpoint's
metadata classes, ``_StorageInfo``, ``torch.Size``, dtypes, ``torch.serialization._get_layout``,
``pathlib`` paths), the write plans megatron-core keeps in it (its ``MCoreSavePlan``, torch's
``SavePlan``, ``WriteItem``, ``TensorWriteData``, ``WriteItemType``: read and dropped) and, for
``torch.save``'s zip files (Megatron's ``common.pt``), tensors and their storages (left unread: a
storage is a reference to a member of the zip), ``OrderedDict`` and ``argparse.Namespace``.
:func:`loads_collecting` reads a checkpoint's tens of thousands of chunk and entry records into
lists of their states, never building an object each.
"""

from __future__ import annotations

import contextlib
import gc
import io
import os
import pickle
import posixpath
import stat
import zipfile
from typing import Any

from ascendfix.checkpoint import prescan
from ascendfix.checkpoint.prescan import Unreadable
from ascendfix.errors import AscendfixError
from ascendfix.tuples import NamedTuple

_DCP = "torch.distributed.checkpoint.metadata"
_FS = "torch.distributed.checkpoint.filesystem"
MAX_PICKLE_BYTES = 1 << 30
MAX_ZIP_BYTES = 16 << 30  # Megatron's common.pt: the state no rank shards
_MAX_PATH = 4096


class UnsafePickle(AscendfixError):
    """The pickle names something outside the allow-list (never imported, never called)."""


class Record:
    """A stand-in: holds the attributes the pickle sets (``BUILD``), nothing else, no behaviour.

    Read them with ``vars(record).get(name)``: a pickle may set any name. Identity hash and
    equality: two records are never merged as dict keys, so duplicate keys stay visible.
    """


def _record(name: str) -> type:
    return type(name, (Record,), {"__module__": __name__})


def _ignored(name: str) -> type:
    """A stand-in whose pickled state is dropped: what the check never reads (a tensor's properties, the
    write plans Megatron keeps in its metadata). ``id`` is a builtin that takes the state and keeps nothing;
    a builtin is no descriptor, so the class attribute is called as it is."""
    return type(name, (), {"__module__": __name__, "__slots__": (), "__setstate__": id})


def _kept(name: str) -> type:
    """A stand-in that keeps its pickled state whole, unread, in ``state`` (a tensor's properties: its dtype)."""
    return type(name, (), {"__module__": __name__, "__slots__": ("state",), "__setstate__": _keep})


def _keep(self: Any, state: object) -> None:
    self.state = state


class Dtype(str):
    """A torch dtype, by name (``bfloat16``)."""

    __slots__ = ()


def _dtype(name: str) -> Dtype:
    return Dtype(name)


class StorageRef(NamedTuple):
    """A tensor storage in a torch zip file: the member ``data/<key>`` holding ``numel`` elements of ``itemsize``;
    ``kind``: the storage class the pickle names (``BFloat16Storage``)."""

    key: str
    itemsize: int
    numel: int
    kind: str = ""


class TensorRef(NamedTuple):
    """A tensor in a torch zip file: where it lies in its storage (never loaded)."""

    storage: StorageRef | None
    offset: object
    size: object
    stride: object


def _layout(name):
    return name


def _enum_member(value):
    return value


def _path(*parts):
    """``PosixPath(*parts)`` of strings only (a path made of anything else is no checkpoint's, and ``str`` of a
    nested reference can take any memory)."""
    if list(map(type, parts)).count(str) != len(parts) or sum(map(len, parts)) > _MAX_PATH:
        raise Unreadable("a pathlib path made of something other than a few short strings")
    return posixpath.join(*parts) if parts else "."


def _rebuild_tensor(storage, offset, size, stride, *_rest):
    return TensorRef(storage if isinstance(storage, StorageRef) else None, offset, size, stride)


def _rebuild_parameter(data, *_rest):
    return data


_DTYPES = (  # torch's dtypes, by name
    "float64", "float32", "float16", "bfloat16", "complex128", "complex64", "complex32",
    "int64", "int32", "int16", "int8", "uint64", "uint32", "uint16", "uint8", "bool",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
    "qint8", "quint8", "qint32", "quint4x2", "quint2x4",
)  # fmt: skip
_STORAGES = {  # the storage classes torch.save names, and their bytes per element
    "DoubleStorage": 8, "FloatStorage": 4, "HalfStorage": 2, "BFloat16Storage": 2, "ComplexDoubleStorage": 16,
    "ComplexFloatStorage": 8, "LongStorage": 8, "IntStorage": 4, "ShortStorage": 2, "CharStorage": 1,
    "ByteStorage": 1, "BoolStorage": 1, "QInt8Storage": 1, "QUInt8Storage": 1, "QInt32Storage": 4,
    "QUInt4x2Storage": 1, "QUInt2x4Storage": 1, "Float8_e4m3fnStorage": 1, "Float8_e5m2Storage": 1,
    "Float8_e4m3fnuzStorage": 1, "Float8_e5m2fnuzStorage": 1, "UntypedStorage": 1,
}  # fmt: skip


class _StorageType(NamedTuple):
    name: str
    itemsize: int


def metadata_names() -> dict[tuple[str, str], object]:
    """What a ``.metadata`` pickle may name, and the stand-in each name becomes: fresh classes and dtypes on
    every call, so that what one pickle sets on a stand-in (``BUILD`` on a class) never reaches another load."""
    return {
        (_DCP, "Metadata"): _record("Metadata"),
        (_DCP, "TensorStorageMetadata"): _record("TensorStorageMetadata"),
        (_DCP, "ChunkStorageMetadata"): _record("ChunkStorageMetadata"),
        (_DCP, "BytesStorageMetadata"): _record("BytesStorageMetadata"),
        (_DCP, "TensorProperties"): _kept("TensorProperties"),
        (_DCP, "MetadataIndex"): _record("MetadataIndex"),
        (_DCP, "StorageMeta"): _record("StorageMeta"),
        (_DCP, "_MEM_FORMAT_ENCODING"): _enum_member,
        ("torch.distributed.checkpoint.planner", "SavePlan"): _ignored("SavePlan"),
        ("torch.distributed.checkpoint.planner", "WriteItem"): _ignored("WriteItem"),
        ("torch.distributed.checkpoint.planner", "TensorWriteData"): _ignored("TensorWriteData"),
        ("torch.distributed.checkpoint.planner", "WriteItemType"): _enum_member,
        ("megatron.core.dist_checkpointing.strategies.torch", "MCoreSavePlan"): _ignored("MCoreSavePlan"),
        (_FS, "_StorageInfo"): _record("StorageInfo"),
        ("torch", "Size"): tuple,
        ("torch.serialization", "_get_layout"): _layout,
        ("collections", "OrderedDict"): dict,
        **{(module, cls): _path for module in ("pathlib", "pathlib._local") for cls in ("PosixPath", "PurePosixPath")},
        **{("torch", name): _dtype(name) for name in _DTYPES},
    }


def zip_names() -> dict[tuple[str, str], object]:
    """What a ``torch.save`` zip's ``data.pkl`` may name (fresh per call): the metadata's names, tensors,
    storages, namespaces."""
    return {
        **metadata_names(),
        ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
        ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
        ("argparse", "Namespace"): _record("Namespace"),
        **{("torch", name): _StorageType(name, size) for name, size in _STORAGES.items()},
    }


METADATA_NAMES = frozenset(metadata_names())
"""The names a ``.metadata`` pickle may use."""
ZIP_NAMES = frozenset(zip_names())
"""The names a ``torch.save`` zip's ``data.pkl`` may use."""


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, names: dict, storages: list | None):
        super().__init__(io.BytesIO(data))
        self._names, self._storages = names, storages
        self.named: set[tuple[str, str]] = set()

    def find_class(self, module: str, name: str) -> Any:
        try:
            found = self._names[module, name]
            self.named.add((module, name))
            return found
        except (KeyError, TypeError):
            raise UnsafePickle(f"it names {module}.{name}, which is not a checkpoint class (never loaded)") from None

    def persistent_load(self, pid):
        if self._storages is None:
            raise Unreadable("a persistent id outside a torch zip file")
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise Unreadable(f"an unknown persistent id {str(pid)[:80]}")
        _, kind, key, _location, numel = pid
        if not isinstance(kind, _StorageType) or not isinstance(key, str) or not isinstance(numel, int) or numel < 0:
            raise Unreadable(f"a storage reference that is not (storage type, key, location, size): {str(pid)[:80]}")
        ref = StorageRef(key, kind.itemsize, numel, kind.name)
        self._storages.append(ref)
        return ref


@contextlib.contextmanager
def no_collection():
    """No cyclic garbage collection inside: the stand-ins and the records built from them form no cycles,
    and the passes a load's hundred thousand objects would set off cost more than the load itself."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def loads(
    data: bytes,
    names: dict | None = None,
    storages: list | None = None,
    named: set | None = None,
    scan: bool = True,
) -> Any:
    """Unpickle ``data`` with ``names`` (default: a fresh :func:`metadata_names`) as the only classes and
    functions it may use (see the module doc), after :func:`ascendfix.checkpoint.prescan.scan` when it is small
    and ``scan``.

    ``storages``: a list that collects each tensor storage a torch zip's pickle refers to (none allowed
    when None); ``named``: a set that collects each (module, name) the pickle used. Raises
    :class:`UnsafePickle` for a name outside ``names``, :class:`Unreadable` for anything else wrong.
    """
    if scan and len(data) <= prescan.SCANNED_BYTES:
        prescan.scan(data)
    unpickler = _Unpickler(data, metadata_names() if names is None else names, storages)
    try:
        with no_collection():
            return unpickler.load()
    except (UnsafePickle, Unreadable):
        raise
    except Exception as e:  # a malformed pickle can raise anything the opcodes reach
        raise Unreadable(f"not a readable pickle ({type(e).__name__}: {_short(e)})") from None
    finally:
        if named is not None:
            named |= unpickler.named


def _short(error: Exception) -> str:
    text = str(error)[:120]
    return text.encode("ascii", "backslashreplace").decode()


class Collected(NamedTuple):
    """What :func:`loads_collecting` returns: the object, the stand-ins of this load, the collected states."""

    obj: object
    classes: dict[tuple[str, str], object]  # (module, name) -> its stand-in in this load
    states: dict[tuple[str, str], list]  # (module, name) -> each instance's state, in the order the pickle built them
    named: set[tuple[str, str]]  # every (module, name) the pickle used


def loads_collecting(data: bytes, collect: tuple[tuple[str, str], ...], scan: bool = True) -> Collected:
    """:func:`loads` (``scan``: as there) with :func:`metadata_names`, where each class in ``collect`` (a name of
    that table) becomes an empty stand-in whose pickled state goes to a list instead: the states of a checkpoint's
    many small records (its chunks and storage entries) are read in one pass and never copied into an object each.
    """
    names = metadata_names()
    states = {}
    for key in collect:
        built: list = []
        names[key] = type(key[1], (), {"__slots__": (), "__setstate__": built.append})
        states[key] = built
    named: set = set()
    try:
        obj = loads(data, names, named=named, scan=scan)
    finally:
        for key in collect:  # a class is a cycle, freed only by the collector: let it not hold the states
            del names[key].__setstate__  # type: ignore[attr-defined]
    return Collected(obj, names, states, named)


class TorchZip(NamedTuple):
    """A ``torch.save`` file read without loading tensors: the object, its storages, and their members' sizes."""

    obj: object
    storages: list[StorageRef]
    member_sizes: dict[str, int]  # storage key -> bytes of its member in the zip


def open_plain(path: str | os.PathLike[str], limit: int) -> int:
    """A descriptor of ``path`` read-only when it is a plain file of at most ``limit`` bytes: no symbolic link
    followed, never blocking (a FIFO is refused, not waited on); Unreadable otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        if os.path.islink(path):
            raise Unreadable("a symbolic link: not followed") from None
        raise Unreadable(f"cannot open it ({e.strerror})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
        os.close(fd)
        raise Unreadable(f"not a plain file of at most {limit:,} bytes")
    return fd


def read_torch_zip(path: str | os.PathLike[str]) -> TorchZip:
    """Read a ``torch.save`` zip file's ``data.pkl`` through :func:`zip_names`; the storages stay unread.

    Opened with :func:`open_plain` (no symbolic link followed, no FIFO waited on).
    """
    fd = open_plain(path, MAX_ZIP_BYTES)
    try:
        with os.fdopen(fd, "rb") as f, zipfile.ZipFile(f) as archive:
            infos = archive.infolist()
            found = [i for i in infos if i.filename.endswith("/data.pkl") and i.filename.count("/") == 1]
            if len(found) != 1:
                raise Unreadable("no data.pkl: not a torch.save zip file")
            if found[0].file_size > MAX_PICKLE_BYTES:
                raise Unreadable(f"data.pkl is {found[0].file_size} bytes, too large for a state dict's pickle")
            data = archive.read(found[0])
    except (OSError, zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, NotImplementedError) as e:
        raise Unreadable(f"not a readable zip file ({_short(e)})") from None
    storages: list[StorageRef] = []
    obj = loads(data, zip_names(), storages)
    members = found[0].filename[: -len("data.pkl")] + "data/"
    sizes = {i.filename[len(members) :]: i.file_size for i in infos if i.filename.startswith(members)}
    return TorchZip(obj, storages, sizes)
