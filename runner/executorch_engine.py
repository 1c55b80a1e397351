"""``validate --engine executorch``: the original and the rewrite in the installed ExecuTorch runtime itself.

The project's own runner proves a rewrite with torch; this engine asks the runtime users ship.  The pip runtime
has no allocator for device memory, so both programs are *flipped* to the CPU first (``flip``): every planned
buffer becomes host memory (``non_const_buffer_device`` goes), every tensor's device tag says CPU, and the
``et_copy`` kernels become ``aten::alias_copy.out`` with the same arguments (a host copy where the device program
copies between host and device).  The delegates are unchanged; the runtime runs those it registers (XNNPACK in
the 1.5.1 wheel) for real, and a program with a delegate it does not register is refused up front.

Each method with inputs runs ``calls`` times in order on one loaded method of a freshly loaded program (state
carries over between calls; host-only methods of one loaded program share arenas, so methods are never
interleaved), in the child process that runs the runtime (``isolated.py``: a backend that crashes is an error
naming the call, never a dead command).  Outputs are compared bit for bit (a NaN equals the same NaN).

**Once.**  Every copy kernel of a constant into the holder of a moved value that arrives by a copy kernel (what
``moved_by`` says moved: the API asks the encodings, each reading its own files) becomes an accumulating add in a
third run (``probe``): ``add.out(dst, src, alpha=1)``.  A fresh arena holds zeros, so a copy that runs once leaves
the constant there and the outputs equal the original's; a copy that runs again (on every call, or on a later
call than the first) doubles it and they differ.  A value the loader fills has no copy to probe: the flip loads
it into the host arena the same way.

What it does not prove: the device allocator and the device copy kernels (the flip replaces both), and what a
device backend does with device memory.  ``--engine runner`` (the default) simulates devices and counts every
copy instead; on a GPU, ``examples/gpu_validate.sh`` runs the real thing.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Mapping, Optional, Sequence, Union

import torch

from pte_devconst.program.kernel_effects import is_device_copy
from pte_devconst.program.moves import COPIED_ONCE, MovedReader, MovedValue, moved_values
from pte_devconst.program.once import constant_copies
from pte_devconst.schema import model as m
from pte_devconst.schema.pte_file import ProgramBytes, open_pte
from pte_devconst.schema.pte_writer import unchanged_segments
from pte_devconst.util.errors import PteDevconstError
from pte_devconst.util.record import record
from pte_devconst.util.units import human_bytes, plural

from .run import program_size, resolve_inputs
from .staging import staged_program
from .validate import pair_moves, same_bits
from .verdict import Check, EngineFacts, FlipChanges, MethodValidation, MovedConstant, Status, ValidationResult

HOST_COPY = m.Operator("aten::alias_copy", "out")  # what a flip runs where the program copies to or from a device
PROBE = m.Operator("aten::add", "out")  # add.out(self, other, *, alpha, out) -> out
MIN_CALLS = 3  # the first call, and two that see what it left
OUTPUTS_CHECK = "outputs bit-identical in the ExecuTorch runtime"
ONCE_CHECK = "moved constants copied once (accumulating probe)"
INSTALL = 'pip install "pte-devconst[executorch]"'


# --- the flip and the probe -----------------------------------------------------------------------------------


def flip(program: m.Program) -> tuple[m.Program, FlipChanges]:
    """``program`` with every device placement moved to the CPU (module docstring)."""
    plans, buffers, tensors, copies = [], 0, 0, 0
    for plan in program.execution_plan or ():
        buffers += sum(1 for device in plan.buffer_devices().values() if not device.is_cpu)
        values = []
        for value in plan.values or ():
            info = value.extra_tensor_info if isinstance(value, m.Tensor) else None
            if isinstance(value, m.Tensor) and info is not None and info.device_type != m.DeviceType.CPU:
                tensors += 1
                value = m.replace(value, extra_tensor_info=m.replace(info, device_type=m.DeviceType.CPU,
                                                                     device_index=0))
            values.append(value)
        operators = list(plan.operators or ())
        device_ops = {i for i, op in enumerate(operators) if is_device_copy(op.qualified_name)}
        copies += sum(1 for chain in plan.chains or () for ins in chain.instructions or ()
                      if isinstance(ins, m.KernelCall) and ins.op_index in device_ops)
        operators = [HOST_COPY if i in device_ops else op for i, op in enumerate(operators)]
        plans.append(m.replace(plan, non_const_buffer_device=None, operators=tuple(operators),
                               values=tuple(values) if plan.values is not None else None))
    return m.replace(program, execution_plan=tuple(plans)), FlipChanges(buffers, tensors, copies)


def kernel_holders(moved: Iterable[Union[MovedValue, MovedConstant]]) -> frozenset[int]:
    """The values holding what ``moved`` says arrives by a copy kernel (``Arrival.by_kernel``)."""
    return frozenset(value.held_by for value in moved if value.arrival.by_kernel)


def probed_copies(plan: m.ExecutionPlan, holders: Collection[int]) -> list[tuple[int, int, int, int]]:
    """(chain, instruction, source, out) of each copy kernel of ``plan`` (before the flip), wherever it is, that
    copies a constant into one of ``holders`` (``kernel_holders`` of what moved): what must run once.  What moved
    says what the file claims, not whether it holds: a copy that runs on every call is exactly what the probe must
    catch."""
    if not holders:
        return []
    return [(c, k, slots.source, slots.out) for c in range(len(plan.chains or ()))
            for k, slots in constant_copies(plan, c) if slots.out in holders]


def copy_word(moved: Sequence[MovedConstant]) -> str:
    """What the reports call a copy of ``moved`` that must run once: the word of the encoding that wrote them, or
    the runtime's ("run-once copy") when the values' encodings disagree."""
    words = {c.arrival.copy for c in moved if c.arrival.by_kernel}
    return words.pop() if len(words) == 1 else COPIED_ONCE.copy


def probe(program: m.Program, flipped: m.Program, probed: Mapping[str, Sequence[tuple[int, int, int, int]]]
          ) -> m.Program:
    """``flipped`` (``program`` after ``flip``) with each copy of ``program`` that must run once (``probed``: per
    method, its ``probed_copies``) an accumulating add: ``add.out(out, source, alpha=1, out)``."""
    plans = []
    for before, plan in zip(program.execution_plan or (), flipped.execution_plan or ()):
        copies = probed.get(before.name or "", ())
        if not copies:
            plans.append(plan)
            continue
        operators = (*(plan.operators or ()), PROBE)
        values = (*(plan.values or ()), m.Int(1))
        add, one = len(operators) - 1, len(values) - 1
        chains = [list(chain.instructions or ()) for chain in plan.chains or ()]
        for c, k, source, out in copies:
            chains[c][k] = m.KernelCall(add, (out, source, one, out, out))
        plans.append(m.replace(plan, operators=operators, values=values,
                               chains=tuple(m.replace(chain, instructions=tuple(instructions))
                                            for chain, instructions in zip(plan.chains or (), chains))))
    return m.replace(flipped, execution_plan=tuple(plans))


@record
class Staged:
    """A program to load: ``program`` (flipped, perhaps probed) over ``source``'s segments, written to a file
    when it is run (``staging.py``), never held in memory."""

    source: Union[str, Path, ProgramBytes]
    program: m.Program


# --- running ----------------------------------------------------------------------------------------------------


def _same(a: Any, b: Any) -> bool:
    """Equal bit for bit: tensors by their bytes (``validate.same_bits``), floats NaN-aware, anything else by ==."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and same_bits(a, b)
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return type(a) is type(b) and bool(a == b)


