"""The rewrite: the 1.6 encoding of every moved constant, idempotence, determinism, and the real runtime."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import CASES, CORPUS, CPU_CASES, facts, ptd_path, pte_path
from pte_devconst.program.executorch import H2D_COPY
from pte_devconst.rewriter.plan import RewriteOptions
from pte_devconst.rewriter.rewrite import rewrite_file
from pte_devconst.schema import model as m
from pte_devconst.util.errors import UnsupportedProgramError
from pte_devconst.schema.model import Device
from pte_devconst.schema.pte_file import open_pte
from pte_devconst.schema.pte_writer import unchanged_segments, write_pte


def _eligible(name: str) -> dict[tuple[str, int], dict]:
    return {(method, c["value"]): c for method, mf in facts(name)["methods"].items() for c in mf["constants"]
            if c["verdict"].startswith("eligible:")}


def _rewrite(name: str, tmp_path: Path, **kwargs) -> Path:
    out = tmp_path / f"{name}.devconst.pte"
    rewrite_file(pte_path(name), out, ptd=ptd_path(name), **kwargs)
    return out


@pytest.mark.parametrize("name", CASES)
def test_every_eligible_constant_has_the_device_encoding(name: str, tmp_path: Path) -> None:
    """Field by field, checked here independently of the tool's own self-check."""
    out = _rewrite(name, tmp_path)
    eligible = _eligible(name)
    with open_pte(pte_path(name)) as before, open_pte(out) as after:
        program = after.program
        mutable = program.mutable_data_segments
        for (method, value), fact in eligible.items():
            device = Device.parse(fact["verdict"].removeprefix("eligible:"))
            plan = program.plan(method)
            old_tensor = before.program.plan(method).values[value]
            t = plan.values[value]
            assert (t.scalar_type, t.sizes, t.dim_order) \
                == (old_tensor.scalar_type, old_tensor.sizes, old_tensor.dim_order)
            assert t.storage_offset == 0 and t.shape_dynamism == m.TensorShapeDynamism.STATIC
            assert t.allocation_info is not None
            info = t.extra_tensor_info
            assert (info.device_type, info.device_index, info.mutable_data_segments_idx) \
                == (device.type, device.index, 0)
            memory_id, offset = t.allocation_info.memory_id, t.allocation_info.memory_offset
            assert plan.buffer_device(memory_id) == device
            assert offset % 16 == 0 and offset + t.nbytes <= plan.non_const_buffer_sizes[memory_id]
            # No other tensor of the method uses the region.
            for other_index, other in enumerate(plan.values):
                if other_index != value and isinstance(other, m.Tensor) and other.allocation_info is not None \
                        and other.allocation_info.memory_id == memory_id and t.nbytes and other.nbytes:
                    o = other.allocation_info.memory_offset
                    assert o + other.nbytes <= offset or offset + t.nbytes <= o, (other_index, value)
            if fact["location"] == "external":
                assert info.location == m.TensorDataLocation.EXTERNAL and info.fully_qualified_name == fact["fqn"]
                continue
            assert info.location == m.TensorDataLocation.SEGMENT
            assert mutable is not None and len(mutable) == 1 and t.data_buffer_idx >= 1
            offsets = mutable[0].offsets
            assert offsets[t.data_buffer_idx] + t.nbytes <= program.segments[mutable[0].segment_index].size
            data = bytes(after.tensor_bytes(t))
            assert hashlib.sha256(data).hexdigest() == fact["data_sha256"]
        # Copy style: no h2d copy of a moved constant is left, and delegates read the constant itself.
        for plan in program.execution_plan:
            moved = {v for (meth, v) in eligible if meth == plan.name}
            ops = [o.qualified_name for o in plan.operators]
            for ins in plan.chains[0].instructions:
                if isinstance(ins, m.KernelCall) and ops[ins.op_index] == H2D_COPY:
                    assert ins.args[0] not in moved
                if isinstance(ins, m.JumpFalseCall):
                    assert 0 <= ins.destination_instruction <= len(plan.chains[0].instructions)


