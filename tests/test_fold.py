"""``rewrite --fold`` on real programs: what it folds, keeps and drops, and what the runner measures afterwards.

The fold fixtures (tests/fixtures/fold, examples/fold_cases.py) each stand for one situation; the real-model
``mm`` fixtures are the issue's "partitions that delegate only matmul or convolution".  Every fold here is
checked by ``validate``: bit-identical outputs, every delegate call given the same bytes (the folded values
against what the original's kernels computed), each folded value copied once at load, and the per-call
host-to-device bytes fallen by exactly what the original copied of them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Optional

import pytest
import torch

from cli_runner import invoke, invoke_json
from pte_devconst.api import check
from pte_devconst.rewriter.fold import FOLD_KERNELS, ShapeOps, Strided, Tracer
from pte_devconst.rewriter.load import analyze_file
from pte_devconst.rewriter.plan import RewriteOptions
from pte_devconst.rewriter.rewrite import rewrite_file
from pte_devconst.runner.run import run_program
from pte_devconst.runner.validate import validate
from pte_devconst.schema import model as m
from pte_devconst.schema.pte_file import open_pte

FOLD = Path(__file__).parent / "fixtures" / "fold"
REAL = Path(__file__).parent / "fixtures" / "real_models"
FOLDING = RewriteOptions(fold=True)


def _inputs(path: Path) -> Path:
    return path.with_name(f"{path.stem}.inputs.pt")


def _folded(path: Path, tmp_path: Path, options: RewriteOptions = FOLDING, ptd: Optional[Path] = None):
    label = "folded" if options.fold else "duplicated" if options.duplicate_shared else "plain"
    out = tmp_path / f"{path.stem}.{label}.pte"
    return rewrite_file(path, out, ptd=ptd, options=options, durable=False), out


def _validated(original: Path, rewritten: Path, ptd: Optional[Path] = None, methods=None):
    expected = original.with_name(f"{original.stem}.expected.pt")
    result = validate(original, rewritten, ptd=ptd, inputs=_inputs(original), expected=expected,
                      simulate_devices=True, methods=methods)
    failed = [c for mv in result.methods for c in mv.checks if not c.passed]
    assert result.passed, failed
    assert all(mv.bit_identical_required for mv in result.methods)
    return result


def _kernels(path: Path, method: int = 0) -> list[str]:
    with open_pte(path) as pte:
        plan = pte.program.execution_plan[method]
        return [plan.operators[i.op_index].qualified_name for c in plan.chains for i in c.instructions
                if isinstance(i, m.KernelCall)]


def test_the_fixtures_are_the_ones_the_generator_wrote() -> None:
    manifest = json.loads((FOLD / "manifest.json").read_text())
    on_disk = {p.name for p in FOLD.iterdir() if p.name not in ("manifest.json", "README.md")}
    assert set(manifest["files"]) == on_disk
    for name, facts in manifest["files"].items():
        assert hashlib.sha256((FOLD / name).read_bytes()).hexdigest() == facts["sha256"], name


# --- analysis -----------------------------------------------------------------------------------------


def test_inspect_shows_each_chain_and_the_constant_verdict() -> None:
    code, report = invoke_json("inspect", REAL / "llama_mm_legacy.pte")
    method = report["file"]["methods"][0]
    verdicts = {c["value"]: c["verdict"] for c in method["constants"]}
    assert verdicts[1] == "foldable: permute_copy at #7, then read by delegate 0 on cuda:0"
    assert [(f["source"], f["kernels"], f["status"]) for f in method["folds"]][:2] == [
        (1, ["permute_copy at #7"], "foldable"), (2, ["permute_copy at #8"], "foldable")]
    assert report["fold_hint"] == {"tensors": 8, "bytes_per_call": 13312}
    text = invoke("inspect", REAL / "gpt2_mm_copy.pte").stdout
    assert "1 more tensor (4.0 KiB per call) would move with --fold" in text
    assert "chains of host kernels from constants to device readers" in text


def test_a_tied_embedding_folds_its_transpose_and_keeps_the_constant_for_the_host() -> None:
    """GPT-2's token embedding is read by the host's embedding kernel and, transposed, by the device's
    lm_head: the transpose folds, the constant stays (its verdict says why)."""
    (method,) = analyze_file(REAL / "gpt2_mm_copy.pte").methods
    (chain,) = method.folds.foldable
    assert chain.stays == ("read by host kernel aten::embedding.out",)
    constant = next(c for c in method.constants if c.value == chain.source)
    assert method.folds.verdict(constant) == ("foldable: permute_copy at #7, then read by delegate 6 on cuda:0 (the "
                                              "host keeps what it still reads: read by host kernel "
                                              "aten::embedding.out)")


@pytest.mark.parametrize("name", ["llama_mm_copy", "gpt2_mm_legacy", "lstm_mm_copy", "wav2vec2_mm_legacy"])
def test_the_chains_bytes_are_what_the_runner_measures_crossing_after_a_plain_rewrite(name: str,
                                                                                       tmp_path: Path) -> None:
    """The analysis (static) and the runner's constant-derived measure (dynamic) agree: after a plain
    rewrite, what still crosses per call from constants is exactly the foldable chains' bytes (wav2vec2 also
    computes a weight norm on the host: mul, div, pow and sum are arithmetic, not foldable).  LSTM's constant 3,
    whose device copy a later delegate output lies exactly on, moves too: the reference blob declares that
    argument an output (program/delegate_blobs.py), so no copy is kept for a view that is not there."""
    source = REAL / f"{name}.pte"
    (method,) = analyze_file(source).methods
    static = sum(c.bytes_per_call for c in method.folds.foldable)
    viewed = sum(c.tensor.nbytes for c in method.constants if "its device copy is also read through a static view"
                 in c.reasons for r in c.readers if r.copies_to_device)
    _, plain = _folded(source, tmp_path, RewriteOptions())
    run = run_program(plain, inputs=_inputs(source), calls=2, simulate_devices=True)
    measured = run.calls[-1].copies.constant_derived_h2d.nbytes
    assert static > 0 and measured == static + viewed + (2048 if name.startswith("wav2vec2") else 0)
    assert viewed == 0


def test_a_chain_with_a_dynamic_argument_is_not_foldable(tmp_path: Path) -> None:
    """view_copy's size computed at run time (a prim op writes it): the kernel stays, with the reason."""
    path = FOLD / "shared_legacy.pte"
    with open_pte(path) as pte:
        plan = pte.program.execution_plan[0]
    tracer = Tracer(plan)
    permute = next(k for k, i in enumerate(plan.chains[0].instructions) if isinstance(i, m.KernelCall)
                   and plan.operators[i.op_index].qualified_name == "aten::permute_copy.out")
    dims = plan.chains[0].instructions[permute].args[1]
    assert tracer.trace(plan.chains[0].instructions[permute].args[-1]) is not None

    def computed_dims(program: m.Program) -> m.Program:
        forward = program.execution_plan[0]
        ops = forward.operators + (m.Operator("executorch_prim::add", "Scalar"),)
        item = forward.values[dims].items[0]
        add = m.KernelCall(len(ops) - 1, (item, item, item))  # writes one of the dims: no longer a literal
        chain = m.replace(forward.chains[0], instructions=(add,) + forward.chains[0].instructions)
        return m.replace(program, execution_plan=(m.replace(forward, operators=ops, chains=(chain,)),))

    from forge import edit_program
    forged = edit_program(path, tmp_path / "dynamic.pte", computed_dims)
    (method,) = analyze_file(forged).methods
    assert not method.folds.foldable
    constant = next(c for c in method.constants if c.value == 0)
    assert "not foldable: its argument" in " ".join(method.folds.nodes[0].host), method.folds.nodes[0].host
    assert constant.verdict.startswith("not eligible")


