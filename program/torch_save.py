"""The tensor index of a ``torch.save`` archive, read without torch and within a budget.

``torch.save`` writes a zip: ``<prefix>/data.pkl`` (a pickle of the saved object, here a state dict: names ->
``torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)``, each storage a persistent id naming
``<prefix>/data/<key>``) and one stored entry per storage.  The names need, per tensor, which storage and where in
it, to hash a tensor's bytes; nothing else.

The pickle comes with a third party's ETRecord, so it is read by ``PickleWalker``, this module's own walk over
its opcodes, never by ``pickle``: it builds only dicts, lists, tuples, strings, numbers and ``TensorRecord``;
calls nothing (a global it does not know is an opaque marker, and so is whatever calling one would make: a
tensor built that way has no bytes here); keeps its memo in a dict (``LONG_BINPUT 4294967295`` cannot size an
array); accepts only strings and numbers as dict keys (hashing a tuple nested a million deep would overflow the
C stack); and counts every object it makes and every item it adds against ``max_objects``, so 250 MiB of
``EMPTY_DICT`` is refused after the budget, not after building 250 million dicts.  ``pickle.Unpickler``'s own
``find_class`` restriction bounds none of that.
"""

from __future__ import annotations

import struct
from typing import Any, Optional

from pte_devconst.util.bounded_zip import Seekable, Window, ZipReadError, open_zip, read_entry, stored_span
from pte_devconst.util.record import record

MAX_RANK = 64  # a tensor's rank in a record this reader accepts (torch's own limit is 64 too)
MAX_EXTENT = 1 << 62  # sizes, strides and offsets past this are not a real tensor's


class TorchSaveError(ValueError):
    """A ``torch.save`` archive this reader will not read; ``entry`` is where inside it (None: the archive)."""

    def __init__(self, why: str, entry: Optional[str] = None) -> None:
        super().__init__(why)
        self.why, self.entry = why, entry


@record
class TensorRecord:
    """One tensor of the pickle: ``_rebuild_tensor_v2``'s storage (its key), offset, sizes and strides."""

    storage: str
    offset: int
    sizes: tuple[int, ...]
    strides: tuple[int, ...]


class _Opaque:
    """An object the walk does not build: a global it does not know, or what calling or building one makes."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


@record
class _Storage:
    """A persistent id ``("storage", type, key, location, numel)``: the archive's ``data/<key>``."""

    key: str


