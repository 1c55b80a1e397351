"""The Python API: what the command line does, as plain functions returning the objects it renders.

An export script can call it right after ``to_executorch()``::

    from pte_devconst import analyze, rewrite, check

    result = rewrite("model.pte")            # writes model.devconst.pte
    assert check([result.output]).passed     # nothing is copied per call any more

Every function that reads a program takes a path, the program's bytes, a binary file object (``io.BytesIO``)
or the ExecuTorch program manager itself (anything with ``.buffer``): ``rewrite(et)`` rewrites in memory and
returns the new program in ``result.data``, touching no file.  A manager also names the constants (its graph
signature), as ``etrecord=`` does for any program (an ETRecord file, an ``ETRecord``, an
``EdgeProgramManager`` or ``ExecutorchProgramManager``).

Nothing here imports torch except ``run`` and ``validate``, which execute programs (and ``rewrite`` with
``fold=True``, to compute folded values).  The command line calls these functions and renders their results;
the file rules (``paths``) are applied here and the lower layers get explicit paths.
Errors are ``pte_devconst.util.errors.PteDevconstError`` (one readable line).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Iterable, Mapping, Optional, Sequence, Union

from pte_devconst.util.errors import PteDevconstError
from pte_devconst.schema.model import Device
from pte_devconst.util.named_enum import NamedEnum

if TYPE_CHECKING:  # only for annotations: keep `import pte_devconst.api` light
    from pte_devconst.rewriter.flows import MethodFlows
    from pte_devconst.rewriter.names import ProgramNames
    from pte_devconst.schema.pte_file import ProgramBytes, PteFile
    from pte_devconst.rewriter.diff import ProgramDiff
    from pte_devconst.rewriter.inventory import ProgramSummary
    from pte_devconst.rewriter.plan import DeviceMemory, FoldGain, RewriteOptions
    from pte_devconst.rewriter.rewrite import RewriteResult
    from pte_devconst.runner.run import RunResult
    from pte_devconst.runner.validate import ValidationResult

PathLike = Union[str, "os.PathLike[str]"]
DeviceLike = Union[str, Device]
# A program: a path, its bytes, a binary file object, or an ExecuTorch program manager (anything with ``.buffer``).
ProgramLike = Union[PathLike, bytes, bytearray, memoryview, BinaryIO, Any]
# Where constants' names come from: an ETRecord file (path or binary file object), an ETRecord object, or a
# program manager (EdgeProgramManager, ExecutorchProgramManager).
NamesLike = Union[PathLike, BinaryIO, Any]

__all__ = ["analyze", "inspect", "rewrite", "diff", "check", "run", "validate", "programs", "expand_paths",
           "parse_devices", "CheckReport", "CheckStatus", "FileCheck", "Finding", "InspectReport", "Programs"]

def _program(program: ProgramLike, role: str = "program") -> "Union[Path, ProgramBytes]":
    """A path as a ``Path``; a program in memory as ``ProgramBytes`` (its bytes, with the name reports give it).

    Anything else is a ``PteDevconstError`` saying what is taken, never a TypeError from deep inside.
    """
    from pte_devconst.schema.pte_file import ProgramBytes

    if isinstance(program, ProgramBytes):
        return program
    if isinstance(program, (str, os.PathLike)):
        return Path(program)
    if isinstance(program, (bytes, bytearray, memoryview)):
        return ProgramBytes(bytes(program), "<bytes>")
    read = getattr(program, "read", None)
    if callable(read):
        data = read()
        if not isinstance(data, (bytes, bytearray)):
            raise PteDevconstError(f"{role}: the file object gives {type(data).__name__}, not bytes (open it in "
                                   "binary mode: open(path, 'rb'))")
        name = getattr(program, "name", None)
        return ProgramBytes(bytes(data), name if isinstance(name, str) else f"<{type(program).__name__}>")
    buffer = getattr(program, "buffer", None)
    if isinstance(buffer, (bytes, bytearray, memoryview)):
        return ProgramBytes(bytes(buffer), f"<{type(program).__name__}>")
    raise PteDevconstError(f"{role}: expected a path, the program's bytes, a binary file object or an ExecuTorch "
                           f"program manager (with .buffer), got {type(program).__name__}")


def _data_for(pte: "Union[Path, ProgramBytes]", ptd: Optional[PathLike]) -> Optional[Path]:
    """The .ptd rule for a file; a program in memory has no sibling: its data is ``ptd`` or none."""
    from pte_devconst.paths import data_for

    if isinstance(pte, Path):
        return data_for(pte, ptd)
    return Path(ptd) if ptd is not None else None


def _names_source(program: ProgramLike, etrecord: Optional[NamesLike]) -> Optional[NamesLike]:
    """Where names come from: ``etrecord``, else the program itself when it is a program manager."""
    if etrecord is not None:
        return etrecord
    return program if callable(getattr(program, "exported_program", None)) else None


def _namer(source: Optional[NamesLike]) -> "Optional[Callable[[PteFile], Optional[ProgramNames]]]":
    """``source`` (an ETRecord file or object, a program manager) -> a function naming an opened program's
    constants.  An ETRecord file is read here, torch-free (``program.etrecord``), so a bad one fails first."""
    if source is None:
        return None
    from pte_devconst.rewriter.names import match_names, recorded_from_programs
    from pte_devconst.program.etrecord import read_etrecord

    if isinstance(source, (str, os.PathLike)) or callable(getattr(source, "read", None)):
        recorded = read_etrecord(source)
        origin = f"ETRecord {os.fspath(source) if isinstance(source, (str, os.PathLike)) else '<file object>'}"
    elif hasattr(source, "edge_dialect_program"):  # executorch.devtools.etrecord.ETRecord
        programs = source.edge_dialect_program
        if programs is None:
            raise PteDevconstError("etrecord: the ETRecord holds no edge program")
        recorded = recorded_from_programs(programs if isinstance(programs, Mapping) else {"forward": programs})
        origin = "ETRecord"
    elif callable(getattr(source, "exported_program", None)) and hasattr(source, "methods"):
        recorded = recorded_from_programs({m: source.exported_program(m) for m in source.methods})
        origin = type(source).__name__
    else:
        raise PteDevconstError(f"etrecord: expected an ETRecord file (a path or binary file object), an ETRecord, or "
                               f"an EdgeProgramManager or ExecutorchProgramManager, got {type(source).__name__}")
    return lambda opened_program: match_names(opened_program, recorded, origin)


def _name(source: "PteFile", namer: "Optional[Callable[[PteFile], Optional[ProgramNames]]]") -> "Optional[ProgramNames]":
    """Name ``source``'s constants for a report: its program becomes one whose constants carry the names."""
    if namer is None:
        return None
    from pte_devconst.rewriter.names import named_program

    names = namer(source)
    if names is not None and names.count:
        source.program = named_program(source.program, names)
    return names