# --- what a fold does, in both styles ---------------------------------------------------------------


@pytest.mark.parametrize("style", ["copy", "legacy"])
def test_a_transpose_the_host_also_reads_keeps_its_kernel_and_the_device_gets_its_own(style: str,
                                                                                    tmp_path: Path) -> None:
    source = FOLD / f"shared_{style}.pte"
    result, out = _folded(source, tmp_path)
    (fold,) = result.plan.folds
    assert fold.chain.stays == () and "aten::permute_copy.out" in _kernels(out)
    # legacy: the host value is the delegate's argument, so the device gets a new value; copy: the device copy
    assert fold.appended == (style == "legacy")
    run = _validated(source, out).methods[0].calls[-1]
    assert run.derived_before == 512 and run.derived_after == 0


@pytest.mark.parametrize("style", ["copy", "legacy"])
def test_a_chain_of_four_kernels_with_two_casts_folds_whole(style: str, tmp_path: Path) -> None:
    source = FOLD / f"steps_{style}.pte"
    result, out = _folded(source, tmp_path)
    assert sorted(len(f.chain.steps) for f in result.plan.folds) == [3, 4]
    assert not set(_kernels(out)) & set(FOLD_KERNELS)
    assert result.plan.methods[0].released == (0, 1) and len(result.plan.dropped_constants) == 2
    _validated(source, out)


