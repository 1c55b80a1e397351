"""Which constants reach which device, by which copies and host kernels, and what a rewrite made of them.

The picture the markdown reports draw (a Mermaid flowchart, ``cli/mermaid.py``): every constant-derived value
a program copies host-to-device on every call (``derived.derived_copies``), with the constants it comes from,
the host kernels that computed it, the device and the delegates there, and whether the rewrite (or, for a
diff, the second program) keeps it in device memory from the load on instead.
"""

from __future__ import annotations

from typing import Callable, Optional

from pte_devconst.schema import model as m
from pte_devconst.program.kernel_effects import copy_slots
from pte_devconst.util.record import record

from .model.analysis import Analysis, MethodAnalysis
from .derived import DerivedCopy, method_derived_copies


@record
class Flow:
    """One constant-derived value copied to a device on every call, and what became of it."""

    value: int
    sources: tuple[str, ...]  # the constants it comes from: their names, or ``value N``
    host_ops: tuple[str, ...]  # the host kernels that computed it (empty: the constant itself is copied)
    device: str
    delegates: tuple[str, ...]  # the delegates on that device that read it or its copy: ``delegate 0 (Backend)``
    nbytes: int
    copies_per_call: int
    resident: Optional[bool]  # in device memory from the load on after the rewrite; None: no "after" (inspect)

    @property
    def bytes_per_call(self) -> int:
        return self.nbytes * self.copies_per_call


@record
class MethodFlows:
    method: str
    flows: tuple[Flow, ...]


def _reached(plan: m.ExecutionPlan, method: MethodAnalysis) -> Callable[[int, str], tuple[str, ...]]:
    """``reached(value, device)``: the delegates on ``device`` that read ``value`` or an h2d copy of it."""
    ops = [op.qualified_name for op in plan.operators or ()]
    copies: dict[int, set[int]] = {}
    for chain in plan.chains or ():
        for instruction in chain.instructions or ():
            slots = copy_slots(ops[instruction.op_index], instruction.args or ()) \
                if isinstance(instruction, m.KernelCall) and 0 <= instruction.op_index < len(ops) else None
            if slots is not None and slots.to_device:
                copies.setdefault(slots.source, set()).add(slots.out)
    backends = {d.index: (d.backend_id, str(d.device)) for d in method.delegates}
    readers: dict[int, set[int]] = {}  # value -> the delegates that take it as an input (indexed once: linear)
    for site in method.call_sites:
        for value in site.inputs:
            readers.setdefault(value, set()).add(site.delegate_index)

    def reached(value: int, device: str) -> tuple[str, ...]:
        found = sorted({index for wanted in ({value} | copies.get(value, set())) for index in readers.get(wanted, ())
                        if backends.get(index, ("", ""))[1] == device})
        return tuple(f"delegate {i} ({backends[i][0]})" for i in found)

    return reached


def program_flows(program: m.Program, analysis: Analysis,
                  resident: Optional[Callable[[DerivedCopy], bool]] = None) -> tuple[MethodFlows, ...]:
    """Per method, every constant-derived per-call copy as a ``Flow``; ``resident(copy)`` says whether the
    rewrite removes it (None: the program as it is, nothing after)."""
    plans = program.execution_plan or ()
    result = []
    for method in analysis.methods:
        plan = plans[method.plan_index]
        reached = _reached(plan, method)
        flows = tuple(
            Flow(copy.value, copy.sources or (copy.name,), copy.host_ops, str(copy.device),
                 reached(copy.value, str(copy.device)), copy.nbytes, copy.copies_per_call,
                 None if resident is None else resident(copy))
            for copy in method_derived_copies(plan, method))
        if flows:
            result.append(MethodFlows(method.label, flows))
    return tuple(result)


def plan_residents(plan: "object") -> Callable[[DerivedCopy], bool]:
    """For a rewrite: a copy goes when its constant moves or the value it copies is folded into device memory."""
    moved = {(p.plan_index, p.value) for p in plan.placements}  # type: ignore[attr-defined]
    moved |= {(f.plan_index, f.chain.result) for f in plan.folds}  # type: ignore[attr-defined]
    return lambda copy: (copy.plan_index, copy.value) in moved


def diff_residents(after_program: m.Program, after: Analysis) -> Callable[[DerivedCopy], bool]:
    """For a diff: a copy of the first program goes when the second has no such copy (same method, value, device)."""
    plans = after_program.execution_plan or ()
    remaining = {(copy.method, copy.value, str(copy.device)) for method in after.methods
                 for copy in method_derived_copies(plans[method.plan_index], method)}
    return lambda copy: (copy.method, copy.value, str(copy.device)) not in remaining