def parse_devices(devices: Optional[Iterable[DeviceLike]], option: str = "devices") -> Optional[frozenset[Device]]:
    """``["cuda:0,cuda:1", Device(1, 1)]`` -> a frozenset of non-CPU devices; None stays None (every device)."""
    if devices is None:
        return None
    chosen = set()
    for item in devices:
        for part in [item] if isinstance(item, Device) else str(item).split(","):
            try:
                device = part if isinstance(part, Device) else Device.parse(part)
            except ValueError as error:
                raise PteDevconstError(f"{option}: {error}") from None
            if device.is_cpu:
                raise PteDevconstError(f"{option}: constants only move to non-CPU devices (e.g. cuda:0)")
            chosen.add(device)
    return frozenset(chosen)


def analyze(pte: ProgramLike, ptd: Optional[PathLike] = None, *, etrecord: Optional[NamesLike] = None
            ) -> "ProgramSummary":
    """What ``inspect`` shows: methods, delegates, buffers, segments and every constant's verdict.

    External constants are judged with ``ptd``, else ``NAME.ptd`` next to ``NAME.pte``; without data
    a constant its readers would move has the verdict ``unknown: ...``.  ``etrecord`` names the constants.
    """
    from pte_devconst.rewriter.inventory import summarize
    from pte_devconst.rewriter.load import analyze_opened, opened

    namer = _namer(_names_source(pte, etrecord))
    source_program = _program(pte)
    with opened(source_program, _data_for(source_program, ptd)) as (source, data):
        names = _name(source, namer)
        return summarize(source, analyze_opened(source, data), names)


@dataclass(frozen=True)
class InspectReport:
    """What ``inspect`` shows of one program: its summary, the data used, and what the runtime would make of it."""

    summary: "ProgramSummary"
    ptd: Optional[str]
    unknown_constants: int
    load_refusal: Optional[str]
    notes: tuple[str, ...]
    fold_gain: Optional["FoldGain"] = None  # what rewrite --fold would move beyond a plain rewrite
    device_memory: Optional["DeviceMemory"] = None  # planned device memory now and after a plain rewrite
    names: Optional["ProgramNames"] = None  # where the constants' names came from (--etrecord)
    flows: tuple["MethodFlows", ...] = ()  # the per-call copies of constant-derived values (markdown's diagram)

    @property
    def ptd_hint(self) -> str:
        """How to give this program its data (``put model.ptd next to it or pass --ptd FILE.ptd``)."""
        from pte_devconst.paths import ptd_hint

        return ptd_hint(self.summary.path)

    def to_json(self) -> dict[str, Any]:
        """``inspect``'s JSON document for this program (cli/report.schema.json)."""
        from pte_devconst.util.jsonable import to_jsonable

        from pte_devconst.rewriter.rewrite_json import names_json

        gain = self.fold_gain
        return {"file": to_jsonable(self.summary), "ptd": self.ptd, "unknown_constants": self.unknown_constants,
                "names": names_json(self.names),
                "load_refusal": self.load_refusal, "notes": list(self.notes),
                "fold_hint": None if gain is None else {"tensors": gain.tensors, "bytes_per_call": gain.bytes_per_call},
                "device_memory": device_memory_json(self.device_memory)}


def inspect(pte: ProgramLike, ptd: Optional[PathLike] = None, *, etrecord: Optional[NamesLike] = None
            ) -> InspectReport:
    """What ``inspect`` shows: ``analyze``'s summary, with the data used, the runtime's refusal and notes.

    ``ptd`` is the program's data, else ``NAME.ptd`` next to ``NAME.pte`` (the .ptd rule).  ``etrecord``
    names the constants (a program manager passed as ``pte`` names them itself).
    """
    from pte_devconst.rewriter.flows import program_flows
    from pte_devconst.rewriter.inventory import summarize
    from pte_devconst.rewriter.load import analyze_opened, opened
    from pte_devconst.rewriter.plan import make_plan, safe_device_memory, safe_fold_gain

    namer = _namer(_names_source(pte, etrecord))
    source_program = _program(pte)
    with opened(source_program, _data_for(source_program, ptd)) as (source, data):
        names = _name(source, namer)
        analysis = analyze_opened(source, data)
        notes = analysis.notes + (names.notes if names else ())
        try:  # the plain rewrite's plan, made once for the fold hint and the device memory
            plain = make_plan(source.program, analysis)
        except PteDevconstError:
            plain = None
        return InspectReport(summarize(source, analysis, names), data.path if data else None, len(analysis.unknown),
                             source.load_refusal, notes, safe_fold_gain(source.program, analysis, plain=plain),
                             safe_device_memory(source.program, analysis, plain=plain), names,
                             program_flows(source.program, analysis))


@dataclass(frozen=True)
class Programs:
    """The programs a command line names, in argument order, each with its .ptd (``programs``)."""

    items: tuple[Union[Path, str], ...]  # a program (Path) or a problem (str: a pattern that matched nothing)
    data: Mapping[Path, Path]  # each program's .ptd, where it has one
    single: bool  # one argument that names one file: its result alone, its errors as they are
    left_out: tuple[str, ...] = ()  # inputs not taken, and why

    @property
    def paths(self) -> list[Path]:
        return [item for item in self.items if isinstance(item, Path)]


