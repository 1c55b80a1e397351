"""The runner's shared host memory (runner/shared_memory.py): what lets the ExecuTorch runtime's child read a
delegate's arguments where they are, instead of receiving a copy of each argument's whole arena per call."""

from __future__ import annotations

import gc
import os

import pytest
import torch

from pte_devconst.runner import shared_memory
from pte_devconst.runner.shared_memory import MappedRegions, describe, file_region, locate, shared_arena

pytestmark = pytest.mark.skipif(not shared_memory.shared_arenas_supported(), reason="no memfd_create here")


def test_a_tensor_in_an_arena_is_located_described_and_mapped_again_without_a_copy() -> None:
    region = shared_arena(1 << 20)
    assert region is not None
    weights = region.tensor[4096: 4096 + 64 * 32 * 4].view(torch.float32).view(64, 32)
    weights.copy_(torch.arange(64 * 32, dtype=torch.float32).view(64, 32))
    view = weights.t()[3:9]  # strided, offset
    found = locate(view)
    assert found is not None and found[0] is region
    described = describe(view, *found)
    child = MappedRegions()  # the child's side, here: the same pages through a second descriptor
    child.map(region.key, os.dup(region.fd), region.size, region.shared)
    again = child.tensor(described)
    assert torch.equal(again, view)
    again[0, 0] = -1.0  # one memory: a write in the child is the parent's
    assert view[0, 0].item() == -1.0


def test_a_tensor_outside_every_region_is_not_located() -> None:
    assert locate(torch.zeros(16)) is None


def test_a_region_that_is_gone_leaves_the_registry() -> None:
    """Addresses are reused once a map is gone: a stale entry below a live region hid it from ``locate``, and
    every argument in it travelled by value (a 256 MiB validation held 1.3 GB a process, some runs)."""
    region = shared_arena(1 << 16)
    assert region is not None
    base = region.base
    assert base in shared_memory._BY_BASE
    del region
    gc.collect()
    assert base not in shared_memory._BY_BASE and base not in shared_memory._BASES


def test_a_file_region_maps_copy_on_write_and_gives_pages_back(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "data.bin"
    data = torch.arange(1 << 20, dtype=torch.int32)
    path.write_bytes(data.numpy().tobytes())
    fd = os.open(path, os.O_RDONLY)
    try:
        region = file_region(fd, path.stat().st_size)
    finally:
        os.close(fd)
    assert region is not None and not region.shared
    mapped = region.tensor.view(torch.int32)
    assert torch.equal(mapped, data)
    shared_memory.release(mapped)  # pages given back: the contents are still the file's
    assert torch.equal(mapped, data)


def test_a_ptd_constant_is_a_view_of_the_mapped_ptd_not_a_copy() -> None:
    """An EXTERNAL constant's bytes are a view of the .ptd mapped copy-on-write (as the .pte's constants are of the
    .pte): located in a region, so it travels to the runtime's child by descriptor, and never copied per key."""
    from pathlib import Path

    from pte_devconst.runner.memory import ProgramData
    from pte_devconst.schema import model as m
    from pte_devconst.schema.ptd_file import open_ptd
    from pte_devconst.schema.pte_file import open_pte

    folder = Path(__file__).resolve().parent / "fixtures" / "xnnpack_more"
    with open_pte(folder / "ext_copy.pte") as pte, open_ptd(folder / "ext_copy.ptd") as ptd:
        data = ProgramData(pte, ptd)
        external = [v for plan in pte.program.execution_plan or () for v in plan.values or ()
                    if isinstance(v, m.Tensor) and v.is_external and v.fqn]
        assert external
        for tensor in external:
            view = data.external(tensor, "test")
            span = ptd.span(tensor.fqn or "")
            assert span is not None and bytes(view.numpy()) == bytes(ptd.data[span.offset: span.end])
            found = locate(view)
            assert found is not None  # inside the mapped .ptd, not a copy of it
