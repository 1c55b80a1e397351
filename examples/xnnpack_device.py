"""Export real programs whose device delegate is XNNPACK, for the real-runtime check (tests/real_runtime.py).

    python examples/xnnpack_device.py OUT_DIR                  # the small fixtures (tests/fixtures/xnnpack_device)
    python examples/xnnpack_device.py OUT_DIR --only mlp       # one model, both styles
    python examples/xnnpack_device.py OUT_DIR --set big        # the bigger models the slow test exports
    python examples/xnnpack_device.py OUT_DIR --set large      # deployment sizes: 20 MiB, 256 MiB and 1 GiB of weights
    python examples/xnnpack_device.py --list                   # the names, nothing exported

The ExecuTorch 1.5.1 pip runtime cannot allocate CUDA memory, but it executes XNNPACK.  So these programs
delegate to XNNPACK through ``DeviceXnnpackPartitioner``, a thin ``XnnpackPartitioner`` that adds the compile
spec ``target_device = cuda:0`` (or cuda:1): the exporter then plans the delegate's inputs on that device, and
``force_non_static_weights_for_f32_linear=True`` keeps linear weights and biases outside the delegate as
program constants, the shape ``rewrite`` exists for.  Once ``tests/real_runtime.py: flip_to_cpu`` moves the
device placement back to the CPU, the real runtime runs the program, the original and a rewrite alike.

Each model is exported in copy style (``enable_non_cpu_memory_planning=True`` with ``clone_spec_patch``,
``et_copy::_h2d_copy.out`` kernels) and legacy style (``=False``: the delegate receives host tensors).  Each
NAME_STYLE.pte comes with NAME_STYLE.inputs.pt (``{method: [call inputs]}``, >= 3 calls run in order on one
loaded method) and NAME_STYLE.expected.pt (eager outputs); ``manifest.json`` lists every file's size and
sha256 and what each model exercises.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch

from export_examples import MLP, TransformerBlock  # the examples' models, on this script's folder

from pte_devconst.exporting import clone_spec_patch

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE.parent / "tests" / "fixtures" / "xnnpack_device"
SEED = 20261202
STYLES = ("copy", "legacy")
Calls = list[tuple[Any, ...]]


def device_partitioner(device: str = "cuda:0", per_op_devices: Sequence[str] = (), **kwargs: Any) -> Any:
    """An XNNPACK partitioner whose delegates carry ``target_device``: ``device``, or ``per_op_devices`` per op."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir.backend.compile_spec_schema import CompileSpec
    from executorch.exir.backend.partitioner import DelegationSpec

    class DeviceXnnpackPartitioner(XnnpackPartitioner):  # type: ignore[misc]
        """XNNPACK with ``target_device`` in its compile specs; linear weights stay outside the delegate.

        ``per_op_devices``: one partition per operator (XNNPACK's ``per_op_mode``), the i-th tagged with
        ``per_op_devices[i % len]``: a program whose delegates sit on several devices."""

        def __init__(self) -> None:
            super().__init__(force_non_static_weights_for_f32_linear=True, per_op_mode=bool(per_op_devices),
                             **kwargs)
            self.base_spec = self.delegation_spec
            self.delegation_spec = self._spec_for(device)

        def _spec_for(self, target: str) -> Any:
            base = self.base_spec
            return DelegationSpec(base.backend_id, [*base.compile_specs, CompileSpec("target_device", target.encode())])

        def partition(self, exported_program: Any) -> Any:
            result = super().partition(exported_program)
            if per_op_devices:
                for k, tag in enumerate(sorted(result.partition_tags, key=_tag_order)):
                    result.partition_tags[tag] = self._spec_for(per_op_devices[k % len(per_op_devices)])
            return result

    return DeviceXnnpackPartitioner()


def _tag_order(tag: str) -> tuple[int, str]:
    digits = "".join(ch for ch in tag if ch.isdigit())
    return (int(digits) if digits else 0, tag)


