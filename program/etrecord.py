"""Reading the names of a program's constants from an ETRecord, without torch.

An ETRecord (``executorch.devtools.etrecord``, written by ``generate_etrecord`` or
``ExecutorchProgramManager.get_etrecord().save``) is a zip holding, per method, the edge-dialect
``ExportedProgram`` serialized by ``torch.export``: ``edge_dialect_exported_program/<method>`` is JSON
(the graph and its signature: which placeholder is which parameter, buffer or lifted constant, and each
placeholder's dtype and sizes), ``..._state_dict`` and ``..._constants`` are ``torch.save`` zips of the
tensors themselves.  Naming constants never imports torch, and an ETRecord cannot run code.

ETRecords come with third-party models, so everything read from one is bounded by what real ones need (measured
on 1.5.1 exports, docs/robustness.md), not only by its bytes: an entry is read only when stored or deflated,
unencrypted, declared within ``MAX_JSON_BYTES`` (``MAX_PICKLE_BYTES``) and inflating at most
``util.bounded_zip.MAX_RATIO`` times; its JSON is built only within ``MAX_JSON_VALUES`` values and
``util.bounded_json.MAX_DEPTH`` levels; a state dict's pickle is walked by ``program.torch_save``, which builds no
object of a class and at most ``MAX_PICKLE_OBJECTS`` objects; all entries together inflate to at most
``MAX_TOTAL_BYTES``, and the tensors' bytes hashed for the names to at most twice the file plus 64 MiB.  Any
failure, past a bound or of the zip, JSON or pickle, is one ``ETRecordError``: ``not an ETRecord (or one this
tool will not read): FILE: ENTRY: why``.

What it yields, ``RecordedMethod``, is the ordered list of the method's constant placeholders with their
names (``fully_qualified_name`` as ``torch.export`` knows them: ``fc1.weight``), dtypes, sizes and a way to
hash their bytes; the mutable buffers likewise (``k_cache``); and the method's user inputs and outputs in order:
an input by its placeholder's name (``torch.export`` names it after the ``forward`` argument: ``tokens``), an
output by its key in what ``forward`` returns (``logits`` of a dict; the graph's own output names,
``aten_add_tensor``, are no name a user knows, so an output returned bare or in a tuple has none).  Matching
them to a program's value indices is ``pte_devconst.rewriter.names``.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from dataclasses import field
from typing import IO, Any, Callable, Optional

from pte_devconst.program.torch_save import TorchSave, TorchSaveError
from pte_devconst.util.bounded_json import BoundedJSON, JSONBoundError
from pte_devconst.util.bounded_zip import Seekable, ZipReadError, check_entry, open_zip, read_entry, stored_span
from pte_devconst.util.errors import PteDevconstError
from pte_devconst.util.record import record

IDENTIFIER = "ETRECORD_V0"
EDGE_PREFIX = "edge_dialect_exported_program"
# What one ETRecord may make this reader build.  Measured on ExecuTorch 1.5.1 exports of 5 to 600 parameters
# (docs/robustness.md): a method's serialized edge program takes about 2.6 KB of JSON per parameter with its graph
# nodes (1.5 MB for 600), one value per 10 to 12 bytes, nests 9 deep, and deflates at most 39 times; a state
# dict's data.pkl takes 120 bytes, 40 opcodes and 54 of the walk's objects and items per tensor.
MAX_JSON_BYTES = 64 << 20  # of any density; real JSON meets the values' bound first
MAX_JSON_VALUES = 4_000_000  # some 45 MB of real JSON, 18,000 parameters' graph (large models take a few MB);
# what it builds stays within about 350 MiB even for the costliest values (4 million short strings)
MAX_PICKLE_BYTES = 16 << 20  # some 140,000 tensors
MAX_PICKLE_OBJECTS = 4_000_000  # some 75,000 tensors, and at most about 256 MiB of the smallest objects
MAX_TOTAL_BYTES = 4 * MAX_JSON_BYTES  # every entry read, all methods together
HASH_FLOOR = 64 << 20  # the tensors' bytes hashed may be twice the file, plus this

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
    """The file is not an ETRecord this tool can read: one line, naming the file and the entry (``where``)."""

    PREFIX = "not an ETRecord (or one this tool will not read)"

    def __str__(self) -> str:
        return ": ".join([self.PREFIX] + [p for p in (self.file, self.where) if p] + [self.what])


@record
class RecordedConstant:
    """One constant placeholder of a recorded method, in graph order."""

    name: str  # the fully qualified name: ``fc1.weight``
    dtype: str  # torch's name: ``float32``
    sizes: tuple[int, ...]
    digest: Optional[Callable[[], Optional[str]]] = field(default=None, compare=False, repr=False)

    @property
    def key(self) -> tuple[str, tuple[int, ...]]:
        return self.dtype, self.sizes


@record
class RecordedValue:
    """One user input or output of a recorded method, in order: its name where a user knows one, dtype and sizes.

    ``sizes`` holds None for a symbolic size; ``dtype`` and ``sizes`` are None for a value that is not a tensor.
    """

    name: Optional[str]
    dtype: Optional[str] = None
    sizes: Optional[tuple[Optional[int], ...]] = None


@record
class RecordedMethod:
    name: str
    constants: tuple[RecordedConstant, ...]
    inputs: Optional[tuple[RecordedValue, ...]] = None  # None: not recorded (the names leave inputs unnamed)
    outputs: Optional[tuple[RecordedValue, ...]] = None
    mutable: tuple[RecordedConstant, ...] = ()  # mutable buffers (``k_cache``), with their initial bytes
    notes: tuple[str, ...] = ()  # what the names of this method could not use, and why (for the report)


def output_keys(spec: Any, leaves: int, loads: Callable[[str], Any] = json.loads
                ) -> Optional[tuple[Optional[str], ...]]:
    """Each leaf's key path in a pytree spec (``logits``, ``past[0]``, ``cache.k``), None for a leaf reached
    through positions only (a bare tensor, a tuple's item); None when the spec is unreadable or has another
    number of leaves than ``leaves``.  ``loads`` parses a spec's JSON strings (an ETRecord's, within its
    budget: ``JSONBoundError`` goes up, as any bound does).

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
                    context = loads(context)
                except JSONBoundError:
                    raise
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
            loaded = loads(spec)
            spec = loaded[1] if isinstance(loaded, list) and len(loaded) == 2 else loaded
        walk(spec, "", False, 0)
    except JSONBoundError:
        raise
    except (ValueError, TypeError, AttributeError, RecursionError):
        return None
    return tuple(found) if len(found) == leaves else None