def programs(files: Iterable[PathLike], ptd: Iterable[PathLike] = (), *, skip_rewrites: bool = False) -> Programs:
    """Expand files, glob patterns and folders into programs and pair each with its .ptd.

    A ``ptd`` entry pairs by path (``a/m.ptd`` with ``a/m.pte``; ``PROGRAM.pte=DATA.ptd`` explicitly; a single
    one with a single program); one that pairs with nothing is refused (PteDevconstError).  ``skip_rewrites``
    leaves out an input that is another input's default output (``models/*.pte`` after a first rewrite also
    matches ``net.devconst.pte``, which is ``net.pte``'s rewrite, not a program to rewrite again).
    """
    from pte_devconst.paths import (default_output, distinct_pairs, expand, identity, names_one_file,
                                    paired_or_refused)

    arguments, given = list(files), list(ptd)
    if len(arguments) == 1 and names_one_file(arguments[0]):
        file = Path(arguments[0])
        return Programs((file,), paired_or_refused([file], given), True)
    items = expand(arguments)
    left_out: list[str] = []
    if skip_rewrites and len(items) > 1:
        outputs = {identity(default_output(i)) for i in items if isinstance(i, Path)}
        kept = [i for i in items if not isinstance(i, Path) or identity(i) not in outputs]
        left_out = [f"{i}: skipped, it is the rewrite of another input" for i in items if i not in kept]
        items = kept
    pairs = paired_or_refused([i for i in items if isinstance(i, Path)], given)
    items, same = distinct_pairs(items, pairs)
    return Programs(tuple(items), pairs, False, tuple(left_out + same))


def rewrite(pte: ProgramLike, output: Optional[PathLike] = None, *, ptd: Optional[PathLike] = None,
            devices: Optional[Iterable[DeviceLike]] = None, min_bytes: int = 0, dry_run: bool = False,
            in_place: bool = False, fsync: bool = True, verify: Optional[str] = None, fold: bool = False,
            duplicate_shared: bool = False, progress: Optional[Callable[[int, int], None]] = None,
            etrecord: Optional[NamesLike] = None, phase: Optional[Callable[[str], None]] = None
            ) -> "RewriteResult":
    """Move every eligible constant into device memory with initial data (what ``rewrite`` does).

    Writes ``output`` (default ``<stem>.devconst.pte`` next to ``pte``) atomically and re-reads it
    before returning; ``dry_run`` only plans.  External constants need ``ptd`` (default: ``NAME.ptd``
    next to ``NAME.pte``).  ``result.changed`` says whether anything moved and
    ``result.plan`` holds every placement, removed instruction and left-in-place verdict.
    ``fsync=False`` skips waiting for the disk: the output is still replaced atomically, but is not
    safe against a power failure right after.  ``verify="full"`` makes the self-check compare every
    byte of the output (default ``"sampled"``: bulk copies from a proven source range are sampled; full
    when PTE_DEVCONST_FULL_CHECK is set).  ``fold=True`` also folds chains of host kernels that only move
    or cast constants for device delegates (``rewrite --fold``; computing them imports torch);
    ``duplicate_shared=True`` gives device readers of a constant the host also reads their own copy.
    ``progress(done, total)`` is called as the output is written, ``phase(name)`` as each step starts
    (planning, writing, self-check, fsync).

    A program in memory (bytes, a file object, ``et`` from ``to_executorch()``) is rewritten in memory:
    ``result.data`` holds the new program's bytes and no file is written (``output`` and ``in_place`` are
    refused).  ``etrecord`` names the constants in the result (a program manager names them itself); the
    output does not change.
    """
    from pte_devconst.paths import default_output
    from pte_devconst.rewriter.plan import RewriteOptions
    from pte_devconst.rewriter.rewrite import rewrite_file

    namer = _namer(_names_source(pte, etrecord))
    source = _program(pte)
    if not isinstance(source, Path) and (output is not None or in_place):
        raise PteDevconstError("a program in memory is rewritten in memory (result.data): output and in_place "
                               "are for files")
    if min_bytes < 0:
        raise PteDevconstError(f"min_bytes must be >= 0, got {min_bytes}")
    if in_place and output is not None:
        raise PteDevconstError("--in-place and --output exclude each other")
    options = RewriteOptions(devices=parse_devices(devices), min_bytes=min_bytes, fold=fold,
                             duplicate_shared=duplicate_shared)
    destination = (None if in_place or dry_run or not isinstance(source, Path) else Path(output) if output is not None
                   else default_output(source))
    return rewrite_file(source, destination, ptd=_data_for(source, ptd), options=options, dry_run=dry_run,
                        in_place=in_place, durable=fsync, verify=verify, progress=progress, names=namer, phase=phase)


def diff(before: ProgramLike, after: ProgramLike, *, etrecord: Optional[NamesLike] = None,
         progress: Optional[Callable[[int, int, str], None]] = None) -> "ProgramDiff":
    """What changed between two programs (any two .pte files): tensors, buffers, instructions, copies.

    ``etrecord`` names the constants of both (a rewrite keeps every value index; a program manager passed as
    ``before`` names them itself).  ``progress(done, total, what)`` is called as each method is compared.
    """
    from pte_devconst.rewriter.diff import diff_files
    from pte_devconst.schema.pte_file import open_pte

    namer = _namer(_names_source(before, etrecord))
    with open_pte(_program(before, "before")) as a, open_pte(_program(after, "after")) as b:
        names = _name(a, namer)
        if names is not None and names.count:
            from pte_devconst.rewriter.names import named_program

            b.program = named_program(b.program, names)
        found = diff_files(a, b, progress)
        if names is not None and names.notes:
            from dataclasses import replace

            found = replace(found, notes=tuple(names.notes))
        return found


def run(pte: ProgramLike, *, ptd: Optional[PathLike] = None, method: Optional[str] = None,
        inputs: Optional[PathLike] = None, calls: int = 1, simulate_devices: bool = False,
        opaque_delegates: bool = False, profile: bool = False, etrecord: Optional[NamesLike] = None) -> "RunResult":
    """Run one method ``calls`` times the way the runtime does and count every copy (imports torch).

    ``ptd`` defaults to ``NAME.ptd`` next to ``NAME.pte``; ``inputs`` is a torch.save file (default:
    deterministic random inputs); ``opaque_delegates`` runs every delegate as a seeded stand-in.  ``etrecord``
    names the method's inputs and outputs (``result.input_names``, ``output_names``; a manager names them itself).
    """
    from pte_devconst.runner.delegates import OpaquePolicy
    from pte_devconst.runner.run import run_program

    source = _program(pte)
    namer = _namer(_names_source(pte, etrecord))  # a bad ETRecord fails before the program runs
    result = run_program(source, ptd_path=_data_for(source, ptd), method=method, inputs=inputs, calls=calls,
                         simulate_devices=simulate_devices, profile=profile,
                         opaque=OpaquePolicy.ALWAYS if opaque_delegates else OpaquePolicy.NEVER)
    names = _io_names(source, namer)
    if names is None:
        return result
    from dataclasses import replace

    from pte_devconst.rewriter.rewrite_json import names_json

    found, labels = names
    plan_index = labels.get(result.method)
    ins = found.inputs.get(plan_index, ()) if plan_index is not None else ()
    outs = found.outputs.get(plan_index, ()) if plan_index is not None else ()
    return replace(result, input_names=tuple(ins), output_names=tuple(outs), names=names_json(found))