@pytest.mark.parametrize("name", CASES)
def test_rewrite_is_idempotent_and_deterministic(name: str, tmp_path: Path) -> None:
    first = _rewrite(name, tmp_path)
    again = tmp_path / "again.pte"
    rewrite_file(first, again, ptd=ptd_path(name))
    assert again.read_bytes() == first.read_bytes()
    other = tmp_path / "other.pte"
    rewrite_file(pte_path(name), other, ptd=ptd_path(name))
    assert other.read_bytes() == first.read_bytes()


@pytest.mark.parametrize("name", CASES)
def test_input_is_never_modified_and_unchanged_files_are_copied(name: str, tmp_path: Path) -> None:
    digest = hashlib.sha256(pte_path(name).read_bytes()).hexdigest()
    out = _rewrite(name, tmp_path)
    assert hashlib.sha256(pte_path(name).read_bytes()).hexdigest() == digest
    if not _eligible(name):
        assert out.read_bytes() == pte_path(name).read_bytes()


def test_copy_style_rewires_delegates_and_removes_copies() -> None:
    result = rewrite_file(pte_path("v_j_cond_copy"), dry_run=True)
    edit = result.plan.methods[0]
    assert edit.removed == ((0, 1), (0, 13))
    mapping = edit.instruction_maps[0]
    assert mapping[1] is None and mapping[13] is None and mapping[14] == 12
    assert result.output is None


def test_jumps_stack_traces_and_delegate_args_after_removal(tmp_path: Path) -> None:
    out = _rewrite("v_j_cond_copy", tmp_path)
    with open_pte(pte_path("v_j_cond_copy")) as before, open_pte(out) as after:
        old, new = before.program.execution_plan[0], after.program.execution_plan[0]
    old_ins, new_ins = old.chains[0].instructions, new.chains[0].instructions
    assert len(new_ins) == len(old_ins) - 2
    old_jumps = [i for i in old_ins if isinstance(i, m.JumpFalseCall)]
    new_jumps = [i for i in new_ins if isinstance(i, m.JumpFalseCall)]
    # Both jumps land after one removed copy (instruction 1), none after 13: each moves back by one.
    assert [j.destination_instruction - 1 for j in old_jumps] == [j.destination_instruction for j in new_jumps]
    if old.chains[0].stacktrace is not None:
        assert len(new.chains[0].stacktrace) == len(new_ins)
    delegate_args = [i.args for i in new_ins if isinstance(i, m.DelegateCall)]
    assert all(0 in args for args in delegate_args)  # both delegate calls now read constant value 0


def test_multi_method_constant_moves_in_each_method_and_is_stored_once(tmp_path: Path) -> None:
    out = _rewrite("v_f_multi_method_copy", tmp_path)
    with open_pte(out) as after:
        forward, other = after.program.plan("forward"), after.program.plan("other")
        assert forward.values[0].allocation_info is not None and other.values[0].allocation_info is not None
        assert forward.values[0].data_buffer_idx == other.values[0].data_buffer_idx  # one initial-data entry
        assert other.values[1].allocation_info is None  # base.k stays a constant in "other"...
        assert forward.values[1].allocation_info is not None  # ...but moves in "forward"
        # base.k's bytes are still in the constant segment because "other" reads them.
        assert after.tensor_bytes(other.values[1]) == after.tensor_bytes(forward.values[1])


def test_legacy_style_gets_a_new_device_buffer(tmp_path: Path) -> None:
    out = _rewrite("v_e_two_devices_legacy", tmp_path)
    with open_pte(out) as after:
        plan = after.program.execution_plan[0]
    assert [(d.buffer_idx, d.device_type, d.device_index) for d in plan.non_const_buffer_device] \
        == [(2, 1, 0), (3, 1, 1)]
    assert plan.non_const_buffer_sizes[0] == 0 and len(plan.non_const_buffer_sizes) == 4


def test_device_and_min_bytes_filters(tmp_path: Path) -> None:
    only_1 = rewrite_file(pte_path("v_e_two_devices_copy"), dry_run=True,
                          options=RewriteOptions(devices=frozenset({Device(1, 1)})))
    assert [str(p.device) for p in only_1.plan.placements] == ["cuda:1"]
    assert any("not selected" in s.reason for s in only_1.plan.skipped)
    big_only = rewrite_file(pte_path("v_a_dtypes_copy"), dry_run=True, options=RewriteOptions(min_bytes=30))
    assert sorted(p.nbytes for p in big_only.plan.placements) == [48, 96]


