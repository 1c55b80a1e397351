"""``validate``: run an original program and its rewrite on the same inputs and check what the rewrite promises.

For every method it checks that

* the outputs agree: bit for bit (bit patterns, so NaNs compare too) when both
  programs run the same kernels and delegates, else within ``rtol``/``atol``;
* both match the expected outputs, when given, except outputs that depend on
  opaque delegates (stand-ins): those are reported as not compared;

Outputs that need not be bit-identical compare by dtype (``output_tolerance``): integer and bool
outputs exactly, floating ones within ``rtol``/``atol`` when given, else within
``torch.testing.assert_close``'s defaults for their dtype; the report says which applied.
* every delegate call receives the same arguments with the same bytes
  (``transcript.py``): the delegate-boundary check, which needs no executor for
  the delegate and sees corruption that never reaches an output;
* every moved constant and folded value was copied to its device exactly once,
  at load, with its full size;
* no call copies one of them, or a value of the original whose bytes they now
  supply;
* each call's host-to-device bytes fell by exactly the bytes the original
  copied of those values in that call (a constant's size when it was copied
  once per call, as in the usual program).

Both kinds come from the two programs alone: a *moved constant* is a constant in
the original that the rewrite keeps in a non-CPU buffer for the whole method (``program/moves.py``), in the
same method at the same value index; a *folded value* is planned the same way in
the rewrite but in the original was a value the host computed (or is new).  Which
of the original's values they stand for comes from the delegate-boundary
transcript: the arguments they replace, and the copies that filled those.

Delegates that neither an executor nor the installed ExecuTorch runtime executes run as opaque stand-ins
(``opaque.py``); ``opaque_delegates=True`` runs every delegate that way.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Collection, Mapping, Optional, Sequence

import torch

from pte_devconst.schema import model as m
from pte_devconst.program.dataflow import Declared, DelegateCallSite, delegate_call_sites
from pte_devconst.program.delegate_blobs import declared_splits
from pte_devconst.program.effects import outputs_depending_on
from pte_devconst.program.effects import MethodEffects
from pte_devconst.program.kernel_effects import is_device_copy, list_items
from pte_devconst.program.layout import layout_problems
from pte_devconst.program.memory import storage_groups
from pte_devconst.program.moves import AT_LOAD, MovedReader, moved_values
from pte_devconst.program.regions import IntervalIndex, planned_region
from pte_devconst.util.errors import PteDevconstError, UnsupportedProgramError
from pte_devconst.util.record import record
from pte_devconst.util.units import exact_bytes, listing, plural
from pte_devconst.program.replay import calls_needed, prove_same_reads
from pte_devconst.schema.pte_file import ProgramBytes, PteFile, open_pte

from .copies import LOAD, Cause, CopyEvent, Direction
from .delegates import OpaquePolicy
from .method import refuse_unbindable
from pte_devconst.program.dtypes import dtype_name
from .run import RunResult, calls_from, load_torch_file, run_program, synthetic_inputs
from .transcript import compare_transcripts, replaced_origins, summarize
from .verdict import (Boundary, CallComparison, Check, MethodValidation, MovedConstant, Status, Tolerance,
                      ValidationResult, name_at)
from pte_devconst.program.labels import constant_label, value_name

BOUNDARY_CHECK = "delegate boundaries match"
EXPECTED_CHECK = "outputs match expected"
MISSING_ENTRY = "the expected outputs have no entry for method"


SWAPPED_CHECK = "the rewrite keeps on its devices what the original does"


def swapped_checks(original: m.Program, rewritten: m.Program, moved: Mapping[str, Sequence[MovedConstant]],
                   reader: MovedReader = moved_values) -> dict[str, Check]:
    """When nothing moved from the first program to the second but something did the other way, the two were most
    likely given in the wrong order: a failing row per method that moved backwards, the same in both engines
    (rather than "nothing moved", which asks whether the second is the first one's rewrite)."""
    if any(moved.values()):
        return {}
    return {method: Check(SWAPPED_CHECK, Status.FAIL,
                          f"the first program keeps {plural(len(back), 'value')} in device memory that the second "
                          f"does not ({listing([value_name(c.name, c.held_by) for c in back])}): the two look "
                          "swapped (validate takes ORIGINAL REWRITTEN)")
            for method, back in moved_constants(rewritten, original, reader).items() if back}


_COMPARE_CHUNK = 16 << 20  # bytes compared at a time: memory bounded whatever the files' size


def same_bytes(first: PteFile, second: PteFile) -> bool:
    """Whether two opened programs are the same bytes (what a rewrite that can move nothing writes): looked at
    only when nothing moved, so that NOTHING MOVED says so instead of asking whether the pair is a rewrite."""
    if first.size != second.size:
        return False
    return all(bytes(first.data[at:at + _COMPARE_CHUNK]) == bytes(second.data[at:at + _COMPARE_CHUNK])
               for at in range(0, first.size, _COMPARE_CHUNK))


@record
class PairMoves:
    """What both engines read of a pair before anything runs: what moved, per method (``moved_constants``), the
    wrong-order rows (``swapped_checks``), and whether the two files are the same bytes (``same_bytes``, only
    where nothing moved)."""

    moved: dict[str, list[MovedConstant]]
    swapped: dict[str, Check]
    identical: bool


def pair_moves(first: PteFile, second: PteFile, files: tuple[str, str], reader: MovedReader) -> PairMoves:
    """``PairMoves`` of two opened programs (``files``: their names, for an error), each first refused if it has a
    delegate call its blob binds past (``method.refuse_unbindable``): the one reading both engines start from."""
    refuse_unbindable(first, files[0])
    refuse_unbindable(second, files[1])
    moved = moved_constants(first.program, second.program, reader)
    return PairMoves(moved, swapped_checks(first.program, second.program, moved, reader),
                     not any(moved.values()) and same_bytes(first, second))


def _tensor(values: Sequence[m.EValue], index: int) -> m.Tensor:
    """``values[index]``, a tensor: moved_values names tensors only (a constant before, planned after)."""
    value = values[index]
    assert isinstance(value, m.Tensor), f"value {index} is {type(value).__name__}, not a tensor"
    return value


def moved_constants(original: m.Program, rewritten: m.Program, reader: MovedReader = moved_values
                    ) -> dict[str, list[MovedConstant]]:
    """Per method: values ``rewritten`` keeps on a device for the whole method that were constants in ``original``
    (moved) or values the host computed there, or no value at all (folded), as ``reader`` finds them
    (``program/moves.py``; the API's asks the registered encodings)."""
    result: dict[str, list[MovedConstant]] = {}
    for plan_a in original.execution_plan or ():
        name = plan_a.name or ""
        try:
            plan_b = rewritten.plan(name)
        except KeyError:
            continue
        values_a, values_b = plan_a.values or (), plan_b.values or ()
        result[name] = [
            MovedConstant(name, moved.value, _tensor(values_b, moved.held_by).fqn if moved.folded else
                          _tensor(values_a, moved.value).fqn or _tensor(values_b, moved.held_by).fqn,
                          str(moved.device), _tensor(values_b, moved.held_by).nbytes, folded=moved.folded,
                          holder=moved.holder, arrival=moved.arrival, reencoded=moved.reencoded)
            for moved in reader(plan_a, plan_b)]
    return result


LAYOUT_CHECK = "device memory: no two live values share bytes"
WRITES_CHECK = "no delegate writes a moved constant"
PROOF_CHECK = "every read sees what the input's sees (byte replay)"


def _proof_check(original: m.ExecutionPlan, rewritten: m.ExecutionPlan,
                 declared: tuple[Optional[Declared], Optional[Declared]]) -> Check:
    """The memory proof (program/replay.py): both methods replayed over bytes, call after call, every surviving
    kernel and delegate argument, jump condition and output reading the same definitions.  It asks nothing of the
    lifetime model the other rows use, and executes no delegate: it holds with opaque ones."""
    try:
        mismatch = prove_same_reads(original, rewritten, declared=declared)
    except UnsupportedProgramError as error:
        return Check(PROOF_CHECK, Status.FAIL, f"not proven: {error.what}")
    calls = calls_needed(original, rewritten)
    return Check.of(PROOF_CHECK, mismatch is None, str(mismatch) if mismatch else
                    f"{calls} calls replayed, every read the input's")


def _layout_problems(plan: m.ExecutionPlan) -> list[str]:
    """Every device buffer of ``plan`` checked by lifetimes (program/memory.py): values live at once share no
    byte, and nothing shares a byte with a resident value."""
    devices = plan.buffer_devices()
    device_ids = sorted(mid for mid, device in devices.items() if not device.is_cpu)
    if not device_ids:
        return []
    groups = storage_groups(MethodEffects(plan), device_ids)
    sizes = plan.non_const_buffer_sizes or ()
    return [f"buffer {mid}: {problem}" for mid in device_ids if mid < len(sizes)
            for problem in layout_problems(groups.get(mid, []), sizes[mid])]


def static_checks(original: m.ExecutionPlan, rewritten: m.ExecutionPlan, moved: Sequence["MovedConstant"],
                  declared: tuple[Optional[Declared], Optional[Declared]] = (None, None)) -> list[Check]:
    """What the rewritten method's tables prove before anything runs: its device memory layout (a problem the
    input already had is not the rewrite's), that no delegate output slot is a moved value or shares bytes
    with one (the delegate would overwrite it; opaque stand-ins could not show that), and the byte replay."""
    checks = []
    problems = _layout_problems(rewritten)
    if problems and _layout_problems(original):
        checks.append(Check(LAYOUT_CHECK, Status.SKIPPED, f"the input's layout has the same kind of problem: "
                            f"{problems[0]}"))
    else:
        checks.append(Check.of(LAYOUT_CHECK, not problems,
                               listing(problems, 3, conjunction="; ") or "every device buffer"))
    values = rewritten.values or ()
    moved_ids = {c.held_by for c in moved}
    by_buffer: dict[int, list[tuple[int, int, int]]] = {}
    for index in sorted(moved_ids):
        region = planned_region(values[index]) if 0 <= index < len(values) else None
        if region is not None:
            by_buffer.setdefault(region.memory_id, []).append((region.start, region.end, index))
    overlaps = {mid: IntervalIndex(items) for mid, items in by_buffer.items()}
    # Output slots are the input's: the rewrite removes kernels only, so the k-th delegate call of a chain is the
    # same call in both, and an argument it wrote there it writes here, whatever the value now is.
    writes, slots = [], 0
    calls_a: dict[int, list[DelegateCallSite]] = {}
    for site in delegate_call_sites(original, declared=declared[0]):
        calls_a.setdefault(site.chain, []).append(site)
    calls_b: dict[int, list[DelegateCallSite]] = {}
    for site in delegate_call_sites(rewritten, declared=declared[1]):
        calls_b.setdefault(site.chain, []).append(site)
    for chain, sites in calls_b.items():
        for site, before in zip(sites, calls_a.get(chain, ())):
            for pos in sorted(set(before.written) | set(site.written)):
                slots += 1
                out = site.args[pos]
                region = planned_region(values[out]) if 0 <= out < len(values) else None
                hit: Optional[int] = None
                if out in moved_ids:
                    hit = out
                elif region is not None and region.memory_id in overlaps:
                    hit = next(iter(overlaps[region.memory_id].overlapping(region.start, region.end)), None)
                if hit is not None:
                    writes.append(f"delegate {site.delegate_index} at instruction {site.instruction} writes value "
                                  f"{out} (argument {pos})" + ("" if hit == out else f", which shares bytes with "
                                                                                      f"moved value {hit}"))
    checks.append(Check.of(WRITES_CHECK, not writes, listing(writes, 3, conjunction="; ") or plural(
        slots, "delegate output slot")))
    checks.append(_proof_check(original, rewritten, declared))
    return checks


def _declared_by_method(pte: PteFile) -> dict[str, Declared]:
    """Method name -> what its delegates' blobs declare of their calls (``program/delegate_blobs.py``)."""
    return {plan.name or "": declared for plan, declared in
            zip(pte.program.execution_plan or (), declared_splits(pte.program, pte.delegate_blob))}


def _compute_signature(plan: m.ExecutionPlan, pte: PteFile) -> tuple[Any, ...]:
    """What decides the arithmetic: host kernels whose results reach host computation, and delegates with their blobs.

    Device copies are not counted, nor kernels whose result only delegates (directly or through device
    copies) read: the delegate-boundary check compares every byte those give the delegates, so a rewrite
    that computes them once, offline (``rewrite --fold``), still owes bit-identical outputs.
    """
    operators = plan.operators or ()
    names = [op.qualified_name for op in operators]
    boundary_only = _feeding_delegates_only(plan, names)
    kernels = Counter(names[i.op_index] for chain in plan.chains or () for i in chain.instructions or ()
                      if isinstance(i, m.KernelCall) and 0 <= i.op_index < len(operators)
                      and not is_device_copy(names[i.op_index]) and id(i) not in boundary_only)
    delegates = tuple((d.id, tuple((s.key, bytes(s.value or b"")) for s in d.compile_specs or ()),
                       bytes(pte.delegate_blob(d))) for d in plan.delegates or ())
    return tuple(sorted(kernels.items())), delegates


def _feeding_delegates_only(plan: m.ExecutionPlan, names: Sequence[str]) -> set[int]:
    """``id()`` of each KernelCall whose results only DelegateCalls, device copies and other such kernels read
    (a chain of host kernels whose end only delegates see).  Reads and writes: ``program/effects.py``."""
    effects = MethodEffects(plan)
    chains = plan.chains or ()
    instruction_at = [(chains[s.chain].instructions or ())[s.instruction] for s in effects.steps]
    readers: dict[int, list[m.Instruction]] = {}
    for position, read in enumerate(effects.reads):
        if isinstance(instruction_at[position], (m.KernelCall, m.DelegateCall, m.MoveCall)):
            for value in read:
                readers.setdefault(value, []).append(instruction_at[position])
    elsewhere = set(effects.outputs) | {item for v in effects.values for item in list_items(v)}
    found: set[int] = set()
    for position in reversed(range(len(effects.steps))):  # readers come after writers: decided first
        ins = instruction_at[position]
        written = effects.writes[position]
        if not isinstance(ins, m.KernelCall) or not written:
            continue
        uses = [u for value in written for u in readers.get(value, [])]
        if uses and not set(written) & elsewhere and all(
                isinstance(u, m.DelegateCall) or isinstance(u, m.KernelCall) and (
                    id(u) in found or 0 <= u.op_index < len(names) and is_device_copy(names[u.op_index]))
                for u in uses):
            found.add(id(ins))
    return found


# torch.testing.assert_close's default (rtol, atol) for each floating dtype (torch/testing/_comparison.py);
# every other dtype (integers, bool, float8) compares exactly, as there.
DEFAULT_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5), torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7), torch.complex32: (1e-3, 1e-5), torch.complex64: (1.3e-6, 1e-5),
    torch.complex128: (1e-7, 1e-7)}


