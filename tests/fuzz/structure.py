"""Structure-aware mutations: plausible programs whose damage gets past the reader.

The byte and field mutations of ``mutate.py`` mostly end in the reader.  These
change a decoded program the way a buggy exporter, another tool or an attacker
could while keeping it well-formed, so the damage reaches analysis, the plan,
apply, the self-check and the runner: values that alias one planned region or
one constant entry, segments shared between tables, duplicate method names and
duplicate named-data or ``.ptd`` keys, ``_h2d_copy.out`` kernels with odd
return slots or arguments or a second writer of their output, huge counts,
lists sharing items and vectors, jumps into and over copies, and delegates on
devices that do not parse.

``make_structure_case(seed, index, suite)`` is deterministic in its arguments,
like ``mutate.make_case``.  Each family returns a note, or None when the program
has nothing it applies to (then another family is drawn).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Any, Callable, Optional

from pte_devconst.schema import model as m
from pte_devconst.schema.decode import decode_flat_tensor, decode_program
from pte_devconst.program.executorch import H2D_COPY
from pte_devconst.schema.flatbuf import I32, I64
from pte_devconst.schema.limits import MAX_TABLES, count_tables
from pte_devconst.schema.ptd_model import FlatTensor

from . import plan_edit as e
from .mutate import Case, _header_info, assemble_ptd, assemble_pte, structured_or_truncated
from .seeds import Seed, program_seeds, real_model_seeds


@dataclass
class Work:
    """The program (and its .ptd) being mutated, plus the choices every family needs."""

    rng: random.Random
    program: m.Program
    ptd: Optional[FlatTensor]
    shared_vectors: bool = False  # encode with identical vectors and tables written once
    shared_tables: bool = True  # with shared_vectors: tables too (False: distinct tables naming one vector)
    aliased: Optional[tuple[int, int]] = None  # (plan, copies): its last value's table named ``copies`` more times
    small: bool = False  # the default test suite's smoke sample: the issue-19 families draw only their small sizes

    def plan_index(self, want: Callable[[m.ExecutionPlan], list]) -> Optional[tuple[int, list]]:
        """A random plan for which ``want`` finds candidates, with them (None when no plan has any)."""
        found = [(p, items) for p, plan in enumerate(self.program.execution_plan or ()) if (items := want(plan))]
        return self.rng.choice(found) if found else None

    def pick(self, want: Callable[[m.ExecutionPlan], list]) -> Optional[tuple[int, m.ExecutionPlan, Any]]:
        """A random plan in which ``want`` finds candidates (sites, values), and one of them (None: none has any)."""
        found = self.plan_index(want)
        if found is None:
            return None
        p, sites = found
        return p, self.plan(p), self.rng.choice(sites)

    def plan(self, p: int) -> m.ExecutionPlan:
        return self.program.execution_plan[p]

    def put(self, p: int, plan: m.ExecutionPlan) -> None:
        self.program = e.with_plan(self.program, p, plan)


Family = Callable[[Work], Optional[str]]


# --- aliasing ------------------------------------------------------------------------------------


def alias_copy_destination(w: Work) -> Optional[str]:
    """A second value on an ``_h2d_copy`` destination's region (a static view), read by a device delegate."""
    picked = w.pick(e.copy_sites)
    if picked is None:
        return None
    p, plan, site = picked
    dst = e.instruction(plan, site).args[1]
    tensor = plan.values[dst]
    if not isinstance(tensor, m.Tensor) or tensor.allocation_info is None:
        return None
    plan, alias = e.add_values(plan, tensor)
    uses = e.arg_uses(plan, dst, m.DelegateCall)
    if not uses:
        return None
    (use_site, pos) = w.rng.choice(uses)
    how = w.rng.choice(("redirect", "second call", "last call"))
    if how == "redirect":
        plan = e.set_arg(plan, use_site, pos, alias)
    else:
        call = e.instruction(plan, use_site)
        args = list(call.args)
        args[pos] = alias
        at = (use_site[0], use_site[1] + 1) if how == "second call" else (use_site[0], len(
            plan.chains[use_site[0]].instructions))
        plan = e.insert_instructions(plan, at, [m.replace(call, args=tuple(args))])
    w.put(p, plan)
    return f"alias of copy destination {dst} as value {alias} ({how}) in plan {p}"


def alias_planned_region(w: Work) -> Optional[str]:
    """One planned tensor moved onto another's region (same buffer and offset), as lifetimes never allow."""
    found = w.plan_index(lambda plan: e.tensors(plan, planned=True))
    if found is None or len(found[1]) < 2:
        return None
    p, planned = found
    plan = w.plan(p)
    a, b = w.rng.sample(planned, 2)
    target = plan.values[a].allocation_info
    shift = w.rng.choice((0, 0, 0, 16, -16))
    alloc = m.AllocationDetails(target.memory_id, max(0, target.memory_offset + shift))
    w.put(p, e.set_value(plan, b, m.replace(plan.values[b], allocation_info=alloc)))
    return f"value {b} planned onto value {a}'s region (+{shift}) in plan {p}"


