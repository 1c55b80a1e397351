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

A facade: each function resolves its arguments (paths by the .ptd rule and the default output name of
``paths``, devices, the names' source) into one request, calls the layer that does the work (``gate``
for ``check``, ``rewriter.rewrite`` for ``rewrite``, ``runner`` for ``run`` and ``validate``) and returns its
records.  The command line resolves its options with the same functions (``rewrite_request``,
``programs``) once per command.  Errors are ``pte_devconst.util.errors.PteDevconstError`` (one readable line).

Imports inside functions, each for a reason: the runner imports torch (``run``, ``validate``), and the writer
(``rewriter.rewrite``) must not load for a command that only reads (tests/test_read_only.py).  Nothing here
imports torch except ``run`` and ``validate`` (and ``rewrite`` with ``fold=True``, to compute folded values).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Iterable, Mapping, Optional, Sequence, Union

from pte_devconst import paths
from pte_devconst.paths import Programs
from pte_devconst.program.etrecord import read_etrecord
from pte_devconst.program.executorch import method_labels
from pte_devconst.rewriter.encodings import Encoding, Runtime, encoding_for, moved_by_encodings, required_runtime
from pte_devconst.rewriter.load import analyze_opened, opened
from pte_devconst.rewriter.names import ProgramNames, match_names, name_opened, named_program, recorded_from_programs
from pte_devconst.program.layout import DeviceMemory
from pte_devconst.rewriter.plan import (FoldGain, RewriteOptions, make_plan, safe_device_memory,
                                        safe_fold_gain)
from pte_devconst.rewriter.request import Namer, RewriteRequest, VerifyMode
from pte_devconst.rewriter.rewrite_json import names_json
from pte_devconst.schema.model import Device
from pte_devconst.schema.pte_file import ProgramBytes, PteFile, open_pte
from pte_devconst.util.errors import PteDevconstError
from pte_devconst.util.jsonable import to_jsonable
from pte_devconst.util.record import record
from pte_devconst._lazy import lazy_exports

if TYPE_CHECKING:  # only for annotations: what a command does not use loads when another command calls it
    from pte_devconst.compare.diff import ProgramDiff
    from pte_devconst.rewriter.flows import MethodFlows
    from pte_devconst.gate.check import Acceptance, CheckReport, CheckStatus, FileCheck, Finding, device_memory_json
    from pte_devconst.inventory.summary import ProgramSummary
    from pte_devconst.rewriter.rewrite import RewriteResult
    from pte_devconst.runner.run import RunResult
    from pte_devconst.runner.verdict import ValidationResult

PathLike = Union[str, "os.PathLike[str]"]
# What runs ``validate``'s two programs: the project's torch runner, or the installed ExecuTorch runtime.
ENGINES = ("runner", "executorch")
DeviceLike = Union[str, Device]
# A program: a path, its bytes, a binary file object, or an ExecuTorch program manager (anything with ``.buffer``).
ProgramLike = Union[PathLike, bytes, bytearray, memoryview, BinaryIO, Any]
# Where constants' names come from: an ETRecord file (path or binary file object), an ETRecord object, or a
# program manager (EdgeProgramManager, ExecutorchProgramManager).
NamesLike = Union[PathLike, BinaryIO, Any]

__all__ = ["analyze", "inspect", "rewrite", "rewrite_request", "rewrite_options", "rewrite_program", "names_from",
           "diff", "check", "run", "validate", "programs",
           "expand_paths", "parse_devices", "Acceptance", "CheckReport", "CheckStatus", "FileCheck", "Finding",
           "InspectReport", "Programs", "RewriteRequest", "VerifyMode", "device_memory_json"]

# The gate's records, named here for callers of ``check``: loaded with the gate, on first use (a rewrite never
# loads it, nor the diff or the inventory: start-up, issue 37).
__getattr__ = lazy_exports("pte_devconst.gate", {name: "check" for name in (
    "Acceptance", "CheckReport", "CheckStatus", "FileCheck", "Finding", "device_memory_json")})