def test_empty_constant_moves_with_initial_data_entry(tmp_path: Path) -> None:
    out = _rewrite("v_a_dtypes_copy", tmp_path)
    with open_pte(out) as after:
        empty = after.program.execution_plan[0].values[6]
    assert empty.nbytes == 0 and empty.allocation_info is not None and empty.data_buffer_idx >= 1


def test_dropped_constant_bytes_leave_the_constant_segment(tmp_path: Path) -> None:
    out = _rewrite("v_a_dtypes_copy", tmp_path)
    with open_pte(out) as after:
        assert after.program.constant_segment.offsets == (0,)
        assert after.segment_span(after.program.constant_segment.segment_index).size == 0


def test_shared_mutable_buffers_are_refused(tmp_path: Path) -> None:
    """A two-method program laid out by share_mutable_buffers ([0, X, shared], same buffer-2 tensors)."""
    with open_pte(pte_path("v_f_multi_method_legacy")) as pte:
        plans = []
        for plan in pte.program.execution_plan:
            shared = m.Tensor(scalar_type=6, sizes=(4,), dim_order=(0,), allocation_info=m.AllocationDetails(2, 0))
            sizes = plan.non_const_buffer_sizes
            plans.append(replace(plan, values=plan.values + (shared,), non_const_buffer_sizes=(0, sizes[1], 16),
                                 non_const_buffer_device=None))
        shared_program = replace(pte.program, execution_plan=tuple(plans))
        source = tmp_path / "shared.pte"
        write_pte(source, shared_program, unchanged_segments(pte))
    with pytest.raises(UnsupportedProgramError, match="share_mutable_buffers"):
        rewrite_file(source, tmp_path / "out.pte")
    assert not (tmp_path / "out.pte").exists()


@pytest.mark.parametrize("name", CPU_CASES)
def test_host_placement_encoding_runs_bit_identically_in_executorch(name: str, tmp_path: Path) -> None:
    """The encoding (planned memory + initial data) checked by the real 1.5.1 runtime, on the CPU."""
    torch = pytest.importorskip("torch")
    from et_oracle import run_with_executorch

    out = tmp_path / f"{name}.host.pte"
    result = rewrite_file(pte_path(name), out, ptd=ptd_path(name), options=RewriteOptions(host_placement=True))
    moved = len(result.plan.placements)
    inputs = torch.load(CORPUS / f"{name}.inputs.pt")
    expected = torch.load(CORPUS / f"{name}.runtime.pt")
    for method, calls in inputs.items():
        for call, stored in zip(calls, expected[method]):
            got = run_with_executorch(out, method, call, ptd_path(name))
            # Bit for bit against the original run here; the stored outputs came from another machine's CPU.
            want = run_with_executorch(pte_path(name), method, call, ptd_path(name))
            assert len(got) == len(want) == len(stored)
            assert all(torch.equal(a, b) for a, b in zip(got, want))
            for a, b in zip(got, stored):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    with open_pte(out) as after:
        planned_constants = sum(1 for plan in after.program.execution_plan for v in plan.values
                                if isinstance(v, m.Tensor) and v.has_initial_data)
    assert planned_constants == moved > 0


def test_stack_traces_stay_parallel_to_the_surviving_instructions(tmp_path: Path) -> None:
    """Give every instruction a frame naming its index, rewrite, and check each survivor kept its own frame."""
    with open_pte(pte_path("v_j_cond_copy")) as pte:
        plan = pte.program.execution_plan[0]
        chain = plan.chains[0]
        frames = tuple(m.FrameList((m.Frame("model.py", k, f"instruction {k}", None),))
                       for k in range(len(chain.instructions)))
        traced = replace(pte.program, execution_plan=(replace(plan, chains=(replace(chain, stacktrace=frames),)),))
        source = tmp_path / "traced.pte"
        write_pte(source, traced, unchanged_segments(pte))
    result = rewrite_file(source, tmp_path / "out.pte")
    mapping = result.plan.methods[0].instruction_maps[0]
    with open_pte(tmp_path / "out.pte") as after:
        new_chain = after.program.execution_plan[0].chains[0]
    assert len(new_chain.stacktrace) == len(new_chain.instructions)
    survivors = [old for old, new in enumerate(mapping) if new is not None]
    assert [f.items[0].lineno for f in new_chain.stacktrace] == survivors
