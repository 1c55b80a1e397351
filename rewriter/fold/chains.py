"""The chain finder: the fold trees of one method, its candidate chains, and what a rewrite removes.

**A foldable chain** starts at a constant and goes through kernels of
``FOLD_KERNELS`` (pure data movement or casts, one tensor input each), each
reading the previous value as its ``self``, with literal arguments (values no
instruction writes), static shapes, and an output that nothing else writes.  It
ends in a value that delegates on one device D read, directly (legacy style) or
through ``_h2d_copy.out`` kernels whose copies only such delegates read (copy
style).  Values of a chain that something else also reads (a host kernel, a
method output, a static view of their memory) stay computed on the host for that
reader; the device gets its own folded value.  With ``--duplicate-shared`` a chain
may have no kernel at all: a constant read by the host and by device delegates,
whose device readers get their own device-resident copy.

All chains of one constant form a tree (``FoldNode``: every kernel has one tensor
input and every value one writer); ``MethodFolds`` holds the trees of a method and
every candidate chain (``FoldChain``).  Which kernels a rewrite removes depends
on which chains it folds (``--device``, ``--min-bytes``): ``removed_steps``.

The finder asks the method's context (``method_context.MethodContext``) what the plain verdict asks:
each value's readers, who writes it (``Writes``, over ``program/effects.py``), the static views of its memory
(``program/memory.py``) and whether an ``_h2d_copy`` may go (``follow_copy``); its work is charged to the
method's budget.  Nothing here imports torch.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import field
from typing import Callable, Mapping, Optional, Protocol, Sequence

from pte_devconst.util.units import listing
from pte_devconst.program.kernel_effects import is_h2d_copy
from pte_devconst.schema import model as m
from pte_devconst.schema.model import CPU, Device
from pte_devconst.util.record import record

from pte_devconst.program.readers import Reader, ReaderKind

from pte_devconst.program.method_context import (DeviceCopy, MethodContext, Reasons, RewiredDelegateArg,
                                                 external_problem, follow_copy, host_reason, instruction_at,
                                                 kernel_args, tensor_at)
from .kernels import FLOATING, FOLD_KERNELS, INTEGRAL, apply_step
from .recipes import FoldRecipe, FoldStep, growth_problem, layout_of, literal_argument, recipe_of
from .shapes import ShapeOps, Strided, Unfoldable, source_view

# Kernels per chain: exported programs use a few (a transpose, a view, a cast); a hostile one could chain
# thousands, each with a device reader, and every chain's recipe repeats its prefix.
MAX_CHAIN = 64


class PlainVerdict(Protocol):
    """What fold reads of a constant's plain verdict (``analysis.ConstantVerdict``, which builds on fold)."""

    @property
    def value(self) -> int: ...

    @property
    def readers(self) -> tuple[Reader, ...]: ...

    @property
    def eligible(self) -> bool: ...

    @property
    def unknown(self) -> bool: ...

    @property
    def verdict(self) -> str: ...


@record
class FoldNode:
    """A value of a fold tree: the constant at its root, or the output of a table kernel reading its parent."""

    value: int
    step: Optional[FoldStep]  # the kernel computing it (None at the root)
    parent: int  # -1 at the root
    children: tuple[int, ...]
    host: tuple[str, ...]  # its readers that stay on the host, e.g. "read by host kernel aten::embedding.out at #12"
    device: Optional[Device]  # the one device its device readers are on
    copies: tuple[DeviceCopy, ...]  # its _h2d_copy kernels whose copies only delegates on `device` read
    delegate_args: tuple[RewiredDelegateArg, ...]  # every delegate argument that reads it or its copies
    device_reads: int  # per call: its copies, or device delegate reads (legacy style)
    delegates: tuple[int, ...] = ()  # the delegates reading it (by index)


