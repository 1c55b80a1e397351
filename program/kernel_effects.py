"""What a KernelCall reads and writes, by its operator's name: the one table every consumer asks.

A KernelCall's arguments are value indices: its schema's arguments, then one *return slot* per result.  What
the runtime writes depends on how the kernel treats its return slots, and ExecuTorch's kernels follow one of
two conventions (``ReturnSlots``):

* **the return slots are the result** (``ReturnSlots.WRITTEN``).  A codegen'd out variant's emitter passes its
  out arguments again as its return slots, so the kernel writes its outs, which are its return slots: when the
  last ``r`` arguments repeat the ``r`` before them, those are the outs.  Several outs may come back as one
  TensorList value whose items are the outs before it (``native_layer_norm.out``), or a list of outs passed
  twice as two list values with the same items (``split_with_sizes_copy.out``).  Otherwise (a prim op,
  ``executorch_prim::*``, ``aten::sym_size``) the last argument is the result and is written.
  ``aten::copy_`` writes ``self`` (argument 0) and its return slot; ``executorch_prim::et_copy_index.tensor``
  writes into its first argument (a stack built in a loop).
* **the result is a view** (``kernel_alias``): ``executorch_prim::et_view`` writes no byte; it points its out
  tensor at ``self``'s data (the runtime's ``set_tensor_data``), so from then on, across calls too, the two
  values name one storage, as ExecuTorch's planner plans them (a view's spec shares its base's storage and
  lifetime).  The data flow still counts the out as the kernel's result (``kernel_writes``).
* **the return slot is never written** (``ReturnSlots.NEVER_WRITTEN``): ``et_copy::_h2d_copy.out`` and
  ``_d2h_copy.out`` copy ``self`` (argument 0) into ``out`` (argument 1), and their codegen'd wrapper never
  writes the return slot (executorch/codegen/gen.py), whatever value it names.  ``copy_slots`` names those
  arguments by role.

Four questions are asked here, and nowhere else:

* ``kernel_writes``: the arguments the runtime writes (the others are read: ``kernel_reads``);
* ``kernel_results``: the values the instruction *names* as its result: what it writes, and a device copy's
  return slots too.  A consumer that must not let anything read a removed copy's result (the self-check), or
  that follows what a value was computed from (constant-derived copies), asks this one;
* ``copy_slots``: a device copy's source, destination and return slots, and its direction;
* ``kernel_alias``: the (source, view) a view kernel binds to one storage.

Everything here is linear in the arguments (and a tensor list's items).
"""

from __future__ import annotations

from typing import Callable, Collection, Mapping, Optional, Sequence

from pte_devconst.schema import model as m
from pte_devconst.util.named_enum import NamedEnum
from pte_devconst.util.record import record

from .executorch import COPY_KERNELS, D2H_COPY, ET_COPY_INDEX, ET_VIEW, H2D_COPY

INPLACE_COPY = ("aten::copy_", "aten::copy_.default")
# A device copy's codegen'd kernel takes exactly its schema arguments plus one return slot (executorch/codegen/gen.py:
# "Expected %zu args"): self, out, return.  The runtime refuses any other count.
DEVICE_COPY_ARGS = 3

Items = Callable[[int], tuple[int, ...]]  # a tensor list's items by value index


class ReturnSlots(NamedEnum):
    """How a kernel treats its return slots (module docstring)."""

    WRITTEN = "written"  # the return slots are the result: out variants, prim ops, aten::copy_
    NEVER_WRITTEN = "never written"  # the et_copy kernels: the wrapper leaves the return slot alone


@record
class KernelRule:
    """A kernel the general rule does not describe: the argument positions it writes, and its return slots."""

    writes: tuple[int, ...]  # positions written (those past the arguments are ignored)
    return_slots: ReturnSlots
    returns_from: Optional[int] = None  # the first return slot, for a kernel whose slots are written
    source: Optional[int] = None  # a device copy's source position
    to_device: bool = False  # a device copy from the host to a device


# The named exceptions; every other kernel follows the out-variant / prim-op rule of the module docstring.
KERNEL_RULES: Mapping[str, KernelRule] = {
    H2D_COPY: KernelRule((1,), ReturnSlots.NEVER_WRITTEN, source=0, to_device=True),
    D2H_COPY: KernelRule((1,), ReturnSlots.NEVER_WRITTEN, source=0),
    **{name: KernelRule((0,), ReturnSlots.WRITTEN, returns_from=3) for name in INPLACE_COPY},
    ET_COPY_INDEX: KernelRule((0,), ReturnSlots.WRITTEN),
}


@record
class CopySlots:
    """A device copy's arguments by role: ``source`` is copied into ``out``; ``returns`` are its return slots,
    which the kernel never writes (``ReturnSlots.NEVER_WRITTEN``)."""

    source: int
    out: int
    returns: tuple[int, ...]
    to_device: bool  # host to device (``_h2d_copy``); else device to host (``_d2h_copy``)


def is_device_copy(name: str) -> bool:
    """An ``et_copy`` kernel: a copy between host memory and a device (either way)."""
    return name in COPY_KERNELS


def is_h2d_copy(name: str) -> bool:
    """``et_copy::_h2d_copy.out``: a copy from host memory to a device."""
    rule = KERNEL_RULES.get(name)
    return rule is not None and rule.to_device