def _int(item: Any) -> Optional[int]:
    """A serialized SymInt: ``{"as_int": 3}``; None for a symbolic size (a dynamic shape is no constant's)."""
    return item.get("as_int") if isinstance(item, dict) and isinstance(item.get("as_int"), int) else None


class _Reading:
    """One ETRecord being read: its file, what it may still inflate, and the tensors' bytes hashed (each run of
    bytes once, at most twice the file plus ``HASH_FLOOR`` in all).  Every failure is an ``ETRecordError``."""

    def __init__(self, source: "str | os.PathLike[str] | IO[bytes]", where: str) -> None:
        self.where = where
        try:
            self.file: Seekable = _open(source) if isinstance(source, (str, os.PathLike)) else source
            self.size = self.file.seek(0, os.SEEK_END)
            self.record = open_zip(self.file)
        except ZipReadError as error:
            raise self.error(str(error)) from None
        except (OSError, ValueError, AttributeError) as error:  # no such file, a directory, an unseekable object
            text = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
            raise self.error(text) from None
        self.inflate_left = MAX_TOTAL_BYTES
        self.hash_left = 2 * self.size + HASH_FLOOR
        self._digests: dict[tuple[int, int], str] = {}

    def error(self, why: str, entry: Optional[str] = None) -> ETRecordError:
        return ETRecordError(why, file=self.where, where=entry)

    def _spend(self, size: int, entry: str) -> None:
        if size > self.inflate_left:
            raise self.error(f"the entries read so far and this one inflate to more than {MAX_TOTAL_BYTES:,} bytes",
                             entry)
        self.inflate_left -= size

    def read(self, entry: str, limit: int) -> bytes:
        """The bytes of ``entry``, within ``limit`` and the bounds of ``util.bounded_zip``."""
        info = self.record.getinfo(entry)
        try:
            check_entry(info, limit)
            self._spend(info.file_size, entry)
            return read_entry(self.record, info, limit)
        except ZipReadError as error:
            raise self.error(str(error), entry) from None

    def torch_save(self, entry: str) -> Optional[TorchSave]:
        """The tensor index of the ``torch.save`` archive in ``entry``; None when the ETRecord has no such entry."""
        try:
            info = self.record.getinfo(entry)
        except KeyError:
            return None
        try:
            start = stored_span(self.record, info, self.file, self.size)
            pickle_limit = min(MAX_PICKLE_BYTES, self.inflate_left)
            saved = TorchSave(self.file, start, info.file_size, max_pickle_bytes=pickle_limit,
                              max_objects=MAX_PICKLE_OBJECTS)
        except ZipReadError as error:
            raise self.error(str(error), entry) from None
        except TorchSaveError as error:
            raise self.error(error.why, f"{entry}: {error.entry}" if error.entry else entry) from None
        self._spend(saved.pickle_size, entry)
        return saved

    def digest(self, span: tuple[int, int], entry: str) -> str:
        """sha256 of ``span`` (file offset, length; in ``entry``), hashed once however many tensors name it."""
        found = self._digests.get(span)
        if found is not None:
            return found
        start, left = span
        if left > self.hash_left:
            raise self.error(f"its tensors name more than twice the file's bytes (plus {HASH_FLOOR:,}) to hash",
                             entry)
        self.hash_left -= left
        hasher = hashlib.sha256()
        try:
            self.file.seek(start)
            while left:
                chunk = self.file.read(min(left, 8 << 20))
                if not chunk:
                    raise self.error("it ended while a tensor's bytes were read (did it change?)", entry)
                hasher.update(chunk)
                left -= len(chunk)
        except OSError as error:
            raise self.error(error.strerror or str(error), entry) from None
        found = self._digests[span] = hasher.hexdigest()
        return found


