"""Export small real architectures with the real ExecuTorch 1.5.1 exporter: the runner's real-model fixtures.

    python examples/real_models.py                       # every fixture -> tests/fixtures/real_models/
    python examples/real_models.py --only resnet --out DIR
    python examples/real_models.py --list                # architectures and variants, nothing exported

Each architecture is built here with random weights from a fixed seed (no downloads): torchvision-style
classifiers written out in this file (torchvision's wheel does not import next to the CPU torch),
tiny ``transformers`` models from config objects (needs ``pip install transformers``), LSTM and GRU, a
``torch.cond`` model and ExecuTorch's own LLaMA (``executorch.examples.models.llama``) with its static
KV cache, run for several decode steps.  Each is exported in five variants:

* ``NAME_cpu``: no delegate (ExecuTorch's portable kernels run everything);
* ``NAME_all_{copy,legacy}``: every op delegated to the reference device backend
  (examples/devconst_backend.py) on ``cuda:0``, constants left outside the delegate;
* ``NAME_mm_{copy,legacy}``: only matrix products and convolutions delegated (``MM_OPS``), so the
  host still transposes each linear weight (``permute_copy``) before the delegate reads it.

Every NAME.pte comes with NAME.inputs.pt ({method: [call inputs]}) and NAME.expected.pt ({method:
[eager outputs]}) in the corpus format; CPU programs also get NAME.runtime.pt, the outputs of the real
ExecuTorch runtime (calls run in order on one loaded method, so state carries over).  ``manifest.json``
lists every fixture (architecture, partition, style, tolerance, size, sha256, operators) and every
architecture the exporter could not export, with the reason.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import hashlib
import json
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

from devconst_backend import DevconstPartitioner  # noqa: E402
from export_examples import clone_spec_patch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "real_models"
SEED = 20240611
# The "mm" partition: matrix products and convolutions only (what a GEMM/conv-only device backend takes).
MM_OPS = frozenset({"aten.mm", "aten.bmm", "aten.addmm", "aten.baddbmm", "aten.convolution"})
PARTITIONS: dict[str, Optional[frozenset[str]]] = {"all": None, "mm": MM_OPS}
Call = tuple[torch.Tensor, ...]


# --- torchvision-style classifiers (torchvision itself does not import next to the CPU torch) --------------


def _conv_bn(c_in: int, c_out: int, kernel: int, stride: int = 1, groups: int = 1, act: Optional[nn.Module] = None
             ) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, groups=groups, bias=False),
                               nn.BatchNorm2d(c_out)]
    if act is not None:
        layers.append(act)
    return nn.Sequential(*layers)


class BasicBlock(nn.Module):
    """torchvision's ResNet BasicBlock: two 3x3 convolutions and a (downsampled) identity."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(_conv_bn(c_in, c_out, 3, stride, act=nn.ReLU()), _conv_bn(c_out, c_out, 3))
        self.downsample = _conv_bn(c_in, c_out, 1, stride) if stride != 1 or c_in != c_out else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.downsample(x))