def alias_constant_entry(w: Work) -> Optional[str]:
    """Two constant values on one constant entry: retarget one, or add a twin that another reader uses."""
    picked = w.pick(lambda plan: e.tensors(plan, constant=True))
    if picked is None:
        return None
    p, plan, a = picked
    tensor = plan.values[a]
    if tensor.is_external:
        return None
    constants = e.tensors(plan, constant=True)
    others = [c for c in constants if c != a and not plan.values[c].is_external
              and plan.values[c].nbytes <= tensor.nbytes]
    if others and w.rng.random() < 0.5:
        b = w.rng.choice(others)
        w.put(p, e.set_value(plan, b, m.replace(plan.values[b], data_buffer_idx=tensor.data_buffer_idx)))
        return f"constant {b} reads constant {a}'s entry {tensor.data_buffer_idx} in plan {p}"
    plan, twin = e.add_values(plan, tensor)
    uses = e.arg_uses(plan, a)
    how = w.rng.choice(("reader", "output", "other method"))
    if how == "reader" and uses:
        site, pos = w.rng.choice(uses)
        plan = e.set_arg(plan, site, pos, twin)
    elif how == "other method" and len(w.program.execution_plan) > 1:
        q = w.rng.choice([i for i in range(len(w.program.execution_plan)) if i != p])
        other, twin = e.add_values(w.plan(q), tensor)
        w.put(q, m.replace(other, outputs=tuple(other.outputs or ()) + (twin,)))
        return f"constant {a}'s entry also read as value {twin} of plan {q}, an output"
    else:
        plan = m.replace(plan, outputs=tuple(plan.outputs or ()) + (twin,))
        how = "output"
    w.put(p, plan)
    return f"twin {twin} of constant {a} ({how}) in plan {p}"


# --- shared segments ------------------------------------------------------------------------------


def _segment_users(program: m.Program) -> dict[str, list[int]]:
    users: dict[str, list[int]] = {"constant": [], "mutable": [], "delegate": [], "named": []}
    cs = program.constant_segment
    if cs is not None and len(cs.offsets or ()) > 1:
        users["constant"].append(cs.segment_index)
    users["mutable"] += [s.segment_index for s in program.mutable_data_segments or ()]
    for plan in program.execution_plan or ():
        for d in plan.delegates or ():
            if d.processed is not None and d.processed.location == m.DataLocation.SEGMENT:
                users["delegate"].append(d.processed.index)
    users["named"] += [n.segment_index for n in program.named_data or ()]
    return users


def share_segment(w: Work) -> Optional[str]:
    """Point one table at a segment another table reads: constants, initial data, a delegate blob, named data."""
    program = w.program
    users = _segment_users(program)
    used = sorted({s for group in users.values() for s in group})
    if not used:
        return None
    target = w.rng.choice(used)
    choice = w.rng.randrange(6)
    if choice == 0 and program.constant_segment is not None and users["constant"]:
        w.program = m.replace(program, constant_segment=m.replace(program.constant_segment, segment_index=target))
        return f"the constant segment is segment {target}"
    if choice == 1:
        offsets = (0,) + tuple(w.rng.choice((0, 16, 32)) for _ in range(w.rng.randrange(3)))
        lists = program.mutable_data_segments or ()
        first = m.SubsegmentOffsets(target, (lists[0].offsets if lists and w.rng.random() < 0.5 else offsets))
        w.program = m.replace(program, mutable_data_segments=(first,) + tuple(lists[1:]))
        return f"the initial-data list reads segment {target}"
    if choice == 2:
        plans = [(p, d) for p, plan in enumerate(program.execution_plan or ())
                 for d, dl in enumerate(plan.delegates or ()) if dl.processed is not None]
        if not plans:
            return None
        p, d = w.rng.choice(plans)
        plan = w.plan(p)
        delegates = list(plan.delegates)
        delegates[d] = m.replace(delegates[d], processed=m.BackendDelegateDataReference(m.DataLocation.SEGMENT, target))
        w.put(p, m.replace(plan, delegates=tuple(delegates)))
        return f"delegate {d} of plan {p} reads its blob from segment {target}"
    if choice == 3:
        key = w.rng.choice(("shared", "weights", "") + tuple(n.key or "" for n in program.named_data or ()))
        named = tuple(program.named_data or ()) + (m.NamedData(key, target),)
        w.program = m.replace(program, named_data=named)
        return f"named data {key!r} on segment {target}"
    if choice == 4:
        # a second segment entry with the same bytes, and one table moved onto it
        segments = tuple(program.segments or ())
        copy = segments[target]
        w.program = m.replace(program, segments=segments + (copy,))
        cs = program.constant_segment
        if cs is not None and cs.segment_index == target:
            w.program = m.replace(w.program, constant_segment=m.replace(cs, segment_index=len(segments)))
        return f"segment {target} listed twice ({len(segments)} is a copy of its entry)"
    # two segments overlapping: one entry grown over the next one
    segments = list(program.segments or ())
    if len(segments) < 2:
        return None
    k = w.rng.randrange(len(segments) - 1)
    end = segments[k + 1].offset + segments[k + 1].size
    segments[k] = m.DataSegment(segments[k].offset, max(segments[k].size, end - segments[k].offset))
    w.program = m.replace(program, segments=tuple(segments))
    return f"segment {k} grown over segment {k + 1}"


# --- duplicate names and keys ---------------------------------------------------------------------


