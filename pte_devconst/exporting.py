"""Help for export scripts: the one patch ExecuTorch 1.5.1 needs to export copy style with device delegates.

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
from typing import Any, Iterator

__all__ = ["clone_spec_patch"]


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