def _open(path: "str | os.PathLike[str]") -> IO[bytes]:
    """A regular file opened for reading; a directory, pipe or device is an OSError (a FIFO never blocks)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "it is a directory")
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, "not a regular file (a pipe, socket or device)")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


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


def _recorded_method(reading: _Reading, method: str, entry: str) -> RecordedMethod:
    parser = BoundedJSON(MAX_JSON_VALUES)  # the graph and the JSON strings inside it, one budget
    data = reading.read(entry, MAX_JSON_BYTES)
    try:
        document = parser.loads(data)
        del data
        module = document["graph_module"]
        specs = module["signature"]["input_specs"]
        outputs = module["signature"].get("output_specs") or []
        tensors = module["graph"].get("tensor_values") or {}
        if not isinstance(specs, list) or not isinstance(outputs, list) or not isinstance(tensors, dict):
            raise TypeError("input_specs, output_specs or tensor_values has the wrong type")
    except JSONBoundError as error:
        raise reading.error(str(error), entry) from None
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as error:
        raise reading.error(f"not a serialized ExportedProgram ({type(error).__name__}: "
                            f"{' '.join(str(error).split())[:200]})", entry) from None
    mutated = {(spec.get("buffer_mutation") or {}).get("buffer_name") for spec in outputs
               if isinstance(spec, dict) and isinstance(spec.get("buffer_mutation"), dict)}
    # The tensor indexes, read now so that a bad one fails before any program is looked at (the bytes they
    # index are hashed only when a name needs them).
    stores = {suffix: reading.torch_save(f"{entry}{suffix}") for suffix in ("_state_dict", "_constants")}
    notes = tuple(f"{entry}{suffix}: its pickle uses what this tool does not read ({'; '.join(saved.unknown[:3])}"
                  f"{'; and more' if len(saved.unknown) > 3 else ''}), so the constants it holds are matched by "
                  "dtype and shape alone" for suffix, saved in stores.items() if saved is not None and saved.unknown)

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
    try:
        keys = output_keys(_out_spec(module), len(user_outputs), parser.loads) or (None,) * len(user_outputs)
    except JSONBoundError as error:
        raise reading.error(f"its out_spec: {error}", entry) from None

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
            saved = stores[suffix]
            span = saved.span(name, size) if saved is not None else None
            if span is None and suffix == "_state_dict":  # torch.export keeps some buffers with the constants
                other, suffix = stores["_constants"], "_constants"
                span = other.span(name, size) if other is not None else None
            return reading.digest(span, f"{entry}{suffix}") if span is not None else None

        # A mutable buffer is no constant once emitted: planned memory, named where it starts with initial data.
        (mutable if name in mutated else constants).append(
            RecordedConstant(name, dtype, sizes, digest))  # type: ignore[arg-type]
    return RecordedMethod(method, tuple(constants), tuple(inputs),
                          tuple(value(arg, key) for arg, key in zip(user_outputs, keys)), tuple(mutable), notes)


def _out_spec(module: dict[str, Any]) -> Any:
    """The serialized ``out_spec`` of the method's root call (``module_call_graph`` entry with ``fqn`` "")."""
    for entry in module.get("module_call_graph") or ():
        if isinstance(entry, dict) and entry.get("fqn") == "" and isinstance(entry.get("signature"), dict):
            return entry["signature"].get("out_spec")
    return None


def read_etrecord(source: "str | os.PathLike[str] | IO[bytes]") -> dict[str, RecordedMethod]:
    """method -> its recorded constants, from an ETRecord file; ``ETRecordError`` for anything else."""
    where = os.fspath(source) if isinstance(source, (str, os.PathLike)) else getattr(source, "name", "<etrecord>")
    reading = _Reading(source, str(where))
    members = reading.record.namelist()
    if IDENTIFIER not in members:
        raise reading.error(f"no {IDENTIFIER} entry (write one with executorch.devtools.etrecord.generate_etrecord)")
    methods = {name: _recorded_method(reading, name, entry) for name, entry in _method_names(members).items()}
    if not methods:
        raise reading.error("it holds no edge program (generate it with the EdgeProgramManager)")
    return methods