def _io_names(program: "Union[Path, ProgramBytes]", namer: "Optional[Callable[[PteFile], Optional[ProgramNames]]]"
              ) -> "Optional[tuple[ProgramNames, dict[str, int]]]":
    """The names ``namer`` gives ``program`` (opened again: the runner read it its own way), and each method
    label's plan index; None without a namer."""
    if namer is None:
        return None
    from pte_devconst.program.executorch import method_labels
    from pte_devconst.schema.pte_file import open_pte

    with open_pte(program) as source:
        names = namer(source)
        labels = {label: index for index, label in enumerate(method_labels(source.program)[0])}
    return (names, labels) if names is not None else None


def validate(original: ProgramLike, rewritten: ProgramLike, *, ptd: Optional[PathLike] = None,
             rewritten_ptd: Optional[PathLike] = None, inputs: Any = None, expected: Any = None, calls: int = 2,
             rtol: Optional[float] = None, atol: Optional[float] = None, simulate_devices: bool = False,
             methods: Optional[Sequence[str]] = None, profile: bool = False,
             opaque_delegates: bool = False, progress: Optional[Callable[[int, int, str], None]] = None,
             etrecord: Optional[NamesLike] = None) -> "ValidationResult":
    """Run both programs on the same inputs and check the rewrite's promises (imports torch).

    ``inputs``/``expected`` are torch.save files (or loaded objects); ``calls`` (>= 2) per program;
    ``rtol``/``atol`` compare floating outputs that need not be bit-identical (None: torch.testing's default for
    the output's dtype; integer and bool outputs compare exactly); ``methods`` (default: every method
    with inputs).  ``result.passed`` is the verdict.  The .ptd rule applies: ``ptd`` defaults to
    ``NAME.ptd`` next to the original, ``rewritten_ptd`` to the rewrite's own sibling, else to the
    original's data (a rewrite keeps external bytes in the same .ptd).  ``progress(done, total, what)`` is
    called before each call of each program.  Either program may be held in memory (bytes, ``et``).
    ``etrecord`` names the moved constants (``result.methods[].moved[].name``).
    """
    if (rtol is not None and rtol < 0) or (atol is not None and atol < 0):
        raise PteDevconstError("--rtol and --atol must not be negative")
    from pte_devconst.runner.validate import validate as run_validation

    first, second = _program(original, "original"), _program(rewritten, "rewritten")
    namer = _namer(_names_source(original, etrecord))
    found = _io_names(first, namer)  # before running: the checks' details name the outputs and constants
    output_names = value_names = None
    if found is not None:
        output_names = {label: found[0].outputs.get(index, ()) for label, index in found[1].items()}
        value_names = {label: found[0].by_plan.get(index, {}) for label, index in found[1].items()}
    data = _data_for(first, ptd)
    result = run_validation(first, second, ptd=data, rewritten_ptd=_data_for(second, rewritten_ptd) or data,
                          inputs=inputs, expected=expected, calls=calls, rtol=rtol, atol=atol,
                          simulate_devices=simulate_devices, methods=methods, profile=profile,
                          opaque_delegates=opaque_delegates, progress=progress, output_names=output_names,
                          value_names=value_names)
    if found is not None:
        result.warnings.extend(note for note in found[0].notes if note not in result.warnings)
    return result


# --------------------------------------------------------------------------- check


@dataclass(frozen=True, slots=True)
class Finding:
    """A constant-derived value copied host-to-device on every call.

    In ``FileCheck.findings`` a constant the rewrite can move; in ``FileCheck.unknown`` an external constant
    that could move if its .ptd showed matching data; in ``FileCheck.stays`` a copy the rewrite cannot
    remove, with ``reason`` saying why (read on the host too, transposed on the host, ...).
    """

    file: str
    method: str
    value: int
    name: str
    device: str
    nbytes: int
    copies_per_call: int
    reason: str = ""  # why it stays copied (``FileCheck.stays``); empty for a finding
    accepted: str = ""  # in ``FileCheck.accepted``: the reason the project gave for accepting it

    @property
    def bytes_per_call(self) -> int:
        return self.nbytes * self.copies_per_call


@dataclass(frozen=True, slots=True)
class Acceptance:
    """A finding a project accepts, with its reason (``[[tool.pte-devconst.accept]]``): ``check`` reports it as
    accepted instead of failing on it.

    ``program`` is a glob (``models/*.pte``) relative to ``root`` (the config file's folder); ``method`` one method
    (None: any); ``constant`` a name (``encoder.weight``) or ``value`` an index (``value 3``), at least one of them.
    """

    program: str
    reason: str
    method: Optional[str] = None
    constant: Optional[str] = None
    value: Optional[int] = None
    root: Optional[str] = None
    origin: str = ""  # where it was written (``pyproject.toml: accept[2]``), for the warning when it matches nothing

    def matches(self, finding: Finding) -> bool:
        from pte_devconst.paths import matches_glob

        return ((self.method is None or self.method == finding.method)
                and (self.constant is None or self.constant == finding.name)
                and (self.value is None or self.value == finding.value)
                and matches_glob(finding.file, self.program, self.root))

    def describe(self) -> str:
        what = [f"program {self.program!r}"] + ([f"method {self.method!r}"] if self.method is not None else [])
        what += [f"constant {self.constant!r}"] if self.constant is not None else []
        what += [f"value {self.value}"] if self.value is not None else []
        return ", ".join(what)