def test_float_to_int_casts_fold_when_every_value_converts_and_are_refused_with_a_nan(tmp_path: Path) -> None:
    result, out = _folded(FOLD / "ints_copy.pte", tmp_path)
    assert len(result.plan.folds) == 1
    _validated(FOLD / "ints_copy.pte", out)
    refused, _ = _folded(FOLD / "nan_copy.pte", tmp_path)
    assert not refused.plan.folds and refused.plan.is_empty
    (skip,) = refused.plan.fold_skipped
    assert skip.reason == ("_to_dim_order_copy casts NaN, infinite or out-of-range values to int32, which C++ "
                           "leaves undefined")


def test_two_methods_folding_one_weight_store_its_folded_bytes_once(tmp_path: Path) -> None:
    source = FOLD / "methods_copy.pte"
    result, out = _folded(source, tmp_path)
    assert len(result.plan.folds) == 2 and len(result.plan.initial_data) == 1
    assert {f.initial_data_index for f in result.plan.folds} == {1}
    _validated(source, out, methods=["forward", "again"])


@pytest.mark.parametrize("style", ["copy", "legacy"])
def test_a_weight_in_a_ptd_folds_from_the_ptd_and_is_unknown_without_it(style: str, tmp_path: Path) -> None:
    source = FOLD / f"external_{style}.pte"
    ptd = source.with_suffix(".ptd")
    result, out = _folded(source, tmp_path, ptd=ptd)
    (fold,) = result.plan.folds
    assert fold.external_key is None and result.plan.initial_data[0].recipe.source.is_external
    _validated(source, out, ptd=ptd)
    alone = tmp_path / source.name
    alone.write_bytes(source.read_bytes())  # no NAME.ptd next to it
    (method,) = analyze_file(alone).methods
    (chain,) = method.folds.chains
    assert chain.problem.startswith("external (data in a .ptd) but no .ptd given")


@pytest.mark.parametrize("style", ["copy", "legacy"])
def test_a_channels_last_copy_of_a_weight_folds_in_its_dim_order(style: str, tmp_path: Path) -> None:
    source = FOLD / f"channels_last_{style}.pte"
    result, out = _folded(source, tmp_path)
    (fold,) = result.plan.folds
    assert fold.tensor.dim_order == (0, 2, 3, 1)
    _validated(source, out)


def test_filters_apply_to_folds_and_a_plain_rewrite_folds_nothing(tmp_path: Path) -> None:
    source = FOLD / "steps_copy.pte"
    result, _ = _folded(source, tmp_path, RewriteOptions(fold=True, min_bytes=1000))
    assert [len(f.chain.steps) for f in result.plan.folds] == [3]
    assert [s.reason for s in result.plan.fold_skipped] == ["512 bytes is below --min-bytes 1000"]
    plain, out = _folded(source, tmp_path, RewriteOptions())
    assert not plain.plan.folds and plain.fold_gain.tensors == 2
    assert [k for k in _kernels(out) if k in FOLD_KERNELS] == [k for k in _kernels(source) if k in FOLD_KERNELS]


def test_a_folded_file_folds_nothing_more(tmp_path: Path) -> None:
    _, once = _folded(REAL / "t5_mm_copy.pte", tmp_path)
    again = tmp_path / "again.pte"
    result = rewrite_file(once, again, options=FOLDING, durable=False)
    assert result.plan.is_empty and again.read_bytes() == once.read_bytes()


@pytest.mark.parametrize("name", ["v_c_shared_host_copy", "v_c_shared_host_legacy", "v_g_external_copy",
                                  "v_g_external_legacy"])
def test_duplicate_shared_gives_device_readers_their_own_copy(name: str, tmp_path: Path) -> None:
    """A constant a host kernel and device delegates both read: with --duplicate-shared the delegates get a
    device-resident copy (initial data, or the same .ptd key), the host keeps the constant."""
    from conftest import CORPUS
    source = CORPUS / f"{name}.pte"
    ptd = source.with_suffix(".ptd") if source.with_suffix(".ptd").exists() else None
    plain, _ = _folded(source, tmp_path, RewriteOptions(fold=True))
    result, out = _folded(source, tmp_path, RewriteOptions(duplicate_shared=True), ptd=ptd)
    (copy,) = result.plan.folds
    assert copy.duplicate and not plain.plan.folds
    assert (copy.external_key is not None) == name.startswith("v_g")
    assert copy.appended == name.endswith("legacy")
    _validated(source, out, ptd=ptd)


