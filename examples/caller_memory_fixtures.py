"""Export the caller-owned memory fixtures: a tiny Gemma 3 decoder whose inputs and outputs the caller owns.

    python examples/caller_memory_fixtures.py      # -> tests/fixtures/caller_memory/ (needs transformers 5.24.0)

``MemoryPlanningPass(alloc_graph_input=False, alloc_graph_output=False)`` leaves a method's inputs and outputs
unplanned: the caller binds them (``Method::set_input`` takes the caller's tensor, ``set_output_data_ptr``
its buffer).  In copy style 1.5.1's exporter then plans the ``_d2h_copy`` destinations the method returns
and leaves the device delegate's outputs unplanned instead; ``runner/method.py`` (``_bind_caller_memory``)
binds those on the delegate's device.  ``tests/test_caller_memory.py`` runs, rewrites and validates these.

The model: ``transformers``' ``Gemma3ForCausalLM`` from a tiny ``Gemma3TextConfig`` (one layer, 16 wide, a
sliding window), random weights from a fixed seed, as ``examples/real_models.py`` builds its models, in
three variants each of two memory plans:

* ``gemma3_{out,inout}_cpu.pte``: no delegate;
* ``gemma3_{out,inout}_all_{copy,legacy}.pte``: every op delegated to the reference device backend
  (examples/devconst_backend.py, ``DevconstPartitioner(None, "cuda:0", "outside")``), constants outside;

``out``: ``alloc_graph_output=False``; ``inout``: ``alloc_graph_input=False`` too.  Every NAME.pte comes with
``gemma3.inputs.pt`` (two calls of 8 tokens) and ``gemma3.expected.pt`` (eager outputs), shared by all.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from devconst_backend import DevconstPartitioner  # noqa: E402
from real_models import SEED, _hf, eager_outputs  # noqa: E402

from pte_devconst.exporting import clone_spec_patch  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "caller_memory"
GEMMA3 = _hf("Gemma3TextConfig", "Gemma3ForCausalLM", ("input_ids",), ("logits",), vocab_size=32, hidden_size=16,
             intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
             max_position_embeddings=16, sliding_window=4)


def export(program: torch.export.ExportedProgram, style: str, inputs_too: bool) -> bytes:
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes import MemoryPlanningPass

    partitioners = None if style == "cpu" else [DevconstPartitioner(None, "cuda:0", "outside")]
    edge = to_edge_transform_and_lower(program, partitioner=partitioners)
    config = ExecutorchBackendConfig(enable_non_cpu_memory_planning=style == "copy", memory_planning_pass=
                                     MemoryPlanningPass(alloc_graph_input=not inputs_too, alloc_graph_output=False))
    with clone_spec_patch() if style == "copy" else contextlib.nullcontext():
        return edge.to_executorch(config).buffer


def main(out: Optional[Path] = None) -> int:
    out = out or OUT
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    model = GEMMA3().eval()
    g = torch.Generator().manual_seed(SEED)
    calls = [(torch.randint(0, 32, (1, 8), generator=g),) for _ in range(2)]
    with torch.no_grad():
        program = torch.export.export(model, calls[0], strict=False)
    torch.save({"forward": calls}, out / "gemma3.inputs.pt")
    torch.save({"forward": eager_outputs(model, calls)}, out / "gemma3.expected.pt")
    for plan, inputs_too in (("out", False), ("inout", True)):
        for style, suffix in (("cpu", "cpu"), ("copy", "all_copy"), ("legacy", "all_legacy")):
            data = export(program, style, inputs_too)
            (out / f"gemma3_{plan}_{suffix}.pte").write_bytes(data)
            print(f"gemma3_{plan}_{suffix}.pte: {len(data)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