class CheckStatus(NamedEnum):
    """One file's result in ``check``, in a word (the JSON's ``status``)."""

    OK = "ok"
    FINDINGS = "findings"  # what fails the gate
    UNKNOWN = "unknown"  # only external constants that could not be judged
    ERROR = "error"  # the file could not be read


@dataclass(frozen=True, slots=True)
class FileCheck:
    """One file's result: its findings, the constants it could not judge, or the error that kept it from being read."""

    file: str
    ptd: Optional[str]
    constants: int  # constants examined
    findings: tuple[Finding, ...]
    error: Optional[str] = None
    note: Optional[str] = None  # e.g. why `rewrite` would refuse this program
    unknown: tuple[Finding, ...] = ()  # external constants whose .ptd was not found or given
    foldable: int = 0  # without fold=True: tensors `rewrite --fold` would move beyond a plain rewrite
    foldable_bytes_per_call: int = 0
    stays: tuple[Finding, ...] = ()  # constant-derived copies the rewrite cannot remove, each with its reason
    strict: bool = False  # stays count as findings
    # What --device/--min-bytes left out: findings, unknown and stays the check would report without them, each
    # with the option that left it out as its reason (copied per call all the same: never "clean").
    filtered: tuple[Finding, ...] = ()
    devices: tuple[str, ...] = ()  # the non-CPU devices the program uses (delegates, planned buffers, copies)
    device_selection: Optional[tuple[str, ...]] = None  # --device, when given
    device_memory: Optional["DeviceMemory"] = None  # planned device memory now and after the rewrite

    @property
    def filtered_bytes_per_call(self) -> int:
        return sum(f.bytes_per_call for f in self.filtered)

    @property
    def unused_selection(self) -> bool:
        """--device names only devices this program does not use: nothing in it was judged."""
        return (self.error is None and self.device_selection is not None
                and not set(self.device_selection) & set(self.devices))
    accepted: tuple[Finding, ...] = ()  # findings (or stays, or unknown) the project accepts, each with its reason

    @property
    def failing(self) -> tuple[Finding, ...]:
        """What fails the gate: the findings; with ``strict`` every constant-derived per-call copy, also what stays
        and the external constants not judged (copied per call either way; only whether they could move is open)."""
        return self.findings + self.stays + self.unknown if self.strict else self.findings

    @property
    def status(self) -> CheckStatus:
        return (CheckStatus.ERROR if self.error else CheckStatus.FINDINGS if self.failing
                else CheckStatus.UNKNOWN if self.unknown else CheckStatus.OK)

    @property
    def bytes_per_call(self) -> int:
        """Bytes per call of the findings: what a rewrite saves."""
        return sum(f.bytes_per_call for f in self.findings)

    @property
    def stays_bytes_per_call(self) -> int:
        return sum(f.bytes_per_call for f in self.stays)


EXIT_UNKNOWN = 3


@dataclass(frozen=True, slots=True)
class CheckReport:
    files: tuple[FileCheck, ...]
    min_bytes: int
    fold: bool = False  # findings include what rewrite --fold would move
    strict: bool = False
    devices: Optional[tuple[str, ...]] = None  # --device, when given
    unused_accepts: tuple[Acceptance, ...] = ()  # accepted findings that matched nothing (a warning, as ruff's RUF100)

    @property
    def findings(self) -> tuple[Finding, ...]:
        return tuple(f for file in self.files for f in file.findings)

    @property
    def filtered(self) -> tuple[Finding, ...]:
        """What --device/--min-bytes left out, over all files (``FileCheck.filtered``)."""
        return tuple(f for file in self.files for f in file.filtered)

    @property
    def filtered_bytes_per_call(self) -> int:
        return sum(f.bytes_per_call for f in self.filtered)

    @property
    def unused_devices(self) -> tuple[str, ...]:
        """Devices given with --device that no program checked uses (a typo in CI): an error, as nothing was
        judged for them.  Empty when no program could be read (those errors say enough)."""
        checked = [f for f in self.files if not f.error]
        if self.devices is None or not checked:
            return ()
        used = {d for f in checked for d in f.devices}
        return tuple(d for d in self.devices if d not in used)

    @property
    def device_problems(self) -> tuple[str, ...]:
        """One line per device no program uses (exit 2)."""
        checked = [f for f in self.files if not f.error]
        used = sorted({d for f in checked for d in f.devices})
        return tuple(f"--device {d}: no program checked uses this device (they use "
                     f"{', '.join(used) or 'no device'}): nothing was judged for it" for d in self.unused_devices)

    @property
    def warnings(self) -> tuple[str, ...]:
        """One line per program that uses none of the devices given with --device: nothing in it was judged."""
        return tuple(f"{f.file}: uses none of the devices selected (--device {', '.join(f.device_selection or ())}); "
                     f"it uses {', '.join(f.devices) or 'no device'}: nothing in it was judged"
                     for f in self.files if f.unused_selection)

    @property
    def accepted(self) -> tuple[Finding, ...]:
        return tuple(f for file in self.files for f in file.accepted)

    @property
    def unknown(self) -> tuple[Finding, ...]:
        return tuple(f for file in self.files for f in file.unknown)

    @property
    def stays(self) -> tuple[Finding, ...]:
        return tuple(f for file in self.files for f in file.stays)

    @property
    def failing(self) -> tuple[Finding, ...]:
        return tuple(f for file in self.files for f in file.failing)

    @property
    def errors(self) -> tuple[FileCheck, ...]:
        return tuple(file for file in self.files if file.error)

    @property
    def passed(self) -> bool:
        return self.exit_code == 0

    @property
    def exit_code(self) -> int:
        """0 clean; 1 some file still copies an eligible constant per call (with ``strict``: any constant-derived
        value, judged or not); 2 some file could not be checked; 3 nothing else, but some external constant could
        not be judged because its .ptd is missing.  A device given with ``--device`` that no program uses is
        exit 2 too: a gate that judged nothing must not pass."""
        return 2 if self.errors or self.unused_devices else 1 if self.failing else EXIT_UNKNOWN if self.unknown else 0

    @property
    def bytes_per_call(self) -> int:
        return sum(f.bytes_per_call for f in self.findings)

    @property
    def foldable(self) -> int:
        """Without ``fold=True``: how many more tensors ``rewrite --fold`` would move, over all files."""
        return sum(f.foldable for f in self.files)

    @property
    def foldable_bytes_per_call(self) -> int:
        return sum(f.foldable_bytes_per_call for f in self.files)

    @property
    def stays_bytes_per_call(self) -> int:
        return sum(f.bytes_per_call for f in self.stays)

    @property
    def fold_gain(self) -> Optional["FoldGain"]:
        """Without ``fold=True``: what ``rewrite --fold`` would move beyond a plain rewrite (None: nothing more)."""
        from pte_devconst.rewriter.plan import FoldGain

        return FoldGain(self.foldable, self.foldable_bytes_per_call) if self.foldable else None

    def to_json(self) -> dict[str, Any]:
        """``check``'s JSON document (cli/report.schema.json)."""
        return {
            "fold_hint": ({"tensors": self.foldable, "bytes_per_call": self.foldable_bytes_per_call}
                          if self.foldable else None),
            "passed": self.passed,
            "exit_code": self.exit_code,
            "fold": self.fold,
            "strict": self.strict,
            "min_bytes": self.min_bytes,
            "findings": len(self.findings),
            "bytes_per_call": self.bytes_per_call,
            "errors": len(self.errors),
            "unknown": len(self.unknown),
            "stays": len(self.stays),
            "stays_bytes_per_call": self.stays_bytes_per_call,
            "filtered": len(self.filtered),
            "filtered_bytes_per_call": self.filtered_bytes_per_call,
            "devices": None if self.devices is None else list(self.devices),
            "device_problems": list(self.device_problems),
            "warnings": list(self.warnings),
            "accepted": len(self.accepted),
            "unused_accepts": [{"program": a.program, "method": a.method, "constant": a.constant, "value": a.value,
                                "reason": a.reason, "origin": a.origin} for a in self.unused_accepts],
            "files": [{
                "file": f.file, "ptd": f.ptd, "status": f.status, "constants": f.constants,
                "bytes_per_call": f.bytes_per_call, "error": f.error, "note": f.note,
                "findings": _findings_json(f.findings), "unknown": _findings_json(f.unknown),
                "stays": _findings_json(f.stays, reasons=True), "stays_bytes_per_call": f.stays_bytes_per_call,
                "device_memory": device_memory_json(f.device_memory),
                "filtered": _findings_json(f.filtered, reasons=True),
                "filtered_bytes_per_call": f.filtered_bytes_per_call, "devices": list(f.devices),
                "accepted": [{**item, "accepted": x.accepted, "reason": x.reason}
                             for item, x in zip(_findings_json(f.accepted), f.accepted)],
            } for f in self.files],
        }