@record
class FoldChain:
    """A candidate: a device-read value the host computes from one constant with table kernels only."""

    method: str
    plan_index: int
    source: int  # the constant's value index
    source_tensor: m.Tensor
    steps: tuple[FoldStep, ...]  # in order from the constant; empty: a device copy of a constant also read on the host
    result: int  # the value the last step writes (the constant itself without steps)
    result_tensor: m.Tensor
    device: Device
    copies: tuple[DeviceCopy, ...]
    delegate_args: tuple[RewiredDelegateArg, ...]
    copies_per_call: int
    delegates: tuple[int, ...]
    stays: tuple[str, ...] = ()  # what keeps the constant (or a step) on the host: "aten::embedding.out at #12"
    problem: Optional[str] = None  # why it cannot fold now (its .ptd is missing, ...)

    @property
    def duplicate(self) -> bool:
        """No kernel: the device readers of a constant also read on the host get their own copy."""
        return not self.steps

    @property
    def nbytes(self) -> int:
        return self.result_tensor.nbytes

    @property
    def bytes_per_call(self) -> int:
        return self.nbytes * self.copies_per_call

    @property
    def kernels(self) -> str:
        """``permute_copy at #7, view_copy at #9``."""
        return ", ".join(step.describe() for step in self.steps)

    @property
    def readers(self) -> str:
        """``delegate 0 on cuda:0`` or ``delegates 0, 3 on cuda:0``."""
        names = ", ".join(map(str, self.delegates))
        return f"delegate{'s' if len(self.delegates) > 1 else ''} {names} on {self.device}"

    @property
    def recipe(self) -> FoldRecipe:
        return recipe_of(self.source_tensor, self.steps, self.result_tensor)

    @property
    def casts_float_to_int(self) -> bool:
        """Whether a step casts floating point to an integer type (its result depends on the data)."""
        current = self.source_tensor.scalar_type
        for step in self.steps:
            if current in FLOATING and step.tensor.scalar_type in INTEGRAL:
                return True
            current = step.tensor.scalar_type
        return False

    def describe(self) -> str:
        """``permute_copy at #4, then read by delegate 0 on cuda:0`` (and what the host keeps)."""
        text = f"{self.kernels}, then read by {self.readers}"
        return text + (f" (the host keeps what it still reads: {self.stays[0]})" if self.stays else "")

    def verdict(self) -> str:
        """``foldable: permute_copy at #4, then read by delegate 0 on cuda:0``."""
        if self.duplicate:
            return f"its device readers ({self.readers}) could get their own copy with --duplicate-shared"
        return f"foldable: {self.describe()}"


@record
class MethodFolds:
    """The fold trees of one method (every value, by index) and its candidate chains."""

    nodes: Mapping[int, FoldNode]
    chains: tuple[FoldChain, ...]
    by_source: Mapping[int, tuple[FoldChain, ...]] = field(default_factory=dict)  # the chains of each constant

    @classmethod
    def of(cls, nodes: Mapping[int, FoldNode], chains: tuple[FoldChain, ...]) -> "MethodFolds":
        by_source: dict[int, list[FoldChain]] = defaultdict(list)
        for chain in chains:
            by_source[chain.source].append(chain)
        return cls(nodes, chains, {source: tuple(found) for source, found in by_source.items()})

    def of_constant(self, value: int) -> tuple[FoldChain, ...]:
        return self.by_source.get(value, ())

    @property
    def foldable(self) -> tuple[FoldChain, ...]:
        """The chains ``--fold`` folds (with kernels, and nothing that stops them)."""
        return tuple(c for c in self.chains if c.steps and c.problem is None)

    def verdict(self, constant: PlainVerdict) -> Optional[str]:
        """The verdict ``inspect`` shows for a constant that does not move by itself but folds (or could be
        duplicated): ``foldable: permute_copy at #4, then read by delegate 0 on cuda:0``; None otherwise."""
        if constant.eligible or constant.unknown:
            return None
        chains = self.of_constant(constant.value)
        folding = [c for c in chains if c.steps and c.problem is None]
        if folding:
            return "foldable: " + listing((c.describe() for c in folding), 2, conjunction="; ") + (
                " chains" if len(folding) > 2 else "")
        shared = [c for c in chains if c.duplicate and c.problem is None]
        if shared:
            return f"{constant.verdict}; {shared[0].verdict()}"
        return None