def duplicate_names(w: Work) -> Optional[str]:
    """Two methods with one name, repeated named-data keys, repeated .ptd keys, repeated tensor names."""
    program = w.program
    plans = list(program.execution_plan or ())
    choice = w.rng.randrange(5)
    if choice == 0:
        p = w.rng.randrange(len(plans))
        at = w.rng.choice((p, p + 1, len(plans)))
        plans.insert(at, plans[p])
        w.program = m.replace(program, execution_plan=tuple(plans))
        return f"plan {p} duplicated at {at}"
    if choice == 1 and len(plans) > 1:
        a, b = w.rng.sample(range(len(plans)), 2)
        plans[b] = m.replace(plans[b], name=plans[a].name)
        w.program = m.replace(program, execution_plan=tuple(plans))
        return f"plan {b} renamed to plan {a}'s name {plans[a].name!r}"
    if choice == 2 and program.named_data:
        named = list(program.named_data)
        k = w.rng.randrange(len(named))
        other = w.rng.randrange(len(program.segments or (None,)))
        entry = m.replace(named[k], segment_index=w.rng.choice((named[k].segment_index, other)))
        named.insert(w.rng.choice((k, k + 1, len(named))), entry)
        w.program = m.replace(program, named_data=tuple(named))
        return f"named-data key {named[k].key!r} repeated"
    if choice == 3 and w.ptd is not None and w.ptd.named_data:
        named = list(w.ptd.named_data)
        k = w.rng.randrange(len(named))
        other = named[w.rng.randrange(len(named))]
        entry = m.replace(other, key=named[k].key)
        named.insert(w.rng.choice((k, k + 1, len(named))), entry)
        w.ptd = m.replace(w.ptd, named_data=tuple(named))
        return f".ptd key {named[k].key!r} repeated (with {other.key!r}'s data)"
    found = w.plan_index(lambda plan: [i for i in e.tensors(plan, constant=True) if plan.values[i].fqn])
    if found is None:
        return None
    p, named_constants = found
    plan = w.plan(p)
    a = w.rng.choice(named_constants)
    others = [i for i in e.tensors(plan) if i != a]
    if not others:
        return None
    b = w.rng.choice(others)
    info = plan.values[b].extra_tensor_info or m.ExtraTensorInfo()
    w.put(p, e.set_value(plan, b, m.replace(plan.values[b], extra_tensor_info=m.replace(
        info, fully_qualified_name=plan.values[a].fqn))))
    return f"value {b} named like value {a} ({plan.values[a].fqn!r})"


# --- copies: return slots, arguments, other writers -----------------------------------------------


def copy_slots(w: Work) -> Optional[str]:
    """An ``_h2d_copy.out`` whose return slot is another value, with an argument more or less, or that copies
    into its own source."""
    picked = w.pick(e.copy_sites)
    if picked is None:
        return None
    p, plan, site = picked
    ins = e.instruction(plan, site)
    args = list(ins.args)
    n = len(plan.values)
    choice = w.rng.randrange(6)
    if choice == 0 and len(args) >= 3:
        read = [v for c, chain in enumerate(plan.chains) for ins2 in chain.instructions or ()
                if isinstance(ins2, (m.KernelCall, m.DelegateCall)) for v in ins2.args or ()]
        pool = read + list(plan.outputs or ()) + e.tensors(plan)
        args[2] = w.rng.choice(pool) if pool else args[0]
        what = f"return slot -> value {args[2]}"
    elif choice == 1 and len(args) >= 3:
        args[2] = args[0]
        what = "return slot -> its source"
    elif choice == 2:
        args.append(w.rng.choice((args[1], args[0], w.rng.randrange(n))))
        what = f"an extra argument {args[-1]}"
    elif choice == 3:
        args.pop()
        what = "an argument fewer"
    elif choice == 4:
        args[1] = args[0]
        what = "out -> its own source"
    else:
        dst = plan.values[args[1]]
        fresh = m.replace(dst, allocation_info=dst.allocation_info) if isinstance(dst, m.Tensor) else m.Null()
        plan, ret = e.add_values(plan, fresh)
        args[2:] = [ret]
        plan = m.replace(plan, outputs=tuple(plan.outputs or ()) + (ret,)) if w.rng.random() < 0.5 else plan
        what = f"return slot -> a new value {ret}"
    w.put(p, e.set_instruction(plan, site, m.replace(ins, args=tuple(args))))
    return f"copy at {site} in plan {p}: {what}"


def second_writer(w: Work) -> Optional[str]:
    """Another instruction writes a copy's destination: a second copy, a move, a free, a delegate output."""
    picked = w.pick(e.copy_sites)
    if picked is None:
        return None
    p, plan, site = picked
    ins = e.instruction(plan, site)
    src, dst = ins.args[0], ins.args[1]
    readers = [s for s, _ in e.arg_uses(plan, dst, m.DelegateCall)]
    after = (site[0], site[1] + 1)
    where = after if not readers or w.rng.random() < 0.3 else w.rng.choice(readers)
    choice = w.rng.randrange(5)
    if choice == 0:
        others = [c for c in e.tensors(plan, constant=True) if c != src]
        other = w.rng.choice(others) if others else src
        new: m.Instruction = m.replace(ins, args=(other, dst, dst))
        what = f"a copy of value {other}"
    elif choice == 1:
        new = m.MoveCall(w.rng.choice(e.tensors(plan)), dst)
        what = f"a move from value {new.move_from}"
    elif choice == 2:
        new = m.FreeCall(dst)
        what = "a free"
    elif choice == 3 and plan.delegates:
        d = w.rng.randrange(len(plan.delegates))
        new = m.DelegateCall(d, (src, dst))
        what = f"delegate {d} with it as an output"
    else:
        plan, kernel = e.operator_index(plan, "aten::mul.out")
        new = m.KernelCall(kernel, (src, src, dst, dst))
        what = "a host aten::mul.out into it"
    w.put(p, e.insert_instructions(plan, where, [new]))
    return f"copy at {site} in plan {p}: {what} writes value {dst} at {where}"


