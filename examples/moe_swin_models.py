"""Export tiny MoE and Swin models in matmul-only partitions: the per-call H2D figure's fixtures for them.

    python examples/moe_swin_models.py                 # -> tests/fixtures/moe_swin/
    python examples/moe_swin_models.py --out DIR

Issue 19 reported ``inspect``'s per-call host-to-device figure a few KiB off the runner's measurement on
legacy programs with matmul-only partitions of MoE and Swin models.  These are such programs, built the
way ``examples/real_models.py`` builds its ``transformers`` models (tiny config objects, random weights
from a fixed seed, nothing downloaded) and exported by the real ExecuTorch 1.5.1 exporter in its ``mm``
partition (only matrix products delegated), legacy and copy style:

* ``mixtral``: ``MixtralForCausalLM``, 4 experts, top 2, with ``experts_implementation="batched_mm"``
  (each token's expert weights gathered with ``index`` on the host, then ``bmm`` on the device).  The
  other two implementations do not export: ``grouped_mm`` (the default) calls ``aten.histc``, which is
  not in the core ATen opset, and ``eager`` loops over the experts a call hits, a data-dependent count
  (``GuardOnDataDependentSymNode``);
* ``qwen2moe``: ``Qwen2MoeForCausalLM``, the same experts plus a shared expert behind a sigmoid gate;
* ``et_moe``: ExecuTorch's LLaMA with ``moe=True``, exported the way its recipe does (a dynamic token
  count: a 3-token prefill, then one-token decode steps): its figure is a bound (``<=``);
* ``swin``: ``SwinForImageClassification``, one stage of two blocks (the second shifts its windows, so
  the attention mask and the relative-position bias index are constant-derived host tensors the
  device reads every call).

``tests/test_estimate_vs_runner.py`` runs every committed program here through the figure-vs-runner check
(before and after the rewrite, by value).  Needs ``pip install -e ".[real-models]"`` (transformers 5.24.0).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

import real_models as rm  # noqa: E402



class ETMoE(rm.ETLlama):
    """ExecuTorch's own LLaMA with its MoE feed-forward (4 experts, top 2), exported by its recipe: a dynamic
    token count, so the tokens each expert sees and the expert weights gathered for them are DYNAMIC_BOUND."""

    def __init__(self) -> None:
        nn.Module.__init__(self)
        from executorch.examples.models.llama.llama_transformer import construct_transformer
        from executorch.examples.models.llama.model_args import ModelArgs

        args = ModelArgs(dim=8, n_layers=1, n_heads=2, n_kv_heads=1, vocab_size=32, hidden_dim=16,
                         max_batch_size=1, max_seq_len=self.MAX_SEQ_LEN, max_context_len=self.MAX_SEQ_LEN,
                         use_kv_cache=True, generate_full_logits=False, enable_dynamic_shape=True,
                         moe=True, num_experts=4, num_activated_experts=2)
        self.model = construct_transformer(args)


DEFAULT_OUT = rm.ROOT / "tests" / "fixtures" / "moe_swin"
VARIANTS = (rm.Variant("mm", "legacy"), rm.Variant("mm", "copy"))

ARCHITECTURES = (
    rm.Architecture("mixtral", rm._hf("MixtralConfig", "MixtralForCausalLM", ("input_ids",), ("logits",),
                                      vocab_size=32, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16,
                                      num_local_experts=4, num_experts_per_tok=2, experts_implementation="batched_mm"),
                    rm._repeat(rm._tokens(32, 1, 6))),
    rm.Architecture("qwen2moe", rm._hf("Qwen2MoeConfig", "Qwen2MoeForCausalLM", ("input_ids",), ("logits",),
                                       vocab_size=32, hidden_size=8, intermediate_size=16, moe_intermediate_size=8,
                                       shared_expert_intermediate_size=8, num_hidden_layers=1, num_attention_heads=2,
                                       num_key_value_heads=1, max_position_embeddings=16, num_experts=4,
                                       num_experts_per_tok=2, experts_implementation="batched_mm"),
                    rm._repeat(rm._tokens(32, 1, 6))),
    rm.Architecture("et_moe", ETMoE, rm._generation(3, 3), dynamic_shapes=rm._token_dim),
    rm.Architecture("swin", rm._hf("SwinConfig", "SwinForImageClassification", ("pixel_values",), ("logits",),
                                   image_size=8, patch_size=2, num_channels=3, embed_dim=8, depths=[2],
                                   num_heads=[2], window_size=2, num_labels=4),
                    rm._repeat(rm._image(8))),
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    fixtures = []
    for arch in ARCHITECTURES:
        for entry in rm.export_architecture(arch, args.out, VARIANTS):
            entry["dynamic"] = arch.dynamic_shapes is not None
            fixtures.append(entry)
            print(f"{entry['name']}: {entry['files'][0]['size']} B, {len(entry['operators'])} operators")
    manifest = {"generator": "examples/moe_swin_models.py", "seed": rm.SEED, "versions": rm._versions(),
                "fixtures": fixtures}
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