class _Finder:
    """Builds the fold trees of one method from its readers (see the module docstring)."""

    def __init__(self, ctx: MethodContext, external_ok: Callable[[m.Tensor], Optional[str]]) -> None:
        self.ctx = ctx
        self.plan = ctx.plan
        self.values = ctx.plan.values or ()
        self.writes = ctx.writes()
        self.external_ok = external_ok
        self.nodes: dict[int, FoldNode] = {}

    # values and arguments

    def _edge(self, reader: Reader, value: int, tensor: m.Tensor) -> FoldStep:
        """The kernel ``reader`` as a step of a chain from ``value``; raises Unfoldable with the reason."""
        kernel = FOLD_KERNELS[reader.name]
        args = kernel_args(self.plan, reader.chain, reader.instruction)
        parts = kernel.split(args)
        if parts is None or value in (*parts.params, parts.out, parts.ret):
            raise Unfoldable(f"it has arguments {list(args)}, not (self, {', '.join(kernel.params + ('out',))}, "
                             "return)")
        out, ret = parts.out, parts.ret
        output = self.values[out] if 0 <= out < len(self.values) else None
        if ret != out or not isinstance(output, m.Tensor) or output.allocation_info is None \
                or output.has_initial_data:
            raise Unfoldable("its output is not a planned tensor it writes alone")
        static = m.TensorShapeDynamism.STATIC
        if output.shape_dynamism != static or tensor.shape_dynamism != static:
            raise Unfoldable("its shapes are dynamic")
        if not self.writes.only_by(out, reader.step):
            raise Unfoldable(f"its output (value {out}) is written elsewhere too")
        literal = kernel.arguments([literal_argument(self.values, self.writes, index) for index in parts.params])
        return FoldStep(reader.chain, reader.instruction, kernel.key, value, out, literal, output)

    def _check_shape(self, step: FoldStep, shape: Strided) -> Strided:
        kernel = FOLD_KERNELS[step.kernel]
        source = tensor_at(self.values, step.input)
        result = apply_step(kernel, ShapeOps, shape, dict(step.args), source, step.tensor)
        if tuple(result.sizes) != tuple(step.tensor.sizes or ()):
            raise Unfoldable(f"it computes shape {list(result.sizes)}, but its output is "
                             f"{list(step.tensor.sizes or ())}")
        return result

    # the tree

    def root(self, index: int, tensor: m.Tensor) -> None:
        """The tree of constant ``index``: each value's readers sorted, table kernels followed (no recursion)."""
        stack: list[tuple[int, m.Tensor, Optional[FoldStep], int, Strided, int]] = [
            (index, tensor, None, -1, source_view(tensor), 0)]
        while stack:
            value, value_tensor, step, parent, shape, depth = stack.pop()
            children = self._visit(value, value_tensor, step, parent, shape, depth)
            stack.extend((child.output, child.tensor, child, value, child_shape, depth + 1)
                         for child, child_shape in reversed(children))

    def _visit(self, index: int, tensor: m.Tensor, step: Optional[FoldStep], parent: int,
               shape: Strided, depth: int = 0) -> list[tuple[FoldStep, Strided]]:
        """Record the node of ``index``; returns the kernels that continue a chain from it."""
        ctx = self.ctx
        readers = ctx.readers.get(index, [])
        ctx.budget.spend(len(readers) + 1)
        host = Reasons()
        devices: set[Device] = set()
        copies: list[DeviceCopy] = []
        args: list[RewiredDelegateArg] = []
        delegates: list[int] = []
        children: list[tuple[FoldStep, Strided]] = []
        own = (step.chain, step.instruction) if step is not None else None
        for reader in readers:
            if reader.step == own:
                continue  # the kernel computing it names it as its out and return slots
            if table_kernel(reader):
                try:
                    if depth >= MAX_CHAIN:
                        raise Unfoldable(f"the chain would be longer than {MAX_CHAIN} kernels")
                    child = self._edge(reader, index, tensor)
                    children.append((child, self._check_shape(child, shape)))
                except Unfoldable as why:
                    host.add(f"read by host kernel {reader.name} (not foldable: {why})",
                             f"read by host kernel {reader.name} at #{reader.instruction} (not foldable: {why})")
            elif reader.on_device \
                    and (reader.chain, reader.instruction, reader.arg_pos) not in self.writes.delegate_outputs:
                devices.add(reader.delegate_device)
                args.append(RewiredDelegateArg(reader.chain, reader.instruction, reader.arg_pos, index))
                delegates.append(reader.delegate_index)
            elif reader.copies_to_device:
                found = Reasons()
                before = len(args)
                follow_copy(ctx, index, reader, found, devices, copies, args)
                if found:
                    for short, detail in zip(*found.result()):
                        host.add(short, detail)
                else:
                    delegates += [self._delegate(a) for a in args[before:]]
            elif ctx.host_placement and reader.kind in (ReaderKind.KERNEL_CALL, ReaderKind.DELEGATE_CALL):
                devices.add(CPU)
                delegates.append(reader.delegate_index)
            else:
                short, detail = host_reason(reader)
                host.add(short, detail.replace("at instruction ", "at #"))
        for alias in self._aliases(index):
            host.add("read through a static view of its memory", f"read through value {alias}, a view of its memory")
        if len(devices) > 1:
            text = f"read by delegates on different devices ({', '.join(str(d) for d in sorted(devices))})"
            host.add(text, text)
        device = next(iter(devices)) if len(devices) == 1 else None
        if device is not None and device.is_cpu and not ctx.host_placement:
            device = None
        if device is None:
            copies, args, delegates = [], [], []
        if device is None or device.is_cpu:
            reads = 0
        else:
            reads = ctx.per_call_copies(index)  # program/transfers.py's count: its copies, or delegate host reads
        self.nodes[index] = FoldNode(index, step, parent, tuple(c.output for c, _ in children), host.result()[0],
                                     device, tuple(copies), tuple(args), reads,
                                     tuple(dict.fromkeys(d for d in delegates if d >= 0)))
        return children

    def _delegate(self, arg: RewiredDelegateArg) -> int:
        ins = instruction_at(self.plan, arg.chain, arg.instruction)
        return ins.delegate_index if isinstance(ins, m.DelegateCall) else -1

    def _aliases(self, index: int) -> list[int]:
        """Static views through which something reads this value (``view_reads``), computed once per method."""
        return list(dict.fromkeys(view for view, _ in self.ctx.views_of(index)))

    # chains

    def chains(self, roots: Sequence[int]) -> tuple[FoldChain, ...]:
        found = []
        for root in roots:
            tensor = tensor_at(self.values, root)
            problem = self.external_ok(tensor) if tensor.is_external else None
            stack = [root]
            while stack:
                node = self.nodes[stack.pop()]
                stack.extend(reversed(node.children))
                if node.device is None:
                    continue
                steps = self._path(node)
                copy_problem = self._copy_layout(node)
                result = self._result(node)
                found.append(FoldChain(
                    self.ctx.name, self.ctx.plan_index, root, tensor, steps, node.value, result,
                    node.device, node.copies, node.delegate_args, node.device_reads, node.delegates,
                    self._stays(root, steps), problem or copy_problem or growth_problem(tensor, result)))
        return tuple(found)

    def _path(self, node: FoldNode) -> tuple[FoldStep, ...]:
        steps = []
        while node.step is not None:
            steps.append(node.step)
            node = self.nodes[node.parent]
        return tuple(reversed(steps))

    def _result(self, node: FoldNode) -> m.Tensor:
        return node.step.tensor if node.step is not None else tensor_at(self.values, node.value)

    def _copy_layout(self, node: FoldNode) -> Optional[str]:
        """A device copy must have the value's type, sizes and dim order to hold its folded bytes."""
        want = layout_of(self._result(node))
        for copy in node.copies:
            dst = self.values[copy.dst]
            if not isinstance(dst, m.Tensor) or layout_of(dst) != want \
                    or dst.shape_dynamism != m.TensorShapeDynamism.STATIC:
                return f"its device copy (value {copy.dst}) has another type, shape or dim order"
            if not self.writes.only_by(copy.dst, (copy.chain, copy.instruction)):
                return f"its device copy (value {copy.dst}) is written elsewhere too"
        return None

    def _stays(self, root: int, steps: Sequence[FoldStep]) -> tuple[str, ...]:
        """What the host still reads on the way: the constant's and each step's host readers."""
        stays = list(self.nodes[root].host)
        for step in steps[:-1]:
            stays += self.nodes[step.output].host
        return tuple(dict.fromkeys(stays))


