"""What judging one method's constants shares: who reads each value, who writes it, and the copy rule.

Both verdicts build on it: the plain one (``analysis.py``: a constant read only by device delegates moves)
and the fold's (``fold/chains.py``: a value computed from a constant by table kernels and read only by
device delegates folds).  Both ask one question of an ``_h2d_copy.out`` (``follow_copy``: may this copy
go?) and explain a host reader the same way (``host_reason``, ``Reasons``), so they live here, below both:
``analysis`` imports ``fold`` (the chains of a method are part of its analysis) and ``fold`` imports this
module, never ``analysis``.

Who reads a value is ``program/readers.py``'s (``Reader``), what an instruction reads and writes
``program/effects.py``'s rule; ``Writes`` and the static views
(``MethodContext.views_of``) are indexes over it, built once per method and charged to its ``WorkBudget``.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import field
from typing import Iterable, Mapping, Optional, Sequence

from pte_devconst.program.dataflow import Declared, DelegateCallSite, delegate_call_sites
from pte_devconst.program.delegate_blobs import reads_blobs_of
from pte_devconst.program.effects import MethodEffects, Step
from pte_devconst.program.kernel_effects import DEVICE_COPY_ARGS, copy_slots
from pte_devconst.program.readers import Reader, ReaderKind
from pte_devconst.program.memory import view_reads
from pte_devconst.program.once import OnceRegion, once_region
from pte_devconst.program.regions import memory_device
from pte_devconst.program.transfers import Transfer, copies_per_call, per_call_transfers
from pte_devconst.program.transfers import work as transfer_work
from pte_devconst.schema import model as m
from pte_devconst.schema.model import Device, LayoutKey
from pte_devconst.schema.ptd_file import tensor_key
from pte_devconst.util.errors import UnsupportedProgramError
from pte_devconst.util.record import record

from .copy_memory import CopyMemory

NO_PTD = "external (data in a .ptd) but no .ptd given; pass --ptd"
# Details kept per distinct reason; the rest are counted ("and N more").
DETAILS_PER_REASON = 3
# Steps of analysis allowed per value, instruction and read of a method.
WORK_PER_ITEM = 16


class WorkBudget:
    """Counts the steps of one method's analysis and fails past a limit proportional to its size."""

    __slots__ = ("left", "limit", "method")

    def __init__(self, method: str, items: int) -> None:
        self.method = method
        self.limit = WORK_PER_ITEM * items + 4096
        self.left = self.limit

    def spend(self, steps: int = 1) -> None:
        self.left -= steps
        if self.left < 0:
            raise UnsupportedProgramError(
                f"method {_printable(self.method)}: analysis needed more than {self.limit:,} steps, "
                f"{WORK_PER_ITEM} per value, instruction and read; refusing a program shaped to run it away")


def _printable(name: str) -> str:
    return name if name.isprintable() else repr(name)


@record
class DeviceCopy:
    """An ``_h2d_copy.out`` kernel that copies a constant into a device tensor: on every call, or (``once``) in a
    run-once region, on the first call only (``program/once.py``)."""

    chain: int
    instruction: int
    src: int
    dst: int
    device: Device
    once: bool = False
    # static views of ``dst`` that read what the copy wrote and nothing else: the rewrite points them at the value
    # that holds the constant on its device (``edit.py``), so the copy can go
    views: tuple[int, ...] = ()


@record
class RewiredDelegateArg:
    """A delegate argument that must point at the constant once its copy is gone."""

    chain: int
    instruction: int
    arg_pos: int
    value: int  # the value there now (a copy's destination, or the constant itself)


@record
class ExternalData:
    """What analysis needs of a .ptd: the layout of each key (None when the entry has none)."""

    layouts: Mapping[str, Optional[LayoutKey]] = field(default_factory=dict)
    repeated: frozenset[str] = frozenset()  # keys with more than one entry (the self-check refuses moving those)


def instruction_at(plan: m.ExecutionPlan, chain: int, instruction: int) -> m.Instruction:
    """The instruction at (chain, instruction): where a reader or a writer found it."""
    return ((plan.chains or ())[chain].instructions or ())[instruction]