def _first_difference(before: Sequence[Sequence[Any]], after: Sequence[Sequence[Any]]) -> Optional[str]:
    for call, (want, got) in enumerate(zip(before, after), start=1):
        if len(want) != len(got):
            return f"call {call}: {len(want)} outputs vs {len(got)}"
        for output, (a, b) in enumerate(zip(want, got)):
            if not _same(a, b):
                what = ""
                if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape \
                        and a.is_floating_point():
                    differ = int((a.double() - b.double()).ne(0).sum())
                    what = f": {differ} of {a.numel()} elements differ"
                return f"call {call}, output {output}{what}"
    return None


def _run(staged: Staged, data_path: Optional[str], method: str, calls: Sequence[Sequence[Any]], what: str,
         on_call: Optional[Callable[[int], None]] = None) -> list[list[Any]]:
    """``method`` of a freshly loaded ``staged`` program, ``calls`` in order, in the runtime's child process."""
    from .isolated import worker

    child = worker()
    key = child.key()
    where = f"{what}: method {method!r}"
    try:
        with open_pte(staged.source) as source, staged_program(staged.program, unchanged_segments(source)) as path:
            child.request("load", key, path, data_path, what=f"load the {what}", where=where)
            child.request("load_method", key, method, what=f"load method {method!r} of the {what}", where=where)
        outputs = []
        for number, call in enumerate(calls, start=1):
            if on_call is not None:
                on_call(number - 1)
            outputs.append(child.request("execute", key, method, list(call),
                                         what=f"run call {number} of method {method!r} of the {what}", where=where))
        return outputs
    finally:
        if child.alive:
            child.request("drop", key, what="let a program go")


ProgramLike = Union[str, Path, ProgramBytes]


