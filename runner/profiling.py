"""Cross-checking the runner's copy counts with torch.profiler's CUDA memcpy events (real GPUs only).

The profiler's Chrome trace records each ``gpu_memcpy`` activity with its
``bytes``; summing the host-to-device and device-to-host ones for a call gives
an independent measurement of what the runner says it copied.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Callable

from pte_devconst.util.record import record


@record
class ProfiledCopies:
    h2d_count: int
    h2d_bytes: int
    d2h_count: int
    d2h_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"h2d": {"count": self.h2d_count, "bytes": self.h2d_bytes},
                "d2h": {"count": self.d2h_count, "bytes": self.d2h_bytes}}


def memcpy_totals(trace: dict[str, Any]) -> ProfiledCopies:
    """Sum the memcpy events of a Chrome trace by direction."""
    h2d = [0, 0]
    d2h = [0, 0]
    for event in trace.get("traceEvents", []):
        if event.get("cat") != "gpu_memcpy":
            continue
        name = event.get("name", "")
        nbytes = int((event.get("args") or {}).get("bytes", 0))
        if "HtoD" in name:
            bucket = h2d
        elif "DtoH" in name:
            bucket = d2h
        else:
            continue
        bucket[0] += 1
        bucket[1] += nbytes
    return ProfiledCopies(h2d[0], h2d[1], d2h[0], d2h[1])


def profile_call(call: Callable[[], Any]) -> tuple[Any, ProfiledCopies]:
    """Run ``call`` under torch.profiler (CPU + CUDA activities) and return its result and memcpy totals."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        result = call()
        torch.cuda.synchronize()
    handle, path = tempfile.mkstemp(suffix=".json")
    os.close(handle)
    try:
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as stream:
            trace = json.load(stream)
    finally:
        os.unlink(path)
    return result, memcpy_totals(trace)