def out_return_slot(w: Work) -> Optional[str]:
    """A host out-variant kernel whose return slot is another value (the codegen'd wrapper never writes it)."""
    picked = w.pick(e.out_variant_sites)
    if picked is None:
        return None
    p, plan, site = picked
    ins = e.instruction(plan, site)
    args = list(ins.args)
    later = [v for k, i2 in enumerate(plan.chains[site[0]].instructions) if k > site[1]
             and isinstance(i2, (m.KernelCall, m.DelegateCall)) for v in i2.args or ()]
    pool = [v for v in later + list(plan.outputs or ()) if isinstance(plan.values[v], m.Tensor) and v != args[-2]]
    if not pool:
        return None
    args[-1] = w.rng.choice(pool)
    w.put(p, e.set_instruction(plan, site, m.replace(ins, args=tuple(args))))
    return f"{e.operator_name(plan, ins)} at {site} in plan {p}: return slot -> value {args[-1]}"


# --- control flow ----------------------------------------------------------------------------------


def jumps(w: Work) -> Optional[str]:
    """Jumps into removed copies, over copies, to the end; existing jumps retargeted."""
    picked = w.pick(lambda plan: e.copy_sites(plan) or e.sites(plan, m.JumpFalseCall))
    if picked is None:
        return None
    p, plan, (c, k) = picked
    length = len(plan.chains[c].instructions)
    existing = e.sites(plan, m.JumpFalseCall)
    copies = [s[1] for s in e.copy_sites(plan) if s[0] == c]
    if existing and w.rng.random() < 0.4:
        jc, jk = w.rng.choice(existing)
        if jc == c:
            dest = w.rng.choice(copies + [length, jk + 1, min(jk + 2, length)])
            ins = e.instruction(plan, (jc, jk))
            w.put(p, e.set_instruction(plan, (jc, jk), m.replace(ins, destination_instruction=dest)))
            return f"jump at {(jc, jk)} in plan {p} retargeted to {dest}"
    taken = w.rng.random() < 0.5
    plan, cond = e.add_values(plan, m.Bool(not taken))
    at = w.rng.choice(([k] if k in copies else []) + [max(0, k - 1), 0])
    dest_choices = [k, k + 1, length] + [x for x in copies if x > at]
    dest = w.rng.choice(dest_choices) + 1  # +1: the jump itself is inserted before them
    w.put(p, e.insert_instructions(plan, (c, at), [m.JumpFalseCall(cond, dest)]))
    return f"jump ({'taken' if taken else 'not taken'}) at {(c, at)} to {dest} in plan {p}"


def moves_and_frees(w: Work) -> Optional[str]:
    """A constant moved into another value or freed; a copy's destination moved elsewhere and read there."""
    picked = w.pick(lambda plan: e.tensors(plan, constant=True))
    if picked is None:
        return None
    p, plan, a = picked
    uses = e.arg_uses(plan, a)
    if not uses:
        return None
    (c, k), _ = w.rng.choice(uses)
    choice = w.rng.randrange(3)
    if choice == 0:
        plan, to = e.add_values(plan, plan.values[a])
        plan = e.insert_instructions(plan, (c, k + 1), [m.MoveCall(a, to)])
        plan = m.replace(plan, outputs=tuple(plan.outputs or ()) + (to,))
        return _put(w, p, plan, f"constant {a} moved to a new output {to} after {(c, k)}")
    if choice == 1:
        plan = e.insert_instructions(plan, (c, k + 1), [m.FreeCall(a)])
        return _put(w, p, plan, f"constant {a} freed after its use at {(c, k)}")
    plan = m.replace(plan, outputs=tuple(plan.outputs or ()) + (a,))
    return _put(w, p, plan, f"constant {a} is also a method output")


def _put(w: Work, p: int, plan: m.ExecutionPlan, note: str) -> str:
    w.put(p, plan)
    return note


# --- devices ---------------------------------------------------------------------------------------

ODD_DEVICES = (b"cuda:x", b"CUDA:1", b"cuda", b"cpu", b"cuda:0 ", b"mps:0", b"cuda:128", b"cuda:-1", b"",
               b"cuda:01", b"\xff", b"cuda:1", b"cuda:0\x00", b"Cuda:0")


def odd_devices(w: Work) -> Optional[str]:
    """Delegates on devices that do not parse (or another one), repeated specs, buffers on other devices."""
    found = w.plan_index(lambda plan: list(range(len(plan.delegates or ()))))
    choice = w.rng.randrange(4)
    if found is not None and choice < 3:
        p, indices = found
        plan = w.plan(p)
        d = w.rng.choice(indices)
        delegate = plan.delegates[d]
        specs = [s for s in delegate.compile_specs or ()]
        value = w.rng.choice(ODD_DEVICES)
        if choice == 0:
            specs = [m.replace(s, value=value) if s.key == "target_device" else s for s in specs] or [
                m.CompileSpec("target_device", value)]
        elif choice == 1:
            specs.insert(w.rng.choice((0, len(specs))), m.CompileSpec("target_device", value))
        else:
            specs = [s for s in specs if s.key != "target_device"]
            value = b"(removed)"
        delegates = list(plan.delegates)
        delegates[d] = m.replace(delegate, compile_specs=tuple(specs))
        w.put(p, m.replace(plan, delegates=tuple(delegates)))
        return f"delegate {d} of plan {p}: target_device {value!r} ({('set', 'added', 'removed')[choice]})"
    found = w.plan_index(lambda plan: list(plan.non_const_buffer_device or ()))
    if found is None:
        return None
    p, entries = found
    plan = w.plan(p)
    k = w.rng.randrange(len(entries))
    entry = entries[k]
    entries = list(entries)
    entries[k] = m.replace(entry, device_index=w.rng.choice((0, 1, 2, 127)))
    w.put(p, m.replace(plan, non_const_buffer_device=tuple(entries)))
    return f"buffer {entry.buffer_idx} of plan {p} moved to device index {entries[k].device_index}"