def device_memory_json(memory: Optional["DeviceMemory"]) -> Optional[dict[str, Any]]:
    """The ``device_memory`` object of a report (cli/report.schema.json), or None."""
    if memory is None:
        return None
    return {"before": memory.before, "after": memory.after, "bound": memory.bound,
            "without_relayout": memory.appended, "warning": memory.warning()}


def _findings_json(findings: tuple[Finding, ...], reasons: bool = False) -> list[dict[str, Any]]:
    return [{"method": x.method, "value": x.value, "name": x.name, "device": x.device, "nbytes": x.nbytes,
             "copies_per_call": x.copies_per_call, "bytes_per_call": x.bytes_per_call,
             **({"reason": x.reason} if reasons else {})} for x in findings]


def _many(files: Any) -> bool:
    """Whether ``files`` is a collection of programs rather than one program (bytes and file objects are one)."""
    return (isinstance(files, (list, tuple, set, frozenset)) or hasattr(files, "__iter__")
            and not isinstance(files, (bytes, bytearray, memoryview)) and not callable(getattr(files, "read", None))
            and getattr(files, "buffer", None) is None)


def expand_paths(patterns: Iterable[PathLike]) -> tuple[list[Path], list[str]]:
    """Expand glob patterns (``**`` too) and directories (every ``*.pte`` below) into files.

    Returns ``(files, problems)``: a pattern that matches nothing is a problem, not an exception, so a
    caller can report every bad argument at once.  A name that exists is taken as it is, even with
    glob characters in it.  Links to folders are followed, each real folder entered once (so a
    symlink loop ends), and each real file is listed once, under the first name found, unless another
    name of it has a .ptd of its own next to it (then it is another program: ``paths.distinct_pairs``).
    Shells usually expand patterns first; this covers those that do not.
    """
    from pte_devconst.paths import distinct_pairs, expand, pair_data

    items = expand(patterns)
    items, _ = distinct_pairs(items, pair_data([i for i in items if isinstance(i, Path)], [])[0])
    return [i for i in items if isinstance(i, Path)], [i for i in items if isinstance(i, str)]