# --- models ------------------------------------------------------------------------------------------------


class CNN(torch.nn.Module):
    """Convolutions (their weights go into the delegate) and a linear head (its weights stay outside).

    The convolutions have no bias: with ``force_non_static_weights_for_f32_linear=True`` the 1.5.1 exporter
    leaves a convolution's bias outside the delegate too, and the XNNPACK runtime then refuses the graph
    (``Failed to create convolution node ... xnn_status_invalid_parameter`` at load, also unflipped)."""

    def __init__(self, channels: int = 4, size: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, channels, 3, padding=1, bias=False)
        self.conv2 = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.head = torch.nn.Linear(channels * (size // 2) ** 2, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv2(torch.relu(self.conv1(x)))), 2)
        return self.head(x.reshape(x.shape[0], -1))


class GRU(torch.nn.Module):
    """A GRU cell unrolled over the sequence: its gates' linears in XNNPACK, the state carried through."""

    def __init__(self, d_in: int = 8, hidden: int = 16, steps: int = 4) -> None:
        super().__init__()
        self.cell = torch.nn.GRUCell(d_in, hidden)
        self.out = torch.nn.Linear(hidden, 4)
        self.steps = steps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.zeros(x.shape[0], self.cell.hidden_size)
        for t in range(self.steps):
            h = self.cell(x[:, t], h)
        return self.out(h)


class KVCache(torch.nn.Module):
    """One attention head over a sliding window of cached keys and values (mutable buffers, state across calls)."""

    def __init__(self, dim: int = 16, window: int = 6) -> None:
        super().__init__()
        self.q = torch.nn.Linear(dim, dim)
        self.k = torch.nn.Linear(dim, dim)
        self.v = torch.nn.Linear(dim, dim)
        self.o = torch.nn.Linear(dim, dim)
        generator = torch.Generator().manual_seed(SEED)
        self.register_buffer("k_cache", torch.randn(window, dim, generator=generator))
        self.register_buffer("v_cache", torch.randn(window, dim, generator=generator))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keys = torch.cat([self.k_cache[1:], self.k(x)], 0)
        values = torch.cat([self.v_cache[1:], self.v(x)], 0)
        self.k_cache.copy_(keys)
        self.v_cache.copy_(values)
        scores = torch.softmax(self.q(x) @ keys.t() / 4.0, dim=-1)
        return self.o(scores @ values)


class TwoMethods(torch.nn.Module):
    """``forward`` and ``encode`` share a linear layer (a program with two methods)."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.shared = torch.nn.Linear(dim, dim)
        self.head = torch.nn.Linear(dim, 4)
        self.enc = torch.nn.Linear(dim, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.shared(x)))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.enc(torch.tanh(self.shared(x)))


class Shared(torch.nn.Module):
    """One weight read by two delegate calls (a host cumsum between them splits the delegate), and one weight
    also read by a host kernel (sum): the first may move, the second keeps its per-call copy."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.twice = torch.nn.Linear(dim, dim)
        self.host = torch.nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.twice(x)
        y = self.twice(torch.cumsum(y, dim=-1) / 8.0)
        return self.host(y) + self.host.weight.sum(dim=0)


class Fold(torch.nn.Module):
    """A weight stored as float16 and cast to float32 on the host before the delegate reads it: the cast is
    a chain ``rewrite --fold`` computes once; and a plain linear next to it."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(SEED + 1)
        self.w16 = torch.nn.Parameter((torch.randn(dim, dim, generator=generator) / 4).half(), requires_grad=False)
        self.plain = torch.nn.Linear(dim, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.plain(torch.relu(torch.nn.functional.linear(x, self.w16.float())))


class Deep(torch.nn.Module):
    """``layers`` small linears in a row: 2 x ``layers`` constants, each read by the delegate only."""

    def __init__(self, layers: int = 128, dim: int = 4) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(dim, dim) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


class Stack(torch.nn.Module):
    """``layers`` linears alternating ``width`` -> ``hidden`` -> ``width``: a model of deployment size whose every
    weight stays outside the delegate (``hidden`` x ``width`` float32 each, ``layers`` of them)."""

    def __init__(self, layers: int = 8, width: int = 2048, hidden: int = 4096) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(
            torch.nn.Linear(width, hidden) if k % 2 == 0 else torch.nn.Linear(hidden, width) for k in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


class Cond(torch.nn.Module):
    """``torch.cond`` on the input's sign between two host branches (the program jumps between them), with a
    linear before and after it in the delegate: the weights' copies sit in a chain with jumps.  (XNNPACK does not
    partition inside a cond's branches: a linear there would stay an undecomposed ``aten.linear``.)"""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.first = torch.nn.Linear(dim, dim)
        self.head = torch.nn.Linear(dim, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.first(x)
        y = torch.cond(x.sum() > 0, lambda t: t * 2.0, lambda t: t - 1.0, (y,))
        return self.head(y)


def _signed(g: torch.Generator) -> dict[str, tuple[Any, ...]]:
    """One call's input for ``Cond``: positive or negative at random, so the calls take both branches."""
    x = torch.rand(4, 16, generator=g)
    return {"forward": (x if int(torch.randint(0, 2, (1,), generator=g)) else -x,)}


# --- the model table --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Model:
    """One program to export: a model, its methods' inputs per call, how it is partitioned and exported."""

    name: str
    what: str
    make: Callable[[], torch.nn.Module]
    inputs: Callable[[torch.Generator], dict[str, tuple[Any, ...]]]  # method -> one call's inputs
    partitioners: Callable[[], list[Any]] = field(default=lambda: [device_partitioner()])
    dynamic: Optional[Callable[[], dict[str, Any]]] = None  # method -> dynamic_shapes
    mutable_buffers: tuple[str, ...] = ()  # buffers whose initial values the program stores
    calls: int = 3
    eligible: int = 0  # constants read only by the device delegates, over all methods (by construction)
    devices: tuple[str, ...] = ("cuda:0",)  # the devices they are eligible for


def _one(*shape: int) -> Callable[[torch.Generator], dict[str, tuple[Any, ...]]]:
    return lambda g: {"forward": (torch.randn(*shape, generator=g),)}


def _batch(g: torch.Generator) -> dict[str, tuple[Any, ...]]:
    rows = int(torch.randint(1, 9, (1,), generator=g))
    return {"forward": (torch.randn(rows, 16, generator=g),)}


def _dynamic_batch() -> dict[str, Any]:
    return {"forward": ({0: torch.export.Dim("batch", min=1, max=8)},)}


SMALL = (
    Model("mlp", "two linears: weights and biases read by the delegate only", MLP, _one(4, 16), eligible=4),
    Model("cnn", "convolutions inside the delegate, a linear head's weights outside", CNN, _one(2, 3, 8, 8),
          eligible=2),
    Model("attention", "a transformer block: layer norms and reshapes on the host between delegates",
          lambda: TransformerBlock(16, 2, 32), _one(2, 4, 16), eligible=9),
    Model("gru", "a GRU cell unrolled over 4 steps", GRU, _one(2, 4, 8), eligible=6),
    Model("kv_cache", "cached keys and values in mutable buffers with initial data: state across calls",
          KVCache, _one(1, 16), mutable_buffers=("k_cache", "v_cache"), eligible=9),
    Model("two_methods", "two methods (forward, encode) sharing a linear layer", TwoMethods,
          lambda g: {"forward": (torch.randn(3, 16, generator=g),), "encode": (torch.randn(3, 16, generator=g),)},
          eligible=8),
    Model("shared", "a weight read by two delegate calls; a weight also read by a host kernel", Shared,
          _one(2, 16), eligible=4),
    Model("fold", "a float16 weight cast to float32 on the host before the delegate (rewrite --fold)", Fold,
          _one(3, 16), eligible=2),
    Model("two_devices", "one partition per operator, alternately on cuda:0 and cuda:1", MLP, _one(4, 16),
          partitioners=lambda: [device_partitioner(per_op_devices=("cuda:0", "cuda:1"))], eligible=4,
          devices=("cuda:0", "cuda:1")),
    Model("dynamic", "a batch dimension from 1 to 8, a different size each call", MLP, _batch,
          dynamic=_dynamic_batch, eligible=4),
    Model("deep", "128 linears in a row: 256 constants", Deep, _one(2, 4), eligible=256),
    Model("cond", "torch.cond on the input's sign between host branches, a linear before and after: jumps",
          Cond, _signed, calls=5, eligible=4),
)

BIG = (
    Model("mlp_big", "a wider MLP", lambda: MLP(256, 1024, 128), _one(8, 256), eligible=4),
    Model("cnn_big", "a CNN on 32x32 images", lambda: CNN(16, 32, 10), _one(2, 3, 32, 32), eligible=2),
    Model("attention_big", "a wider transformer block", lambda: TransformerBlock(64, 4, 256), _one(2, 16, 64),
          eligible=9),
    Model("gru_big", "a GRU over 12 steps", lambda: GRU(32, 64, 12), _one(2, 12, 32), eligible=6),
    Model("kv_cache_big", "a longer key/value window", lambda: KVCache(64, 32), _one(1, 64),
          mutable_buffers=("k_cache", "v_cache"), calls=5, eligible=9),
    Model("deep_big", "300 linears in a row: 600 constants", lambda: Deep(300, 8), _one(2, 8), eligible=600),
    Model("dynamic_big", "a wider MLP with a dynamic batch", lambda: MLP(16, 512, 64), _batch,
          dynamic=_dynamic_batch, calls=5, eligible=4),
    Model("mlp_wide", "an MLP of 64 MiB of weights: segments the writer lays out at their input's page-cache "
          "alignment", lambda: MLP(1024, 8192, 1024), _one(2, 1024), eligible=4),
)

# Deployment sizes, for the benchmark's validate section (bench/sections/validate.py): not committed, exported on
# demand (on 2 cores: 17 s and 1.5 GB of memory for the 256 MiB one, 52 s and 4.6 GB for 1 GiB; both styles;
# the 20 MiB one in a few seconds).
LARGE = (
    Model("stack_20m", "2 linears of 1024x2560 float32: 20 MiB of weights outside the delegate",
          lambda: Stack(2, 1024, 2560), _one(4, 1024), eligible=4),
    Model("stack_256m", "8 linears of 2048x4096 float32: 256 MiB of weights outside the delegate",
          lambda: Stack(8, 2048, 4096), _one(4, 2048), eligible=16),
    Model("stack_1g", "32 linears of 2048x4096 float32: 1 GiB of weights outside the delegate",
          lambda: Stack(32, 2048, 4096), _one(4, 2048), eligible=64),
)

SETS = {"small": SMALL, "big": BIG, "large": LARGE}


# --- export --------------------------------------------------------------------------------------------------


def export_program(model: Model, module: torch.nn.Module, example: dict[str, tuple[Any, ...]], style: str) -> bytes:
    """``module``'s methods exported with the real ExecuTorch exporter in ``style`` (copy or legacy)."""
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

    dynamic = model.dynamic() if model.dynamic else {}
    programs = {}
    for method, args in example.items():
        wrapped = module if method == "forward" else _Method(module, method)
        programs[method] = torch.export.export(wrapped, args, dynamic_shapes=dynamic.get(method), strict=False)
    edge = to_edge_transform_and_lower(programs, partitioner=model.partitioners())
    passes = [InitializedMutableBufferPass(list(model.mutable_buffers))] if model.mutable_buffers else []
    config = ExecutorchBackendConfig(enable_non_cpu_memory_planning=style == "copy", passes=passes)
    with torch.no_grad(), clone_spec_patch() if style == "copy" else contextlib.nullcontext():
        return bytes(edge.to_executorch(config).buffer)


class _Method(torch.nn.Module):
    """``module.method`` as a module's forward, for torch.export."""

    def __init__(self, module: torch.nn.Module, method: str) -> None:
        super().__init__()
        self.module = module
        self.method = method

    def forward(self, *args: Any) -> Any:
        return getattr(self.module, self.method)(*args)


def make_calls(model: Model) -> tuple[torch.nn.Module, dict[str, Calls]]:
    """The model with seeded weights and ``model.calls`` calls' inputs per method."""
    torch.manual_seed(SEED)
    module = model.make().eval()
    generator = torch.Generator().manual_seed(SEED)
    per_call = [model.inputs(generator) for _ in range(model.calls)]
    return module, {method: [call[method] for call in per_call] for method in per_call[0]}


def eager_outputs(model: Model, calls: dict[str, Calls]) -> dict[str, list[list[torch.Tensor]]]:
    """What eager PyTorch returns for each method's calls, in order, on a fresh model per method (state)."""
    expected = {}
    for method, method_calls in calls.items():
        module, _ = make_calls(model)
        with torch.no_grad():
            expected[method] = [[getattr(module, method)(*call)] for call in method_calls]
    return expected


def export_model(model: Model, out: Path, styles: Sequence[str] = STYLES) -> list[dict[str, Any]]:
    """Write NAME_STYLE.pte, .inputs.pt and .expected.pt for each style; their manifest entries."""
    entries = []
    for style in styles:
        module, calls = make_calls(model)
        example = {method: method_calls[0] for method, method_calls in calls.items()}
        stem = f"{model.name}_{style}"
        (out / f"{stem}.pte").write_bytes(export_program(model, module, example, style))
        torch.save(calls, out / f"{stem}.inputs.pt")
        torch.save(eager_outputs(model, calls), out / f"{stem}.expected.pt")
        entries.append({"name": stem, "model": model.name, "style": style, "what": model.what,
                        "methods": sorted(calls), "calls": model.calls, "eligible": model.eligible,
                        "devices": list(model.devices),
                        "files": {f.name: {"size": f.stat().st_size, "sha256": _sha256(f)}
                                  for f in sorted(out.glob(f"{stem}.*"))}})
    return entries


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, nargs="?", default=DEFAULT_OUT, help="output folder")
    parser.add_argument("--set", choices=sorted(SETS), default="small", help="which models (default: small)")
    parser.add_argument("--only", action="append", metavar="NAME", help="export only this model; repeatable")
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    args = parser.parse_args(argv)
    models = [m for m in SETS[args.set] if not args.only or m.name in args.only]
    if args.list:
        for model in models:
            print(f"{model.name:14} {model.what}")
        return 0
    if args.only and len(models) != len(set(args.only)):
        parser.error(f"unknown model in {args.only}; --list shows the names")
    args.out.mkdir(parents=True, exist_ok=True)
    manifest_path = args.out / "manifest.json"
    kept = json.loads(manifest_path.read_text())["fixtures"] if manifest_path.exists() and args.only else []
    entries = [e for e in kept if e["model"] not in {m.name for m in models}]
    for model in models:
        written = export_model(model, args.out)
        entries.extend(written)
        for entry in written:
            print(f"{entry['name']:24} {entry['files'][entry['name'] + '.pte']['size']:>8} B")
    versions = {"torch": torch.__version__, "executorch": _version("executorch")}
    manifest = {"generator": "examples/xnnpack_device.py", "seed": SEED, "versions": versions,
                "fixtures": sorted(entries, key=lambda e: e["name"])}
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    return 0


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


if __name__ == "__main__":
    raise SystemExit(main())
