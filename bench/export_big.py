"""Export the big benchmark program with the real ExecuTorch 1.5.1 exporter (copy style).

A chain ``y = x + p0 + p1 + ... + p{n-1}`` whose adds all go to one
``BackendWithCompilerDemo`` delegate with ``target_device`` = ``cuda:0``
(``DeviceAwarePartitioner`` from ExecuTorch's own test code).  Every parameter
is read only by that delegate, so each gets an ``et_copy::_h2d_copy.out`` per
call: the rewriter's best case, at scale.  Copy style needs the run-time
``_clone_spec_with_device`` patch (tests/fixtures/corpus/README.md).

Run as ``python -m bench.export_big OUT.pte [--params N] [--rows R]``; with the
defaults (512 parameters of 512x1024 float32) the file is 1 GiB plus a few
hundred KiB.  ``--transposed`` exports the ``rewrite --fold`` benchmark instead
(``export_transposed``).  This is the only bench module that imports torch.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def export(path: str, params: int = 512, rows: int = 512, cols: int = 1024, seed: int = 0) -> None:
    """Write the program to ``path`` (atomically: a temporary file, then a rename)."""
    import torch
    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.backend.test.device_util import DeviceAwarePartitioner

    sys.path.insert(0, str(EXAMPLES))
    from export_examples import clone_spec_patch  # the runner's exporter owns the 1.5.1 emitter fix

    class Chain(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            generator = torch.Generator().manual_seed(seed)
            self.weights = torch.nn.ParameterList(
                torch.nn.Parameter(torch.randn(rows, cols, generator=generator), requires_grad=False)
                for _ in range(params))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for weight in self.weights:
                x = x + weight
            return x

    with clone_spec_patch(), torch.no_grad():
        model = Chain().eval()
        exported = torch.export.export(model, (torch.randn(rows, cols),))
        edge = to_edge_transform_and_lower(exported, partitioner=[DeviceAwarePartitioner("cuda:0")],
                                           compile_config=EdgeCompileConfig())
        program = edge.to_executorch(ExecutorchBackendConfig(enable_non_cpu_memory_planning=True))
    _write(program, path)


def _write(program, path: str) -> None:  # an ExecutorchProgramManager
    """Atomically: a temporary file next to ``path``, then a rename."""
    temp = f"{path}.partial"
    with open(temp, "wb") as handle:
        program.write_to_file(handle)
    os.replace(temp, path)


def export_transposed(path: str, params: int = 64, size: int = 2048, seed: int = 0) -> None:
    """The ``rewrite --fold`` benchmark: ``x = x @ w.t()`` for ``params`` square weights, matmuls on ``cuda:0``.

    Only the matmuls go to the reference device backend (``aten.linear``'s lowering leaves each weight's
    ``permute_copy`` on the host), so every weight is transposed on the host and copied on every call: with
    the defaults, 64 weights of 2048x2048 float32, 1 GiB.  Copy style, like ``export``.
    """
    import torch
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

    sys.path.insert(0, str(EXAMPLES))
    from devconst_backend import DevconstPartitioner
    from export_examples import clone_spec_patch

    class Linears(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            generator = torch.Generator().manual_seed(seed)
            self.weights = torch.nn.ParameterList(
                torch.nn.Parameter(torch.randn(size, size, generator=generator) / size ** 0.5, requires_grad=False)
                for _ in range(params))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for weight in self.weights:
                x = torch.mm(x, weight.t())
            return x

    with clone_spec_patch(), torch.no_grad():
        exported = torch.export.export(Linears().eval(), (torch.randn(1, size),))
        edge = to_edge_transform_and_lower(exported, partitioner=[DevconstPartitioner({"aten.mm"}, "cuda:0")])
        program = edge.to_executorch(ExecutorchBackendConfig(enable_non_cpu_memory_planning=True))
    _write(program, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--params", type=int, default=None)
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--cols", type=int, default=1024)
    parser.add_argument("--transposed", action="store_true",
                        help="the --fold benchmark instead: --params square weights (default 64) of --cols (2048)")
    args = parser.parse_args()
    start = time.perf_counter()
    if args.transposed:
        export_transposed(args.out, args.params or 64, args.cols if args.cols != 1024 else 2048)
    else:
        export(args.out, args.params or 512, args.rows, args.cols)
    print(f"exported {args.out}: {os.path.getsize(args.out)} bytes in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