def table_kernel(reader: Reader) -> bool:
    """The reader is the input of a kernel in the fold table: a chain can continue (or start) there."""
    return reader.kind is ReaderKind.KERNEL_CALL and reader.name in FOLD_KERNELS and reader.arg_pos == 0


def method_folds(ctx: MethodContext, constants: Sequence[PlainVerdict]) -> MethodFolds:
    """The fold trees and candidate chains of one method, given its constants' plain verdicts.

    Roots are the constants that do not move by themselves; with host placement (a library option for
    testing the encoding on the CPU runtime, which makes every host reader a "device" reader) also those
    that a table kernel reads, so that their chains fold rather than the constant moving.
    """
    def device_bound(reader: Reader) -> bool:  # a chain could start here, or its device readers be duplicated
        return (table_kernel(reader) or reader.on_device
                or reader.kind == ReaderKind.KERNEL_CALL and is_h2d_copy(reader.name))

    roots = [c.value for c in constants if (not c.eligible or ctx.host_placement and any(map(table_kernel, c.readers)))
             and any(map(device_bound, c.readers))]
    if not roots:  # nothing to walk: no writer map, no view reads
        return MethodFolds({}, ())
    finder = _Finder(ctx, lambda tensor: external_problem(tensor, ctx.external))
    for root in roots:
        finder.root(root, tensor_at(finder.values, root))
    return MethodFolds.of(finder.nodes, finder.chains(roots))