# --- the done-when, on the real architectures -------------------------------------------------

ARCHITECTURES = ("llama", "t5", "bert", "gpt2", "vit", "whisper", "wav2vec2", "lstm")
# What a fold cannot remove: wav2vec2's positional convolution uses weight norm, computed on the host from two
# constants with mul, div, pow and sum (arithmetic: no table kernel computes it bit-exactly as C++ sums).  And in
# A device copy whose bytes a later delegate output lies exactly on (LSTM's constant 3, Whisper's permuted constant
# 24, copy style) goes: the reference blob declares that argument an output (program/delegate_blobs.py).
NOT_FOLDABLE = {("wav2vec2", "copy"): 2048, ("wav2vec2", "legacy"): 2048}


def _readme_row(name: str) -> Optional[list[str]]:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for line in readme.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == f"`{name}`" and len(cells) >= 7:
            return cells
    return None


@pytest.mark.parametrize("style", ["copy", "legacy"])
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_fold_leaves_no_constant_derived_tensor_crossing_to_the_device(arch: str, style: str,
                                                                      tmp_path: Path) -> None:
    """Done when: on the real architectures, partitions that delegate only matmul or convolution, rewrite
    --fold leaves no constant-derived tensor crossing to a device on any call, and validate passes with
    bit-identical outputs and an equal delegate transcript.  The README's table holds these figures."""
    source = REAL / f"{arch}_mm_{style}.pte"
    result, out = _folded(source, tmp_path)
    _, plain = _folded(source, tmp_path, RewriteOptions())
    assert result.plan.folds
    validation = _validated(source, out)
    calls = validation.methods[0].calls
    assert all(c.derived_after == NOT_FOLDABLE.get((arch, style), 0) for c in calls), \
        [c.derived_after for c in calls]
    plain_run = run_program(plain, inputs=_inputs(source), calls=2, simulate_devices=True).calls[-1].copies
    row = _readme_row(f"{arch}_mm_{style}")
    assert row is not None, "the README's fold table has no row for it"
    measured = [calls[-1].h2d_before, calls[-1].derived_before, plain_run.h2d.nbytes,
                plain_run.constant_derived_h2d.nbytes, calls[-1].h2d_after, calls[-1].derived_after]
    assert [int(c.replace(",", "").removesuffix(" B")) for c in row[1:7]] == measured


# --- shapes: the pure rules against torch's ---------------------------------------------------------

STORAGE = torch.arange(256)
TORCH_VIEWS = {"permute": lambda t, d: t.permute(d), "transpose": lambda t, a, b: t.transpose(a, b),
               "t": lambda t: t.t(), "reshape": lambda t, s: t.reshape(s), "expand": lambda t, s: t.expand(s),
               "squeeze": lambda t, d: t.squeeze() if d is None else t.squeeze(tuple(d)),
               "unsqueeze": lambda t, d: t.unsqueeze(d), "select": lambda t, d, i: t.select(d, i),
               "slice": lambda t, d, a, b, s: torch.ops.aten.slice.Tensor(t, d, a, b, s)}


def _agree(base: torch.Tensor, steps: list[tuple[str, tuple]]) -> None:
    """ShapeOps and torch apply ``steps`` to ``base`` (a view of STORAGE): same sizes, same elements."""
    x = Strided(tuple(base.shape), tuple(base.stride()), base.storage_offset(), m.ScalarType.LONG)
    theirs = base
    for name, args in steps:
        x = getattr(ShapeOps, name)(x, *args)
        theirs = TORCH_VIEWS[name](theirs, *args)
    assert x.sizes == tuple(theirs.shape)
    if x.gathered:  # still a view of the source: the block reader takes these elements
        assert torch.equal(STORAGE.as_strided(x.sizes, x.strides, x.offset), theirs)


@pytest.mark.parametrize("steps", [
    [("permute", ((2, 0, 1),))], [("transpose", (-1, 0))], [("reshape", ((4, -1),))], [("squeeze", (None,))],
    [("unsqueeze", (-1,))], [("select", (1, -1))], [("slice", (2, -3, None, 2))], [("slice", (0, 5, 1, 1))],
    [("permute", ((1, 0, 2),)), ("reshape", ((4, 6),))], [("select", (0, 2)), ("t", ())],
    [("slice", (1, 1, 3, 1)), ("unsqueeze", (0,)), ("expand", ((5, 3, 2, 2),))]])