class ResNet(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(_conv_bn(3, 8, 3, act=nn.ReLU()), nn.MaxPool2d(3, 2, 1))
        self.layers = nn.Sequential(BasicBlock(8, 8, 1), BasicBlock(8, 16, 2))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expand, 3x3 depthwise, 1x1 project (ReLU6), residual when shapes allow."""

    def __init__(self, c_in: int, c_out: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = c_in * expand
        layers: list[nn.Module] = [_conv_bn(c_in, hidden, 1, act=nn.ReLU6())] if expand != 1 else []
        layers += [_conv_bn(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6()), _conv_bn(hidden, c_out, 1)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(_conv_bn(3, 8, 3, 2, act=nn.ReLU6()), InvertedResidual(8, 8, 1, 1),
                                      InvertedResidual(8, 12, 2, 4), InvertedResidual(12, 12, 1, 4),
                                      _conv_bn(12, 32, 1, act=nn.ReLU6()))
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(32, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(nn.functional.adaptive_avg_pool2d(self.features(x), 1).flatten(1))


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    batch, channels, height, width = x.shape
    x = x.view(batch, groups, channels // groups, height, width).transpose(1, 2).contiguous()
    return x.view(batch, channels, height, width)


class ShuffleUnit(nn.Module):
    """ShuffleNetV2's unit: split the channels (stride 1) or branch twice (stride 2), concat, shuffle."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        half = c_out // 2
        self.stride = stride
        self.branch1 = (nn.Sequential(_conv_bn(c_in, c_in, 3, stride, groups=c_in),
                                      _conv_bn(c_in, half, 1, act=nn.ReLU()))
                        if stride > 1 else nn.Identity())
        self.branch2 = nn.Sequential(_conv_bn(c_in if stride > 1 else half, half, 1, act=nn.ReLU()),
                                     _conv_bn(half, half, 3, stride, groups=half),
                                     _conv_bn(half, half, 1, act=nn.ReLU()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(_conv_bn(3, 8, 3, 2, act=nn.ReLU()), nn.MaxPool2d(3, 2, 1))
        self.stage = nn.Sequential(ShuffleUnit(8, 16, 2), ShuffleUnit(16, 16, 1))
        self.conv5 = _conv_bn(16, 32, 1, act=nn.ReLU())
        self.fc = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv5(self.stage(self.stem(x))).mean([2, 3]))


class DenseLayer(nn.Module):
    def __init__(self, c_in: int, growth: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.BatchNorm2d(c_in), nn.ReLU(), nn.Conv2d(c_in, 2 * growth, 1, bias=False),
                                  nn.BatchNorm2d(2 * growth), nn.ReLU(),
                                  nn.Conv2d(2 * growth, growth, 3, padding=1, bias=False))

    def forward(self, features: list[torch.Tensor]) -> torch.Tensor:
        return self.body(torch.cat(features, 1))


class DenseBlock(nn.Module):
    """DenseNet's block: every layer reads the concatenation of all earlier feature maps."""

    def __init__(self, layers: int, c_in: int, growth: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DenseLayer(c_in + i * growth, growth) for i in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x]
        for layer in self.layers:
            features.append(layer(features))
        return torch.cat(features, 1)


class DenseNet(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
            DenseBlock(2, 8, 4),
            nn.BatchNorm2d(16), nn.ReLU(), nn.Conv2d(16, 8, 1, bias=False), nn.AvgPool2d(2, 2),  # transition
            DenseBlock(2, 8, 4), nn.BatchNorm2d(16), nn.ReLU())
        self.fc = nn.Linear(16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


# --- recurrent networks and control flow -------------------------------------------------------------------


class LSTMModel(nn.Module):
    """Two-layer LSTM over a sequence with its state passed in and out, and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(8, 16, num_layers=2, batch_first=True)
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out, (h, c) = self.lstm(x, (h0, c0))
        return self.head(out), h, c


class GRUModel(nn.Module):
    """Bidirectional GRU with its state passed in and out, and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(8, 12, batch_first=True, bidirectional=True)
        self.head = nn.Linear(24, 4)

    def forward(self, x: torch.Tensor, h0: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out, h = self.gru(x, h0)
        return self.head(out), h


class CondModel(nn.Module):
    """``torch.cond`` on the input's sign: each branch has its own weights (JumpFalseCall in the program)."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(8, 8)
        self.yes = nn.Linear(8, 8)
        self.no = nn.Linear(8, 8)
        self.out = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        h = torch.cond(h.sum() > 0, lambda t: torch.relu(self.yes(t)) * 2.0, lambda t: self.no(t) - 1.0, (h,))
        return self.out(h)


# --- Hugging Face transformers (tiny configs, random weights) ----------------------------------------------


class HFOutputs(nn.Module):
    """A transformers model called with keyword inputs, returning plain tensors (export needs no ModelOutput)."""

    def __init__(self, model: nn.Module, input_names: Sequence[str], output_names: Sequence[str]) -> None:
        super().__init__()
        self.model = model
        self.input_names = tuple(input_names)
        self.output_names = tuple(output_names)

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        result = self.model(**dict(zip(self.input_names, inputs)), return_dict=True)
        return tuple(result[name] for name in self.output_names)


def _hf(config_class: str, model_class: str, inputs: Sequence[str], outputs: Sequence[str], **config: Any
        ) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        import transformers

        settings = getattr(transformers, config_class)(**config)
        settings._attn_implementation = "eager"
        if hasattr(settings, "use_cache"):
            settings.use_cache = False
        return HFOutputs(getattr(transformers, model_class)(settings), inputs, outputs)

    return make


def _tokens(vocab: int, *shape: int) -> Callable[[torch.Generator], Call]:
    return lambda g: (torch.randint(0, vocab, shape, generator=g),)


def _bert_inputs(g: torch.Generator) -> Call:
    ids = torch.randint(0, 64, (1, 8), generator=g)
    mask = torch.ones(1, 8, dtype=torch.long)
    mask[0, int(torch.randint(5, 8, (1,), generator=g)):] = 0  # right padding
    return ids, mask


def _seq2seq_inputs(g: torch.Generator) -> Call:
    return torch.randint(0, 64, (1, 8), generator=g), torch.randint(0, 64, (1, 4), generator=g)


# --- ExecuTorch's own LLaMA with its static KV cache ---------------------------------------------------------


class ETLlama(nn.Module):
    """``executorch.examples.models.llama``'s Transformer with its KV cache (fixed-size mutable buffers).

    ``dynamic=True`` is ExecuTorch's own export recipe (``enable_dynamic_shape``): the token count is a
    dynamic dim, so one program prefills a prompt and then decodes one token per call; ``dynamic=False``
    takes exactly one token per call.
    """

    MAX_SEQ_LEN = 16

    def __init__(self, dynamic: bool) -> None:
        super().__init__()
        from executorch.examples.models.llama.llama_transformer import construct_transformer
        from executorch.examples.models.llama.model_args import ModelArgs

        args = ModelArgs(dim=16, n_layers=2, n_heads=2, n_kv_heads=1, vocab_size=32, hidden_dim=32,
                         max_batch_size=1, max_seq_len=self.MAX_SEQ_LEN, max_context_len=self.MAX_SEQ_LEN,
                         use_kv_cache=True, generate_full_logits=False, enable_dynamic_shape=dynamic)
        self.model = construct_transformer(args)

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        return self.model(tokens, {"input_pos": input_pos})


def _generation(prompt: int, steps: int) -> Callable[[torch.Generator], list[Call]]:
    """A prompt of ``prompt`` tokens in one call (1: no prefill), then ``steps`` one-token decode calls."""

    def calls(g: torch.Generator) -> list[Call]:
        tokens = torch.randint(0, 32, (prompt + steps,), generator=g)
        result = [(tokens[:prompt].reshape(1, prompt), torch.tensor([0]))]
        return result + [(tokens[i].reshape(1, 1), torch.tensor([i])) for i in range(prompt, prompt + steps)]

    return calls


def _token_dim() -> Any:
    from torch.export import Dim

    return ({1: Dim("token_dim", max=ETLlama.MAX_SEQ_LEN - 1)}, None)


def _initialized_kv_cache() -> list:
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

    return [InitializedMutableBufferPass(["k_cache", "v_cache"])]


# --- the architectures ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Architecture:
    """One model: how to build it (seeded), its calls (run in order), and how its outputs compare."""

    name: str
    make: Callable[[], nn.Module]
    calls: Callable[[torch.Generator], list[Call]]
    rtol: float = 1e-4
    atol: float = 1e-5
    dynamic_shapes: Optional[Callable[[], Any]] = None  # torch.export's dynamic_shapes
    passes: Callable[[], list] = list  # extra to_executorch passes

    def build(self) -> tuple[nn.Module, list[Call]]:
        torch.manual_seed(SEED)
        model = self.make().eval()
        _randomize_norm_statistics(model)
        return model, self.calls(torch.Generator().manual_seed(SEED))


def _randomize_norm_statistics(model: nn.Module) -> None:
    """Fresh BatchNorms normalize by (0, 1): random statistics make the folded arithmetic matter."""
    generator = torch.Generator().manual_seed(SEED + 1)
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            with torch.no_grad():
                module.running_mean.copy_(torch.randn(module.num_features, generator=generator) * 0.1)
                module.running_var.copy_(torch.rand(module.num_features, generator=generator) + 0.5)
                module.weight.copy_(torch.rand(module.num_features, generator=generator) + 0.5)
                module.bias.copy_(torch.randn(module.num_features, generator=generator) * 0.1)


def _repeat(make_call: Callable[[torch.Generator], Call], count: int = 2) -> Callable[[torch.Generator], list[Call]]:
    return lambda g: [make_call(g) for _ in range(count)]


def _image(size: int) -> Callable[[torch.Generator], Call]:
    return lambda g: (torch.randn(1, 3, size, size, generator=g),)


def _cond_calls(g: torch.Generator) -> list[Call]:
    x = torch.randn(2, 8, generator=g)
    return [(x,), (-x,), (x * 0.5,)]  # the sign of inp(x).sum() picks the branch: false, true, false


ARCHITECTURES: tuple[Architecture, ...] = (
    Architecture("resnet", ResNet, _repeat(_image(16))),
    Architecture("mobilenet_v2", MobileNetV2, _repeat(_image(16))),
    Architecture("shufflenet_v2", ShuffleNetV2, _repeat(_image(32))),
    Architecture("densenet", DenseNet, _repeat(_image(16))),
    Architecture("lstm", LSTMModel, _repeat(lambda g: (torch.randn(1, 5, 8, generator=g),
                                                       torch.randn(2, 1, 16, generator=g),
                                                       torch.randn(2, 1, 16, generator=g)))),
    Architecture("gru", GRUModel, _repeat(lambda g: (torch.randn(1, 5, 8, generator=g),
                                                     torch.randn(2, 1, 12, generator=g)))),
    Architecture("cond", CondModel, _cond_calls),
    Architecture("bert", _hf("BertConfig", "BertModel", ("input_ids", "attention_mask"),
                             ("last_hidden_state", "pooler_output"), vocab_size=64, hidden_size=16,
                             num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                             max_position_embeddings=16), _repeat(_bert_inputs)),
    Architecture("gpt2", _hf("GPT2Config", "GPT2LMHeadModel", ("input_ids",), ("logits",), vocab_size=64,
                             n_positions=16, n_embd=16, n_layer=1, n_head=2), _repeat(_tokens(64, 1, 8))),
    Architecture("llama", _hf("LlamaConfig", "LlamaForCausalLM", ("input_ids",), ("logits",), vocab_size=64,
                              hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                              num_key_value_heads=1, max_position_embeddings=32), _repeat(_tokens(64, 1, 8))),
    Architecture("t5", _hf("T5Config", "T5ForConditionalGeneration", ("input_ids", "decoder_input_ids"), ("logits",),
                           vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_decoder_layers=1,
                           num_heads=2, relative_attention_num_buckets=8, relative_attention_max_distance=16),
                 _repeat(_seq2seq_inputs)),
    Architecture("vit", _hf("ViTConfig", "ViTForImageClassification", ("pixel_values",), ("logits",), image_size=16,
                            patch_size=8, num_channels=3, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=32, num_labels=10), _repeat(_image(16))),
    Architecture("whisper", _hf("WhisperConfig", "WhisperForConditionalGeneration",
                                ("input_features", "decoder_input_ids"), ("logits",), vocab_size=64, num_mel_bins=8,
                                encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                                decoder_attention_heads=2, d_model=16, encoder_ffn_dim=32, decoder_ffn_dim=32,
                                max_source_positions=8, max_target_positions=16, pad_token_id=0, bos_token_id=1,
                                eos_token_id=2, decoder_start_token_id=1),
                 _repeat(lambda g: (torch.randn(1, 8, 16, generator=g), torch.randint(0, 64, (1, 4), generator=g)))),
    Architecture("wav2vec2", _hf("Wav2Vec2Config", "Wav2Vec2ForCTC", ("input_values",), ("logits",), vocab_size=32,
                                 hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                                 conv_dim=(8, 8), conv_stride=(5, 2), conv_kernel=(10, 3), conv_bias=True,
                                 num_conv_pos_embeddings=4, num_conv_pos_embedding_groups=2),
                 _repeat(lambda g: (torch.randn(1, 400, generator=g),))),
    # ExecuTorch's export recipe: dynamic token count (prefill, then decode); the cache starts as zeros.
    Architecture("et_llama", lambda: ETLlama(dynamic=True), _generation(3, 3), dynamic_shapes=_token_dim),
    # One token per call; the cache is initial state in the program (as ExecuTorch exports it for some backends).
    Architecture("et_llama_static", lambda: ETLlama(dynamic=False), _generation(1, 3), passes=_initialized_kv_cache),
)


@dataclass(frozen=True)
class Variant:
    partition: Optional[str]  # None: CPU program; else a key of PARTITIONS
    style: str  # "cpu", "copy" or "legacy"

    @property
    def suffix(self) -> str:
        return "cpu" if self.partition is None else f"{self.partition}_{self.style}"

    def partitioners(self) -> list:
        if self.partition is None:
            return []
        return [DevconstPartitioner(PARTITIONS[self.partition], "cuda:0", "outside")]


VARIANTS = (Variant(None, "cpu"), Variant("all", "copy"), Variant("all", "legacy"), Variant("mm", "copy"),
            Variant("mm", "legacy"))


def export_program(model: nn.Module, example: Call, variant: Variant, dynamic_shapes: Any = None,
                   passes: Sequence[Any] = ()) -> bytes:
    """The real 1.5.1 exporter, as export_examples.py runs it (copy style needs its clone-spec patch)."""
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

    with torch.no_grad():
        program = torch.export.export(model, example, dynamic_shapes=dynamic_shapes, strict=False)
    edge = to_edge_transform_and_lower(program, partitioner=variant.partitioners() or None)
    config = ExecutorchBackendConfig(enable_non_cpu_memory_planning=variant.style != "legacy", passes=list(passes))
    with clone_spec_patch() if variant.style == "copy" else contextlib.nullcontext():
        return edge.to_executorch(config).buffer


def eager_outputs(model: nn.Module, calls: list[Call]) -> list[list[torch.Tensor]]:
    """Eager outputs of ``calls`` run in order on one copy of ``model`` (state such as a KV cache carries over)."""
    model = copy.deepcopy(model)
    results = []
    with torch.no_grad():
        for call in calls:
            out = model(*call)
            results.append([t.detach().clone() for t in (out if isinstance(out, (tuple, list)) else (out,))])
    return results


def runtime_outputs(pte: Path, calls: list[Call]) -> list[list[Any]]:
    """The real ExecuTorch runtime's outputs, the calls run in order on one loaded method."""
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(str(pte)).load_method("forward")
    return [[o.clone() if isinstance(o, torch.Tensor) else o for o in method.execute(list(call))] for call in calls]


def operators_of(pte: bytes) -> list[str]:
    """The operators the program's kernels call (the runner must resolve every one)."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    program = deserialize_pte_binary(pte).program
    return sorted({f"{op.name}.{op.overload}" if op.overload else op.name
                   for plan in program.execution_plan for op in plan.operators})


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def export_architecture(arch: Architecture, out: Path, variants: Sequence[Variant] = VARIANTS) -> list[dict]:
    """Export ``arch`` in ``variants`` into ``out``; one manifest entry per program written."""
    model, calls = arch.build()
    expected = eager_outputs(model, calls)
    entries = []
    for variant in variants:
        name = f"{arch.name}_{variant.suffix}"
        model, calls = arch.build()  # a fresh model per export: lowering may touch the module
        pte = export_program(model, calls[0], variant, arch.dynamic_shapes() if arch.dynamic_shapes else None,
                             arch.passes())
        path = out / f"{name}.pte"
        path.write_bytes(pte)
        torch.save({"forward": calls}, out / f"{name}.inputs.pt")
        torch.save({"forward": expected}, out / f"{name}.expected.pt")
        files = [path.name, f"{name}.inputs.pt", f"{name}.expected.pt"]
        if variant.partition is None:
            torch.save({"forward": runtime_outputs(path, calls)}, out / f"{name}.runtime.pt")
            files.append(f"{name}.runtime.pt")
        entries.append({"name": name, "architecture": arch.name, "partition": variant.partition or "none",
                        "style": variant.style, "calls": len(calls), "rtol": arch.rtol, "atol": arch.atol,
                        "operators": operators_of(pte),
                        "files": [{"file": f, "size": (out / f).stat().st_size, "sha256": _sha256(out / f)}
                                  for f in files]})
    return entries


def _versions() -> dict[str, str]:
    from importlib import metadata

    versions = {"torch": torch.__version__, "executorch": metadata.version("executorch")}
    with contextlib.suppress(metadata.PackageNotFoundError):
        versions["transformers"] = metadata.version("transformers")
    return versions


def export_all(out: Path, only: Optional[set[str]] = None, variants: Sequence[Variant] = VARIANTS,
               verbose: bool = False) -> dict:
    """Export every architecture (or those in ``only``) into ``out`` and write ``manifest.json``.

    An architecture the exporter cannot handle is recorded under ``failed`` with the reason; with
    ``only`` the manifest's other entries are kept.
    """
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if only and manifest_path.exists() else {}
    fixtures = {e["name"]: e for e in manifest.get("fixtures", [])}
    failed = {f["architecture"]: f for f in manifest.get("failed", [])}
    for arch in ARCHITECTURES:
        if only is not None and arch.name not in only:
            continue
        try:
            entries = export_architecture(arch, out, variants)
        except Exception as error:  # noqa: BLE001 - recorded in the manifest, the others still export
            if verbose:
                traceback.print_exc()
            failed[arch.name] = {"architecture": arch.name, "error": f"{type(error).__name__}: "
                                 f"{' '.join(str(error).split())[:400]}"}
            print(f"{arch.name}: FAILED {failed[arch.name]['error']}", file=sys.stderr)
            continue
        failed.pop(arch.name, None)
        for entry in entries:
            fixtures[entry["name"]] = entry
            print(f"{entry['name']}: {entry['files'][0]['size']} B, {len(entry['operators'])} operators")
    manifest = {"generator": "examples/real_models.py", "seed": SEED, "versions": _versions(),
                "variants": [v.suffix for v in variants], "mm_ops": sorted(MM_OPS),
                "fixtures": [fixtures[k] for k in sorted(fixtures)], "failed": [failed[k] for k in sorted(failed)]}
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="output folder (default tests/fixtures/real_models)")
    parser.add_argument("--only", action="append", metavar="ARCH", help="export only this architecture; repeatable")
    parser.add_argument("--list", action="store_true", help="list the architectures and variants, export nothing")
    parser.add_argument("--verbose", action="store_true", help="print the traceback of an export that fails")
    args = parser.parse_args(argv)
    if args.list:
        for arch in ARCHITECTURES:
            print(f"{arch.name}: {', '.join(f'{arch.name}_{v.suffix}' for v in VARIANTS)}")
        return 0
    manifest = export_all(args.out, set(args.only) if args.only else None, verbose=args.verbose)
    return 1 if manifest["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