def _check_one(pte: "Union[Path, ProgramBytes]", ptd: Optional[Path], options: "RewriteOptions", strict: bool,
               namer: "Optional[Callable[[PteFile], Optional[ProgramNames]]]" = None) -> FileCheck:
    """One program's findings: the placements (and, with fold, folds) of the very plan ``rewrite`` would make.

    With ``--device``/``--min-bytes`` the plan is also made without them, so that what they leave out is
    reported (``FileCheck.filtered``), never passed over as clean.
    """
    from dataclasses import replace

    from pte_devconst.paths import ptd_hint
    from pte_devconst.rewriter.derived import derived_copies
    from pte_devconst.rewriter.fold import NOT_JUDGED, fold_refusals, torch_found
    from pte_devconst.rewriter.load import analyze_opened, opened
    from pte_devconst.rewriter.plan import make_plan, safe_fold_gain

    with opened(pte, ptd) as (source, data):
        refusal = source.load_refusal
        if refusal:
            raise PteDevconstError(refusal, file=str(pte))
        names = _name(source, namer)
        analysis = analyze_opened(source, data)
        program = source.program
        derived = derived_copies(program, analysis)
        # As rewrite --fold plans: chains whose data it refuses (a NaN cast to int) do not fold.  Without torch
        # no fold computes at all, so the gate counts every chain (rewrite --fold asks for torch first).
        refusals = fold_refusals(source, data, analysis, judge=torch_found()) if options.fold else {}
    # The very plan rewrite makes; its refusal (a buffer past the reader's limit) is this file's error.
    plan = make_plan(program, analysis, options, refusals)
    findings, unknown, stays = _judged(pte, plan, analysis, derived, options)
    # Chains whose data needs torch to judge (a float-to-int cast): not judged, never a silent answer either way.
    unjudged = {key for key, why in refusals.items() if why == NOT_JUDGED}
    chains = [chain for method in analysis.methods for chain in (method.folds.chains if method.folds else ())
              if (chain.plan_index, chain.result) in unjudged]
    unknown += [Finding(str(pte), chain.method, chain.result, f"{chain.kernels} of "
                        f"{chain.source_tensor.fqn or f'value {chain.source}'}", str(chain.device), chain.nbytes,
                        chain.copies_per_call, NOT_JUDGED) for chain in chains]
    not_judged = {(chain.method, chain.result) for chain in chains}
    stays = [f for f in stays if (f.method, f.value) not in not_judged]
    filtered: list[Finding] = []
    if options.devices is not None or options.min_bytes:
        everything = replace(options, devices=None, min_bytes=0)
        kept = {(kind, f.method, f.value) for kind, group in enumerate((findings, unknown, stays)) for f in group}
        for kind, group in enumerate(_judged(pte, make_plan(program, analysis, everything, refusals), analysis,
                                             derived, everything)):
            filtered += [replace(f, reason=_left_out_by(f, options)) for f in group
                         if (kind, f.method, f.value) not in kept]
    gain = None if options.fold else safe_fold_gain(program, analysis, options, plain=plan)
    notes = list(analysis.notes) + list(names.notes if names else ())
    if analysis.refusal and findings:
        notes.append(f"rewrite would refuse this program: {analysis.refusal}")
    external = [f for f in unknown if f.reason != NOT_JUDGED]
    if external:
        hint = ptd_hint(pte) if isinstance(pte, Path) else "pass ptd=FILE.ptd"
        notes.append(f"{len(external)} external constant(s) not judged: their data is in a .ptd; {hint}")
    if chains:
        notes.append(f"{len(chains)} folded chain(s) not judged: {NOT_JUDGED.removeprefix('not judged: ')}")
    return FileCheck(str(pte), str(ptd) if ptd else None, sum(len(m.constants) for m in analysis.methods),
                     tuple(findings), None, "; ".join(notes) or None, tuple(unknown),
                     gain.tensors if gain else 0, gain.bytes_per_call if gain else 0, tuple(stays), strict,
                     tuple(filtered), _devices_used(program, analysis),
                     None if options.devices is None else tuple(sorted(str(d) for d in options.devices)),
                     plan.memory)


def _left_out_by(finding: Finding, options: "RewriteOptions") -> str:
    """Which option left ``finding`` out, in the words of the plan's rule (``plan.skip_reason``)."""
    if options.devices is not None and finding.device not in {str(d) for d in options.devices}:
        return f"device {finding.device} not selected (--device)"
    if finding.nbytes < options.min_bytes:
        return f"{finding.nbytes} bytes is below --min-bytes {options.min_bytes}"
    return "left out by --device/--min-bytes"  # a fold chain's copy left out with it


def _judged(pte: Path, plan: Any, analysis: Any, derived: Any, options: "RewriteOptions"
            ) -> tuple[list[Finding], list[Finding], list[Finding]]:
    """The findings, unknown constants and copies that stay, of ``plan``, as ``options`` select them."""
    from pte_devconst.rewriter.derived import DerivedStatus
    from pte_devconst.rewriter.plan import skip_reason

    eligible = {(c.plan_index, c.value) for c in analysis.eligible}
    found = [(p, Finding(str(pte), p.method, p.value, p.name, str(p.device), p.nbytes, p.copies_per_call))
             for p in plan.placements]
    released = [(p, f) for p, f in found if (p.plan_index, p.value) not in eligible]  # moved once their kernels fold
    findings = [f for p, f in found if (p.plan_index, p.value) in eligible]
    findings += [Finding(str(pte), f.method, f.value, f"{f.chain.kernels} of "
                         f"{f.chain.source_tensor.fqn or f'value {f.chain.source}'}", str(f.device), f.nbytes,
                         f.chain.copies_per_call) for f in plan.folds]
    findings += [f for _, f in released]
    # What folding moves no longer stays: the chains' results and the constants released by them.
    covered = {(f.plan_index, f.chain.result) for f in plan.folds} | {(p.plan_index, p.value) for p, _ in released}
    unknown = [Finding(str(pte), v.method, v.value, v.name, str(v.pending_device), v.nbytes, v.copies_per_call)
               for method in analysis.methods for v in method.constants
               if v.unknown and skip_reason(v.pending_device, v.nbytes, options) is None]
    stays = [Finding(str(pte), copy.method, copy.value, copy.name, str(copy.device), copy.nbytes,
                     copy.copies_per_call, copy.reason)
             for copy in derived
             if copy.status is DerivedStatus.STAYS and skip_reason(copy.device, copy.nbytes, options) is None
             and (copy.plan_index, copy.value) not in covered]
    return findings, unknown, stays


def _devices_used(program: Any, analysis: Any) -> tuple[str, ...]:
    """The non-CPU devices a program uses: its delegates' target devices, its planned buffers' devices and the
    devices its host-to-device copies go to (what ``--device`` can select)."""
    used = {d.device for method in analysis.methods for d in method.delegates}
    used |= {t.device for method in analysis.methods for t in method.transfers}
    for plan in program.execution_plan or ():
        used |= set(plan.buffer_devices().values())
    return tuple(sorted(str(d) for d in used if d is not None and not d.is_cpu))