def removed_steps(folds: MethodFolds, chosen: set[int]) -> tuple[set[tuple[int, int]], dict[int, bool]]:
    """The kernels that go when the chains ending at the values in ``chosen`` fold, and which values the
    host still needs afterwards (``{value: needed}``, for every value of every tree).

    A value is still needed when a host reader, a device reader left unfolded, or a kernel that stays
    reads it; its own folded device readers do not count (they get the folded value), nor, at a root,
    its direct device readers (the plan moves or duplicates the constant for them).  A kernel goes when
    its output is not needed.  Kernels whose subtree holds no chosen chain are not touched.
    """
    removed: set[tuple[int, int]] = set()
    needed: dict[int, bool] = {}
    below: dict[int, bool] = {}
    for value in _post_order(folds):  # children before parents: no recursion, however long a chain
        node = folds.nodes[value]
        below[value] = value in chosen or any(below[c] for c in node.children)
        if not below[value]:
            needed[value] = True  # untouched: everything that reads it stays
            continue
        unfolded_device = node.device is not None and value not in chosen and node.parent != -1
        needed[value] = bool(node.host) or unfolded_device or any(needed[c] for c in node.children)
        if not needed[value] and node.step is not None:
            removed.add((node.step.chain, node.step.instruction))
    return removed, needed


def _post_order(folds: MethodFolds) -> list[int]:
    order: list[int] = []
    for root, node in folds.nodes.items():
        if node.parent != -1:
            continue
        stack = [(root, False)]
        while stack:
            value, expanded = stack.pop()
            if expanded:
                order.append(value)
                continue
            stack.append((value, True))
            stack.extend((child, False) for child in folds.nodes[value].children)
    return order