# --- lists -----------------------------------------------------------------------------------------


def list_sharing(w: Work) -> Optional[str]:
    """Lists that share items (a constant in a TensorList too, IntLists on one Int), or vectors shared in
    the file itself (identical vectors and tables written once), or one large vector that many tables name
    (``one_vector_many_tables``)."""
    roll = w.rng.random()
    if roll < 0.3:
        w.shared_vectors = True
        return "identical vectors and tables shared in the flatbuffer"
    if roll < 0.45:
        return one_vector_many_tables(w)
    found = w.plan_index(lambda plan: e.tensors(plan, constant=True) + [
        i for i, v in enumerate(plan.values or ()) if isinstance(v, (m.TensorList, m.IntList))])
    if found is None:
        return None
    p, candidates = found
    plan = w.plan(p)
    v = w.rng.choice(candidates)
    value = plan.values[v]
    copies = w.rng.choice((1, 2, 5))
    if isinstance(value, m.Tensor):
        plan, lst = e.add_values(plan, *(m.TensorList((v,) * w.rng.choice((1, 2))),) * copies)
        where = w.rng.choice(("output", "delegate", "none"))
        if where == "output":
            plan = m.replace(plan, outputs=tuple(plan.outputs or ()) + (lst,))
        elif where == "delegate":
            calls = e.sites(plan, m.DelegateCall)
            if calls:
                site = w.rng.choice(calls)
                ins = e.instruction(plan, site)
                plan = e.set_instruction(plan, site, m.replace(ins, args=(lst,) + tuple(ins.args or ())))
        return _put(w, p, plan, f"constant {v} in {copies} TensorList(s) ({where})")
    plan, twin = e.add_values(plan, *(value,) * copies)
    uses = e.arg_uses(plan, v)
    if uses:
        site, pos = w.rng.choice(uses)
        plan = e.set_arg(plan, site, pos, twin)
    return _put(w, p, plan, f"list {v} repeated {copies} times, one reader on the copy {twin}")


LOGICAL_ITEMS = 2_000_000


