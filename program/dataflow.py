"""Static data flow of a method: where a DelegateCall's inputs end and its outputs begin, and what they reach.

ExecuTorch passes a delegate one argument list, its inputs then its outputs, and
the program does not store the split: only the backend's own blob knows it.  For
a delegate whose blob nobody reads (an opaque stand-in in the runner, or an
estimate of what a call copies), the split is decided here, by one rule that
looks at the program alone.

**The rule.**  The outputs of a DelegateCall are the longest run of arguments at
the end of its list that this call *defines*: values that are

* not a method input, a constant, or a tensor with initial data;
* not mentioned by any earlier instruction (chains in order, instructions in
  order: an argument, either end of a MoveCall, a jump condition, a freed value,
  a tensor list's items);
* a Tensor or an Int (a delegate may return a SymInt); other kinds are literals;
* not a *static view*: the emitter elides a static view of a planned tensor into
  a second value with the same planned region (memory id, offset, size) and no
  instruction.  A planned argument whose region equals the region of a value
  whose data is still pending, written by an earlier instruction (or set as a
  method input, or loaded as initial data) and not read since, is such a view,
  hence an input.  A region whose data was read, through any value that lies
  there (the value itself or a view of it), is free for the memory planner to
  reuse, so an argument there may be a new output (an RNN step's output read
  through a view, then its region reused by the next step's output).

The last argument is an output whenever it is a Tensor or Int that no earlier
instruction mentions and that is no method input, constant or initial data: a
delegate returns at least one value, so the view rule never claims it.

**What a blob declares comes first.**  Where the delegate's blob can be read
(``delegate_blobs.declared_splits``) and binds the call's arguments as its backend
binds them (every argument position named once, read or written, none past the
call's arguments), the call is split as declared: the positions it reads are
inputs, the positions it writes outputs, each one for sure, wherever it lies in the
list (XNNPACK binds an external value to the argument at its external id, so an
output may come before an input).  A declaration that cannot be the backend's (its
``problem``) or that does not fit the call (``Declaration.disagreement``) declares
nothing: the rule applies, as for the calls of blobs nobody reads.

A call site carries **positions**, never a count: ``DelegateCallSite.read`` and
``.written`` (ascending, together every argument position once), ``.sure`` (the
written positions that are outputs whatever the bytes: a trusted declaration's, or
the last argument when new) and ``.declared``.  Under the rule the read positions
are a prefix; under a declaration they need not be.

``tests/test_dataflow.py`` checks the rule against every delegate call whose blob
states its input count (the reference backend's ``inputs``, the demo backend's op
arities) in the examples and the corpus.

"""

from __future__ import annotations

from typing import Mapping, Optional

from pte_devconst.schema import model as m
from pte_devconst.util.record import record

from .kernel_effects import instruction_effects, list_items
from .regions import RegionKey, region_key



@record
class Declaration:
    """How a delegate's blob binds the arguments of its calls, as its backend binds them (``delegate_blobs``):
    the argument positions it reads and those it writes.  ``problem``, when set, says why it cannot be the
    backend's (an external id listed twice, one both read and written, ...): it then declares nothing."""

    backend: str
    read: tuple[int, ...]
    written: tuple[int, ...]
    problem: str = ""

    def past_the_call(self, n_args: int) -> tuple[int, ...]:
        """The argument positions this declaration binds that a call of ``n_args`` arguments does not pass, in
        order: a backend binding them reads and writes past the call's argument list (undefined behaviour; the
        1.5.1 runtime's XNNPACK crashes on one machine and refuses on another).  Empty for a ``problem``."""
        if self.problem:
            return ()
        return tuple(sorted(p for p in self.read + self.written if not 0 <= p < n_args))

    def disagreement(self, n_args: int) -> str:
        """Why this declaration does not bind a call of ``n_args`` arguments ("" when it does: every position
        named once, read or written); the ``problem`` when it has one."""
        if self.problem:
            return self.problem
        named = self.read + self.written
        past = self.past_the_call(n_args)
        if past:
            return (f"its blob binds argument {past[0]}, past the call's {n_args} arguments (it binds "
                    f"{len(named)}: {len(self.read)} read, {len(self.written)} written)")
        unnamed = sorted(set(range(n_args)) - set(named))
        if unnamed:
            listed = ", ".join(str(p) for p in unnamed[:4]) + (", ..." if len(unnamed) > 4 else "")
            return (f"the call passes {n_args} arguments, its blob binds {len(named)} ({len(self.read)} read, "
                    f"{len(self.written)} written): argument{'s' if len(unnamed) > 1 else ''} {listed} named by "
                    "nothing it declares")
        return ""


