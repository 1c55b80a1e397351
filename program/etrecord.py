"""Reading the names of a program's constants from an ETRecord, without torch.

An ETRecord (``executorch.devtools.etrecord``, written by ``generate_etrecord`` or
``ExecutorchProgramManager.get_etrecord().save``) is a zip holding, per method, the edge-dialect
``ExportedProgram`` serialized by ``torch.export``: ``edge_dialect_exported_program/<method>`` is JSON
(the graph and its signature: which placeholder is which parameter, buffer or lifted constant, and each
placeholder's dtype and sizes), ``..._state_dict`` and ``..._constants`` are ``torch.save`` zips of the
tensors themselves.  This module reads the JSON with ``json`` and the ``torch.save`` pickles with a
restricted unpickler that builds no object (it only records which storage file, offset and shape each
tensor has), so naming constants never imports torch and an ETRecord cannot run code.

What it yields, ``RecordedMethod``, is the ordered list of the method's constant placeholders with their
names (``fully_qualified_name`` as ``torch.export`` knows them: ``fc1.weight``), dtypes, sizes and a way to
hash their bytes; the mutable buffers likewise (``k_cache``); and the method's user inputs and outputs in order:
an input by its placeholder's name (``torch.export`` names it after the ``forward`` argument: ``tokens``), an
output by its key in what ``forward`` returns (``logits`` of a dict; the graph's own output names,
``aten_add_tensor``, are no name a user knows, so an output returned bare or in a tuple has none).  Matching
them to a program's value indices is ``pte_devconst.rewriter.names``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import zipfile
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Optional

from pte_devconst.util.errors import PteDevconstError

IDENTIFIER = "ETRECORD_V0"
EDGE_PREFIX = "edge_dialect_exported_program"
# The serialized graph of one method is a few MB even for a large model; a bigger entry is not an ETRecord's.
MAX_JSON_BYTES = 256 << 20

# torch.export's serialized ScalarType (torch/_export/serde/schema.py) -> torch's dtype name, which
# program.executorch.scalar_type_name gives for ExecuTorch's numbering.
TORCH_SERDE_DTYPES = {
    1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "float16", 7: "float32", 8: "float64",
    12: "bool", 13: "bfloat16", 28: "uint16", 29: "float8_e4m3fn", 30: "float8_e5m2", 31: "float8_e4m3fnuz",
    32: "float8_e5m2fnuz", 34: "uint32", 35: "uint64",
}
ELEMENT_SIZES = {"uint8": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "float16": 2, "float32": 4,
                 "float64": 8, "bool": 1, "bfloat16": 2, "uint16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1,
                 "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "uint32": 4, "uint64": 8}

# The placeholder kinds of a graph signature that are constants once emitted (a mutated buffer is not).
CONSTANT_KINDS = {"parameter": "parameter_name", "buffer": "buffer_name", "tensor_constant": "tensor_constant_name"}


class ETRecordError(PteDevconstError):
    """The file is not an ETRecord this tool can read (one line, naming the file and the entry)."""


@dataclass(frozen=True)
class RecordedConstant:
    """One constant placeholder of a recorded method, in graph order."""

    name: str  # the fully qualified name: ``fc1.weight``
    dtype: str  # torch's name: ``float32``
    sizes: tuple[int, ...]
    digest: Optional[Callable[[], Optional[str]]] = field(default=None, compare=False, repr=False)

    @property
    def key(self) -> tuple[str, tuple[int, ...]]:
        return self.dtype, self.sizes


@dataclass(frozen=True)
class RecordedValue:
    """One user input or output of a recorded method, in order: its name where a user knows one, dtype and sizes.

    ``sizes`` holds None for a symbolic size; ``dtype`` and ``sizes`` are None for a value that is not a tensor.
    """

    name: Optional[str]
    dtype: Optional[str] = None
    sizes: Optional[tuple[Optional[int], ...]] = None


@dataclass(frozen=True)
class RecordedMethod:
    name: str
    constants: tuple[RecordedConstant, ...]
    inputs: Optional[tuple[RecordedValue, ...]] = None  # None: not recorded (the names leave inputs unnamed)
    outputs: Optional[tuple[RecordedValue, ...]] = None
    mutable: tuple[RecordedConstant, ...] = ()  # mutable buffers (``k_cache``), with their initial bytes


def output_keys(spec: Any, leaves: int) -> Optional[tuple[Optional[str], ...]]:
    """Each leaf's key path in a pytree spec (``logits``, ``past[0]``, ``cache.k``), None for a leaf reached
    through positions only (a bare tensor, a tuple's item); None when the spec is unreadable or has another
    number of leaves than ``leaves``.

    ``spec`` is ``torch.utils._pytree``'s JSON (a serialized ``out_spec``: ``{"type", "context",
    "children_spec"}``) or a live ``TreeSpec``: a node whose context is a list of keys as long as its children
    (a dict, an ``OrderedDict``, a registered output class) or a namedtuple class names its children.
    """
    found: list[Optional[str]] = []

    def walk(node: Any, path: str, keyed: bool, depth: int) -> None:
        if depth > 64 or len(found) > leaves:
            raise ValueError("too deep or too many leaves")
        if isinstance(node, dict):
            children, context = node.get("children_spec"), node.get("context")
            if isinstance(context, str):
                try:
                    context = json.loads(context)
                except ValueError:
                    context = None
        else:  # a live TreeSpec
            children = list(node.children()) if callable(getattr(node, "children", None)) else \
                getattr(node, "children_specs", None)
            context = getattr(node, "context", None)
            context = list(getattr(context, "_fields", context) or ()) if not isinstance(context, list) else context
        if not isinstance(children, list):
            raise ValueError("no children")
        if not children:
            found.append(path if keyed else None)
            return
        keys = context if isinstance(context, list) and len(context) == len(children) and all(
            isinstance(k, (str, int)) and not isinstance(k, bool) for k in context) else None
        for position, child in enumerate(children):
            if keys is not None:
                key = str(keys[position])
                walk(child, f"{path}.{key}" if path else key, True, depth + 1)
            else:
                walk(child, f"{path}[{position}]", keyed, depth + 1)

    try:
        if isinstance(spec, str):
            loaded = json.loads(spec)
            spec = loaded[1] if isinstance(loaded, list) and len(loaded) == 2 else loaded
        walk(spec, "", False, 0)
    except (ValueError, TypeError, AttributeError, RecursionError):
        return None
    return tuple(found) if len(found) == leaves else None


def _int(item: Any) -> Optional[int]:
    """A serialized SymInt: ``{"as_int": 3}``; None for a symbolic size (a dynamic shape is no constant's)."""
    return item.get("as_int") if isinstance(item, dict) and isinstance(item.get("as_int"), int) else None


class _TensorRecord:
    """What the restricted unpickler makes of
    ``torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)``."""

    def __init__(self, storage: Any, offset: Any, size: Any, stride: Any, *_: Any) -> None:
        self.storage, self.offset, self.size, self.stride = storage, offset, tuple(size), tuple(stride)


def _rebuild_parameter(data: Any, *_: Any) -> Any:
    return data


class _Opaque:
    """Any object the pickle builds that the names do not need (hooks, an OrderedDict's metadata)."""

    def __init__(self, *_: Any, **__: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass


_ALLOWED = {("torch._utils", "_rebuild_tensor_v2"): _TensorRecord,
            ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
            ("collections", "OrderedDict"): dict}


class _Unpickler(pickle.Unpickler):
    """Builds only dicts, tuples, plain values and ``_TensorRecord``; any other global is refused (nothing runs)."""

    def find_class(self, module: str, name: str) -> Any:
        found = _ALLOWED.get((module, name))
        if found is not None:
            return found
        if module == "torch" and name.endswith("Storage"):
            return name  # the storage's type, as a name
        raise pickle.UnpicklingError(f"{module}.{name} is not a tensor")

    def persistent_load(self, pid: Any) -> Any:
        if isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == "storage":
            return str(pid[2])  # the storage's key: the archive's data/<key>
        raise pickle.UnpicklingError("unknown persistent id")


class _TorchSave:
    """A ``torch.save`` zip (inside the ETRecord): its tensors' storage files, read only to hash one tensor's bytes."""

    def __init__(self, data: IO[bytes]) -> None:
        self.zip = zipfile.ZipFile(data)
        names = self.zip.namelist()
        pickles = [n for n in names if n.endswith("data.pkl")]
        if not pickles:
            raise pickle.UnpicklingError("no data.pkl")
        self.prefix = pickles[0][: -len("data.pkl")]
        info = self.zip.getinfo(pickles[0])
        if info.file_size > MAX_JSON_BYTES:
            raise pickle.UnpicklingError("data.pkl is larger than a state dict's index")
        loaded = _Unpickler(io.BytesIO(self.zip.read(info))).load()
        self.tensors: dict[str, _TensorRecord] = (
            {k: v for k, v in loaded.items() if isinstance(k, str) and isinstance(v, _TensorRecord)}
            if isinstance(loaded, dict) else {})

    def digest(self, name: str, element_size: int) -> Optional[str]:
        """sha256 of the tensor's bytes when they are one contiguous run of its storage, else None."""
        try:
            return self._digest(name, element_size)
        except (TypeError, ValueError, OSError, zipfile.BadZipFile, EOFError):  # a malformed record: no bytes
            return None

    def _digest(self, name: str, element_size: int) -> Optional[str]:
        tensor = self.tensors.get(name)
        if tensor is None or not isinstance(tensor.offset, int):
            return None
        expected, numel = 1, 1
        for size, stride in reversed(list(zip(tensor.size, tensor.stride))):
            if size != 1 and stride != expected:
                return None  # not contiguous: the emitter made it contiguous; its bytes are not a run here
            expected *= size
            numel *= size
        try:
            member = self.zip.getinfo(f"{self.prefix}data/{tensor.storage}")
        except KeyError:
            return None
        start, length = tensor.offset * element_size, numel * element_size
        if start + length > member.file_size:
            return None
        hasher = hashlib.sha256()
        with self.zip.open(member) as stream:
            stream.seek(start)  # a stored entry (torch.save's) seeks; a compressed one decompresses up to here
            left = length
            while left:
                chunk = stream.read(min(left, 8 << 20))
                if not chunk:
                    return None
                hasher.update(chunk)
                left -= len(chunk)
        return hasher.hexdigest()


def _method_names(members: list[str]) -> dict[str, str]:
    """method -> the entry of its serialized edge program (an old ETRecord has one, for ``forward``)."""
    found: dict[str, str] = {}
    for member in members:
        if member == EDGE_PREFIX:
            found.setdefault("forward", member)
        elif member.startswith(EDGE_PREFIX + "/") and not member.endswith(("_state_dict", "_constants",
                                                                          "_example_inputs")):
            found[member[len(EDGE_PREFIX) + 1:]] = member
    return found


def _recorded_method(record: zipfile.ZipFile, method: str, entry: str, where: str) -> RecordedMethod:
    info = record.getinfo(entry)
    if info.file_size > MAX_JSON_BYTES:
        raise ETRecordError(f"{entry} is {info.file_size} bytes, more than a serialized program has", file=where)
    try:
        document = json.loads(record.read(entry))
        module = document["graph_module"]
        specs = module["signature"]["input_specs"]
        outputs = module["signature"].get("output_specs") or []
        tensors = module["graph"].get("tensor_values") or {}
        if not isinstance(specs, list) or not isinstance(outputs, list) or not isinstance(tensors, dict):
            raise TypeError("input_specs, output_specs or tensor_values has the wrong type")
    except (ValueError, KeyError, TypeError, AttributeError, zipfile.BadZipFile) as error:
        raise ETRecordError(f"{entry} is not a serialized ExportedProgram ({type(error).__name__}: {error})",
                            file=where) from None
    mutated = {(spec.get("buffer_mutation") or {}).get("buffer_name") for spec in outputs
               if isinstance(spec, dict) and isinstance(spec.get("buffer_mutation"), dict)}
    stores: dict[str, Optional[_TorchSave]] = {}

    def store(suffix: str) -> Optional[_TorchSave]:
        if suffix not in stores:
            try:  # streamed from the ETRecord (a stored entry seeks without reading a state dict of GBs)
                stores[suffix] = _TorchSave(record.open(f"{entry}{suffix}"))
            except (KeyError, pickle.UnpicklingError, zipfile.BadZipFile, EOFError, ValueError, TypeError,
                    AttributeError, IndexError, OSError, RecursionError, MemoryError):
                stores[suffix] = None  # no bytes to compare: names are then matched by dtype and shape alone
        return stores[suffix]

    def value(arg: Any, name: Optional[str]) -> RecordedValue:
        """A user input or output: ``{"as_tensor": {"name": "x"}}`` names its placeholder (or node)."""
        inner = next(iter(arg.values()), None) if isinstance(arg, dict) and len(arg) == 1 else None
        placeholder = inner.get("name") if isinstance(inner, dict) else None
        meta = tensors.get(placeholder) if isinstance(placeholder, str) else None
        if not isinstance(meta, dict):
            return RecordedValue(name)
        dtype = meta.get("dtype")
        raw_sizes = meta.get("sizes")
        return RecordedValue(name, TORCH_SERDE_DTYPES.get(dtype) if isinstance(dtype, int) else None,
                             tuple(_int(s) for s in raw_sizes) if isinstance(raw_sizes, list) else None)

    inputs = []
    for spec in specs:
        body = spec.get("user_input") if isinstance(spec, dict) and len(spec) == 1 else None
        if isinstance(body, dict):
            arg = body.get("arg")
            inner = next(iter(arg.values()), None) if isinstance(arg, dict) and len(arg) == 1 else None
            name = inner.get("name") if isinstance(inner, dict) else None
            inputs.append(value(arg, name if isinstance(name, str) and name else None))
    user_outputs = [spec["user_output"].get("arg") for spec in outputs if isinstance(spec, dict) and len(spec) == 1
                    and isinstance(spec.get("user_output"), dict)]
    keys = output_keys(_out_spec(module), len(user_outputs)) or (None,) * len(user_outputs)

    constants: list[RecordedConstant] = []
    mutable: list[RecordedConstant] = []
    for spec in specs:
        if not isinstance(spec, dict) or len(spec) != 1:
            continue
        kind, body = next(iter(spec.items()))
        if kind not in CONSTANT_KINDS or not isinstance(body, dict):
            continue
        name = body.get(CONSTANT_KINDS[kind])
        arg = body.get("arg")
        placeholder = arg.get("name") if isinstance(arg, dict) else None
        meta = tensors.get(placeholder) if isinstance(placeholder, str) else None
        if not isinstance(name, str) or not isinstance(meta, dict):
            continue
        dtype = meta.get("dtype")
        dtype = TORCH_SERDE_DTYPES.get(dtype) if isinstance(dtype, int) else None
        raw_sizes = meta.get("sizes")
        sizes = tuple(_int(s) for s in raw_sizes) if isinstance(raw_sizes, list) else (None,)
        if dtype is None or any(s is None or s < 0 for s in sizes):
            continue
        suffix = "_constants" if kind == "tensor_constant" else "_state_dict"

        def digest(name: str = name, suffix: str = suffix, size: int = ELEMENT_SIZES[dtype]) -> Optional[str]:
            saved = store(suffix)
            found = saved.digest(name, size) if saved is not None else None
            if found is None and suffix == "_state_dict":  # torch.export keeps some buffers with the constants
                other = store("_constants")
                found = other.digest(name, size) if other is not None else None
            return found

        # A mutable buffer is no constant once emitted: planned memory, named where it starts with initial data.
        (mutable if name in mutated else constants).append(
            RecordedConstant(name, dtype, sizes, digest))  # type: ignore[arg-type]
    return RecordedMethod(method, tuple(constants), tuple(inputs),
                          tuple(value(arg, key) for arg, key in zip(user_outputs, keys)), tuple(mutable))


def _out_spec(module: dict[str, Any]) -> Any:
    """The serialized ``out_spec`` of the method's root call (``module_call_graph`` entry with ``fqn`` "")."""
    for entry in module.get("module_call_graph") or ():
        if isinstance(entry, dict) and entry.get("fqn") == "" and isinstance(entry.get("signature"), dict):
            return entry["signature"].get("out_spec")
    return None


def read_etrecord(source: "str | os.PathLike[str] | IO[bytes]") -> dict[str, RecordedMethod]:
    """method -> its recorded constants, from an ETRecord file; ``ETRecordError`` for anything else."""
    where = os.fspath(source) if isinstance(source, (str, os.PathLike)) else getattr(source, "name", "<etrecord>")
    try:
        record = zipfile.ZipFile(source)
    except (OSError, zipfile.BadZipFile, ValueError) as error:
        text = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise ETRecordError(f"not an ETRecord: {text}", file=str(where)) from None
    members = record.namelist()
    if IDENTIFIER not in members:
        raise ETRecordError(f"not an ETRecord (no {IDENTIFIER} entry; write one with executorch.devtools."
                            "etrecord.generate_etrecord)", file=str(where))
    methods = {name: _recorded_method(record, name, entry, str(where))
               for name, entry in _method_names(members).items()}
    if not methods:
        raise ETRecordError("the ETRecord holds no edge program (generate it with the EdgeProgramManager)",
                            file=str(where))
    return methods