def kernel_args(plan: m.ExecutionPlan, chain: int, instruction: int) -> tuple[int, ...]:
    """The arguments of the KernelCall at (chain, instruction), a kernel reader's own; () for another instruction."""
    ins = instruction_at(plan, chain, instruction)
    return tuple(ins.args or ()) if isinstance(ins, m.KernelCall) else ()


def tensor_at(values: Sequence[m.EValue], index: int) -> m.Tensor:
    """Value ``index``, which the caller found to be a tensor (a constant, or a kernel's output)."""
    value = values[index]
    if not isinstance(value, m.Tensor):
        raise TypeError(f"value {index} is a {type(value).__name__}, not a tensor")
    return value


def host_reason(reader: Reader) -> tuple[str, str]:
    """(short reason, detailed reason) for a reader that keeps a constant on the host."""
    if reader.kind == ReaderKind.KERNEL_CALL:
        short = f"read by host kernel {reader.name}"
        return short, f"{short} at instruction {reader.instruction}"
    if reader.kind == ReaderKind.DELEGATE_CALL:
        if reader.device_error:
            short = f"read by delegate {reader.name} with an unreadable target_device (host)"
            return short, f"{short} at instruction {reader.instruction}: {reader.device_error}"
        short = f"read by delegate {reader.name} without target_device (host)"
        return short, f"{short} at instruction {reader.instruction}"
    if reader.kind == ReaderKind.OUTPUT:
        return "is a method output", f"is method output {reader.arg_pos}"
    if reader.kind == ReaderKind.TENSOR_LIST:
        return "is part of a tensor list", f"is item {reader.arg_pos} of tensor list {reader.name}"
    return f"used by a {reader.kind}", f"used by a {reader.kind} at instruction {reader.instruction}"