def one_vector_many_tables(w: Work) -> Optional[str]:
    """Issue 27: many tables naming one stored vector (written once), so a small file is a huge program as every
    step sees it: TensorList or IntList values, kernel calls' arguments, or tensors' names (a long string)."""
    p = w.rng.randrange(len(w.program.execution_plan))
    plan = w.plan(p)
    tables = w.rng.choice((2, 50, 3000))
    items = w.rng.choice((100, 10000, 200000)) if not w.small else w.rng.choice((100, 1000))
    # The model's own size, as every later family walks it (3,000 calls of 200,000 arguments: 600 million, past
    # the worker's 3 GiB when one listed the uses of a value): at most 2,000,000 items, which is still hundreds
    # of times what a few-KB file may hand on.
    items = min(items, LOGICAL_ITEMS // tables)
    kind = w.rng.choice(("TensorList", "IntList", "args", "names"))
    tensors = e.tensors(plan)
    if kind == "names":
        constants = e.tensors(plan, constant=True)
        if not constants:
            return None
        name = "w" * items
        values = list(plan.values)
        for index in constants[:tables]:
            info = values[index].extra_tensor_info or m.ExtraTensorInfo()
            values[index] = m.replace(values[index], extra_tensor_info=m.replace(info, fully_qualified_name=name))
        plan = m.replace(plan, values=tuple(values))
        what = f"{min(tables, len(constants))} constants named one {items:,}-character string"
    elif kind == "args":
        calls = e.sites(plan, m.KernelCall)
        if not calls or not tensors:
            return None
        site = w.rng.choice(calls)
        call = e.instruction(plan, site)
        args = tuple(tensors[k % len(tensors)] for k in range(items))
        plan = e.insert_instructions(plan, site, [m.replace(call, args=args) for _ in range(tables)])
        what = f"{tables} kernel calls with one {items:,}-argument vector"
    else:
        if kind == "IntList":
            plan, first = e.add_values(plan, m.Int(3))
            pool = [first]
        else:
            pool = tensors
        if not pool:
            return None
        value = (m.IntList if kind == "IntList" else m.TensorList)(tuple(pool[k % len(pool)] for k in range(items)))
        plan, _ = e.add_values(plan, *(value,) * tables)
        what = f"{tables} {kind} values naming one {items:,}-item vector"
    w.shared_vectors, w.shared_tables = True, w.rng.random() < 0.3
    once = "tables" if w.shared_tables else "the string" if kind == "names" else "the vector"
    return _put(w, p, plan, f"{what} ({once} written once) in plan {p}")


# --- huge counts -----------------------------------------------------------------------------------


def huge_counts(w: Work) -> Optional[str]:
    """Many values, instructions, list items, delegates, buffer-device entries, constant entries; or a program
    just under or over the verifier's 1,000,000 tables."""
    p = w.rng.randrange(len(w.program.execution_plan))
    plan = w.plan(p)
    n = w.rng.choice((1000, 20000, 100000))
    # A program at the table limit is 10 MB and takes a minute through every check: one draw in 29.
    choice = w.rng.choices(range(8), (4, 4, 4, 4, 4, 4, 4, 1))[0]
    if choice == 0:
        plan, _ = e.add_values(plan, *(w.rng.choice((m.Null(), m.Int(7), m.Bool(True))),) * n)
        return _put(w, p, plan, f"{n} more values in plan {p}")
    if choice == 1:
        calls = e.sites(plan, m.DelegateCall) + e.copy_sites(plan)
        if not calls:
            return None
        site = w.rng.choice(calls)
        count = n // 20
        plan = e.insert_instructions(plan, site, [e.instruction(plan, site)] * count)
        return _put(w, p, plan, f"instruction {site} repeated {count} times in plan {p}")
    if choice == 2:
        tensors = e.tensors(plan)
        if not tensors:
            return None
        t = w.rng.choice(tensors)
        plan, lst = e.add_values(plan, m.TensorList((t,) * n))
        calls = e.sites(plan, m.DelegateCall)
        if calls and w.rng.random() < 0.5:
            site = w.rng.choice(calls)
            ins = e.instruction(plan, site)
            plan = e.set_instruction(plan, site, m.replace(ins, args=(lst,) + tuple(ins.args or ())))
        else:
            plan = m.replace(plan, outputs=tuple(plan.outputs or ()) + (lst,))
        return _put(w, p, plan, f"a TensorList of {n} x value {t} in plan {p}")
    if choice == 3:
        calls = e.sites(plan, m.DelegateCall)
        if not calls:
            return None
        site = w.rng.choice(calls)
        ins = e.instruction(plan, site)
        count = n // 50
        first = len(plan.delegates)
        plan = m.replace(plan, delegates=tuple(plan.delegates) + (plan.delegates[ins.delegate_index],) * count)
        plan = e.insert_instructions(plan, site, [m.replace(ins, delegate_index=first + i) for i in range(count)])
        return _put(w, p, plan, f"{count} more delegates, each called once before {site}, in plan {p}")
    if choice == 4:
        sizes = plan.non_const_buffer_sizes or (0,)
        entries = tuple(plan.non_const_buffer_device or ())
        listed = entries or (m.NonConstBufferDevice(len(sizes) - 1, 0, 0),)
        extra = tuple(w.rng.choice(listed) for _ in range(n))
        plan = m.replace(plan, non_const_buffer_device=entries + extra)
        return _put(w, p, plan, f"{n} repeated non_const_buffer_device entries in plan {p}")
    if choice == 5:
        cs = w.program.constant_segment
        if cs is None:
            return None
        offsets = tuple(cs.offsets or (0,)) + (0,) * n
        w.program = m.replace(w.program, constant_segment=m.replace(cs, offsets=offsets))
        return f"{n} more constant entries"
    if choice == 6:
        sizes = tuple(plan.non_const_buffer_sizes or (0,))
        plan = m.replace(plan, non_const_buffer_sizes=sizes + (0,) * (n // 10))
        return _put(w, p, plan, f"{n // 10} more (empty) planned buffers in plan {p}")
    # near the verifier's table limit: Null values cost two tables each (the EValue and the Null)
    missing = MAX_TABLES - count_tables(w.program)
    over = w.rng.choice((-2, -1, 0, 1, 2))
    count = (missing + over) // 2
    if count <= 0:
        return None
    plan, _ = e.add_values(plan, *(m.Null(),) * count)
    return _put(w, p, plan, f"{count} Null values: {count_tables(e.with_plan(w.program, p, plan)):,} tables")


# --- inputs that cost far more than their size (issue 19) ------------------------------------------


def aliasing_value_table(w: Work) -> Optional[str]:
    """A values vector naming one tensor's table thousands to a million times (4 bytes a reference): below and
    above the reader's bound of twice the verifier's 1,000,000 tables."""
    picked = w.pick(lambda plan: e.tensors(plan))
    if picked is None:
        return None
    p, plan, t = picked
    # Accepted sizes stay small: the library check re-encodes every accepted program, and the writer writes each
    # reference as a table of its own (it does not share records); past the reader's bound it refuses.
    copies = w.rng.choice((1000,) if w.small else (1000, 3000, 1050000, 4000000))
    plan, last = e.add_values(plan, plan.values[t])
    w.put(p, plan)
    w.aliased = (p, copies)
    return f"value {t}'s table named {copies + 1} times at the end of plan {p}'s values (from {last})"


def expanding_fold(w: Work) -> Optional[str]:
    """An ``expand_copy`` whose first size becomes huge (up to 2^31 - 1 rows, the format's int32): its output and
    every copy of it grow, moved to the end of their planned buffers; a fold of it would expand a small constant
    to gigabytes."""
    def expands(plan: m.ExecutionPlan) -> list:
        return [s for s in e.sites(plan, m.KernelCall) if e.operator_name(plan, e.instruction(plan, s)) ==
                "aten::expand_copy.out" and len(e.instruction(plan, s).args or ()) == 5]
    picked = w.pick(expands)
    if picked is None:
        return None
    p, plan, site = picked
    ins = e.instruction(plan, site)
    values = list(plan.values)
    size_list, out = values[ins.args[1]], ins.args[3]
    if not isinstance(size_list, m.IntList) or not size_list.items or not isinstance(values[out], m.Tensor) \
            or not values[out].sizes or values[out].allocation_info is None:
        return None
    try:
        row = values[out].nbytes // max(1, values[out].sizes[0])
    except Exception:  # noqa: BLE001 - an unknown dtype: leave it
        return None
    # small: just past the fold bound (64 MiB) and no more, so that running both programs stays cheap
    rows = max(2, (96 << 20) // max(1, row)) if w.small else w.rng.choice((1 << 10, 1 << 20, 1 << 27, (1 << 31) - 1))
    values[size_list.items[0]] = m.Int(rows)
    sizes = (rows,) + tuple(values[out].sizes[1:])
    readers = [e.instruction(plan, s).args[1] for s, pos in e.arg_uses(plan, out, m.KernelCall)
               if pos == 0 and e.operator_name(plan, e.instruction(plan, s)) == H2D_COPY]
    buffers = list(plan.non_const_buffer_sizes or ())
    for index in [out, *readers]:
        tensor = values[index]
        if not isinstance(tensor, m.Tensor) or tensor.allocation_info is None \
                or tensor.allocation_info.memory_id >= len(buffers):
            continue
        grown = m.replace(tensor, sizes=sizes)
        info = grown.allocation_info
        try:
            nbytes = grown.nbytes
        except Exception:  # noqa: BLE001 - an unknown dtype: leave it
            return None
        values[index] = m.replace(grown, allocation_info=m.replace(info, memory_offset=buffers[info.memory_id]))
        buffers[info.memory_id] = min(buffers[info.memory_id] + nbytes, 1 << 62)
    w.put(p, m.replace(plan, values=tuple(values), non_const_buffer_sizes=tuple(buffers)))
    return f"expand_copy at {site} of plan {p} to {rows} rows"


def repetitive_operators(w: Work) -> Optional[str]:
    """A run of hundreds to thousands of calls of one kernel, some with another kernel between them (the diff
    of such a program and its rewrite aligns runs of one operator name)."""
    picked = w.pick(lambda plan: e.sites(plan, m.KernelCall))
    if picked is None:
        return None
    p, plan, site = picked
    run = w.rng.choice((300,) if w.small else (300, 3000, 10000))
    first = e.instruction(plan, site)
    others = [e.instruction(plan, s) for s in e.sites(plan, m.KernelCall)]
    every = w.rng.choice((0, 2, 3, 7))
    other = w.rng.choice(others)
    new = [other if every and k % every == 0 else first for k in range(run)]
    w.put(p, e.insert_instructions(plan, site, new))
    return f"{run} calls of instruction {site} before it in plan {p}" + (f", every {every}th another" if every else "")


def runtime_keys(w: Work) -> Optional[str]:
    """External tensor names and .ptd keys that only the runtime's lookup tells apart: a name with a NUL (the
    runtime looks up the C string before it), .ptd entries named with a NUL, repeated keys in front."""
    if w.ptd is None or not w.ptd.named_data:
        return None
    named = list(w.ptd.named_data)
    choice = w.rng.randrange(3)
    k = w.rng.randrange(len(named))
    if choice == 0:
        found = w.plan_index(lambda plan: [i for i in e.tensors(plan, constant=True) if plan.values[i].is_external])
        if found is None:
            return None
        p, external = found
        plan = w.plan(p)
        t = w.rng.choice(external)
        tensor = plan.values[t]
        name = (tensor.fqn or "") + "\0" + w.rng.choice(("x", "", tensor.fqn or "y"))
        w.put(p, e.set_value(plan, t, m.replace(tensor, extra_tensor_info=m.replace(
            tensor.extra_tensor_info, fully_qualified_name=name))))
        if w.rng.random() < 0.5:  # and an entry named exactly so, with other data, in front
            other = named[w.rng.randrange(len(named))]
            named.insert(0, m.replace(other, key=name))
            w.ptd = m.replace(w.ptd, named_data=tuple(named))
        return f"external value {t} of plan {p} named {name!r}"
    if choice == 1:
        other = named[w.rng.randrange(len(named))]
        named.insert(w.rng.choice((0, k)), m.replace(other, key=named[k].key + "\0" + other.key))
        w.ptd = m.replace(w.ptd, named_data=tuple(named))
        return f".ptd entry {named[k].key!r} + NUL + {other.key!r} added"
    other = named[w.rng.randrange(len(named))]
    count = w.rng.choice((2, 10) if w.small else (2, 10, 1000))
    named[0:0] = [m.replace(other, key=named[k].key)] * count
    w.ptd = m.replace(w.ptd, named_data=tuple(named))
    return f".ptd key {named[k].key!r} repeated {count} times in front (with {other.key!r}'s data)"


FAMILIES: tuple[tuple[Family, int], ...] = (
    (alias_copy_destination, 10), (alias_planned_region, 6), (alias_constant_entry, 8), (share_segment, 10),
    (duplicate_names, 8), (copy_slots, 10), (second_writer, 8), (out_return_slot, 6), (jumps, 8),
    (moves_and_frees, 6), (odd_devices, 6), (list_sharing, 6), (huge_counts, 4),
    (aliasing_value_table, 3), (expanding_fold, 4), (repetitive_operators, 4), (runtime_keys, 4),
)


def _families() -> tuple[tuple[Family, int], ...]:
    """``FAMILIES``, or only the one ``PTE_FUZZ_FAMILY`` names (``python -m tests.fuzz --family NAME``)."""
    only = os.environ.get("PTE_FUZZ_FAMILY")
    if not only:
        return FAMILIES
    chosen = tuple((f, weight) for f, weight in FAMILIES if f.__name__ == only)
    if not chosen:
        raise ValueError(f"no structure family {only!r}: {', '.join(f.__name__ for f, _ in FAMILIES)}")
    return chosen


# --- cases -----------------------------------------------------------------------------------------


def _shared_program(program: m.Program, tables: bool = True) -> bytes:
    """``program`` encoded with every identical int vector and string, and with ``tables`` every identical table,
    written once (several references to each)."""
    from pte_devconst.schema.flatbuf_builder import Builder
    from pte_devconst.schema.generated.encoders import PROGRAM_IDENTIFIER, write_program

    class SharingBuilder(Builder):
        """The project builder, made to hand out the offset of an identical item written before."""

        def __init__(self, initial_size: int = 1024) -> None:
            super().__init__(initial_size)
            self.written: dict[tuple, int] = {}
            self.kept: list[object] = []

        def _once(self, key: tuple, write: Callable[[], int]) -> int:
            if key not in self.written:
                self.written[key] = write()
            return self.written[key]

        def scalars(self, kind, items, alignment=0):  # noqa: ANN001, ANN202
            if kind not in (I32, I64):
                return super().scalars(kind, items, alignment)
            same = (kind.format, id(items), alignment)  # one tuple named by thousands of tables: hashed once
            if same not in self.written:
                self.written[same] = self._once(("vector", kind.format, tuple(items), alignment),
                                                lambda: super(SharingBuilder, self).scalars(kind, items, alignment))
                self.kept.append(items)  # (its id stays its own while the builder lives)
            return self.written[same]

        def string(self, text):  # noqa: ANN001, ANN202
            return self._once(("string", text), lambda: super(SharingBuilder, self).string(text))

        def table(self, layout, values):  # noqa: ANN001, ANN202
            if not tables:
                return super().table(layout, values)
            key = ("table", id(layout), tuple((type(v), v) for v in values))
            return self._once(key, lambda: super(SharingBuilder, self).table(layout, values))

    builder = SharingBuilder()
    return builder.finish(write_program(builder, program), PROGRAM_IDENTIFIER)


def _aliased_program(program: m.Program, p: int, copies: int) -> Optional[bytes]:
    """``program`` encoded with plan ``p``'s values vector extended by ``copies`` repeats of its last offset (one
    table named ``copies`` more times); None when another offset vector has the same length (no unique mark)."""
    from pte_devconst.schema.flatbuf_builder import Builder
    from pte_devconst.schema.generated.encoders import PROGRAM_IDENTIFIER, write_program

    marked = len(program.execution_plan[p].values)

    class Aliasing(Builder):
        seen = 0

        def offsets(self, targets):  # noqa: ANN001, ANN202
            if len(targets) == marked:
                self.seen += 1
                targets = list(targets) + [targets[-1]] * copies
            return super().offsets(targets)

    builder = Aliasing(4 * (marked + copies) + 4096)
    flat = builder.finish(write_program(builder, program), PROGRAM_IDENTIFIER)
    return flat if builder.seen == 1 else None


def _encode(w: Work, seed: Seed) -> tuple[bytes, Optional[bytes]]:
    aliased = _aliased_program(w.program, *w.aliased) if w.aliased else None
    if aliased is not None:
        data = _assemble_with(aliased, seed.data)
    elif w.shared_vectors:
        data = _assemble_with(_shared_program(w.program, w.shared_tables), seed.data)
    else:
        data = assemble_pte(w.program, seed.data)
    ptd = None
    if w.ptd is not None and seed.ptd is not None:
        ptd = assemble_ptd(w.ptd, seed.ptd)
    return data, ptd


def _assemble_with(plain: bytes, original: bytes) -> bytes:
    """``assemble_pte`` for an already encoded program."""
    from pte_devconst.schema.header import SEGMENT_ALIGNMENT, ExtendedHeader, align_up
    from pte_devconst.schema.pte_writer import insert_extended_header

    _, base, size = _header_info(original)
    if not size:
        return plain + bytes(max(0, 64 - len(plain)))
    program_size = len(plain) + 32
    header = ExtendedHeader(program_size, align_up(program_size, SEGMENT_ALIGNMENT), size)
    flat = insert_extended_header(plain, header)
    return flat + bytes(header.segment_base_offset - len(flat)) + original[base:base + size]


SUITES = ("structure", "real")


def make_structure_case(seed: int, index: int, suite: str = "structure") -> Case:
    """Case ``index`` of ``suite``: "structure" mutates the corpus and example programs, "real" the
    real-model fixtures (with the field mutations of ``mutate.structured`` one case in four)."""
    rng = random.Random(f"{suite}:{seed}:{index}")
    seeds = program_seeds() if suite == "structure" else real_model_seeds()
    source = seeds[index % len(seeds)]
    if suite == "real" and rng.random() < 0.25:
        note, data = structured_or_truncated(rng, source)
        return Case(index, "pte", source.name, note, data, ptd=source.ptd, suite=suite)
    fb_end = _header_info(source.data)[0]
    w = Work(rng, decode_program(source.data[:fb_end]),
             decode_flat_tensor(source.ptd[:_header_info(source.ptd)[0]]) if source.ptd else None)
    notes = []
    families, weights = zip(*_families())
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3))):
        for _attempt in range(8):
            note = rng.choices(families, weights)[0](w)
            if note is not None:
                notes.append(note)
                break
    data, ptd = _encode(w, source)
    return Case(index, "pte", source.name, "; ".join(notes) or "unchanged", data, ptd=ptd, suite=suite)
