"""The differential check of every rewrite: a rewrite that exits 0 must compute what the original computes.

For each ``.pte`` case the reader accepts, ``check_differential``

1. rewrites it for its devices (the command's default) and, when anything moved,
   runs ``validate --simulate-devices`` on the pair: same outputs bit for bit,
   the same bytes at every delegate boundary, each moved constant copied once at
   load and never per call.  Delegates without an executor run as opaque
   stand-ins; with ``opaque`` every delegate does (faster, and what a CUDA
   program gets);
2. rewrites it with host placement (``RewriteOptions(host_placement=True)``, a
   library option: host-read constants go to planned CPU memory with initial data,
   which the 1.5.1 runtime can load) and, when anything moved and the real
   runtime runs the original, runs the rewrite there on the same inputs: the
   outputs must be bit-identical;
3. where the real runtime runs the original, runs it with the project's runner
   too: the outputs must agree (floats within 1e-5 relative, 1e-6 absolute, as in
   ``tests/test_real_models.py``), or ``validate`` would be judging a rewrite by
   wrong arithmetic.

An original that does not run (in the runner or the runtime) is not a finding.
A rewrite that exits 0 and then does not run, or runs differently, is, and so is
any exception other than ``PteDevconstError`` and any step past its time bound.
Each case records the stages it reached (``Outcome.stages``), which the summary
counts.
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path
from typing import Any, Optional

from pte_devconst.schema import model as m
from pte_devconst.util.errors import PteDevconstError
from pte_devconst.schema.pte_file import PteFile

from .harness import CaseTimeout, Outcome, bound_for, time_bound
from .mutate import Case

DIFFERENTIAL_BOUND_S = 60.0  # rewrite, validate and the runtime runs of one case together
CALLS = 2  # calls per method, on one loaded method (initial data is loaded once; state carries over)

# Stage names, in the order a case can reach them (the summary prints them in this order).
STAGES = (
    "rejected by the reader",
    "device: refused by rewrite",
    "device: nothing to move",
    "device: rewritten",
    "device: original does not run in the runner",
    "device: validated",
    "host: refused by rewrite",
    "host: nothing to move",
    "host: rewritten",
    "host: not comparable (a delegate's target_device put constants on a device)",
    "runtime: not comparable (an output the Python runtime binds its own buffer to)",
    "runtime: original does not load or run",
    "runtime: original ran",
    "host: bit-identical in the runtime",
    "runner: not compared (a kernel reads and writes overlapping memory)",
    "runner: refused a program the runtime runs",
    "runner: agrees with the runtime",
)


class Finding(Exception):
    """A wrong result: a rewrite that exited 0 and then computes something else, or a runner that disagrees."""


def check_differential(case: Case, folder: Path, *, opaque: bool = True, runtime: bool = True,
                       bound: Optional[float] = None) -> Outcome:
    """Judge every rewrite of ``case`` against its original (see the module docstring)."""
    bound = bound_for(case, DIFFERENTIAL_BOUND_S) if bound is None else bound
    start = time.perf_counter()
    stages: list[str] = []
    try:
        with time_bound(bound):
            _check(case, folder, opaque, runtime, stages)
    except Finding as finding:
        return Outcome("failure", f"{finding}", time.perf_counter() - start, tuple(stages))
    except CaseTimeout:
        return Outcome("failure", f"timeout: the differential check took more than {bound} s (stages: {stages})",
                       time.perf_counter() - start, tuple(stages))
    except BaseException as error:  # noqa: BLE001 - an exception from the tool is what we look for
        if isinstance(error, KeyboardInterrupt):
            raise
        return Outcome("failure", traceback.format_exc(), time.perf_counter() - start, tuple(stages))
    return Outcome("accepted", "", time.perf_counter() - start, tuple(stages))


def _check(case: Case, folder: Path, opaque: bool, runtime: bool, stages: list[str]) -> None:
    for stale in folder.iterdir():
        stale.unlink()
    pte = folder / "in.pte"
    pte.write_bytes(case.data)
    ptd: Optional[Path] = None
    if case.ptd is not None:
        ptd = folder / "in.ptd"
        ptd.write_bytes(case.ptd)
    try:
        with PteFile.open(pte) as source:
            program = source.program
    except PteDevconstError:
        stages.append("rejected by the reader")
        return
    device_out = _rewrite(pte, ptd, folder / "device.pte", False, stages, "device")
    if device_out is not None:
        _validate(pte, device_out, ptd, opaque, stages)
    if not runtime:
        return
    host_out = _rewrite(pte, ptd, folder / "host.pte", True, stages, "host")
    if _unplanned_output(program):
        stages.append("runtime: not comparable (an output the Python runtime binds its own buffer to)")
        return
    calls = _calls(program)
    if calls is None:
        stages.append("runtime: original does not load or run")
        return
    from .oracle import run_in_runtime

    original = run_in_runtime(pte, ptd, calls)
    if not original.ran:
        stages.append("runtime: original does not load or run")
        return
    stages.append("runtime: original ran")
    if host_out is not None:
        rewritten = run_in_runtime(host_out, ptd, calls)
        if not rewritten.ran:
            raise Finding(f"host placement: the original runs in the 1.5.1 runtime, its rewrite does not "
                          f"({rewritten.status}: {rewritten.detail})")
        _compare(original.outputs, rewritten.outputs, exact=True, what="host placement: runtime outputs")
        stages.append("host: bit-identical in the runtime")
    if _overlapping_kernel_arguments(program):
        stages.append("runner: not compared (a kernel reads and writes overlapping memory)")
        return
    _runner_against_runtime(pte, ptd, calls, original.outputs, stages)


def _unplanned_output(program: m.Program) -> bool:
    """Whether a method returns a tensor that MethodMeta calls not memory-planned (no allocation, no data index).

    ExecuTorch's Python runtime binds a buffer of its own to such an output before each call
    (``set_output_data_ptr``), so an external constant returned as an output reads as zeros there and so
    does everything computed from it: the runtime then runs another program than the file's.
    """
    for plan in program.execution_plan or ():
        for index in plan.outputs or ():
            value = (plan.values or ())[index]
            if isinstance(value, m.Tensor) and value.allocation_info is None and value.data_buffer_idx == 0:
                return True
    return False


def _overlapping_kernel_arguments(program: m.Program) -> bool:
    """Whether a kernel gets two different values whose planned memory overlaps (view prim ops aside).

    Its result then depends on the order in which the kernel reads and writes (a portable ``mm`` and
    torch's differ), which no runner can match; the values a rewrite moves get memory of their own.
    """
    for plan in program.execution_plan or ():
        values = plan.values or ()
        operators = plan.operators or ()
        for chain in plan.chains or ():
            for ins in chain.instructions or ():
                if not isinstance(ins, m.KernelCall) or operators[ins.op_index].qualified_name.startswith(
                        "executorch_prim::"):
                    continue
                indices = set()
                for arg in ins.args or ():
                    value = values[arg]
                    items = value.items or () if isinstance(value, (m.TensorList, m.OptionalTensorList)) else (arg,)
                    indices.update(i for i in items if i >= 0)
                spans = sorted((v.allocation_info.memory_id, v.allocation_info.memory_offset,
                                v.allocation_info.memory_offset + v.nbytes)
                               for i in indices if isinstance(v := values[i], m.Tensor)
                               and v.allocation_info is not None and v.nbytes)
                if any(a[0] == b[0] and b[1] < a[2] for a, b in zip(spans, spans[1:])):
                    return True
    return False


def _rewrite(pte: Path, ptd: Optional[Path], out: Path, host: bool, stages: list[str], mode: str) -> Optional[Path]:
    """The rewrite's output when anything moved; None when it refused or had nothing to move."""
    from pte_devconst.rewriter.plan import RewriteOptions
    from pte_devconst.rewriter.rewrite import rewrite_file

    try:
        result = rewrite_file(pte, out, ptd=ptd, options=RewriteOptions(host_placement=host), durable=False)
    except PteDevconstError:
        stages.append(f"{mode}: refused by rewrite")
        return None
    if not result.changed:
        stages.append(f"{mode}: nothing to move")
        return None
    stages.append(f"{mode}: rewritten")
    if host and any(not p.device.is_cpu for p in result.plan.placements):
        # The CPU runtime ignores target_device, the rewrite follows it: the result needs that device.
        stages.append("host: not comparable (a delegate's target_device put constants on a device)")
        return None
    return out


def _validate(pte: Path, out: Path, ptd: Optional[Path], opaque: bool, stages: list[str]) -> None:
    from pte_devconst.runner.validate import validate

    try:
        report = validate(pte, out, ptd=ptd, calls=CALLS, simulate_devices=True, opaque_delegates=opaque)
    except PteDevconstError as error:
        if error.file == str(pte):
            stages.append("device: original does not run in the runner")
            return
        raise Finding(f"validate: the original runs, its rewrite does not: {error}") from None
    if not report.passed:
        failed = [f"{mv.method}: {c.name}: {c.detail}" for mv in report.methods for c in mv.checks if not c.passed]
        raise Finding("validate failed: " + " | ".join(failed)[:2000])
    stages.append("device: validated")


def _calls(program: m.Program) -> Optional[dict[str, list[tuple[Any, ...]]]]:
    """The same deterministic inputs ``validate`` uses, per method (the first plan of each name)."""
    from pte_devconst.runner.run import synthetic_inputs

    calls: dict[str, list[tuple[Any, ...]]] = {}
    try:
        for plan in program.execution_plan or ():
            if plan.name not in calls:
                calls[plan.name or ""] = [synthetic_inputs(plan)] * CALLS
    except PteDevconstError:
        return None
    return calls


def _compare(before: dict[str, list[list[Any]]], after: dict[str, list[list[Any]]], *, exact: bool, what: str,
             rtol: float = 1e-5, atol: float = 1e-6) -> None:
    from pte_devconst.runner.validate import _outputs_equal

    for name, calls in before.items():
        for i, (a, b) in enumerate(zip(calls, after.get(name, []))):
            why = _outputs_equal(a, b, exact, rtol, atol)
            if why:
                raise Finding(f"{what} differ: method {name!r} call {i}: {why}")


def _runner_against_runtime(pte: Path, ptd: Optional[Path], calls: dict[str, list[tuple[Any, ...]]],
                            runtime_outputs: dict[str, list[list[Any]]], stages: list[str]) -> None:
    from pte_devconst.runner.run import run_program

    runner_outputs = {}
    for name, inputs in calls.items():
        try:
            result = run_program(pte, ptd_path=ptd, method=name, inputs=inputs, calls=len(inputs),
                                 simulate_devices=True)
        except PteDevconstError:
            stages.append("runner: refused a program the runtime runs")
            return
        runner_outputs[name] = [call.outputs for call in result.calls]
    _compare(runtime_outputs, runner_outputs, exact=False, what="runner vs the 1.5.1 runtime: outputs")
    stages.append("runner: agrees with the runtime")