def output_tolerance(dtype: torch.dtype, rtol: Optional[float], atol: Optional[float]) -> Tolerance:
    """The tolerance for an output of ``dtype``: exact unless floating; ``rtol``/``atol`` override the defaults.

    Token ids all off by one are within any relative tolerance of large ids: integers are never compared so.
    """
    default = DEFAULT_TOLERANCES.get(dtype)
    if default is None:
        return Tolerance(dtype_name(dtype), exact=True)
    return Tolerance(dtype_name(dtype), default[0] if rtol is None else rtol, default[1] if atol is None else atol,
                     given=rtol is not None or atol is not None)


def tolerances_text(outputs: Sequence[Any], rtol: Optional[float], atol: Optional[float],
                    positions: Optional[Collection[int]] = None, names: Sequence[Optional[str]] = ()) -> str:
    """Which tolerance applied to which outputs: ``float32 within rtol=1.3e-06, atol=1e-05 (dtype default)``."""
    shown: dict[str, list[int]] = {}
    for position, x in enumerate(outputs):
        if isinstance(x, torch.Tensor) and (positions is None or position in positions):
            shown.setdefault(output_tolerance(x.dtype, rtol, atol).describe(), []).append(position)
    return "; ".join(f"{_outputs(where, names)}: {how}" for how, where in shown.items())


