"""Performance smoke tests: seconds, not a benchmark (that is ``python -m bench``, bench/RESULTS.md).

* a 100,000-value program is analysed within a generous bound;
* rewriting a ~256 MiB synthetic file keeps the child's peak RSS bounded (no mapped or
  buffered tensor data), and its bulk data moves by ``os.copy_file_range``;
* the self-check's sorted overlap test and windowed byte comparison still catch what they must.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.synth import analysis_program
from pte_devconst.schema import model as m
from pte_devconst.schema.pte_writer import SegmentContent, write_pte

ROOT = Path(__file__).resolve().parent.parent


def test_analysis_of_100k_values_is_fast(tmp_path: Path) -> None:
    from pte_devconst.rewriter.model.analysis import analyze_program
    from pte_devconst.rewriter.plan import make_plan

    program, _ = analysis_program(100_000)  # in memory: encoding and decoding are measured by the benchmark
    start = time.process_time()
    analysis = analyze_program(program)
    plan = make_plan(program, analysis)
    elapsed = time.process_time() - start
    assert len(program.execution_plan[0].values) > 99_000
    assert len(plan.placements) == len(analysis.eligible) > 24_000
    assert elapsed < 20, f"analysis + plan of 100k values took {elapsed:.1f} s CPU (about 2 s expected)"


def _big_file(path: Path, tensors: int, rows: int) -> int:
    """A copy-style program: ``tensors`` float32 [rows, 1024] constants, each h2d-copied to one cuda:0 delegate."""
    shape, nbytes = (rows, 1024), rows * 4096
    values: list[m.EValue] = []
    instructions: list[m.Instruction] = []
    dsts = []
    info = m.ExtraTensorInfo(device_type=m.DeviceType.CUDA)
    for k in range(tensors):
        values.append(m.Tensor(m.ScalarType.FLOAT, sizes=shape, dim_order=(0, 1), data_buffer_idx=k + 1))
        values.append(m.Tensor(m.ScalarType.FLOAT, sizes=shape, dim_order=(0, 1),
                               allocation_info=m.AllocationDetails(2, k * nbytes), extra_tensor_info=info))
        instructions.append(m.KernelCall(0, (2 * k, 2 * k + 1, 2 * k + 1)))
        dsts.append(2 * k + 1)
    out = len(values)
    values.append(m.Tensor(m.ScalarType.FLOAT, sizes=shape, dim_order=(0, 1),
                           allocation_info=m.AllocationDetails(2, tensors * nbytes), extra_tensor_info=info))
    instructions.append(m.DelegateCall(0, tuple(dsts) + (out,)))
    plan = m.ExecutionPlan(
        name="forward", values=tuple(values), inputs=(), outputs=(out,),
        chains=(m.Chain(instructions=tuple(instructions)),),
        operators=(m.Operator("et_copy::_h2d_copy", "out"),),
        delegates=(m.BackendDelegate("Demo", m.BackendDelegateDataReference(m.DataLocation.SEGMENT, 1),
                                     (m.CompileSpec("target_device", b"cuda:0"),)),),
        non_const_buffer_sizes=(0, 0, (tensors + 1) * nbytes),
        non_const_buffer_device=(m.NonConstBufferDevice(2, m.DeviceType.CUDA, 0),))
    program = m.Program(execution_plan=(plan,), segments=(m.DataSegment(), m.DataSegment()),
                        constant_segment=m.SubsegmentOffsets(0, tuple([0] + [k * nbytes for k in range(tensors)])))
    chunk = os.urandom(nbytes)  # one random tensor, repeated: the pieces are small bytes, the file is not sparse
    constants = SegmentContent(tensors * nbytes, [(k * nbytes, chunk) for k in range(tensors)])
    return write_pte(path, program, [constants, SegmentContent.of(b"blob")]).file_size


COUNT_AND_REWRITE = """
import json, os, sys
moved = {"copy_file_range": 0, "other": 0}
real_cfr, real_write = os.copy_file_range, os.write
def cfr(*a, **k):
    n = real_cfr(*a, **k); moved["copy_file_range"] += n; return n