def test_shape_rules_are_torchs_view_rules(steps: list) -> None:
    """Each ShapeOps rule gives torch's sizes and, for a view, the same elements (so the block reader in
    fold.compute gathers exactly what torch computes); a reshape torch must copy is marked as not a view."""
    _agree(STORAGE[:24].view(3, 4, 2), steps)


def test_random_chains_of_view_rules_agree_with_torch() -> None:
    from hypothesis import given, settings, strategies as st

    @st.composite
    def chains(draw):
        shape = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=4)))  # at most 81 elements
        steps, current = [], list(shape)
        for _ in range(draw(st.integers(1, 4))):
            rank = len(current)
            kind = draw(st.sampled_from(["permute", "transpose", "unsqueeze", "squeeze", "select", "slice", "expand",
                                         "reshape"]))
            if kind == "permute":
                order = draw(st.permutations(range(rank)))
                steps.append(("permute", (tuple(order),)))
                current = [current[d] for d in order]
            elif kind == "transpose" and rank:
                a, b = draw(st.integers(-rank, rank - 1)), draw(st.integers(-rank, rank - 1))
                steps.append(("transpose", (a, b)))
                a, b = a % rank, b % rank
                current[a], current[b] = current[b], current[a]
            elif kind == "unsqueeze" and rank < 5:
                d = draw(st.integers(-rank - 1, rank))
                steps.append(("unsqueeze", (d,)))
                current.insert(d % (rank + 1), 1)
            elif kind == "squeeze":
                steps.append(("squeeze", (None,)))
                current = [s for s in current if s != 1] or ([] if rank else [])
            elif kind == "select" and rank > 1 and all(current):
                d = draw(st.integers(0, rank - 1))
                steps.append(("select", (d, draw(st.integers(-current[d], current[d] - 1)))))
                current.pop(d)
            elif kind == "slice" and rank:
                d = draw(st.integers(0, rank - 1))
                start, end = draw(st.integers(-4, 4)), draw(st.one_of(st.none(), st.integers(-4, 4)))
                step = draw(st.integers(1, 3))
                steps.append(("slice", (d, start, end, step)))
                current[d] = TORCH_VIEWS["slice"](torch.empty(current), d, start, end, step).shape[d]
            elif kind == "expand" and 1 in current:
                target = [draw(st.integers(1, 3)) if s == 1 else s for s in current]
                steps.append(("expand", (tuple(target),)))
                current = target
            elif kind == "reshape" and rank:
                steps.append(("reshape", ((-1,),)))
                current = [max(1, int(torch.tensor(current).prod()))] if all(current) else [0]
        return shape, steps

    @settings(max_examples=300, deadline=None)
    @given(chains())
    def check(case):
        shape, steps = case
        count = int(torch.tensor(shape).prod())
        _agree(STORAGE[:count].view(shape), steps)

    check()


def test_the_block_reader_gathers_across_many_blocks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """With 64-byte blocks a 512-byte transpose is read in many pieces and still equals the one-block result."""
    from pte_devconst.rewriter.fold import compute as fold_compute
    from pte_devconst.rewriter.fold.compute import SourceBytes, fold_bytes

    (method,) = analyze_file(REAL / "llama_mm_copy.pte").methods
    with open_pte(REAL / "llama_mm_copy.pte") as pte:
        whole = [bytes(fold_bytes(c.recipe, SourceBytes(pte))) for c in method.folds.foldable]
        reads = []
        monkeypatch.setattr(fold_compute, "BLOCK_BYTES", 64)
        original = fold_compute._read

        def counted(*args):
            reads.append(args[2])
            return original(*args)

        monkeypatch.setattr(fold_compute, "_read", counted)
        pieces = [bytes(fold_bytes(c.recipe, SourceBytes(pte))) for c in method.folds.foldable]
    assert pieces == whole and len(reads) > 8 * len(whole) and max(reads) * 4 <= 128


# --- the command line ----------------------------------------------------------------------------------