# delegate index -> how its blob binds its calls (``delegate_blobs.declared_splits``, one method's)
Declared = Mapping[int, Declaration]


@record
class DelegateCallSite:
    """One DelegateCall of a method, with its argument positions split into those read and those written."""

    chain: int
    instruction: int
    delegate_index: int
    args: tuple[int, ...]
    read: tuple[int, ...]  # argument positions the delegate reads, ascending
    written: tuple[int, ...]  # argument positions it writes, ascending; with ``read``, every position once
    sure: tuple[int, ...] = ()  # written positions that are outputs whatever a view says (module docstring)
    declared: bool = False  # split as its blob declares (else by the module's rule)

    @property
    def inputs(self) -> tuple[int, ...]:
        """The values at the read positions."""
        return tuple(self.args[p] for p in self.read)

    @property
    def outputs(self) -> tuple[int, ...]:
        """The values at the written positions."""
        return tuple(self.args[p] for p in self.written)

    @property
    def maybe_views(self) -> tuple[int, ...]:
        """Written positions that may yet be static views the delegate reads (written, not for sure)."""
        sure = set(self.sure)
        return tuple(p for p in self.written if p not in sure)

    @property
    def n_inputs(self) -> Optional[int]:
        """The count of leading read positions when the read positions are a prefix (always, under the rule);
        None when they are not.  For callers that still split a list by a count: prefer ``read``/``written``."""
        return len(self.read) if self.read == tuple(range(len(self.read))) else None


def _by_rule(chain: int, instruction: int, delegate: int, args: tuple[int, ...], n_inputs: int, sure: int
             ) -> DelegateCallSite:
    n = len(args)
    return DelegateCallSite(chain, instruction, delegate, args, tuple(range(n_inputs)), tuple(range(n_inputs, n)),
                            tuple(range(n - sure, n)))


class _PendingFlow:
    """What the instructions executed so far have mentioned, and which regions hold pending data."""

    def __init__(self, plan: m.ExecutionPlan) -> None:
        self.values = plan.values or ()
        self.ops = [op.qualified_name for op in plan.operators or ()]
        self.method_inputs = frozenset(plan.inputs or ())
        self.mentioned: set[int] = set()
        self.pending: dict[RegionKey, int] = {}  # region -> the value whose unread data it holds
        self.state: set[RegionKey] = set()  # initial-data tensors: their regions live for the whole method
        for index in self.method_inputs:
            if 0 <= index < len(self.values) and (region := region_key(self.values[index])) is not None:
                self.pending[region] = index
        for value in self.values:
            if isinstance(value, m.Tensor) and value.has_initial_data and (region := region_key(value)) is not None:
                self.state.add(region)

    def _value(self, index: int) -> m.EValue:
        return self.values[index] if 0 <= index < len(self.values) else None

    def _expand(self, indices: tuple[int, ...]) -> list[int]:
        result = []
        for index in indices:
            result.append(index)
            result.extend(list_items(self._value(index)))
        return result

    def read(self, indices: tuple[int, ...]) -> None:
        for index in self._expand(indices):
            self.mentioned.add(index)
            region = region_key(self._value(index))
            if region is not None:  # its data has been read, through this value or a view of it
                self.pending.pop(region, None)

    def write(self, indices: tuple[int, ...]) -> None:
        for index in self._expand(indices):
            self.mentioned.add(index)
            region = region_key(self._value(index))
            if region is not None:
                self.pending[region] = index

    def defined_here(self, index: int, *, views_count: bool = True) -> bool:
        """Whether a DelegateCall argument is a value the call defines (an output), by the module's rule."""
        value = self._value(index)
        if index in self.method_inputs or index in self.mentioned:
            return False
        if isinstance(value, m.Int):
            return True
        if not isinstance(value, m.Tensor) or value.is_constant or value.has_initial_data:
            return False
        region = region_key(value)
        if views_count and region is not None and (region in self.state or region in self.pending):
            return False  # a static view of data that is still to be read
        return True

    def step(self, instruction: m.Instruction, written: Optional[tuple[int, ...]] = None) -> None:
        name = ""
        if isinstance(instruction, m.KernelCall) and 0 <= instruction.op_index < len(self.ops):
            name = self.ops[instruction.op_index]
        read, wrote = instruction_effects(instruction, name, written, lambda i: list_items(self._value(i)))
        self.read(read)  # kernel_effects.py's rule, this call's written positions ``written``
        self.write(wrote)


