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
(``delegate_blobs.declared_splits``) and declares as many inputs and outputs as the
call passes, the call is split as declared, and every output is one for sure: the
rule is for the calls of blobs nobody reads.

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



# delegate index -> (inputs, outputs) its blob declares (``delegate_blobs.declared_splits``, one method's)
Declared = Mapping[int, tuple[int, int]]


@record
class DelegateCallSite:
    """One DelegateCall of a method, with its arguments split into inputs and outputs."""

    chain: int
    instruction: int
    delegate_index: int
    args: tuple[int, ...]
    n_inputs: int
    sure_outputs: int = 0  # trailing arguments that are outputs whatever a blob says (the last, when it is new)

    @property
    def inputs(self) -> tuple[int, ...]:
        return self.args[: self.n_inputs]

    @property
    def outputs(self) -> tuple[int, ...]:
        return self.args[self.n_inputs:]


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

    def step(self, instruction: m.Instruction, split: Optional[int] = None) -> None:
        name = ""
        if isinstance(instruction, m.KernelCall) and 0 <= instruction.op_index < len(self.ops):
            name = self.ops[instruction.op_index]
        read, written = instruction_effects(instruction, name, split, lambda i: list_items(self._value(i)))
        self.read(read)  # kernel_effects.py's rule, this call split by ``split``
        self.write(written)


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
    """Every DelegateCall of ``plan`` in program order, with its inputs/outputs split as its blob declares them
    (``declared``, when it fits the call) or else by the module's rule.

    One delegate (one blob) has one signature: when it is called more than once with the same number of
    arguments, every call gets the fewest inputs any of them was found to have, so an argument in an output
    position is an output at every call (a second call with its output slot on a value mentioned before).
    ``per_call``: each call split by its own arguments alone.
    """
    flow = _PendingFlow(plan)
    sites = []
    for chain_index, chain in enumerate(plan.chains or ()):
        for pc, instruction in enumerate(chain.instructions or ()):
            split = None
            if isinstance(instruction, m.DelegateCall):
                args = tuple(instruction.args or ())
                io = declared.get(instruction.delegate_index) if declared else None
                split, sure = io if io is not None and sum(io) == len(args) else _split(flow, args)
                sites.append(DelegateCallSite(chain_index, pc, instruction.delegate_index, args, split, sure))
            flow.step(instruction, split)
    return sites if per_call else one_signature(sites)


def one_signature(sites: list[DelegateCallSite]) -> list[DelegateCallSite]:
    """The calls of one delegate with one number of arguments, each split as the one with the fewest inputs (its
    outputs are outputs at every call) and the most sure outputs."""
    signature: dict[tuple[int, int], tuple[int, int]] = {}  # (delegate, arguments) -> (fewest inputs, most sure)
    for site in sites:
        key = (site.delegate_index, len(site.args))
        inputs, sure = signature.get(key, (site.n_inputs, site.sure_outputs))
        signature[key] = (min(inputs, site.n_inputs), max(sure, site.sure_outputs))
    return [DelegateCallSite(site.chain, site.instruction, site.delegate_index, site.args,
                             *signature[(site.delegate_index, len(site.args))]) for site in sites]