def copies_to_device(name: str, position: int) -> bool:
    """Whether argument ``position`` of kernel ``name`` is what an ``_h2d_copy`` copies to a device (its self)."""
    rule = KERNEL_RULES.get(name)
    return rule is not None and rule.to_device and position == rule.source


def updates_in_place(name: str) -> bool:
    """An in-place kernel (``aten::index_put_``: its base name ends in ``_``): it writes its first argument and
    reads what it updates there too (adds to it, rather than replacing it).  ``aten::copy_`` overwrites it whole."""
    base = name.split(".")[0]
    return base.endswith("_") and base != "aten::copy_"


def updated_in_place(name: str, args: Sequence[int]) -> Optional[int]:
    """The argument an in-place kernel updates (its first; ``updates_in_place``), None for any other kernel."""
    return args[0] if args and updates_in_place(name) else None


def copy_slots(name: str, args: Sequence[int]) -> Optional[CopySlots]:
    """A device copy's arguments by role (None: not a device copy, or fewer than its source and out)."""
    rule = KERNEL_RULES.get(name)
    if rule is None or rule.source is None or len(args) < 2:
        return None
    out = rule.writes[0]
    return CopySlots(args[rule.source], args[out], tuple(args[out + 1:]), rule.to_device)


def kernel_writes(name: str, args: Sequence[int], items: Optional[Items] = None) -> tuple[int, ...]:
    """The arguments a KernelCall writes, by the rule of the module docstring (tensor lists unexpanded).

    ``items(value)`` gives a tensor list's items, to find outs returned as a list.
    """
    if not args:
        return ()
    rule = KERNEL_RULES.get(name)
    if rule is not None:
        written = tuple(args[p] for p in rule.writes if p < len(args))
        if rule.return_slots is ReturnSlots.WRITTEN and rule.returns_from is not None:
            written += tuple(args[rule.returns_from:])
        return written
    n = len(args)
    for r in range(n // 2, 0, -1):
        if tuple(args[n - r:]) == tuple(args[n - 2 * r:n - r]):
            return tuple(dict.fromkeys(args[n - 2 * r:]))
    returned = items(args[-1]) if items is not None else ()
    if returned:
        k = len(returned)
        if n - 1 >= k and tuple(args[n - 1 - k:n - 1]) == returned:
            return (*args[n - 1 - k:n - 1], args[-1])
        if n >= 2 and items is not None and items(args[-2]) == returned:
            return (args[-2], args[-1])
    return (args[-1],)


def kernel_alias(name: str, args: Sequence[int]) -> Optional[tuple[int, int]]:
    """(source, view) when kernel ``name`` makes its result a view of its first argument's bytes (module
    docstring: ``et_view``), else None."""
    if name in ET_VIEW and len(args) >= 2:
        return args[0], args[-1]
    return None


def kernel_reads(name: str, args: Sequence[int], items: Optional[Items] = None,
                 written: Optional[Sequence[int]] = None) -> tuple[int, ...]:
    """The arguments a KernelCall reads: every one it does not write (``written``: ``kernel_writes``'s answer, when
    the caller has it)."""
    written = kernel_writes(name, args, items) if written is None else written
    return tuple(a for a in args if a not in written)


def kernel_results(name: str, args: Sequence[int], items: Optional[Items] = None) -> tuple[int, ...]:
    """The values a KernelCall names as its result: what it writes and, for a device copy, its return slots (which
    the runtime leaves alone, but which name the copy's result to the program)."""
    slots = copy_slots(name, args)
    if slots is None:
        return kernel_writes(name, args, items)
    return tuple(dict.fromkeys(v for v in (slots.out, *slots.returns) if v != slots.source))


def instruction_effects(instruction: m.Instruction, name: str, written: Optional[Collection[int]],
                        items: Optional[Items] = None) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(reads, writes) of one instruction, tensor lists unexpanded: a KernelCall named ``name`` by the table above,
    a DelegateCall by its split (the arguments at the positions ``written`` are written, every other one read:
    ``dataflow.py``'s question; None: all read), a MoveCall reads ``move_from`` and writes ``move_to`` (the runtime
    copies the EValue), a JumpFalseCall and a FreeCall read their value."""
    if isinstance(instruction, m.KernelCall):
        args = tuple(instruction.args or ())
        written = kernel_writes(name, args, items)
        return kernel_reads(name, args, written=written), written
    if isinstance(instruction, m.DelegateCall):
        args = tuple(instruction.args or ())
        if not written:
            return args, ()
        out = written if isinstance(written, (set, frozenset)) else frozenset(written)
        return (tuple(a for p, a in enumerate(args) if p not in out),
                tuple(a for p, a in enumerate(args) if p in out))
    if isinstance(instruction, m.MoveCall):
        return (instruction.move_from,), (instruction.move_to,)
    if isinstance(instruction, m.JumpFalseCall):
        return (instruction.cond_value_index,), ()
    if isinstance(instruction, m.FreeCall):
        return (instruction.value_index,), ()
    return (), ()


def list_items(value: m.EValue) -> tuple[int, ...]:
    """The items of a tensor list (absent optionals left out); () for anything else."""
    if isinstance(value, (m.TensorList, m.OptionalTensorList)):
        return tuple(i for i in value.items or () if i >= 0)
    return ()