def _program(program: ProgramLike, role: str = "program") -> "Union[Path, ProgramBytes]":
    """A path as a ``Path``; a program in memory as ``ProgramBytes`` (its bytes, with the name reports give it).

    Anything else is a ``PteDevconstError`` saying what is taken, never a TypeError from deep inside.
    """
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


def _names_source(program: ProgramLike, etrecord: Optional[NamesLike]) -> Optional[NamesLike]:
    """Where names come from: ``etrecord``, else the program itself when it is a program manager."""
    if etrecord is not None:
        return etrecord
    return program if callable(getattr(program, "exported_program", None)) else None


def _namer(source: Optional[NamesLike]) -> Optional[Namer]:
    """``source`` (an ETRecord file or object, a program manager) -> a function naming an opened program's
    constants.  An ETRecord file is read here, torch-free (``program.etrecord``), so a bad one fails first."""
    if source is None:
        return None
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
        manager: Any = source  # an EdgeProgramManager or ExecutorchProgramManager (executorch is not imported)
        recorded = recorded_from_programs({m: manager.exported_program(m) for m in manager.methods})
        origin = type(source).__name__
    else:
        raise PteDevconstError(f"etrecord: expected an ETRecord file (a path or binary file object), an ETRecord, or "
                               f"an EdgeProgramManager or ExecutorchProgramManager, got {type(source).__name__}")
    return lambda opened_program: match_names(opened_program, recorded, origin)


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
    from pte_devconst.inventory.summary import summarize  # inspect's: a rewrite never loads it

    namer = _namer(_names_source(pte, etrecord))
    source_program = _program(pte)
    with opened(source_program, paths.data_for(source_program, ptd)) as (source, data):
        names = name_opened(source, namer)
        return summarize(source, analyze_opened(source, data), names)


@record
class InspectReport:
    """What ``inspect`` shows of one program: its summary, the data used, and what the runtime would make of it."""

    summary: ProgramSummary
    ptd: Optional[str]
    unknown_constants: int
    load_refusal: Optional[str]
    notes: tuple[str, ...]
    fold_gain: Optional[FoldGain] = None  # what rewrite --fold would move beyond a plain rewrite
    device_memory: Optional[DeviceMemory] = None  # planned device memory now and after a plain rewrite
    names: Optional[ProgramNames] = None  # where the constants' names came from (--etrecord)
    flows: tuple[MethodFlows, ...] = ()  # the per-call copies of constant-derived values (markdown's diagram)

    @property
    def ptd_hint(self) -> str:
        """How to give this program its data (``put model.ptd next to it or pass --ptd FILE.ptd``)."""
        return paths.ptd_hint(self.summary.path)

    def to_json(self) -> dict[str, Any]:
        """``inspect``'s JSON document for this program (cli/report.schema.json)."""
        from pte_devconst.gate.check import device_memory_json  # the one JSON form of a device-memory figure

        gain = self.fold_gain
        return {"file": to_jsonable(self.summary), "ptd": self.ptd, "unknown_constants": self.unknown_constants,
                "names": names_json(self.names),
                "load_refusal": self.load_refusal, "notes": list(self.notes),
                "fold_hint": None if gain is None else {"tensors": gain.tensors, "bytes_per_call": gain.bytes_per_call},
                "device_memory": device_memory_json(self.device_memory)}


def inspect(pte: ProgramLike, ptd: Optional[PathLike] = None, *, etrecord: Optional[NamesLike] = None,
            paired: bool = False, names: Optional[Namer] = None) -> InspectReport:
    """What ``inspect`` shows: ``analyze``'s summary, with the data used, the runtime's refusal and notes.

    ``ptd`` is the program's data, else ``NAME.ptd`` next to ``NAME.pte`` (the .ptd rule; ``paired=True``: ``ptd``
    is the pairing's answer already, None is no data).  ``etrecord`` names the constants (a program manager
    passed as ``pte`` names them itself); ``names`` is that namer made once (``names_from``).
    """
    from pte_devconst.rewriter.flows import program_flows  # inspect's and diff's: a rewrite never loads them
    from pte_devconst.inventory.summary import summarize

    namer = names if names is not None else _namer(_names_source(pte, etrecord))
    source_program = _program(pte)
    data_path = (Path(ptd) if ptd is not None else None) if paired else paths.data_for(source_program, ptd)
    with opened(source_program, data_path) as (source, data):
        found = name_opened(source, namer)
        analysis = analyze_opened(source, data)
        notes = analysis.notes + (found.notes if found else ())
        try:  # the plain rewrite's plan, made once for the fold hint and the device memory
            plain = make_plan(source.program, analysis)
        except PteDevconstError:  # planning refuses the program: no hint, no device memory
            plain = None
        gain = safe_fold_gain(source.program, analysis, plain=plain) if plain is not None else None
        memory = safe_device_memory(source.program, analysis, plain=plain) if plain is not None else None
        return InspectReport(summarize(source, analysis, found), data.path if data else None, len(analysis.unknown),
                             source.load_refusal, notes, gain, memory, found, program_flows(source.program, analysis))