def _max_abs_diff(a: Sequence[Any], b: Sequence[Any]) -> float:
    worst = 0.0
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape == y.shape and x.numel():
            worst = max(worst, float((x.double() - y.double()).abs().max()))
    return worst


def same_bits(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Bit patterns equal (a NaN equals the same NaN; 0.0 and -0.0 differ), unlike ``torch.equal``."""
    return torch.equal(x.detach().contiguous().reshape(-1).view(torch.uint8),
                       y.detach().contiguous().reshape(-1).view(torch.uint8))


def _outputs_equal(a: Sequence[Any], b: Sequence[Any], exact: bool, rtol: Optional[float],
                   atol: Optional[float], names: Sequence[Optional[str]] = (),
                   positions: Optional[Sequence[int]] = None) -> Optional[str]:
    """None when ``a`` and ``b`` agree, else why not: bit for bit when ``exact``, else by ``output_tolerance``.

    ``positions``: each item's output position when ``a`` and ``b`` are a selection; ``names``: the outputs'
    names by position (``output 0 (logits)``)."""
    if len(a) != len(b):
        return f"{len(a)} outputs vs {len(b)}"
    for item, (x, y) in enumerate(zip(a, b)):
        label = _output(positions[item] if positions is not None else item, names)
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return f"{label}: a tensor vs a {type(y if isinstance(x, torch.Tensor) else x).__name__}"
        if not isinstance(x, torch.Tensor):
            if x != y:
                return f"{label}: {x!r} vs {y!r}"
            continue
        if x.dtype != y.dtype or x.shape != y.shape:
            return (f"{label}: {dtype_name(x.dtype)}{list(x.shape)} vs "
                    f"{dtype_name(y.dtype)}{list(y.shape)}")
        if exact:
            if not same_bits(x, y):
                return f"{label}: not bit-identical (max |diff| {_max_abs_diff([x], [y]):.3g})"
        elif (tolerance := output_tolerance(x.dtype, rtol, atol)).exact:
            if not torch.equal(x, y):
                wrong = int((x != y).sum())
                return (f"{label}: {wrong:,} of {plural(x.numel(), f'{tolerance.dtype} element')} differ "
                        f"(compared exactly; max |diff| {_max_abs_diff([x], [y]):.3g})")
        elif not torch.allclose(x.double(), y.double(), rtol=tolerance.rtol, atol=tolerance.atol, equal_nan=True):
            return (f"{label}: differs beyond rtol={tolerance.rtol:g}, atol={tolerance.atol:g} "
                    f"(max |diff| {_max_abs_diff([x], [y]):.3g})")
    return None


def _h2d(events: Sequence[CopyEvent], phase: str, method: str) -> list[CopyEvent]:
    return [e for e in events if e.phase == phase and e.method == method and e.direction is Direction.H2D]


def _output(position: int, names: Sequence[Optional[str]] = ()) -> str:
    """'output 0', or 'output 0 (logits)' where the output has a name."""
    name = name_at(names, position)
    return f"output {position} ({name})" if name else f"output {position}"


def _outputs(positions: Collection[int], names: Sequence[Optional[str]] = ()) -> str:
    """'output 1' or 'outputs 0, 2', each with its name where it has one: 'outputs 0 (logits), 2'."""
    numbers = ", ".join(_output(p, names).removeprefix("output ") for p in sorted(positions))
    return f"output {numbers}" if len(positions) == 1 else f"outputs {numbers}"


def _expected_check(before: RunResult, after: RunResult, expected: list[tuple[Any, ...]], rtol: Optional[float],
                    atol: Optional[float], stand_ins: frozenset[int], opaque_backends: Sequence[str],
                    names: Sequence[Optional[str]] = ()) -> Check:
    """Outputs against the expected ones by ``output_tolerance``, leaving out those that depend on opaque delegates."""
    name = EXPECTED_CHECK
    n_outputs = len(before.calls[0].outputs) if before.calls else 0
    compared = [p for p in range(n_outputs) if p not in stand_ins]
    backends = ", ".join(opaque_backends)
    if n_outputs and not compared:
        return Check(name, Status.SKIPPED, f"every output depends on opaque delegates ({backends}): their values "
                                           f"are stand-ins, not the model's")
    problems = []
    for label, run in (("original", before), ("rewritten", after)):
        for i, call in enumerate(run.calls):
            want = expected[i % len(expected)]
            if len(want) != len(call.outputs):
                problems.append(f"{label} call {i}: {len(call.outputs)} outputs, {len(want)} expected")
            elif (why := _outputs_equal([call.outputs[p] for p in compared], [want[p] for p in compared],
                                        False, rtol, atol, names, compared)):
                problems.append(f"{label} call {i}: {why}")
    how = tolerances_text(before.calls[0].outputs, rtol, atol, compared, names) if before.calls else ""
    detail = "; ".join(problems) or "all calls"
    if stand_ins and not problems:
        detail = (f"{_outputs(compared, names)} in all calls; not compared: {_outputs(stand_ins, names)}, which depend "
                  f"on opaque delegates ({backends})")
    return Check.of(name, not problems, detail + (f" ({how})" if how else ""))


def _boundary(name: str, before: RunResult, after: RunResult, moved: list[MovedConstant]) -> tuple[Boundary, Check]:
    """The delegate-boundary check: every delegate call of the rewrite gets what the original's got."""
    records_before = [c.delegate_calls for c in before.calls]
    records_after = [c.delegate_calls for c in after.calls]
    differences = compare_transcripts(records_before, records_after, {c.held_by: c.resident for c in moved})
    counts = summarize(records_before)
    boundary = Boundary(counts["delegate_calls"], counts["arguments"], differences)
    if differences:
        more = f" (and {len(differences) - 1} more)" if len(differences) > 1 else ""
        return boundary, Check.of(BOUNDARY_CHECK, False, differences[0].line(name) + more)
    if not counts["delegate_calls"] and not any(records_after):
        return boundary, Check(BOUNDARY_CHECK, Status.SKIPPED, "the method made no delegate calls")
    return boundary, Check.of(BOUNDARY_CHECK, True, f"{counts['delegate_calls']} delegate calls, "
                                                    f"{counts['arguments']} arguments: same bytes")


def _check_method(name: str, before: RunResult, after: RunResult, moved: list[MovedConstant], exact: bool,
                  expected: Optional[list[tuple[Any, ...]]], rtol: Optional[float], atol: Optional[float], *,
                  expected_missing: Optional[str] = None,
                  stand_ins: frozenset[int] = frozenset(), static: Sequence[Check] = (),
                  output_names: Sequence[Optional[str]] = ()) -> MethodValidation:
    """All checks of one method.  ``stand_ins``: output positions that depend on opaque delegates;
    ``expected_missing``: why the expected outputs given hold nothing for this method (a failed check: outputs
    the user asked to compare were not compared)."""
    opaque_backends = sorted(set(before.opaque_backends) | set(after.opaque_backends))
    checks: list[Check] = []
    problems = [f"call {i}: {why}" for i, (a, b) in enumerate(zip(before.calls, after.calls))
                if (why := _outputs_equal(a.outputs, b.outputs, exact, rtol, atol, output_names))]
    detail = "; ".join(problems) or f"{len(before.calls)} calls"
    if stand_ins and not problems:
        detail += f" ({_outputs(stand_ins, output_names)} from opaque delegates: stand-ins)"
    how = "" if exact or not before.calls else tolerances_text(before.calls[0].outputs, rtol, atol,
                                                              names=output_names)
    checks.append(Check.of("outputs agree" + (" (bit-identical)" if exact else " (within tolerance)"),
                           not problems, detail + (f" ({how})" if how else "")))
    if expected_missing is not None:
        checks.append(Check(EXPECTED_CHECK, Status.FAIL, expected_missing))
    elif expected is not None:
        checks.append(_expected_check(before, after, expected, rtol, atol, stand_ins, opaque_backends, output_names))
    boundary, boundary_check = _boundary(name, before, after, moved)
    checks.append(boundary_check)
    checks.append(_observed_writes_check(before, after))
    checks.extend(static)
    what = "moved and folded values" if any(c.folded for c in moved) else "moved constants"
    once, owed_copies = _copied_once(name, after, moved)
    folded = sum(1 for c in moved if c.folded)
    counted = plural(len(moved) - folded, "constant") + (f" and {plural(folded, 'folded value')}" if folded else "")
    when = " and ".join(sorted({c.arrival.when for c in moved})) or AT_LOAD.when
    checks.append(_vacuous_if_none_moved(moved, Check.of(
        f"{what} copied to their device once", not once,
        "; ".join(once) or f"{counted}, {exact_bytes(sum(c.nbytes for c in moved))}, {when}")))
    resident = {c.held_by: c.resident for c in moved}
    calls: list[CallComparison] = []
    per_call_problems, drop_problems = [], []
    for i, (a, b) in enumerate(zip(before.calls, after.calls)):
        phase = f"call {i}"
        # the original's values whose bytes the resident values now supply: a moved constant itself, the
        # value a folded one was computed as (or copied from), read from this call's delegate arguments
        origins = {c.value for c in moved if not c.folded} | replaced_origins(a.delegate_calls, b.delegate_calls,
                                                                              resident)
        moved_before = sum(e.nbytes for e in _h2d(before.events, phase, name) if e.source_value in origins)
        first_copies = owed_copies.get(phase, [])  # the one copy each value arriving by a kernel here is owed
        owed = {id(e) for e in first_copies}
        still = [e for e in _h2d(after.events, phase, name)
                 if e.source_value in origins | set(resident) | {c.held_by for c in moved} and id(e) not in owed]
        if still:
            sources = sorted({e.source_value for e in still if e.source_value is not None})
            per_call_problems.append(f"call {i}: {plural(len(still), 'copy')} "
                                     f"({exact_bytes(sum(e.nbytes for e in still))}) of values {sources}")
        drop = a.copies.h2d.nbytes - b.copies.h2d.nbytes
        expected_drop = moved_before - sum(e.nbytes for e in first_copies)
        if drop != expected_drop:
            drop_problems.append(f"call {i}: fell by {exact_bytes(drop)}, expected {exact_bytes(expected_drop)}")
        calls.append(CallComparison(i, a.copies.h2d.nbytes, b.copies.h2d.nbytes, moved_before, a.copies.d2h.nbytes,
                                    b.copies.d2h.nbytes, a.wall_s, b.wall_s, _max_abs_diff(a.outputs, b.outputs),
                                    a.profiled, b.profiled, a.copies.constant_derived_h2d.nbytes,
                                    b.copies.constant_derived_h2d.nbytes))
    checks.append(_vacuous_if_none_moved(moved, Check.of(f"no per-call copies of {what}", not per_call_problems,
                                                         "; ".join(per_call_problems) or plural(len(calls), "call"))))
    last = calls[-1] if calls else None
    checks.append(_vacuous_if_none_moved(moved, Check.of(
        f"per-call H2D bytes fell by the {what}' bytes", not drop_problems, "; ".join(drop_problems) or (
            f"{exact_bytes(last.h2d_before)} -> {exact_bytes(last.h2d_after)} per call" if last else "no calls"))))
    tolerances = [(p, output_tolerance(x.dtype, rtol, atol)) for p, x in
                  enumerate(before.calls[0].outputs if before.calls else ()) if isinstance(x, torch.Tensor)]
    return MethodValidation(name, moved, checks, exact, calls, before.load.h2d.nbytes, after.load.h2d.nbytes,
                            boundary, before, after, opaque_backends, tolerances, tuple(output_names))


OBSERVED_CHECK = "delegates wrote only what the program says they write (observed)"


def _observed_writes_check(before: RunResult, after: RunResult) -> Check:
    """The proof that does not take a blob's word: every argument a delegate (its backend or an executor, not a
    stand-in) was said to only read, digested before and after each call (``LoadedMethod.finish_call``).  A write
    there means the program's reading of that delegate (``program/delegate_blobs.py``) is not the backend's, and a
    rewrite that kept a value resident on that reading cannot be vouched for, whatever the outputs say."""
    seen = before.observed_arguments + after.observed_arguments
    writes = [f"{what}: {w.line()}" for what, run in (("original", before), ("rewrite", after))
              for w in dict.fromkeys(run.observed_writes)]
    if not seen and not writes:
        return Check(OBSERVED_CHECK, Status.SKIPPED, "no delegate ran for real (stand-ins write only their outputs)")
    return Check.of(OBSERVED_CHECK, not writes, listing(writes, 3, conjunction="; ") or
                    f"{plural(seen, 'read-only argument')} unchanged by their calls")


def _copied_once(name: str, after: RunResult, moved: Sequence[MovedConstant]
                 ) -> tuple[list[str], dict[str, list[CopyEvent]]]:
    """(problems, per phase the copies its calls owe): each moved value reached its device exactly once over the
    load and every call, as its arrival says (``program/moves.py``): one copy in its phase (the loader's initial
    data of the value itself, or a copy kernel into its holder), and no copy kernel into its holder later."""
    problems: list[str] = []
    owed: dict[str, list[CopyEvent]] = {}
    phases = [LOAD, *(f"call {i}" for i in range(len(after.calls)))]
    events: dict[str, list[CopyEvent]] = {}

    def copies_in(phase: str) -> list[CopyEvent]:
        if phase not in events:
            events[phase] = _h2d(after.events, phase, name)
        return events[phase]

    for constant in moved:
        label = constant_label(value_name(constant.name, constant.value), constant.value)
        arrival = constant.arrival
        if arrival.by_kernel:
            copies = [e for e in copies_in(arrival.phase)
                      if e.cause is Cause.H2D_KERNEL and e.destination_value == constant.held_by]
            later = phases[phases.index(arrival.phase) + 1:] if arrival.phase in phases else []
            again = [e for phase in later for e in copies_in(phase)
                     if e.cause is Cause.H2D_KERNEL and e.destination_value == constant.held_by]
            if len(copies) != 1 or again or copies[0].nbytes != constant.nbytes \
                    or copies[0].device != constant.device:
                problems.append(f"{label}: {len(copies)} copies {arrival.when} and {len(again)} after, "
                                f"{sum(e.nbytes for e in copies + again)} B (expected 1 copy of {constant.nbytes} B "
                                f"to {constant.device} {arrival.when})")
            owed.setdefault(arrival.phase, []).extend(copies)
            continue
        copies = [e for e in copies_in(arrival.phase)
                  if e.source_value == constant.value and e.cause is Cause.LOAD_INITIAL_DATA]
        if len(copies) != 1 or copies[0].nbytes != constant.nbytes or copies[0].device != constant.device:
            problems.append(f"{label}: {len(copies)} {arrival.phase} copies, "
                            f"{sum(e.nbytes for e in copies)} B (expected 1 copy of {constant.nbytes} B to "
                            f"{constant.device})")
    return problems, owed


def _vacuous_if_none_moved(moved: Sequence[MovedConstant], check: Check) -> Check:
    """A check of what moved, where nothing moved, proves nothing: skipped, saying so (a failure still fails)."""
    if moved or check.status is Status.FAIL:
        return check
    return Check(check.name, Status.SKIPPED, "nothing moved in this method")


def _reporter(progress: Optional[Callable[[int, int, str], None]], start: int, total: int, what: str, calls: int
              ) -> Optional[Callable[[int, str], None]]:
    """``run_program``'s ``on_call`` for one program of one method, reporting on the whole validation's scale,
    with the bytes the call (or load) before copied."""
    if progress is None:
        return None
    return lambda index, moved: progress(start + index, total, f"{what}, call {index + 1}/{calls} ({moved})")


def validate(original: str | Path | ProgramBytes, rewritten: str | Path | ProgramBytes, *,
             ptd: Optional[str | Path] = None,
             rewritten_ptd: Optional[str | Path] = None, inputs: Any = None, expected: Any = None,
             calls: int = 2, rtol: Optional[float] = None, atol: Optional[float] = None,
             simulate_devices: bool = False, methods: Optional[Sequence[str]] = None, profile: bool = False,
             opaque_delegates: bool = False, progress: Optional[Callable[[int, int, str], None]] = None,
             output_names: Optional[Mapping[str, Sequence[Optional[str]]]] = None,
             value_names: Optional[Mapping[str, Mapping[int, str]]] = None,
             moved_by: MovedReader = moved_values) -> ValidationResult:
    """Run both programs ``calls`` (>= 2) times per method on the same inputs and check the rewrite's promises.

    ``inputs``/``expected`` are paths to torch.save files (``{method: [call, ...]}``) or loaded objects;
    without inputs, deterministic synthetic inputs are used (and ``expected`` is refused: random inputs
    cannot give the expected outputs).  Expected outputs that hold no entry for any method validated are
    refused (nothing would be compared with them), and so are those no output was compared with because every
    output depends on opaque delegates (stand-ins); a method without an entry fails its expected-outputs check.
    ``rtol``/``atol`` (None: the dtype's default) apply to floating outputs only: the others compare exactly
    (``output_tolerance``).  ``rewritten_ptd`` defaults to ``ptd``.  Delegates that neither an executor nor
    the installed ExecuTorch runtime executes run as opaque stand-ins; ``opaque_delegates=True`` runs every
    delegate that way.
    ``progress(done, total, what)`` is called before each call of each program (``forward: original, call 2/3``).
    ``output_names`` (method -> each output's name, an ETRecord's) names the outputs in the checks' details, and
    ``value_names`` (method -> value index -> name) the moved constants the program leaves unnamed.
    ``moved_by`` says what moved and how each value arrives (``program/moves.py: MovedReader``; the API passes
    the registered encodings' own reading).
    """
    _refuse_options(calls, inputs, expected)
    pair = _read_pair(original, rewritten, methods, moved_by, value_names)
    input_data = load_torch_file(inputs, "inputs") if isinstance(inputs, (str, Path)) else inputs
    expected_data = load_torch_file(expected, "expected outputs") if isinstance(expected, (str, Path)) else expected
    expected_path = str(expected) if isinstance(expected, (str, Path)) else None
    _refuse_expected_without_entries(expected_data, pair.names, input_data, methods, expected_path)
    common: dict[str, Any] = dict(calls=calls, simulate_devices=simulate_devices, profile=profile, transcript=True,
                                  opaque=OpaquePolicy.ALWAYS if opaque_delegates else OpaquePolicy.MISSING)
    results, skipped = [], []
    warnings: list[str] = []
    for index, name in enumerate(pair.names):
        if input_data is None:
            call_inputs = [synthetic_inputs(pair.plans[name])]
        elif isinstance(input_data, dict) and name not in input_data and methods is None:
            skipped.append((name, "the inputs file has no entry for it"))
            continue
        else:
            call_inputs = _given_inputs(input_data, name, inputs, calls, warnings)
        expected_calls, expected_missing = _expected_for(expected_data, name, methods, expected_path)
        before, after = _run_both((original, rewritten), (ptd, rewritten_ptd or ptd), name, call_inputs,
                                  _reporters(progress, index, len(pair.names), name, calls), common)
        stand_ins = outputs_depending_on(pair.plans[name], set(before.opaque_delegates) | set(after.opaque_delegates))
        results.append(_check_method(name, before, after, pair.moved[name], pair.exact[name], expected_calls, rtol,
                                     atol, expected_missing=expected_missing, stand_ins=stand_ins,
                                     static=pair.static[name], output_names=(output_names or {}).get(name, ())))
    if not results:
        raise PteDevconstError("the inputs name none of the program's methods", file=str(inputs))
    _refuse_nothing_compared(results, expected_data, expected_path)
    return ValidationResult(str(original), str(rewritten), simulate_devices, calls, results, skipped, warnings,
                            opaque_delegates, rtol, atol, identical=pair.identical)


def _refuse_options(calls: int, inputs: Any, expected: Any) -> None:
    if calls < 2:
        raise PteDevconstError(f"validate needs --calls of at least 2 (load once, then steady calls), got {calls}")
    if expected is not None and inputs is None:
        raise PteDevconstError("--expected needs --inputs: the expected outputs belong to particular inputs, and "
                               "the synthetic random inputs used without --inputs cannot reproduce them")


@record
class PairTables:
    """What ``validate`` reads of both programs' tables before anything runs, per method validated."""

    names: list[str]  # the methods validated, in the original's order
    moved: dict[str, list[MovedConstant]]
    plans: dict[str, m.ExecutionPlan]  # the original's
    exact: dict[str, bool]  # both run the same arithmetic (``_compute_signature``): outputs bit-identical
    static: dict[str, list[Check]]  # ``static_checks``
    identical: bool  # nothing moved and the two files are the same bytes (``same_bytes``)


def _read_pair(original: str | Path | ProgramBytes, rewritten: str | Path | ProgramBytes,
               methods: Optional[Sequence[str]], moved_by: MovedReader,
               value_names: Optional[Mapping[str, Mapping[int, str]]]) -> PairTables:
    """Both programs opened once: what moved (named by ``value_names`` where the program leaves a constant
    unnamed), the methods to validate (each in both programs), and what the tables decide of each."""
    with open_pte(original) as a, open_pte(rewritten) as b:
        read = pair_moves(a, b, (str(original), str(rewritten)), moved_by)
        moved = read.moved
        for method, found in moved.items():
            known = (value_names or {}).get(method, {})
            found[:] = [replace(c, name=known[c.value]) if c.name is None and not c.folded and c.value in known
                        else c for c in found]
        names = list(methods) if methods else [p.name or "" for p in a.program.execution_plan or ()]
        for name in names:
            if name not in moved:
                raise PteDevconstError(f"method {name!r} is not in both programs", file=str(rewritten))
        plans = {name: a.program.plan(name) for name in names}
        exact = {name: _compute_signature(plans[name], a) == _compute_signature(b.program.plan(name), b)
                 for name in names}
        declared = _declared_by_method(a), _declared_by_method(b)
        static = {name: static_checks(plans[name], b.program.plan(name), moved[name],
                                      (declared[0].get(name), declared[1].get(name)))
                  + ([read.swapped[name]] if name in read.swapped else []) for name in names}
    return PairTables(names, moved, plans, exact, static, read.identical)


def _refuse_expected_without_entries(expected_data: Any, names: Sequence[str], input_data: Any,
                                     methods: Optional[Sequence[str]], expected_path: Optional[str]) -> None:
    """Expected outputs that hold no entry for any method that will run would be compared with nothing."""
    if not isinstance(expected_data, dict):
        return
    running = [n for n in names if methods is not None or not isinstance(input_data, dict) or n in input_data]
    if running and not any(n in expected_data for n in running):
        raise PteDevconstError(
            f"the expected outputs have no entry for {'method' if len(running) == 1 else 'any of the methods'} "
            f"{', '.join(map(repr, running))} (has: {', '.join(map(repr, expected_data)) or 'nothing'}): "
            "nothing would be compared with them", file=expected_path)


def _given_inputs(input_data: Any, name: str, inputs: Any, calls: int, warnings: list[str]) -> list[Any]:
    """The calls the inputs give method ``name``; more of them than ``calls`` is said in ``warnings``."""
    call_inputs = calls_from(input_data, name, "inputs", str(inputs) if isinstance(inputs, (str, Path)) else "")
    if len(call_inputs) > calls:  # said, not silently dropped: a user's later calls may be the ones that matter
        warnings.append(f"method {name!r}: the inputs hold {len(call_inputs)} calls and validate ran the first "
                        f"{calls} (--calls {len(call_inputs)} runs them all)")
    return call_inputs


def _expected_for(expected_data: Any, name: str, methods: Optional[Sequence[str]], expected_path: Optional[str]
                  ) -> tuple[Optional[list[tuple[Any, ...]]], Optional[str]]:
    """(the expected outputs of each call of method ``name``, why there are none where some were given)."""
    if expected_data is None:
        return None, None
    if isinstance(expected_data, dict) and name not in expected_data:
        if methods is not None:
            raise PteDevconstError(f"the expected outputs have no entry for method {name!r} (has: "
                                   f"{', '.join(map(str, expected_data))})", file=expected_path)
        return None, f"{MISSING_ENTRY} {name!r}: its outputs were not compared with them"
    return [tuple(c) for c in calls_from(expected_data, name, "expected outputs")], None


def _reporters(progress: Optional[Callable[[int, int, str], None]], index: int, methods: int, name: str, calls: int
               ) -> tuple[Optional[Callable[[int, str], None]], Optional[Callable[[int, str], None]]]:
    """``run_program``'s ``on_call`` for the original and the rewrite of the ``index``-th of ``methods`` methods."""
    total = methods * 2 * calls
    return (_reporter(progress, index * 2 * calls, total, f"{name}: original", calls),
            _reporter(progress, (index * 2 + 1) * calls, total, f"{name}: rewrite", calls))


def _run_both(programs: tuple[str | Path | ProgramBytes, str | Path | ProgramBytes],
              data: tuple[Optional[str | Path], Optional[str | Path]], name: str, call_inputs: list[Any],
              on_call: tuple[Optional[Callable[[int, str], None]], Optional[Callable[[int, str], None]]],
              common: dict[str, Any]) -> tuple[RunResult, RunResult]:
    """Method ``name`` of the original, then of the rewrite, on the same inputs (never both held at once)."""
    before = run_program(programs[0], ptd_path=data[0], on_call=on_call[0], method=name, inputs=call_inputs,
                         **common)
    after = run_program(programs[1], ptd_path=data[1], on_call=on_call[1], method=name, inputs=call_inputs,
                        **common)
    return before, after


def _refuse_nothing_compared(results: Sequence[MethodValidation], expected_data: Any,
                             expected_path: Optional[str]) -> None:
    """Expected outputs given, and no output compared with them: every output depends on opaque delegates."""
    if expected_data is not None and not any(c.name == EXPECTED_CHECK and c.status is not Status.SKIPPED
                                             and not c.detail.startswith(MISSING_ENTRY)
                                             for mv in results for c in mv.checks):
        backends = sorted({b for mv in results for b in mv.opaque_backends})
        raise PteDevconstError(
            "no output was compared with the expected outputs: every output depends on opaque delegates "
            f"({', '.join(backends)}), whose outputs are stand-ins, not the model's; run where their backends "
            "execute, or validate without --expected", file=expected_path)