def test_rewrite_fold_reports_every_folded_chain(tmp_path: Path) -> None:
    source = REAL / "gpt2_mm_legacy.pte"
    result = invoke("rewrite", source, "-o", tmp_path / "out.pte", "--fold")
    assert result.exit_code == 0, result.stderr
    assert "chains folded into device memory" in result.stdout
    assert "permute_copy" in result.stdout and "1 folded value: 4.0 KiB of device memory" in result.stdout
    code, report = invoke_json("rewrite", source, "--fold", "--dry-run")
    (fold,) = report["methods"][0]["folded"]
    assert (fold["source"], fold["kernels"][0]["instruction"], fold["bytes_per_call_saved"]) == (15, 7, 4096)
    assert fold["host_keeps"] == ["read by host kernel aten::embedding.out"]
    markdown = invoke("rewrite", source, "--fold", "--dry-run", "--format", "markdown").stdout
    assert "Folded chains:" in markdown and "permute\\_copy at \\#7" in markdown  # markdown-escaped
    plain = invoke("rewrite", source, "--dry-run").stdout
    assert "1 more tensor (4.0 KiB per call) would move with --fold" in plain


def test_check_fold_counts_chains_and_passes_once_they_folded(tmp_path: Path) -> None:
    source = REAL / "llama_mm_copy.pte"
    assert check([source]).passed and check([source]).foldable == 8  # nothing a plain rewrite moves
    report = check([source], fold=True)
    assert report.exit_code == 1 and len(report.findings) == 8 and report.bytes_per_call == 13312
    hint = invoke("check", source)
    assert hint.exit_code == 0 and "8 more tensors (13.0 KiB per call) would move with --fold" in hint.stdout
    assert "8 tensors copied to a device on every call" in invoke("check", "--fold", source).stdout
    _, out = _folded(source, tmp_path)
    assert check([out], fold=True).passed and not check([out]).foldable


def test_check_fold_turns_what_stays_into_findings_and_strict_agrees(tmp_path: Path) -> None:
    """Without --fold, a transposed weight is a copy that stays (its reason says so; --strict fails on it); with
    --fold it is a finding, and no longer also listed as staying, so a strict gate counts it once."""
    source = FOLD / "both_copy.pte"
    plain = check([source])
    assert plain.passed and len(plain.stays) == 2 and not plain.findings
    assert any("transposed on the host" in f.reason for f in plain.stays)
    assert check([source], strict=True).exit_code == 1
    folding = check([source], fold=True, strict=True)
    assert folding.exit_code == 1 and len(folding.findings) == 2 and not folding.stays
    assert folding.bytes_per_call == plain.stays_bytes_per_call
    _, out = _folded(source, tmp_path)
    assert check([out], fold=True, strict=True).passed  # folded: nothing left copied per call


def test_diff_lists_each_folded_chain(tmp_path: Path) -> None:
    source = FOLD / "shared_legacy.pte"
    _, out = _folded(source, tmp_path)
    code, report = invoke_json("diff", source, out)
    (method,) = report["diff"]["methods"]
    (fold,) = method["folds"]
    assert report["folded_values"] == 1 and fold["new_value"] and fold["kernels"] == ["permute_copy at #0"]
    assert fold["bytes_per_call"] == 512
    assert next(t for t in method["tensors"] if t["value"] == fold["value"])["data"] == "folded"


def test_without_torch_a_fold_is_refused_in_one_line_before_anything_is_written(monkeypatch: pytest.MonkeyPatch,
                                                                                tmp_path: Path) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    out = tmp_path / "out.pte"
    result = invoke("rewrite", REAL / "llama_mm_copy.pte", "-o", out, "--fold")
    assert result.exit_code == 2 and not out.exists()
    assert result.stderr.strip().endswith("rewrite --fold computes folded values with torch, which is not "
                                          "installed: pip install 'pte-devconst[runner]'")
    assert invoke("rewrite", FOLD / "shared_copy.pte", "-o", out).exit_code == 0  # a plain rewrite needs none