def check(files: Union[ProgramLike, Iterable[ProgramLike]], *,
          ptd: Optional[Union[PathLike, Sequence[PathLike]]] = None,
          min_bytes: int = 0, devices: Optional[Iterable[DeviceLike]] = None, strict: bool = False,
          progress: Optional[Callable[[int, int, str], None]] = None, fold: bool = False,
          etrecord: Optional[NamesLike] = None,

          accept: Sequence[Acceptance] = (), exclude: Sequence[str] = (),
          exclude_root: Optional[PathLike] = None) -> CheckReport:
    """Which constants do these programs still copy to a device on every call? (what ``check`` does)

    The findings are the constants a rewrite would move.  Every other constant-derived per-call copy
    (a constant read on the host too, a weight transposed on the host, ...) is in ``FileCheck.stays``
    with its reason; ``strict`` makes those fail the check too.

    ``files`` may hold paths, glob patterns and directories; each (program, data) pair is checked once (a
    file and a link to it with a .ptd each are two programs, each judged with its own data).  Each
    program is judged with its .ptd: a ``ptd`` entry paired with it by path (``a/m.ptd`` goes with
    ``a/m.pte``; ``"PROGRAM.pte=DATA.ptd"`` pairs explicitly; a single entry goes with a single
    program), else ``NAME.ptd`` next to ``NAME.pte``.  An external constant whose data is missing is
    reported as unknown (``FileCheck.unknown``, exit code 3), never as clean.  Constants under
    ``min_bytes`` (or bound for devices not in ``devices``) are not judged, but listed in
    ``FileCheck.filtered`` with the option that left them out; a device in ``devices`` that no program
    uses is an error (``report.device_problems``, exit code 2) and a program that uses none of them a
    warning (``report.warnings``).  Never raises for a bad file: each unreadable file (or one the
    runtime's verifier would refuse) is a ``FileCheck`` with ``error`` set, and ``report.exit_code``
    is 2.  ``progress(done, total, name)`` is called after each file.  ``fold=True`` also counts what
    ``rewrite --fold`` would move (each folded chain, each constant that moves once its kernels go) as
    findings; without it, ``FileCheck.foldable`` says how many more tensors that would be.

    ``files`` may also hold programs in memory (bytes, a binary file object, a program manager), or be one;
    a single ``ptd`` goes with a single one.  ``etrecord`` names the constants of the programs it matches.
    ``accept`` moves each matching finding (or copy that stays, or constant not judged) to ``FileCheck.accepted``
    (it no longer fails the check); an acceptance that matches nothing is in ``report.unused_accepts``.
    ``exclude`` leaves out every program a glob names (relative to ``exclude_root``; ``paths.matches_glob``),
    also one named explicitly.
    """
    if min_bytes < 0:
        raise PteDevconstError(f"min_bytes must be >= 0, got {min_bytes}")
    from pte_devconst.paths import DataArgument, distinct_pairs, expand, pair_data
    from pte_devconst.rewriter.plan import RewriteOptions

    options = RewriteOptions(devices=parse_devices(devices), min_bytes=min_bytes, fold=fold)
    arguments = list(files) if not isinstance(files, (str, os.PathLike)) and _many(files) else [files]
    memory = [_program(item, "check") for item in arguments if not isinstance(item, (str, os.PathLike))]
    namer = _namer(_names_source(arguments[0], etrecord) if len(arguments) == 1 else etrecord)

    given = [] if ptd is None else [ptd] if isinstance(ptd, (str, os.PathLike)) else list(ptd)
    paths = [item for item in arguments if isinstance(item, (str, os.PathLike))]
    items = excluded(expand(paths), exclude, exclude_root) if paths or not memory else []
    pairs, problems = pair_data([i for i in items if isinstance(i, Path)],
                                [DataArgument.parse(g) for g in given] if items or not memory else [])
    items, _ = distinct_pairs(items, pairs)  # a second name of one program with the same data: one check
    programs = [i for i in items if isinstance(i, Path)]
    results: list[FileCheck] = []
    used: set[int] = set()
    done = 0
    for item in items:
        if isinstance(item, str):
            results.append(FileCheck(item.rsplit(": ", 1)[0], None, 0, (), item))
            continue
        data = pairs.get(item)
        try:
            results.append(_accepting(_check_one(item, data, options, strict, namer), accept, used))
        except PteDevconstError as error:
            text = " ".join(str(error).split())
            results.append(FileCheck(str(item), str(data) if data else None, 0, (),
                                     text if str(item) in text else f"{item}: {text}"))
        except OSError as error:
            results.append(FileCheck(str(item), str(data) if data else None, 0, (),
                                     f"{item}: {error.strerror or error}"))
        done += 1
        if progress is not None:
            progress(done, len(programs), str(item))
    for problem in problems:
        name = problem.split(": --ptd", 1)[0]
        results.append(FileCheck(name, name, 0, (), problem))
    single_data = Path(given[0]) if len(given) == 1 and len(memory) == 1 and not programs else None
    for held in memory:
        try:
            results.append(_accepting(_check_one(held, single_data, options, strict, namer), accept, used))
        except PteDevconstError as error:
            results.append(FileCheck(held.name, None, 0, (), " ".join(str(error).split())))
    if not results:
        results.append(FileCheck("", None, 0, (), "no files given"))
    return CheckReport(tuple(results), min_bytes, fold, strict,
                       devices=None if options.devices is None else tuple(sorted(str(d) for d in options.devices)),
                       unused_accepts=tuple(a for index, a in enumerate(accept) if index not in used))


def excluded(items: list[Union[Path, str]], exclude: Sequence[str], root: Optional[PathLike]) -> list[Union[Path, str]]:
    """``items`` without the programs an ``exclude`` glob names (problems, ``str``, stay)."""
    from pte_devconst.paths import matches_glob

    return [i for i in items if not isinstance(i, Path) or not any(matches_glob(i, g, root) for g in exclude)]


def _accepting(checked: FileCheck, accept: Sequence[Acceptance], used: set[int]) -> FileCheck:
    """``checked`` with what ``accept`` matches moved to ``accepted`` (the first matching entry's reason); the
    indices of the entries that matched are added to ``used``."""
    if not accept:
        return checked
    from dataclasses import replace

    taken: list[Finding] = []

    def keep(findings: tuple[Finding, ...]) -> tuple[Finding, ...]:
        kept = []
        for finding in findings:
            index = next((k for k, a in enumerate(accept) if a.matches(finding)), None)
            if index is None:
                kept.append(finding)
            else:
                used.add(index)
                taken.append(replace(finding, accepted=accept[index].reason))
        return tuple(kept)

    findings, stays, unknown = keep(checked.findings), keep(checked.stays), keep(checked.unknown)
    return replace(checked, findings=findings, stays=stays, unknown=unknown, accepted=tuple(taken))