def validate_in_runtime(original: ProgramLike, rewritten: ProgramLike, *, ptd: Optional[Path] = None,
                        rewritten_ptd: Optional[Path] = None, inputs: Any = None, calls: int = MIN_CALLS,
                        methods: Optional[Sequence[str]] = None,
                        progress: Optional[Callable[[int, int, str], None]] = None,
                        moved_by: MovedReader = moved_values) -> ValidationResult:
    """Both programs, flipped, in the installed ExecuTorch runtime (module docstring); ``moved_by`` says what
    moved (``program/moves.py: MovedReader``; the API passes the registered encodings' reading).  The result is
    ``validate``'s one record, with what this engine ran in its ``engine`` facts."""
    import importlib.util

    from .runtime_backend import runtime_backends, runtime_version

    if importlib.util.find_spec("executorch") is None:
        raise PteDevconstError(f"validate --engine executorch runs the installed ExecuTorch runtime, and none is "
                               f"installed: {INSTALL}")
    calls = max(calls, MIN_CALLS)
    registered = runtime_backends()
    with open_pte(original) as first, open_pte(rewritten) as second:
        read = pair_moves(first, second, (str(original), str(rewritten)), moved_by)
        used = sorted({d.id or "" for pte in (first, second) for plan in pte.program.execution_plan or ()
                       for d in plan.delegates or ()})
        missing = [backend for backend in used if backend not in registered]
        if missing:
            raise PteDevconstError(
                f"the installed ExecuTorch runtime ({runtime_version()}) does not register {', '.join(missing)} "
                f"(it registers {', '.join(sorted(registered)) or 'no backend'}): --engine executorch cannot run "
                "this program; --engine runner can (its delegate executors, or opaque stand-ins)")
        flipped_a, changes_a = flip(first.program)
        flipped_b, changes_b = flip(second.program)
        moved, swapped = read.moved, read.swapped  # read once: the probe and the rows
        copied_once = {name: probed_copies(second.program.plan(name), kernel_holders(values))
                       for name, values in moved.items()}
        probed = sum(len(copies) for copies in copied_once.values())
        data_a, data_b = Staged(original, flipped_a), Staged(rewritten, flipped_b)
        data_probe = Staged(rewritten, probe(second.program, flipped_b, copied_once)) if probed else None
        plans_a = {plan.name or "": plan for plan in first.program.execution_plan or ()}
        plans_b = {plan.name or "": plan for plan in second.program.execution_plan or ()}
    chosen = list(methods) if methods else list(plans_a)
    results, skipped = [], []
    path_a = str(ptd) if ptd is not None else None
    path_b = str(rewritten_ptd) if rewritten_ptd is not None else path_a
    steps = len(chosen) * (3 if probed else 2) * calls
    done = 0
    for method in chosen:
        if method not in plans_a or method not in plans_b:
            raise PteDevconstError(f"method {method!r} is not in both programs (the original has "
                                   f"{', '.join(plans_a)}; the rewrite {', '.join(plans_b)})")
        try:
            given = resolve_inputs(inputs, method, plans_a[method])
        except PteDevconstError as error:
            if methods or inputs is None:
                raise
            skipped.append((method, error.what))
            continue
        method_calls = [given[k % len(given)] for k in range(calls)]
        runs = []
        for what, data, data_path in (("original", data_a, path_a), ("rewrite", data_b, path_b),
                                      *((("probed rewrite", data_probe, path_b),) if data_probe else ())):
            def report(index: int, what: str = what, start: int = done,
                       size: str = human_bytes(program_size(data.source))) -> None:
                if progress is not None:
                    progress(start + index, steps, f"{method}: {what}, call {index + 1}/{calls} (a program of "
                                                   f"{size})")
            runs.append(_run(data, data_path, method, method_calls, what, report))
            done += calls
        checks = _checks(runs, calls, copied_once[method], moved[method]) \
            + ([swapped[method]] if method in swapped else [])
        results.append(MethodValidation(method, moved[method], checks))
    if not results and not skipped:
        raise PteDevconstError("no method to validate")
    return ValidationResult(str(original), str(rewritten), False, calls, results, skipped,
                            engine=EngineFacts(runtime_version(), tuple(used), changes_a, changes_b, probed,
                                               copy_word([c for values in moved.values() for c in values])),
                            identical=read.identical)


def _checks(runs: Sequence[list[list[Any]]], calls: int, copied_once: Sequence[tuple[int, ...]],
            moved: Sequence[MovedConstant]) -> list[Check]:
    """One method's rows: the rewrite's outputs against the original's, and each copy made once held to running
    once.  ``runs``: the outputs of the original, the rewrite and, where copies were probed, the probed rewrite;
    ``copied_once``: the rewrite's copies that must run once (``probed_copies``); ``moved``: what moved, each with
    its arrival, whose words (the encoding's) the rows use."""
    difference = _first_difference(runs[0], runs[1])
    checks = [Check.of(OUTPUTS_CHECK, difference is None, difference or f"{calls} calls, every output")]
    if len(runs) > 2 and copied_once:
        again = _first_difference(runs[0], runs[2])
        copy = copy_word(moved)
        checks.append(Check.of(ONCE_CHECK, again is None,
                               f"a {copy} ran again: {again}" if again else
                               f"{plural(len(copied_once), copy)} made accumulating adds: each ran once in {calls} "
                               "calls"))
    elif moved:
        kept = " and ".join(sorted({c.arrival.kept for c in moved}))
        checks.append(Check(ONCE_CHECK, Status.PASS, f"{plural(len(moved), 'value')} kept as {kept}: "
                            "loaded once, no copy of them runs"))
    else:
        checks.append(Check(ONCE_CHECK, Status.SKIPPED, "nothing moved in this method"))
    return checks