def write(fd, data):
    n = real_write(fd, data); moved["other"] += n; return n
os.copy_file_range, os.write = cfr, write
from pte_devconst.rewriter.rewrite import rewrite_file
result = rewrite_file(sys.argv[1], sys.argv[2])
moved["placements"] = len(result.plan.placements)
# VmHWM is this process's own peak: ru_maxrss would include the (large) pytest parent's, inherited at exec.
with open("/proc/self/status") as status:
    moved["maxrss_kib"] = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
print(json.dumps(moved))
"""


@pytest.mark.skipif(not hasattr(os, "copy_file_range") or not os.path.exists("/proc/self/status"),
                    reason="needs Linux (os.copy_file_range, /proc/self/status)")
def test_rewrite_of_256_mib_keeps_memory_bounded(tmp_path: Path) -> None:
    src, dst = tmp_path / "big.pte", tmp_path / "big.devconst.pte"
    size = _big_file(src, 64, 1024)  # 64 x 4 MiB = 256 MiB of constants
    assert size > 256 << 20
    proc = subprocess.run([sys.executable, "-c", COUNT_AND_REWRITE, str(src), str(dst)], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(proc.stdout)
    assert stats["placements"] == 64
    assert stats["copy_file_range"] >= 256 << 20, stats  # the tensor data went through the kernel
    assert stats["other"] < 1 << 20, stats  # only the flatbuffer and padding through write()
    assert stats["maxrss_kib"] < 160 * 1024, f"peak RSS {stats['maxrss_kib'] / 1024:.0f} MiB for a 256 MiB rewrite"
    assert dst.stat().st_size > 256 << 20


def test_self_check_overlap_and_bytes(tmp_path: Path) -> None:
    from pte_devconst.rewriter import verify
    from pte_devconst.rewriter.model import verify_bytes

    t = m.Tensor(m.ScalarType.FLOAT, sizes=(4,), dim_order=(0,), allocation_info=m.AllocationDetails(2, 64))
    other = m.Tensor(m.ScalarType.FLOAT, sizes=(4,), dim_order=(0,), allocation_info=m.AllocationDetails(2, 72))
    apart = m.Tensor(m.ScalarType.FLOAT, sizes=(4,), dim_order=(0,), allocation_info=m.AllocationDetails(2, 80))
    elsewhere = m.Tensor(m.ScalarType.FLOAT, sizes=(4,), dim_order=(0,), allocation_info=m.AllocationDetails(1, 64))
    assert verify.overlap(m.ExecutionPlan(values=(t, apart, elsewhere)), [(2, 64, 16, 0)]) is None
    assert verify.overlap(m.ExecutionPlan(values=(t, other)), [(2, 64, 16, 0)]) == \
        "value 1 overlaps the region of moved value 0"
    assert "overlaps the region" in verify.overlap(m.ExecutionPlan(values=(t, other)),  # two moved regions
                                                   [(2, 64, 16, 0), (2, 72, 16, 1)])

    assert verify_bytes.windows(100, full=False) == [(0, 100)]
    windows = verify_bytes.windows(5 << 20, full=False)
    assert windows[0] == (0, verify_bytes.SAMPLE_BYTES)
    assert windows[-1] == ((5 << 20) - verify_bytes.SAMPLE_BYTES, verify_bytes.SAMPLE_BYTES)
    assert len(windows) == 2 + verify_bytes.SPREAD_WINDOWS == len(verify_bytes.windows(1 << 30, full=False))
    assert windows == verify_bytes.windows(5 << 20, full=False) != verify_bytes.windows(5 << 20, False, 4096)
    assert sum(length for _, length in verify_bytes.windows(5 << 20, full=True)) == 5 << 20
