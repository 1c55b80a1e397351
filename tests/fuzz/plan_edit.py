"""Small pure edits of a decoded program that keep it plausible: the helpers the structure-aware mutations share.

Every function takes model objects and returns new ones (the model is immutable).  Values are only
ever appended, so existing value indices stay valid; an inserted instruction shifts the jumps and the
stack trace after it, so the rest of the chain still means what it meant.
"""

from __future__ import annotations

from typing import Optional

from pte_devconst.schema import model as m

H2D_COPY = "et_copy::_h2d_copy.out"
Site = tuple[int, int]  # (chain, instruction)


def with_plan(program: m.Program, p: int, plan: m.ExecutionPlan) -> m.Program:
    plans = list(program.execution_plan or ())
    plans[p] = plan
    return m.replace(program, execution_plan=tuple(plans))


def add_values(plan: m.ExecutionPlan, *values: m.EValue) -> tuple[m.ExecutionPlan, int]:
    """``plan`` with ``values`` appended, and the index of the first of them."""
    first = len(plan.values or ())
    return m.replace(plan, values=tuple(plan.values or ()) + values), first


def set_value(plan: m.ExecutionPlan, index: int, value: m.EValue) -> m.ExecutionPlan:
    values = list(plan.values or ())
    values[index] = value
    return m.replace(plan, values=tuple(values))


def instruction(plan: m.ExecutionPlan, site: Site) -> m.Instruction:
    return (plan.chains[site[0]].instructions or ())[site[1]]


def set_instruction(plan: m.ExecutionPlan, site: Site, ins: m.Instruction) -> m.ExecutionPlan:
    chain = plan.chains[site[0]]
    items = list(chain.instructions or ())
    items[site[1]] = ins
    return _with_chain(plan, site[0], m.replace(chain, instructions=tuple(items)))


def insert_instructions(plan: m.ExecutionPlan, site: Site, new: list[m.Instruction]) -> m.ExecutionPlan:
    """Insert ``new`` before instruction ``site``; jumps past it keep their target, a jump to it lands on ``new``."""
    c, k = site
    chain = plan.chains[c]
    old = list(chain.instructions or ())
    n = len(new)
    shifted = [m.replace(ins, destination_instruction=ins.destination_instruction + n)
               if isinstance(ins, m.JumpFalseCall) and ins.destination_instruction > k else ins for ins in old]
    stacktrace = chain.stacktrace
    if stacktrace is not None:
        stacktrace = tuple(stacktrace[:k]) + (None,) * n + tuple(stacktrace[k:])
    return _with_chain(plan, c, m.replace(chain, instructions=tuple(shifted[:k] + new + shifted[k:]),
                                          stacktrace=stacktrace))


def _with_chain(plan: m.ExecutionPlan, c: int, chain: m.Chain) -> m.ExecutionPlan:
    chains = list(plan.chains or ())
    chains[c] = chain
    return m.replace(plan, chains=tuple(chains))


def operator_index(plan: m.ExecutionPlan, qualified: str) -> tuple[m.ExecutionPlan, int]:
    """The index of operator ``ns::name.overload`` in ``plan.operators``, appended when missing."""
    name, _, overload = qualified.partition(".")
    for i, op in enumerate(plan.operators or ()):
        if op.qualified_name == qualified:
            return plan, i
    operators = tuple(plan.operators or ()) + (m.Operator(name, overload),)
    return m.replace(plan, operators=operators), len(operators) - 1


def operator_name(plan: m.ExecutionPlan, ins: m.KernelCall) -> str:
    ops = plan.operators or ()
    return ops[ins.op_index].qualified_name if 0 <= ins.op_index < len(ops) else ""


def sites(plan: m.ExecutionPlan, kind: type) -> list[Site]:
    return [(c, k) for c, chain in enumerate(plan.chains or ()) for k, ins in enumerate(chain.instructions or ())
            if isinstance(ins, kind)]


def copy_sites(plan: m.ExecutionPlan) -> list[Site]:
    """The ``_h2d_copy.out`` kernels with at least (self, out)."""
    return [s for s in sites(plan, m.KernelCall)
            if operator_name(plan, instruction(plan, s)) == H2D_COPY and len(instruction(plan, s).args or ()) >= 2]


def out_variant_sites(plan: m.ExecutionPlan) -> list[Site]:
    """Kernels laid out as an out variant with one out: the return slot (last) equals the out (second to last)."""
    found = []
    for s in sites(plan, m.KernelCall):
        args = instruction(plan, s).args or ()
        if len(args) >= 2 and args[-1] == args[-2]:
            found.append(s)
    return found


def tensors(plan: m.ExecutionPlan, *, constant: Optional[bool] = None, planned: Optional[bool] = None) -> list[int]:
    out = []
    for i, v in enumerate(plan.values or ()):
        if not isinstance(v, m.Tensor):
            continue
        if constant is not None and v.is_constant != constant:
            continue
        if planned is not None and v.is_planned != planned:
            continue
        out.append(i)
    return out


def arg_uses(plan: m.ExecutionPlan, value: int, kind: type = object) -> list[tuple[Site, int]]:
    """Every (site, argument position) where an instruction of ``kind`` names ``value`` in its args."""
    found = []
    for c, chain in enumerate(plan.chains or ()):
        for k, ins in enumerate(chain.instructions or ()):
            if isinstance(ins, (m.KernelCall, m.DelegateCall)) and isinstance(ins, kind):
                found += [((c, k), pos) for pos, a in enumerate(ins.args or ()) if a == value]
    return found


def set_arg(plan: m.ExecutionPlan, site: Site, pos: int, value: int) -> m.ExecutionPlan:
    ins = instruction(plan, site)
    args = list(ins.args or ())
    args[pos] = value
    return set_instruction(plan, site, m.replace(ins, args=tuple(args)))


def device_delegates(plan: m.ExecutionPlan) -> list[int]:
    """Delegates whose ``target_device`` names a device other than the CPU."""
    found = []
    for i, d in enumerate(plan.delegates or ()):
        raw = d.compile_spec("target_device")
        if raw is not None and not bytes(raw).lower().startswith(b"cpu"):
            found.append(i)
    return found