class _Known:
    """A global the walk stands in for (it calls nothing: ``PickleWalker._call`` builds what torch's would)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


_REBUILD_TENSOR = _Known("torch._utils._rebuild_tensor_v2")
_REBUILD_PARAMETER = _Known("torch._utils._rebuild_parameter")
_ORDERED_DICT = _Known("collections.OrderedDict")
_KNOWN = {known.name: known for known in (_REBUILD_TENSOR, _REBUILD_PARAMETER, _ORDERED_DICT)}
_KEY_TYPES = (str, int, float, bool, type(None))


def _extent(value: Any) -> bool:
    return type(value) is int and 0 <= value <= MAX_EXTENT


_BAD_TENSOR = f"{_REBUILD_TENSOR.name} with a storage, offset, rank, size or stride out of range"


def _tensor(args: tuple[Any, ...]) -> Optional[TensorRecord]:
    """``_rebuild_tensor_v2(storage, offset, size, stride, ...)`` as a record; None unless every part is sane."""
    if len(args) < 4 or not isinstance(args[0], _Storage) or not _extent(args[1]):
        return None
    sizes, strides = args[2], args[3]
    if not (isinstance(sizes, tuple) and isinstance(strides, tuple) and len(sizes) == len(strides) <= MAX_RANK
            and all(map(_extent, sizes)) and all(map(_extent, strides))):
        return None
    return TensorRecord(args[0].key, args[1], sizes, strides)


_U8, _U16, _I32, _U32, _U64, _F64 = (struct.Struct(f) for f in ("<B", "<H", "<i", "<I", "<Q", ">d"))
# The struct of each string or bytes opcode's length: BINUNICODE, BINBYTES; SHORT_BINUNICODE, SHORT_BINBYTES;
# BINUNICODE8
_STRING_LENGTHS = {0x58: _U32, 0x42: _U32, 0x8C: _U8, 0x43: _U8, 0x8D: _U64}
_MALFORMED: dict[type, str] = {
    struct.error: "an opcode's argument runs past the end", IndexError: "an opcode without the stack items or "
    "the mark it takes", KeyError: "a memo entry it never stored", UnicodeDecodeError: "a string that is not UTF-8"}


class PickleWalker:
    """Walks the opcodes ``torch.save`` writes (pickle protocol 2, and the few later ones a newer writer may use),
    building only what ``TensorRecord`` needs; ``TorchSaveError`` for anything else, or past ``max_objects``."""

    def __init__(self, data: bytes, max_objects: int) -> None:
        self.data, self.max_objects = data, max_objects
        self.unknown: dict[str, None] = {}  # the globals it did not build (or records), in order of first use

    def _over(self) -> TorchSaveError:
        return TorchSaveError(f"a pickle that builds more than {self.max_objects:,} objects (a state dict's index "
                              "builds a few dozen a tensor)")

    def _global(self, module: Any, name: Any) -> Any:
        if not isinstance(module, str) or not isinstance(name, str):
            raise TorchSaveError("a pickle whose global names no module and name")
        qualified = f"{module}.{name}"
        known = _KNOWN.get(qualified)
        if known is not None:
            return known
        if not (module == "torch" and name.endswith("Storage")):  # a storage's type: in the persistent id anyway
            self.unknown.setdefault(qualified)
        return _Opaque(qualified)

    def _call(self, function: Any, args: Any) -> Any:
        if not isinstance(args, tuple):
            raise TorchSaveError("a pickle whose REDUCE has no argument tuple")
        if function is _REBUILD_TENSOR:
            record = _tensor(args)
            if record is None:
                self.unknown.setdefault(_BAD_TENSOR)
                return _Opaque(_REBUILD_TENSOR.name)
            return record
        if function is _REBUILD_PARAMETER and args:
            return args[0]
        if function is _ORDERED_DICT and not args:
            return {}
        return _Opaque(function.name if isinstance(function, (_Opaque, _Known)) else type(function).__name__)

    def load(self) -> Any:  # noqa: C901 - one branch an opcode, as pickle's own loop
        """The pickled object; ``TorchSaveError`` at the first opcode this walk does not take."""
        stack: list[Any] = []
        marks: list[int] = []
        memo: dict[int, Any] = {}
        data, end, left = self.data, len(self.data), self.max_objects
        position = 0
        try:
            while True:
                if position >= end:
                    raise TorchSaveError("a pickle that ends before its STOP opcode")
                op = data[position]
                position += 1
                left -= 1
                if left < 0:
                    raise self._over()
                if op == 0x71:  # BINPUT
                    memo[data[position]] = stack[-1]
                    position += 1
                elif op == 0x68:  # BINGET
                    stack.append(memo[data[position]])
                    position += 1
                elif op == 0x72:  # LONG_BINPUT
                    memo[_U32.unpack_from(data, position)[0]] = stack[-1]
                    position += 4
                elif op == 0x6A:  # LONG_BINGET
                    stack.append(memo[_U32.unpack_from(data, position)[0]])
                    position += 4
                elif op == 0x4B:  # BININT1
                    stack.append(data[position])
                    position += 1
                elif op == 0x28:  # MARK
                    marks.append(len(stack))
                elif op == 0x29:  # EMPTY_TUPLE
                    stack.append(())
                elif op == 0x52:  # REDUCE
                    args = stack.pop()
                    stack[-1] = self._call(stack[-1], args)
                elif op in (0x58, 0x8C, 0x8D, 0x42, 0x43):  # BINUNICODE, SHORT_ and 8; BINBYTES, SHORT_BINBYTES
                    length_of = _STRING_LENGTHS[op]
                    size = length_of.unpack_from(data, position)[0]
                    position += length_of.size
                    if position + size > end:
                        raise struct.error
                    raw = data[position:position + size]
                    position += size
                    stack.append(raw if op in (0x42, 0x43) else raw.decode("utf-8", "surrogatepass"))
                elif op in (0x85, 0x86, 0x87):  # TUPLE1, TUPLE2, TUPLE3
                    count = op - 0x84
                    if len(stack) < count:
                        raise IndexError
                    items = tuple(stack[len(stack) - count:])
                    del stack[len(stack) - count:]
                    stack.append(items)
                elif op in (0x74, 0x6C, 0x64, 0x65, 0x75):  # TUPLE, LIST, DICT, APPENDS, SETITEMS: items since the mark
                    start = marks.pop()
                    items = tuple(stack[start:])
                    del stack[start:]
                    left -= len(items)
                    if left < 0:
                        raise self._over()
                    if op == 0x74:
                        stack.append(items)
                    elif op == 0x6C:
                        stack.append(list(items))
                    elif op == 0x64:
                        stack.append(self._dict_items({}, items))
                    elif op == 0x65 and isinstance(stack[-1], list):
                        stack[-1].extend(items)
                    elif op == 0x75 and isinstance(stack[-1], dict):
                        self._dict_items(stack[-1], items)
                elif op == 0x61:  # APPEND
                    item = stack.pop()
                    if isinstance(stack[-1], list):
                        stack[-1].append(item)
                elif op == 0x73:  # SETITEM
                    value = stack.pop()
                    key = stack.pop()
                    if isinstance(stack[-1], dict):
                        self._dict_items(stack[-1], (key, value))
                elif op == 0x94:  # MEMOIZE
                    memo[len(memo)] = stack[-1]
                elif op == 0x4D:  # BININT2
                    stack.append(_U16.unpack_from(data, position)[0])
                    position += 2
                elif op == 0x4A:  # BININT
                    stack.append(_I32.unpack_from(data, position)[0])
                    position += 4
                elif op in (0x8A, 0x8B):  # LONG1, LONG4
                    length_of = _U8 if op == 0x8A else _U32
                    size = length_of.unpack_from(data, position)[0]
                    position += length_of.size
                    if size > 64 or position + size > end:
                        raise TorchSaveError(f"a pickle with an integer of {size:,} bytes")
                    stack.append(int.from_bytes(data[position:position + size], "little", signed=True))
                    position += size
                elif op == 0x47:  # BINFLOAT
                    stack.append(_F64.unpack_from(data, position)[0])
                    position += 8
                elif op == 0x7D:  # EMPTY_DICT
                    stack.append({})
                elif op == 0x5D:  # EMPTY_LIST
                    stack.append([])
                elif op == 0x4E:  # NONE
                    stack.append(None)
                elif op == 0x88:  # NEWTRUE
                    stack.append(True)
                elif op == 0x89:  # NEWFALSE
                    stack.append(False)
                elif op == 0x63:  # GLOBAL: two lines, module and name
                    first = data.find(b"\n", position)
                    second = data.find(b"\n", first + 1) if first >= 0 else -1
                    if second < 0:
                        raise TorchSaveError(f"a pickle that ends inside a GLOBAL (byte {position - 1:,})")
                    module, name = data[position:first].decode("utf-8"), data[first + 1:second].decode("utf-8")
                    stack.append(self._global(module, name))
                    position = second + 1
                elif op == 0x93:  # STACK_GLOBAL
                    name = stack.pop()
                    stack[-1] = self._global(stack[-1], name)
                elif op == 0x81:  # NEWOBJ: an instance of a class (never one of torch.save's tensors)
                    stack.pop()
                    cls = stack[-1]
                    stack[-1] = _Opaque(cls.name if isinstance(cls, _Opaque) else "NEWOBJ")
                elif op == 0x62:  # BUILD: the state of the object below; nothing here takes one
                    stack.pop()
                    if not stack:
                        raise IndexError
                elif op == 0x51:  # BINPERSID
                    pid = stack[-1]
                    if not (isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == "storage"
                            and isinstance(pid[2], str)):
                        raise TorchSaveError("a pickle with a persistent id that names no storage")
                    stack[-1] = _Storage(pid[2])
                elif op == 0x30:  # POP
                    stack.pop()
                elif op == 0x31:  # POP_MARK
                    del stack[marks.pop():]
                elif op == 0x32:  # DUP
                    stack.append(stack[-1])
                elif op == 0x80:  # PROTO
                    position += 1
                elif op == 0x95:  # FRAME: a length hint
                    position += 8
                elif op == 0x2E:  # STOP
                    if len(stack) != 1 or marks:
                        raise TorchSaveError("a pickle that stops with other than one object on its stack")
                    return stack[0]
                else:
                    raise TorchSaveError(f"a pickle opcode 0x{op:02x} at byte {position - 1:,} that torch.save does "
                                         "not write")
        except TorchSaveError:
            raise
        except (IndexError, KeyError, struct.error, UnicodeDecodeError, TypeError, ValueError) as error:
            raise TorchSaveError(f"a malformed pickle at byte {position:,}: {_MALFORMED.get(type(error), error)}"
                                 ) from None

    @staticmethod
    def _dict_items(target: dict[Any, Any], items: tuple[Any, ...]) -> dict[Any, Any]:
        if len(items) % 2:
            raise TorchSaveError("a pickle that sets a dict key without a value")
        for k in range(0, len(items), 2):
            key = items[k]
            if not isinstance(key, _KEY_TYPES):
                raise TorchSaveError(f"a pickle with a dict key of type {type(key).__name__} (a state dict's keys "
                                     "are strings)")
            target[key] = items[k + 1]
        return target


class TorchSave:
    """The tensor index of the ``torch.save`` archive stored at ``[start, start + size)`` of ``file``.

    ``tensors`` maps a name to its ``TensorRecord``; ``unknown`` lists the globals the pickle used that this
    reader does not build (their tensors have no bytes here).  ``span`` says where a tensor's bytes lie in ``file``.
    """

    def __init__(self, file: Seekable, start: int, size: int, *, max_pickle_bytes: int, max_objects: int) -> None:
        self.file, self.start = file, start
        self.window = Window(file, start, size)
        try:
            self.archive = open_zip(self.window)
        except ZipReadError as error:
            raise TorchSaveError(f"not a torch.save archive ({error})") from None
        pickles = [info for info in self.archive.infolist() if info.filename.endswith("data.pkl")]
        if not pickles:
            raise TorchSaveError("a torch.save archive without data.pkl")
        info = pickles[0]
        self.prefix = info.filename[: -len("data.pkl")]
        try:
            data = read_entry(self.archive, info, max_pickle_bytes)
        except ZipReadError as error:
            raise TorchSaveError(str(error), info.filename) from None
        self.pickle_size = len(data)
        walker = PickleWalker(data, max_objects)
        try:
            loaded = walker.load()
        except TorchSaveError as error:
            raise TorchSaveError(error.why, info.filename) from None
        self.unknown = tuple(walker.unknown)
        if not isinstance(loaded, dict):
            top = loaded.name if isinstance(loaded, _Opaque) else type(loaded).__name__
            self.unknown += (f"{top} at its top, not a dict",)
        self.tensors: dict[str, TensorRecord] = (
            {k: v for k, v in loaded.items() if isinstance(k, str) and isinstance(v, TensorRecord)}
            if isinstance(loaded, dict) else {})
        # Where each storage a tensor names lies, found now, so that a damaged archive fails as it is read.
        self._storages: dict[str, Optional[tuple[int, int]]] = {}
        for tensor in self.tensors.values():
            self._storage(tensor.storage)

    def _storage(self, key: str) -> Optional[tuple[int, int]]:
        """(where storage ``key``'s bytes start in the file, how many), or None when the archive lacks it."""
        if key not in self._storages:
            name = f"{self.prefix}data/{key}"
            try:
                info = self.archive.getinfo(name)
            except KeyError:
                self._storages[key] = None
                return None
            try:
                self._storages[key] = (self.start + stored_span(self.archive, info, self.window, self.window.size),
                                       info.file_size)
            except ZipReadError as error:
                raise TorchSaveError(str(error), name) from None
        return self._storages[key]

    def span(self, name: str, element_size: int) -> Optional[tuple[int, int]]:
        """(file offset, length) of tensor ``name``'s bytes when they are one contiguous run of its storage; None
        when the index has no such tensor, its storage is missing or too short, or it is not contiguous."""
        tensor = self.tensors.get(name)
        if tensor is None:
            return None
        expected, numel = 1, 1
        for size, stride in reversed(list(zip(tensor.sizes, tensor.strides))):
            if size != 1 and stride != expected:
                return None  # not contiguous: the emitter made it contiguous; its bytes are not a run here
            expected *= size
            numel *= size
        storage = self._storage(tensor.storage)
        if storage is None:
            return None
        at, available = storage
        start, length = tensor.offset * element_size, numel * element_size
        if start + length > available:
            return None
        return at + start, length