def _split(flow: _PendingFlow, args: tuple[int, ...]) -> tuple[int, int]:
    """The number of inputs (everything before the longest run of defined-here arguments at the end), and of
    trailing arguments that are outputs for sure (the last one, when no earlier instruction mentions it)."""
    n_inputs = len(args)
    while n_inputs > 0 and flow.defined_here(args[n_inputs - 1]):
        n_inputs -= 1
    sure = 1 if args and flow.defined_here(args[-1], views_count=False) else 0
    if n_inputs == len(args) and sure:
        n_inputs -= 1  # a delegate returns at least one value
    return n_inputs, sure


def delegate_call_sites(plan: m.ExecutionPlan, *, per_call: bool = False,
                        declared: Optional[Declared] = None) -> list[DelegateCallSite]:
    """Every DelegateCall of ``plan`` in program order, with its argument positions split as its blob binds them
    (``declared``, when the declaration is trusted and fits the call) or else by the module's rule.

    One delegate (one blob) has one signature: when it is called more than once with the same number of
    arguments, every call gets every position any of them was found to write, so an argument in an output
    position is an output at every call (a second call with its output slot on a value mentioned before).
    ``per_call``: each call split by its own arguments alone.
    """
    flow = _PendingFlow(plan)
    sites = []
    for chain_index, chain in enumerate(plan.chains or ()):
        for pc, instruction in enumerate(chain.instructions or ()):
            written = None
            if isinstance(instruction, m.DelegateCall):
                args = tuple(instruction.args or ())
                declaration = declared.get(instruction.delegate_index) if declared else None
                if declaration is not None and not declaration.disagreement(len(args)):
                    site = DelegateCallSite(chain_index, pc, instruction.delegate_index, args,
                                            tuple(sorted(declaration.read)), tuple(sorted(declaration.written)),
                                            tuple(sorted(declaration.written)), declared=True)
                else:
                    site = _by_rule(chain_index, pc, instruction.delegate_index, args, *_split(flow, args))
                sites.append(site)
                written = site.written
            flow.step(instruction, written)
    return sites if per_call else one_signature(sites)


def one_signature(sites: list[DelegateCallSite]) -> list[DelegateCallSite]:
    """The calls of one delegate with one number of arguments, each with every position any of them writes (its
    outputs are outputs at every call) and every position any of them writes for sure."""
    signature: dict[tuple[int, int], tuple[set[int], set[int]]] = {}  # (delegate, arguments) -> (written, sure)
    for site in sites:
        written, sure = signature.setdefault((site.delegate_index, len(site.args)), (set(), set()))
        written.update(site.written)
        sure.update(site.sure)
    result = []
    for site in sites:
        written, sure = signature[(site.delegate_index, len(site.args))]
        read = tuple(p for p in range(len(site.args)) if p not in written)
        result.append(DelegateCallSite(site.chain, site.instruction, site.delegate_index, site.args, read,
                                       tuple(sorted(written)), tuple(sorted(sure)), site.declared))
    return result