def programs(files: Iterable[PathLike], ptd: Iterable[PathLike] = (), *, skip_rewrites: bool = False,
             exclude: Sequence[str] = (), exclude_root: Optional[PathLike] = None, refuse: bool = True) -> Programs:
    """Expand files, glob patterns and folders into programs and pair each with its .ptd (``paths.programs``,
    the one way every command does it).

    A ``ptd`` entry pairs by path (``a/m.ptd`` with ``a/m.pte``; ``PROGRAM.pte=DATA.ptd`` explicitly; a single
    one with a single program); one that pairs with nothing is refused (PteDevconstError), or with
    ``refuse=False`` kept in ``Programs.problems`` (``check`` reports each as a file it could not check).
    ``skip_rewrites`` leaves out an input that is another input's default output; ``exclude`` globs
    (relative to ``exclude_root``) leave out programs, also ones named explicitly.
    """
    chosen = paths.programs(files, ptd, skip_rewrites=skip_rewrites, exclude=exclude, exclude_root=exclude_root)
    if refuse and chosen.problems:
        raise PteDevconstError(chosen.problems[0])
    return chosen


def rewrite(pte: ProgramLike, output: Optional[PathLike] = None, *, ptd: Optional[PathLike] = None,
            devices: Optional[Iterable[DeviceLike]] = None, min_bytes: int = 0, dry_run: bool = False,
            in_place: bool = False, fsync: bool = True, verify: Union[None, str, VerifyMode] = None,
            fold: bool = False, duplicate_shared: bool = False, progress: Optional[Callable[[int, int], None]] = None,
            etrecord: Optional[NamesLike] = None, phase: Optional[Callable[[str], None]] = None,
            runtime: Union[None, str, Runtime] = None) -> "RewriteResult":
    """Move every eligible constant into device memory, copied there once instead of on every call (``rewrite``).

    ``runtime`` picks the encoding for the ExecuTorch release that will load the output: ``"1.6"`` (the
    default) gives each moved constant device memory with initial data, what 1.6's ``skip_h2d_for_constants``
    writes; ``"1.5"`` keeps it on the host and copies it once, on the first call (copies that 1.5 runtimes run
    once; ``docs/file-format.md``, "Runtime encodings").  ``result.plan.output_runtime`` is what the output needs.

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
    request = rewrite_request(pte, output, ptd=ptd, devices=devices, min_bytes=min_bytes, dry_run=dry_run,
                              in_place=in_place, fsync=fsync, verify=verify, fold=fold,
                              duplicate_shared=duplicate_shared, etrecord=etrecord, runtime=runtime)
    return rewrite_program(request, progress=progress, phase=phase)


def rewrite_request(pte: ProgramLike, output: Optional[PathLike] = None, *, ptd: Optional[PathLike] = None,
                    devices: Optional[Iterable[DeviceLike]] = None, min_bytes: int = 0, dry_run: bool = False,
                    in_place: bool = False, fsync: bool = True, verify: Union[None, str, VerifyMode] = None,
                    fold: bool = False, duplicate_shared: bool = False, etrecord: Optional[NamesLike] = None,
                    options: Optional[RewriteOptions] = None, names: Optional[Namer] = None,
                    paired: bool = False, runtime: Union[None, str, Runtime] = None) -> RewriteRequest:
    """``rewrite``'s arguments resolved into the request the rewriter carries out: the program read, its data
    (the .ptd rule), the destination (``NAME.devconst.pte`` unless given; ``pte`` itself with ``in_place``; none
    for a dry run or a program in memory), the plan's options, the verify mode and the names' source.

    ``options`` and ``names``, when given, are used as they are (a command line resolves them once for all its
    programs: ``RewriteOptions`` with its devices parsed, a ``namer``) instead of ``devices``, ``min_bytes``,
    ``fold``, ``duplicate_shared``, ``runtime`` and ``etrecord``; ``paired=True`` says ``ptd`` is the pairing's
    answer already (``programs``: None is no data), so the .ptd rule is not applied again.
    """
    source = _program(pte)
    if not isinstance(source, Path) and (output is not None or in_place):
        raise PteDevconstError("a program in memory is rewritten in memory (result.data): output and in_place "
                               "are for files")
    if in_place and output is not None:
        raise PteDevconstError("--in-place and --output exclude each other")
    if options is None:
        options = rewrite_options(devices=devices, min_bytes=min_bytes, fold=fold, duplicate_shared=duplicate_shared,
                                  runtime=runtime)
    if names is None:
        names = _namer(_names_source(pte, etrecord))
    destination: Optional[Path]
    if dry_run or not isinstance(source, Path):
        destination = None
    elif in_place:
        destination = source
    elif output is not None:
        destination = Path(output)
    else:
        destination = paths.default_output(source)
    data = (Path(ptd) if ptd is not None else None) if paired else paths.data_for(source, ptd)
    return RewriteRequest(source, destination, data, options, dry_run, in_place, fsync,
                          VerifyMode.parse(verify), names)


def rewrite_options(*, devices: Optional[Iterable[DeviceLike]] = None, min_bytes: int = 0, fold: bool = False,
                    duplicate_shared: bool = False, device_option: str = "devices",
                    runtime: Union[None, str, Runtime, Encoding] = None) -> RewriteOptions:
    """The plan's options, checked: devices parsed (``parse_devices``; ``device_option`` names the option in an
    error), ``min_bytes`` not negative, ``runtime`` one the tool writes for, resolved to its encoding once
    (``resolve_encoding``; an ``Encoding`` is taken as it is): every layer reads ``options.encoding``."""
    if min_bytes < 0:
        raise PteDevconstError(f"min_bytes must be >= 0, got {min_bytes}")
    return RewriteOptions(devices=parse_devices(devices, device_option), min_bytes=min_bytes, fold=fold,
                          duplicate_shared=duplicate_shared,
                          encoding=resolve_encoding(runtime))


def resolve_encoding(runtime: Union[None, str, Runtime, Encoding]) -> Encoding:
    """The registered encoding that writes for ``runtime`` (``"1.5"``, ``"1.6"``, a ``Runtime``; None: the default;
    an ``Encoding``: itself), ``PteDevconstError`` naming the choices when none does."""
    if isinstance(runtime, Encoding):
        return runtime
    try:
        return encoding_for(runtime)
    except ValueError as error:
        raise PteDevconstError(str(error)) from None


def parse_runtime(runtime: Union[None, str, Runtime]) -> Runtime:
    """``"1.5"`` / ``"1.6"`` (or a ``Runtime``) as the release the output must load in, one some registered encoding
    writes for (``rewriter/encodings``); None is the default."""
    return resolve_encoding(runtime).runtime


def names_from(etrecord: Optional[NamesLike]) -> Optional[Namer]:
    """A function naming an opened program's constants from ``etrecord`` (None: no names), read once: a command
    line makes it once for all its programs (``rewrite_request(names=...)``)."""
    return _namer(etrecord)


def rewrite_program(request: RewriteRequest, *, progress: Optional[Callable[[int, int], None]] = None,
                    phase: Optional[Callable[[str], None]] = None) -> "RewriteResult":
    """Carry out a ``rewrite_request`` (``rewriter.rewrite.rewrite``)."""
    from pte_devconst.rewriter.rewrite import rewrite as carry_out  # the writer: never loaded by inspect or check

    return carry_out(request, progress, phase)


def diff(before: ProgramLike, after: ProgramLike, *, etrecord: Optional[NamesLike] = None,
         progress: Optional[Callable[[int, int, str], None]] = None) -> ProgramDiff:
    """What changed between two programs (any two .pte files): tensors, buffers, instructions, copies.

    ``etrecord`` names the constants of both (a rewrite keeps every value index; a program manager passed as
    ``before`` names them itself).  ``progress(done, total, what)`` is called as each method is compared.
    """
    from pte_devconst.compare.diff import diff_files  # diff's alone: no other command loads it

    namer = _namer(_names_source(before, etrecord))
    with open_pte(_program(before, "before")) as a, open_pte(_program(after, "after")) as b:
        names = name_opened(a, namer)
        b.program = named_program(b.program, names)  # a rewrite keeps every value index
        found = diff_files(a, b, progress)
        if names is not None and names.notes:
            from dataclasses import replace

            found = replace(found, notes=tuple(names.notes))
        return found


def run(pte: ProgramLike, *, ptd: Optional[PathLike] = None, method: Optional[str] = None,
        inputs: Optional[PathLike] = None, calls: int = 1, simulate_devices: bool = False,
        opaque_delegates: bool = False, profile: bool = False, etrecord: Optional[NamesLike] = None,
        outputs: Optional[PathLike] = None, progress: Optional[Callable[[int, int, str], None]] = None
        ) -> "RunResult":
    """Run one method ``calls`` times the way the runtime does and count every copy (imports torch).

    ``ptd`` defaults to ``NAME.ptd`` next to ``NAME.pte``; ``inputs`` is a torch.save file (default:
    deterministic random inputs); ``opaque_delegates`` runs every delegate as a seeded stand-in.  ``etrecord``
    names the method's inputs and outputs (``result.input_names``, ``output_names``; a manager names them itself).
    ``outputs`` saves every call's outputs there (torch.save, ``{method: [outputs per call]}``: what ``validate``
    takes as expected outputs); ``progress(done, total, what)`` is called as each call starts.
    """
    from pte_devconst.runner.delegates import OpaquePolicy  # the runner imports torch: only run loads it
    from pte_devconst.runner.run import run_program

    source = _program(pte)
    if outputs is not None:  # refused before the program runs
        from pte_devconst.util.atomic import check_destination  # a writer: only run -o loads it

        check_destination(outputs, inputs=[("the program", source, "")] if isinstance(source, Path) else [])
    namer = _namer(_names_source(pte, etrecord))  # a bad ETRecord fails before the program runs
    result = run_program(source, ptd_path=paths.data_for(source, ptd), method=method, inputs=inputs, calls=calls,
                         simulate_devices=simulate_devices, profile=profile,
                         opaque=OpaquePolicy.ALWAYS if opaque_delegates else OpaquePolicy.NEVER,
                         on_call=(lambda index, moved: progress(index, calls, f"call {index + 1}/{calls} ({moved})"))
                         if progress is not None else None)
    if outputs is not None:
        from pte_devconst.runner.run import save_outputs

        save_outputs(result, Path(outputs))
    names = _io_names(source, namer)
    if names is None:
        return result

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
             etrecord: Optional[NamesLike] = None, engine: str = "runner"
             ) -> "ValidationResult":
    """Run both programs on the same inputs and check the rewrite's promises (imports torch).

    ``inputs``/``expected`` are torch.save files (or loaded objects); ``calls`` (>= 2) per program;
    ``rtol``/``atol`` compare floating outputs that need not be bit-identical (None: torch.testing's default for
    the output's dtype; integer and bool outputs compare exactly); ``methods`` (default: every method
    with inputs).  ``result.verdict`` is the verdict (``result.passed``: no check failed).  The .ptd rule
    applies: ``ptd`` defaults to ``NAME.ptd`` next to the original, ``rewritten_ptd`` to the rewrite's own
    sibling, else to the original's data (a rewrite keeps external bytes in the same .ptd).
    ``progress(done, total, what)`` is called before each call of each program.  Either program may be held in
    memory (bytes, ``et``).  ``etrecord`` names the moved constants (``result.methods[].moved[].name``).

    ``engine="executorch"`` runs both programs, flipped to the CPU, in the installed ExecuTorch runtime (the
    ``executorch`` extra) instead: outputs bit for bit over ``calls`` (at least 3) calls per method, and each
    copy made once held to running once (``runner/executorch_engine.py``).  Either engine returns the one
    ``ValidationResult`` (``runner/verdict.py``): the same checks, verdict and JSON, with what only the runtime ran
    (its version, the flips, the probes) in ``result.engine`` and what only the runner measured in each
    ``result.methods[]``'s runs (``None``/empty for the runtime).
    """
    if engine not in ENGINES:
        raise PteDevconstError(f"--engine: unknown engine {engine!r} (choose one of: {', '.join(ENGINES)})")
    if (rtol is not None and rtol < 0) or (atol is not None and atol < 0):
        raise PteDevconstError("--rtol and --atol must not be negative")
    if engine == "executorch":
        given = [name for name, used in (("expected", expected is not None), ("rtol", rtol is not None),
                                         ("atol", atol is not None), ("profile", profile),
                                         ("opaque_delegates", opaque_delegates)) if used]
        if given:
            raise PteDevconstError(f"{', '.join(given)}: the runner's options; engine executorch compares the two "
                                   "programs bit for bit in the real runtime")
        from pte_devconst.runner.executorch_engine import validate_in_runtime

        first, second = _program(original, "original"), _program(rewritten, "rewritten")
        data = paths.data_for(first, ptd)
        engine_result = validate_in_runtime(first, second, ptd=data,
                                            rewritten_ptd=paths.rewrite_data_for(second, data, rewritten_ptd),
                                            inputs=inputs, calls=calls, methods=methods, progress=progress,
                                            moved_by=moved_by_encodings)
        assert engine_result.engine is not None  # the runtime's facts: its version
        engine_result.warnings.extend(_older_runtime_warnings(engine_result.engine.runtime, (first, second)))
        return engine_result
    from pte_devconst.runner.validate import validate as run_validation  # imports torch: only validate loads it

    first, second = _program(original, "original"), _program(rewritten, "rewritten")
    namer = _namer(_names_source(original, etrecord))
    found = _io_names(first, namer)  # before running: the checks' details name the outputs and constants
    output_names = value_names = None
    if found is not None:
        output_names = {label: found[0].outputs.get(index, ()) for label, index in found[1].items()}
        value_names = {label: found[0].by_plan.get(index, {}) for label, index in found[1].items()}
    data = paths.data_for(first, ptd)
    result = run_validation(first, second, ptd=data, rewritten_ptd=paths.rewrite_data_for(second, data, rewritten_ptd),
                          inputs=inputs, expected=expected, calls=calls, rtol=rtol, atol=atol,
                          simulate_devices=simulate_devices, methods=methods, profile=profile,
                          opaque_delegates=opaque_delegates, progress=progress, output_names=output_names,
                          value_names=value_names, moved_by=moved_by_encodings)
    if found is not None:
        result.warnings.extend(note for note in found[0].notes if note not in result.warnings)
    return result


def _older_runtime_warnings(installed: str, programs: Sequence[Union[Path, ProgramBytes]]) -> list[str]:
    """What ``--engine executorch`` cannot prove with an installed runtime older than a program needs on a device:
    the flip runs it on the CPU, where an older loader fills initial data like any host buffer, so the
    outputs and the once-copy are proven, and that this runtime loads the file on a device is not."""
    release = Runtime.read(installed)
    if release is None:
        return []
    found = []
    for program in programs:
        with open_pte(program) as pte:
            need = required_runtime(pte.program)
        if not need.loads_in(release):
            found.append(f"{program}: needs {need.describe()} on a device, and the installed runtime is "
                         f"ExecuTorch {installed}: the run on the CPU proves its outputs and that each moved constant "
                         f"is copied once, not that ExecuTorch {installed} loads it on a device (it cannot: "
                         f"for that runtime, rewrite with --runtime {release.value})")
    return found


def check(files: Union[ProgramLike, Iterable[ProgramLike], Programs], *,
          ptd: Optional[Union[PathLike, Sequence[PathLike]]] = None,
          min_bytes: int = 0, devices: Optional[Iterable[DeviceLike]] = None, strict: bool = False,
          progress: Optional[Callable[[int, int, str], None]] = None, fold: bool = False,
          etrecord: Optional[NamesLike] = None, accept: Sequence[Acceptance] = (), exclude: Sequence[str] = (),
          exclude_root: Optional[PathLike] = None, options: Optional[RewriteOptions] = None,
          runtime: Union[None, str, Runtime] = None) -> CheckReport:
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
    is 2.  ``progress(done, total, name)`` is called as each file starts (``done`` finished).  ``fold=True``
    also counts what ``rewrite --fold`` would move (each folded chain, each constant that moves once its
    kernels go) as findings; without it, ``FileCheck.foldable`` says how many more tensors that would be.

    ``files`` may also hold programs in memory (bytes, a binary file object, a program manager), or be one;
    a single ``ptd`` goes with a single one.  ``etrecord`` names the constants of the programs it matches.
    ``accept`` moves each matching finding (or copy that stays, or constant not judged) to ``FileCheck.accepted``
    (it no longer fails the check); an acceptance that matches nothing is in ``report.unused_accepts``.
    ``exclude`` leaves out every program a glob names (relative to ``exclude_root``; ``paths.matches_glob``),
    also one named explicitly.  ``files`` may also be ``programs(..., refuse=False)``'s result (then ``ptd``,
    ``exclude`` and ``exclude_root`` were applied there), and ``options`` the plan's options resolved already.
    ``runtime`` is the ExecuTorch release the project deploys (None: 1.6): the findings are what ``rewrite
    --runtime`` of it would move, and with ``"1.5"`` a file only a 1.6 runtime loads (``Encoding.needs``) fails
    too (``FileCheck.runtime_findings``).
    """
    if options is None:
        options = rewrite_options(devices=devices, min_bytes=min_bytes, fold=fold, runtime=runtime)
    if isinstance(files, Programs):
        arguments: list[Any] = []
        chosen: Optional[Programs] = files
    else:
        arguments = list(files) if not isinstance(files, (str, os.PathLike)) and _many(files) else [files]
        chosen = None
    memory = [_program(item, "check") for item in arguments if not isinstance(item, (str, os.PathLike))]
    names = _namer(_names_source(arguments[0], etrecord) if len(arguments) == 1 else etrecord)
    if ptd is None:
        given = []
    elif isinstance(ptd, (str, os.PathLike)):
        given = [ptd]
    else:
        given = list(ptd)
    named = [item for item in arguments if isinstance(item, (str, os.PathLike))]
    if chosen is None and (named or not memory):
        chosen = paths.programs(named, given, exclude=exclude, exclude_root=exclude_root)
    from pte_devconst.gate.check import CheckProblem, CheckRequest, CheckTarget, check_programs  # check's alone

    items: list[Union[CheckTarget, CheckProblem]] = []
    if chosen is not None:
        for item in chosen.items:
            items.append(CheckProblem(item.rsplit(": ", 1)[0], item) if isinstance(item, str)
                         else CheckTarget(item, chosen.data.get(item), paths.ptd_hint(item)))
        items += [CheckProblem(name, problem, name) for problem in chosen.problems
                  for name in [problem.split(": --ptd", 1)[0]]]
        if chosen is not files:  # expanded here: a folder without programs is a file the gate could not check
            items += [CheckProblem(folder, f"{folder}: {paths.NO_PROGRAMS}") for folder in chosen.empty_folders]
    single_data = Path(given[0]) if len(given) == 1 and len(memory) == 1 and (chosen is None or not chosen.paths) \
        else None
    items += [CheckTarget(held, single_data) for held in memory]
    request = CheckRequest(tuple(items), options, strict, tuple(accept), names)
    return check_programs(request, progress)


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
    chosen = paths.programs(list(patterns))
    return chosen.paths, [i for i in chosen.items if isinstance(i, str)]