def test_a_chain_longer_than_the_limit_is_left_on_the_host_in_linear_time(tmp_path: Path) -> None:
    """A program forged to chain 2,000 alias_copy kernels from a weight to its delegate: nothing folds (the
    chain passes MAX_CHAIN kernels) and analysing it stays fast."""
    import time

    from forge import edit_program
    from pte_devconst.rewriter.fold import MAX_CHAIN

    path = FOLD / "shared_legacy.pte"
    with open_pte(path) as pte:
        plan = pte.program.execution_plan[0]
    names = [o.qualified_name for o in plan.operators]
    k = next(k for k, i in enumerate(plan.chains[0].instructions) if isinstance(i, m.KernelCall)
             and names[i.op_index] == "aten::permute_copy.out")
    permute = plan.chains[0].instructions[k]
    result = permute.args[-1]

    def long_chain(program: m.Program) -> m.Program:
        forward = program.execution_plan[0]
        values, operators = list(forward.values), list(forward.operators) + [m.Operator("aten::alias_copy", "out")]
        instructions = list(forward.chains[0].instructions)
        previous, added = result, []
        for _ in range(2000):
            values.append(forward.values[result])
            added.append(m.KernelCall(len(operators) - 1, (previous, len(values) - 1, len(values) - 1)))
            previous = len(values) - 1
        instructions[k + 1:k + 1] = added
        rewired = [m.replace(i, args=tuple(previous if a == result else a for a in i.args))
                   if isinstance(i, m.DelegateCall) else i for i in instructions]
        chain = m.replace(forward.chains[0], instructions=tuple(rewired))
        return m.replace(program, execution_plan=(m.replace(forward, values=tuple(values), operators=tuple(operators),
                                                            chains=(chain,)),))

    forged = edit_program(path, tmp_path / "long.pte", long_chain)
    start = time.process_time()  # CPU time: work done (a busy machine's wall clock is no measure of it)
    (method,) = analyze_file(forged).methods
    assert time.process_time() - start < 5
    assert not method.folds.foldable
    deepest = max(method.folds.nodes.values(), key=lambda n: n.step.instruction if n.step else -1)
    assert f"longer than {MAX_CHAIN} kernels" in " ".join(deepest.host)


def test_validate_catches_a_folded_value_with_wrong_bytes(tmp_path: Path) -> None:
    """A folded value one bit off (written past the self-check, as a broken tool or a damaged file would): the
    delegate that reads it gets other bytes than the original's transpose gave it, and validate says so."""
    source = REAL / "llama_mm_copy.pte"
    result, out = _folded(source, tmp_path)
    fold = result.plan.folds[0]
    with open_pte(out) as pte:
        span = pte.tensor_span(pte.program.execution_plan[0].values[fold.value])
    data = bytearray(out.read_bytes())
    data[span.offset + 5] ^= 0x01
    damaged = tmp_path / "damaged.pte"
    damaged.write_bytes(bytes(data))
    report = validate(source, damaged, inputs=_inputs(source), simulate_devices=True)
    checks = {c.name: c for c in report.methods[0].checks}
    assert not report.passed and not checks["delegate boundaries match"].passed
    assert "bytes differ" in checks["delegate boundaries match"].detail
    assert f"value {fold.chain.copies[0].dst}" in checks["delegate boundaries match"].detail


def test_validate_refuses_a_resident_value_where_the_original_passed_an_input(tmp_path: Path) -> None:
    """The exception for folded values covers only arguments that were constant-derived: a value made
    device-resident where the original passed an activation is a boundary difference, bytes aside."""
    from pte_devconst.runner.transcript import ArgRecord, DelegateCallRecord, Resident, compare_calls

    def call(arg: ArgRecord) -> DelegateCallRecord:
        return DelegateCallRecord(0, 0, 5, 0, "PteDevconstReference", False, (arg,))

    activation = ArgRecord(0, 7, "tensor", "float32", (2,), "cuda:0", (1, 2), h2d_source=3, constant_derived=False)
    folded = ArgRecord(0, 9, "tensor", "float32", (2,), "cuda:0", (1, 2))
    (difference,) = compare_calls(0, [call(activation)], [call(folded)], {9: Resident("cuda:0", folded=True)})
    assert difference.what == "value" and "nor a constant-derived value" in difference.detail
    derived = ArgRecord(0, 7, "tensor", "float32", (2,), "cuda:0", (1, 2), h2d_source=3, constant_derived=True)
    assert not compare_calls(0, [call(derived)], [call(folded)], {9: Resident("cuda:0", folded=True)})


def test_the_python_api_folds_too(tmp_path: Path) -> None:
    from pte_devconst.api import rewrite

    result = rewrite(REAL / "llama_mm_legacy.pte", tmp_path / "api.pte", fold=True, fsync=False)
    assert len(result.plan.folds) == 8 and result.plan.bytes_per_call_saved == 13312


# --- found by fuzzing mutated fold fixtures (inspect, rewrite --fold --duplicate-shared, check --fold) -------