class Reasons:
    """Why a constant stays: distinct short reasons in order, and at most a few details of each."""

    __slots__ = ("counts", "details")

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.details: list[str] = []

    def __bool__(self) -> bool:
        return bool(self.counts)

    def add(self, short: str, detail: str, count: int = 1) -> None:
        """``count`` occurrences of ``short``; ``detail`` describes the first of them."""
        seen = self.counts.get(short, 0)
        if seen < DETAILS_PER_REASON:
            self.details.append(detail)
        self.counts[short] = seen + count

    def result(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        extra = [f"and {n - DETAILS_PER_REASON:,} more: {short}" for short, n in self.counts.items()
                 if n > DETAILS_PER_REASON]
        return tuple(self.counts), tuple(self.details + extra)


@record
class Uses:
    """The readers of one value split by what the copy rule needs, built once per value (``MethodContext.uses``).

    ``kinds`` holds, per distinct short reason of the non-device readers, how many there are and the
    first few of them: enough to explain why a copy cannot go without scanning every reader again.
    """

    on_device: tuple[Reader, ...]
    kinds: tuple[tuple[str, int, tuple[Reader, ...]], ...]


class Writes:
    """Who writes each value (the instructions that may, and the method's inputs), and which delegate call
    arguments are outputs: an index over ``program/effects.py`` (the one rule of what an instruction writes)
    and ``program/dataflow.py`` (a delegate call's outputs), built once per method."""

    def __init__(self, effects: MethodEffects) -> None:
        self.inputs = effects.inputs
        self.steps: dict[int, list[Step]] = defaultdict(list)
        self.delegate_outputs: frozenset[tuple[int, int, int]] = frozenset(
            (s.chain, s.instruction, pos) for s in effects.sites for pos in s.written)
        for step, written in zip(effects.steps, effects.writes):
            for value in written:
                self.steps[value].append(step)

    def first(self, value: int) -> Optional[Step]:
        """The first instruction that writes ``value``, or None."""
        found = self.steps.get(value)
        return found[0] if found else None

    def only_by(self, value: int, step: tuple[int, int]) -> bool:
        """Only the instruction at ``step`` writes ``value`` (and it is no method input)."""
        found = self.steps.get(value, [])
        return value not in self.inputs and len(found) == 1 and (found[0].chain, found[0].instruction) == step

    def literal(self, value: int) -> bool:
        """Nothing writes ``value`` at run time: no instruction, and it is no method input."""
        return value not in self.inputs and not self.steps.get(value)


ViewReads = Mapping[int, list[tuple[int, tuple[int, int]]]]  # value -> (the view, the reading step), view_reads's


class MethodContext:
    """What judging one method's constants shares: its readers, and per-value summaries built on demand."""

    def __init__(self, name: str, plan_index: int, plan: m.ExecutionPlan, readers: Mapping[int, list[Reader]],
                 external: Optional[ExternalData], host_placement: bool, budget: WorkBudget,
                 declared: Optional[Declared] = None) -> None:
        self.name = name
        self.plan_index = plan_index
        self.plan = plan
        self.readers = readers
        self.external = external
        self.host_placement = host_placement
        self.budget = budget
        self.declared = declared  # what the delegates' blobs declare of their calls (dataflow.delegate_call_sites)
        self._sites: Optional[tuple[DelegateCallSite, ...]] = None
        self._uses: dict[int, Uses] = {}
        self._views: Optional[ViewReads] = None
        self._memory: Optional[CopyMemory] = None
        self._effects: Optional[MethodEffects] = None
        self._writes: Optional[Writes] = None
        self._transfers: Optional[tuple[tuple[Transfer, ...], tuple[DelegateCallSite, ...]]] = None
        self._copies: dict[int, int] = {}
        self._buffer_devices: Optional[Mapping[int, Device]] = None
        self.once: Optional[OnceRegion] = once_region(plan, self.effects)
        if self.once is not None:
            budget.spend(len(self.once.written))

    def buffer_devices(self) -> Mapping[int, Device]:
        """Planned buffer -> device (``ExecutionPlan.buffer_devices``), once per method."""
        if self._buffer_devices is None:
            self._buffer_devices = self.plan.buffer_devices()
        return self._buffer_devices

    def transfers(self) -> tuple[tuple[Transfer, ...], tuple[DelegateCallSite, ...]]:
        """Every host-to-device copy one call makes (``program/transfers.py``: the rule the runner's counts
        follow), and the delegate calls' input/output split it rests on (``program/dataflow.py``), built once per
        method, the data flow's work charged to the budget first.

        Their bytes are the per-call estimate that ``inspect`` and ``diff`` show; ``tests/test_estimate_vs_runner.py``
        holds it equal to the runner's measured copies.
        """
        if self._transfers is None:
            self.budget.spend(transfer_work(self.plan))
            sites = self.sites()
            self._transfers = (tuple(per_call_transfers(self.plan, sites, self.once)), sites)
            self._copies = copies_per_call(self._transfers[0])
        return self._transfers

    def sites(self) -> tuple[DelegateCallSite, ...]:
        """The delegate calls, split into inputs and outputs as their blobs declare or by the data flow's rule
        (``program/dataflow.py``), once per method."""
        if self._sites is None:
            self._sites = tuple(delegate_call_sites(self.plan, declared=self.declared))
        return self._sites

    def per_call_copies(self, value: int) -> int:
        """How many times one call copies ``value`` host-to-device (``transfers.copies_per_call``)."""
        self.transfers()
        return self._copies.get(value, 0)

    def runs_once(self, step: tuple[int, int]) -> bool:
        """Whether the instruction at ``step`` is in the method's run-once region."""
        return self.once is not None and self.once.runs_once(*step)

    def views_of(self, value: int) -> list[tuple[int, tuple[int, int]]]:
        """Reads of ``value``'s memory through static views (``program/memory.py``, computed once per method)."""
        if self._views is None:
            self._views = view_reads(self.effects())
        return self._views.get(value, [])

    def memory(self) -> CopyMemory:
        """The method's regions, uses and jumps, for the copy rules (built on the first copy that needs them)."""
        if self._memory is None:
            self._memory = CopyMemory(self.plan, self.budget.spend, self.effects())
        return self._memory

    def effects(self) -> MethodEffects:
        """What each instruction reads and writes (``program/effects.py``), built once per method."""
        if self._effects is None:
            self._effects = MethodEffects(self.plan, self.sites())
            self.budget.spend(self._effects.work)
        return self._effects

    def writes(self) -> Writes:
        """Who writes each value (``Writes``), built once per method."""
        if self._writes is None:
            self._writes = Writes(self.effects())
        return self._writes

    def writer_of(self, index: int) -> Optional[Step]:
        """The first instruction that writes value ``index``, or None."""
        return self.writes().first(index)

    def uses(self, value: int) -> Uses:
        """The readers of ``value`` as the copy rule sees them (``Uses``), built once per value."""
        found = self._uses.get(value)
        if found is None:
            readers = self.readers.get(value, ())
            self.budget.spend(len(readers) + 1)
            kinds: dict[str, tuple[int, list[Reader]]] = {}
            on_device = []
            for reader in readers:
                if reader.on_device:
                    on_device.append(reader)
                    continue
                short = host_reason(reader)[0]
                count, sample = kinds.get(short, (0, []))
                if len(sample) <= DEVICE_COPY_ARGS:  # one more than a copy's own slots: always one that is not its own
                    sample.append(reader)
                kinds[short] = (count + 1, sample)
            found = Uses(tuple(on_device), tuple((short, n, tuple(sample)) for short, (n, sample) in kinds.items()))
            self._uses[value] = found
        return found


def follow_copy(ctx: MethodContext, index: int, copy: Reader, reasons: Reasons, devices: set[Device],
                 copies: list[DeviceCopy], args: list[RewiredDelegateArg]) -> None:
    """One h2d copy of the constant: it may go only if delegates on one device are all that read what it writes.

    The kernel writes its ``out`` argument; codegen'd out variants never write the return slot (the
    wrapper in executorch/codegen/gen.py leaves it alone), so a return slot naming another value that
    anything reads is refused rather than guessed at.
    """
    own_args = kernel_args(ctx.plan, copy.chain, copy.instruction)
    where = f"_h2d_copy at instruction {copy.instruction}"
    slots = copy_slots(copy.name, own_args)
    if len(own_args) != DEVICE_COPY_ARGS or slots is None or slots.out == index:
        reasons.add("copied by a malformed _h2d_copy",
                    f"{where} has arguments {list(own_args)}; the kernel takes (self, out, return) and the "
                    "runtime refuses any other count")
        return
    dst, (ret,) = slots.out, slots.returns
    values = ctx.plan.values or ()
    source, out = values[index], values[dst] if 0 <= dst < len(values) else None
    if not isinstance(out, m.Tensor) or not isinstance(source, m.Tensor) or source.layout_key != out.layout_key:
        reasons.add("its device copy has another dtype, shape or dim order",
                    f"{where} copies it into value {dst}, of another dtype, shape or dim order: the delegates read "
                    "the copy's, which the constant in its place would change")
        return
    clean = _only_read_by_this_copy(ctx, dst, copy, own_args, reasons, delegates_allowed=True,
                                    short="its device copy is also {kind}",
                                    detail=f"its device copy (value {dst}) is also {{detail}}")
    if ret != dst:
        clean &= _only_read_by_this_copy(ctx, ret, copy, own_args, reasons, delegates_allowed=False,
                                         short="its _h2d_copy returns into another value that is read",
                                         detail=f"{where} returns into value {ret}, not its out value {dst} (the "
                                         f"kernel never writes that slot), and value {ret} is also {{detail}}")
    if not clean:
        return
    views = ctx.views_of(dst)
    untrusted = _untrusted_binding(ctx, dst, [use.step for use in ctx.uses(dst).on_device] + [s for _, s in views])
    if untrusted is not None:
        reasons.add(*untrusted)
        return
    followers: tuple[int, ...] = ()
    if views:  # removing the copy would leave that memory unwritten, unless each view follows the constant
        refusal = _views_refusal(ctx, dst, views)
        if refusal is not None:
            reasons.add(*refusal)
            return
        followers = tuple(dict.fromkeys(view for view, _ in views))
    uses = ctx.uses(dst)
    if not uses.on_device and not followers:
        reasons.add("its device copy has no readers", f"its device copy (value {dst}) has no readers")
        return
    ctx.budget.spend(len(uses.on_device))
    once = ctx.runs_once(copy.step)
    read_at = [use.step for use in uses.on_device] + [step for _, step in views]  # every view follows, or none
    problem = ctx.memory().problem(copy.step, dst, read_at, once=once, views=frozenset(followers))
    if problem is not None:
        reasons.add(*problem)
        return
    on_device = [*uses.on_device, *(r for view in followers for r in ctx.readers.get(view, ()))]
    devices.update(use.delegate_device for use in on_device)
    args.extend(RewiredDelegateArg(use.chain, use.instruction, use.arg_pos, dst) for use in uses.on_device)
    dst_device = memory_device((ctx.plan.values or ())[dst], ctx.buffer_devices())
    copies.append(DeviceCopy(copy.chain, copy.instruction, index, dst,
                             on_device[0].delegate_device if dst_device.is_cpu else dst_device, once, followers))


def _views_refusal(ctx: MethodContext, dst: int, views: list[tuple[int, tuple[int, int]]]
                   ) -> Optional[tuple[str, str]]:
    """Why the static views of a device copy cannot follow the constant to the value that holds it on its device,
    or None when they can.

    A view follows when it lies inside the copy's bytes (it starts where they do: ``view_reads`` matches places),
    every use of it is one of these reads (it reads what the copy wrote, never what another value left there,
    and nothing writes it), and only delegates on a device read it, as inputs: then the rewrite points it at the
    holder's bytes (``edit.py``), which hold the same bytes on every call, and nothing can change them there.
    """
    values = ctx.plan.values or ()
    copy_tensor = values[dst]
    assert isinstance(copy_tensor, m.Tensor), "follow_copy checked the destination"
    effects = ctx.effects()
    steps: dict[int, set[tuple[int, int]]] = {}
    for view, step in views:
        steps.setdefault(view, set()).add(step)
    for view, read_at in steps.items():
        ctx.budget.spend(len(read_at) + 1)
        tensor = values[view]
        first = min(read_at)
        if first == (-1, -1):
            return ("its device copy is also a method output through a static view",
                    f"its device copy (value {dst}) is also method output value {view}, a view of its memory (the "
                    "caller would hold the resident constant's own bytes)")
        for step in sorted(read_at):
            undeclared = _undeclared_argument(ctx, dst, view, step)
            if undeclared is not None:
                return undeclared
        if not isinstance(tensor, m.Tensor) or tensor.nbytes > copy_tensor.nbytes:
            return ("its device copy is also read through a larger static view",
                    f"its device copy (value {dst}) is also read through value {view}, a view larger than its "
                    "bytes: it reads more than the copy wrote")
        uses = effects.uses()[view]
        if any(use.writes or (effects.steps[use.position].chain, effects.steps[use.position].instruction)
               not in read_at for use in uses):
            return ("its device copy is also read through a static view of other data",
                    f"its device copy (value {dst}) is also read through value {view}, a view of its memory that "
                    "is also used where another value's bytes are there")
        other = next((r for r in ctx.readers.get(view, ()) if not r.on_device), None)
        if other is not None:
            return ("its device copy is also read through a static view by the host",
                    f"its device copy (value {dst}) is also read through value {view}, a view of its memory "
                    f"that is {host_reason(other)[1]}")
    return None


def _untrusted_binding(ctx: MethodContext, dst: int, steps: Iterable[tuple[int, int]]) -> Optional[tuple[str, str]]:
    """When a delegate call that reads a device copy (directly or through a static view) has a blob whose
    declaration is read but cannot be its backend's, or does not bind this call (``Declaration.disagreement``): why
    the copy stays.  Which arguments such a delegate writes is unknown, so the copy's bytes may be written there and
    the resident constant with them.  None otherwise."""
    if not ctx.declared:
        return None
    delegates = ctx.plan.delegates or ()
    for chain, instruction in dict.fromkeys(steps):
        ins = instruction_at(ctx.plan, chain, instruction) if chain >= 0 else None
        if not isinstance(ins, m.DelegateCall):
            continue
        declaration = ctx.declared.get(ins.delegate_index)
        args = tuple(ins.args or ())
        what = declaration.disagreement(len(args)) if declaration is not None else ""
        if not what:
            continue
        backend = delegates[ins.delegate_index].id if 0 <= ins.delegate_index < len(delegates) else None
        return ("its device copy is read by a delegate whose blob's binding is not its backend's",
                f"its device copy (value {dst}) is an argument of delegate {ins.delegate_index} "
                f"({backend or 'unnamed'}) at instruction {instruction}, whose blob declares nothing this tool can "
                f"trust: {what}; which of its arguments that delegate writes is unknown")
    return None


def _undeclared_argument(ctx: MethodContext, dst: int, view: int, step: tuple[int, int]
                         ) -> Optional[tuple[str, str]]:
    """When the read of a device copy's bytes through ``view`` at ``step`` is a delegate argument the split calls an
    output, lying exactly on the copy (``program/memory.py``): why the copy stays, since only the delegate's blob,
    which cannot be read here, says whether the delegate writes it or reads the copy again.  None otherwise."""
    chain, instruction = step
    ins = instruction_at(ctx.plan, chain, instruction) if chain >= 0 else None
    if not isinstance(ins, m.DelegateCall):
        return None
    site = ctx.effects().site(step)
    if site is None or view not in site.outputs:
        return None
    delegates = ctx.plan.delegates or ()
    backend = delegates[ins.delegate_index].id if 0 <= ins.delegate_index < len(delegates) else None
    return ("its device copy's bytes are a later delegate argument its blob does not declare",
            f"its device copy (value {dst}) lies exactly where delegate {ins.delegate_index} at instruction "
            f"{instruction} has argument {site.args.index(view)} (value {view}): an output, or a view of the copy "
            f"it reads again, which only its {backend or 'unnamed'} blob says, and this tool reads no such blob"
            if not reads_blobs_of(backend or "") else
            f"it reads again, which only its {backend} blob says, and this tool could not read it")


def _only_read_by_this_copy(ctx: MethodContext, value: int, copy: Reader, own_args: tuple[int, ...],
                            reasons: Reasons, *, delegates_allowed: bool, short: str, detail: str) -> bool:
    """Whether nothing but this copy's own slots (and device delegates, if allowed) uses ``value``; else say what.

    Constant work per call: the copy's own slots (at most three, all of one kind) are subtracted from
    the per-value counts, and each kind's sample always holds a reader that is not one of them.
    """
    uses = ctx.uses(value)
    own = own_args.count(value)
    own_kind = host_reason(copy)[0]
    kinds: Iterable[tuple[str, int, tuple[Reader, ...]]] = uses.kinds
    if not delegates_allowed and uses.on_device:
        first = uses.on_device[0]
        on_device = (f"read by delegate {first.name} on {first.device}", len(uses.on_device), uses.on_device[:1])
        kinds = itertools.chain([on_device], kinds)
    named = 0
    for kind, count, sample in kinds:
        others = count - (own if kind == own_kind else 0)
        if others <= 0:
            continue
        first = next(r for r in sample if r.step != copy.step)
        first_detail = (host_reason(first)[1] if not first.on_device
                        else f"read by delegate {first.name} on {first.device} at instruction {first.instruction}")
        reasons.add(short.format(kind=kind), detail.format(detail=first_detail)
                    + (f" (and {others - 1:,} more uses like it)" if others > 1 else ""))
        named += 1
        if named == DETAILS_PER_REASON:
            break
    return named == 0


def external_problem(tensor: m.Tensor, external: Optional[ExternalData]) -> Optional[str]:
    if external is None:
        return NO_PTD
    key = tensor_key(tensor.fqn or "")  # what the runtime looks up (schema/ptd_file.py, the one resolution)
    if key not in external.layouts:
        return f"external key {key!r} is not in the .ptd"
    layout = external.layouts[key]
    if layout is None:  # Method::parse_external_constants calls get_tensor_layout, which needs one
        return f"the .ptd entry of {key!r} has no tensor layout (the runtime needs one to load it)"
    if layout != tensor.layout_key:
        return f"the .ptd layout of {key!r} does not match the tensor"
    if key in external.repeated:  # the runtime loads the first entry: which one the exporter meant is unknown
        return f"external key {key!r} appears more than once in the .ptd"
    return None
