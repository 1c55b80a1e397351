"""Help for export scripts: marking an existing partitioner's delegates for a device, and the one patch ExecuTorch
1.5.1 needs to export copy style with device delegates.  Both need ``executorch``, imported when called.

``with_target_device(partitioner, "cuda:0")`` wraps any ExecuTorch partitioner so that each delegate it creates
carries the compile spec ``target_device``, the key ExecuTorch's ``PropagateDevicePass`` reads (what
``CudaPartitioner`` adds for its own delegates).  The constants that partitioner passes to its delegates as inputs
then get a per-call host-to-device copy, which ``rewrite`` removes; docs/real-backends.md says when a real
partitioner keeps constants outside its delegates::

    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from pte_devconst.exporting import with_target_device

    device_partitioner = with_target_device(XnnpackPartitioner(force_non_static_weights_for_f32_linear=True))

Copy style (``ExecutorchBackendConfig(enable_non_cpu_memory_planning=True)``, the 1.5.1 default) crashes the
1.5.1 emitter as soon as a constant feeds a device delegate: ``propagate_device_pass._clone_spec_with_device``
clones the constant's TensorSpec for its ``_h2d_copy`` output, still ``const`` but without storage, and
emission fails with ``InternalError: 'NoneType' object has no attribute 'nbytes'`` (measured with the reference
backend of examples/devconst_backend.py).  ``clone_spec_patch`` makes the copy's output an ordinary planned
tensor while it is active; the program is then what copy style means: a per-call ``et_copy::_h2d_copy`` of each
constant, which ``rewrite`` removes.  Legacy style (``enable_non_cpu_memory_planning=False``) needs no patch::

    from pte_devconst import rewrite
    from pte_devconst.exporting import clone_spec_patch

    with clone_spec_patch():
        et = edge.to_executorch(ExecutorchBackendConfig(enable_non_cpu_memory_planning=True))
    result = rewrite(et)  # in memory: result.data is the rewritten program
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Iterator

from pte_devconst.api import parse_devices
from pte_devconst.schema.devices import TARGET_DEVICE_KEY
from pte_devconst.util.errors import PteDevconstError

__all__ = ["clone_spec_patch", "with_target_device"]


def with_target_device(partitioner: Any, device: str = "cuda:0") -> Any:
    """``partitioner`` (any ExecuTorch ``Partitioner``), its delegates marked for ``device``: every delegation spec
    it returns gains the compile spec ``target_device`` (one it has already is kept), so ExecuTorch plans the
    delegates' inputs and outputs on that device.  Which ops it delegates and which constants it takes inside its
    delegates do not change: those it passes as inputs are the ones ``rewrite`` moves.

    ``device`` is a non-CPU device (``cuda:0``, ``cuda:1``); anything else is a ``PteDevconstError``.
    """
    parsed = sorted(parse_devices([device], "device") or ())
    if len(parsed) != 1:
        raise PteDevconstError(f"device: one device, e.g. cuda:0, not {device!r}")
    return _device_partitioner()(partitioner, str(parsed[0]))


@functools.lru_cache(maxsize=None)
def _device_partitioner() -> Any:
    """The wrapper class, defined on first use: it derives from ExecuTorch's ``Partitioner``, which only an export
    script imports."""
    from executorch.exir.backend.compile_spec_schema import CompileSpec
    from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult

    class TargetDevicePartitioner(Partitioner):  # type: ignore[misc]  # executorch has no type information
        """Another partitioner's partition, each delegation spec with ``target_device`` added."""

        def __init__(self, inner: Any, device: str) -> None:
            try:
                spec = inner.spec
            except AttributeError:  # a partitioner that never called Partitioner.__init__ (AotiPartitioner)
                spec = {}
            super().__init__(spec)
            self.inner = inner
            self.device = device

        def partition(self, exported_program: Any) -> Any:
            result = self.inner.partition(exported_program)
            marked = {}
            for tag, spec in result.partition_tags.items():
                specs = list(spec.compile_specs)
                if not any(s.key == TARGET_DEVICE_KEY for s in specs):
                    specs.append(CompileSpec(TARGET_DEVICE_KEY, self.device.encode()))
                marked[tag] = DelegationSpec(spec.backend_id, specs)
            return PartitionResult(tagged_exported_program=result.tagged_exported_program, partition_tags=marked)

        def ops_to_not_decompose(self, ep: Any) -> Any:
            return self.inner.ops_to_not_decompose(ep)

        def transform_for_pre_decomposition(self, exported_program: Any) -> Any:
            return self.inner.transform_for_pre_decomposition(exported_program)

        def __repr__(self) -> str:
            return f"with_target_device({self.inner!r}, {self.device!r})"

    return TargetDevicePartitioner


@contextlib.contextmanager
def clone_spec_patch() -> Iterator[None]:
    """While active, the h2d copy of a constant is a planned tensor (``const=False``, no storage), not a constant.

    Restores ExecuTorch's own function on exit, also when the export fails.
    """
    from executorch.exir.passes import propagate_device_pass as pass_module

    original = pass_module._clone_spec_with_device

    def patched(spec: Any, device_type: Any, device_index: int = 0) -> Any:
        clone = original(spec, device_type, device_index)
        clone.const = False
        clone.storage = None
        return clone

    pass_module._clone_spec_with_device = patched
    try:
        yield
    finally:
        pass_module._clone_spec_with_device = original