def test_a_literal_argument_of_the_wrong_kind_keeps_the_kernel_on_the_host(tmp_path: Path) -> None:
    """permute_copy's dims replaced by an int (a forged program): not foldable, with the reason; was a TypeError."""
    from forge import edit_program

    path = FOLD / "shared_legacy.pte"
    with open_pte(path) as pte:
        plan = pte.program.execution_plan[0]
    names = [o.qualified_name for o in plan.operators]
    permute = next(i for i in plan.chains[0].instructions if isinstance(i, m.KernelCall)
                   and names[i.op_index] == "aten::permute_copy.out")
    dims = permute.args[1]

    def int_dims(program: m.Program) -> m.Program:
        forward = program.execution_plan[0]
        values = list(forward.values)
        values[dims] = m.Int(1)
        return m.replace(program, execution_plan=(m.replace(forward, values=tuple(values)),))

    forged = edit_program(path, tmp_path / "int_dims.pte", int_dims)
    (method,) = analyze_file(forged).methods
    assert not method.folds.foldable
    assert "(not foldable: its argument dims is 1, not ints)" in " ".join(method.folds.nodes[0].host)
    result = invoke("rewrite", forged, "--fold", "-o", tmp_path / "out.pte")
    assert result.exit_code == 0 and "nothing to move" in result.stdout


def test_a_device_copy_read_through_a_static_view_keeps_its_constant(tmp_path: Path) -> None:
    """A value planned where an _h2d_copy writes, which no instruction writes (a static view), read as a method
    output: the view cannot follow the constant to device memory (the caller would hold the resident constant's
    own bytes; tests/test_views_on_resident.py has the views that follow), so the constant stays."""
    from conftest import pte_path
    from forge import edit_program

    def view_of_the_copy(program: m.Program) -> m.Program:
        forward = program.execution_plan[0]
        copy = forward.chains[0].instructions[1]  # _h2d_copy.out(0, 15, 15)
        view = forward.values[copy.args[1]]
        values = forward.values + (view,)
        return m.replace(program, execution_plan=(m.replace(forward, values=values,
                                                            outputs=forward.outputs + (len(forward.values),)),))

    forged = edit_program(pte_path("v_a_dtypes_copy"), tmp_path / "viewed.pte", view_of_the_copy)
    (method,) = analyze_file(forged).methods
    verdict = next(c for c in method.constants if c.value == 0)
    assert not verdict.eligible
    assert verdict.reasons == ("its device copy is also a method output through a static view",)
    assert rewrite_file(forged, tmp_path / "out.pte", durable=False).plan.placements  # the others still move


@pytest.mark.parametrize("style", ["copy", "legacy"])
def test_a_weight_the_device_also_reads_as_it_is_moves_once_its_transpose_folds(style: str, tmp_path: Path) -> None:
    source = FOLD / f"both_{style}.pte"
    plain, _ = _folded(source, tmp_path, RewriteOptions())
    assert not plain.plan.placements and plain.fold_gain.tensors == 2  # the transpose keeps it on the host
    result, out = _folded(source, tmp_path)
    (moved,) = result.plan.placements
    (fold,) = result.plan.folds
    assert moved.value == fold.chain.source == 0 and not fold.appended
    assert result.plan.methods[0].released == ()  # it moved: its entry's bytes are its initial data now
    run = _validated(source, out).methods[0]
    assert [c.folded for c in run.moved] == [False, True] and run.calls[-1].derived_after == 0


def test_check_fold_without_torch_says_what_it_could_not_judge() -> None:
    """``nan_copy`` casts NaN to an integer type: with torch the data refuses the fold (exit 0, nothing that
    can move); without torch that cannot be judged, and the gate says so (exit 3, the chain as not judged)
    instead of counting the chain as a finding (exit 1), as it did."""
    import subprocess
    import sys

    script = ("import sys, json\nsys.modules['torch'] = None\nfrom pte_devconst import api\n"
              "r = api.check([sys.argv[1]], fold=True)\n"
              "print(json.dumps([r.exit_code, len(r.findings), [u.reason for u in r.unknown], r.files[0].note]))")
    pte = FOLD / "nan_copy.pte"
    done = subprocess.run([sys.executable, "-c", script, str(pte)], capture_output=True, text=True, check=True)
    code, findings, reasons, note = json.loads(done.stdout)
    assert (code, findings) == (3, 0) and len(reasons) == 1 and "not judged" in reasons[0] and "torch" in note
    from pte_devconst import api

    judged = api.check([pte], fold=True)
    assert judged.exit_code == 0 and not judged.findings and not judged.unknown
