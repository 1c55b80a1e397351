"""What a delegate's blob declares of its calls settles the data flow's split (``program/delegate_blobs.py``).

A later delegate argument planned exactly on a device copy's bytes is an output or a static view of the copy, read
again; the program alone cannot say which.  Where the blob can be read, it says: the copy-style LSTM's constant 3
then moves (the argument is an output), in both encodings, plain and folded, and every proof agrees (the
self-check's byte replay, ``validate``'s, and the runner executing the reference blob).  Where no blob can be read,
the copy stays, and the reason names the delegate, the instruction and the argument.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import CASES, CORPUS, EXAMPLES, pte_path, shipped
from forge import edit_program
from pte_devconst.program.dataflow import Declaration, delegate_call_sites
from pte_devconst.program.delegate_blobs import REFERENCE, declaration_of, declared_io, declared_splits
from pte_devconst.rewriter.load import analyze_file
from pte_devconst.rewriter.encodings import encoding_for
from pte_devconst.rewriter.plan import RewriteOptions
from pte_devconst.rewriter.rewrite import rewrite_file
from pte_devconst.runner.validate import validate
from pte_devconst.schema import model as m
from pte_devconst.schema.pte_file import open_pte

REAL = CORPUS.parent / "real_models"
LSTM = REAL / "lstm_mm_copy.pte"
XNNPACK = CORPUS.parent / "xnnpack_device"
UNDECLARED = "its device copy's bytes are a later delegate argument its blob does not declare"


def _constant_3(path: Path):
    (method,) = analyze_file(path).methods
    return next(c for c in method.constants if c.value == 3)


def _validated(original: Path, rewritten: Path) -> None:
    result = validate(original, rewritten, inputs=original.with_name(f"{original.stem}.inputs.pt"),
                      expected=original.with_name(f"{original.stem}.expected.pt"), simulate_devices=True)
    assert result.passed, [c for mv in result.methods for c in mv.checks if not c.passed]


def test_every_readable_blob_declares_what_its_calls_pass() -> None:
    """The declarations are read from the real blobs (reference and XNNPACK), and each fits its calls."""
    programs = ([EXAMPLES / f"{n}.pte" for n in shipped(EXAMPLES)] + [pte_path(n) for n in CASES]
                + [REAL / f"{n}.pte" for n in shipped(REAL)] + sorted(XNNPACK.glob("*.pte")))
    seen: dict[str, int] = {}
    for path in programs:
        with open_pte(path) as pte:
            for plan, declared in zip(pte.program.execution_plan, declared_splits(pte.program, pte.delegate_blob)):
                for site in delegate_call_sites(plan, declared=declared):
                    declaration = declared.get(site.delegate_index)
                    if declaration is None:
                        continue
                    backend = plan.delegates[site.delegate_index].id
                    seen[backend] = seen.get(backend, 0) + 1
                    assert not declaration.disagreement(len(site.args)) and site.declared, (path.name, site)
                    assert (site.read, site.written, site.sure) == (declaration.read, declaration.written,
                                                                    declaration.written), (path.name, site)
                    assert site.read == tuple(range(len(site.read))), (path.name, site)  # every exporter's order
    assert seen.get(REFERENCE, 0) >= 300 and seen.get("XnnpackBackend", 0) >= 20, seen


def test_a_declaration_that_does_not_fit_the_call_is_not_used() -> None:
    """Two declared inputs and outputs for a call of three arguments: the program's own rule splits it."""
    tensor = m.Tensor(scalar_type=m.ScalarType.FLOAT, sizes=(4,), dim_order=(0,),
                      allocation_info=m.AllocationDetails(1, 0))
    out = m.Tensor(scalar_type=m.ScalarType.FLOAT, sizes=(4,), dim_order=(0,),
                   allocation_info=m.AllocationDetails(1, 16))
    plan = m.ExecutionPlan(name="forward", values=(tensor, tensor, out), inputs=(0, 1), outputs=(2,),
                           chains=(m.Chain(inputs=(), outputs=(), instructions=(m.DelegateCall(0, (0, 1, 2)),)),),
                           delegates=(m.BackendDelegate(id="X"),))
    (ruled,) = delegate_call_sites(plan)
    (misfit,) = delegate_call_sites(plan, declared={0: Declaration("X", (0,), (1,))})
    (fitting,) = delegate_call_sites(plan, declared={0: Declaration("X", (0,), (1, 2))})
    (permuted,) = delegate_call_sites(plan, declared={0: Declaration("X", (2,), (0, 1))})
    assert (misfit.read, misfit.written, misfit.sure) == (ruled.read, ruled.written, ruled.sure) == ((0, 1), (2,), (2,))
    assert not misfit.declared and fitting.declared
    assert (fitting.read, fitting.written, fitting.sure) == ((0,), (1, 2), (1, 2))
    assert (permuted.read, permuted.written, permuted.inputs, permuted.outputs) == ((2,), (0, 1), (2,), (0, 1))


UNREADABLE = [b"not json", b"[1, 2]", json.dumps({"format": "other", "inputs": [], "outputs": []}).encode(),
              json.dumps({"format": "pte-devconst-reference", "inputs": 3, "outputs": []}).encode(),
              b"[" * 100_000, b" " * (1 << 20) + b"{}"]


@pytest.mark.parametrize("blob", UNREADABLE)
def test_an_unreadable_reference_blob_declares_nothing(blob: bytes) -> None:
    assert declared_io(REFERENCE, memoryview(blob)) is None


def test_a_reference_blob_declares_its_inputs_and_outputs() -> None:
    blob = json.dumps({"format": "pte-devconst-reference", "version": 1, "inputs": [{}, {}, {}],
                       "outputs": [0]}).encode()
    assert declared_io(REFERENCE, memoryview(blob)) == (3, 1)
    declaration = declaration_of(REFERENCE, memoryview(blob))
    assert declaration is not None and (declaration.read, declaration.written) == ((0, 1, 2), (3,))
    for other in ({"version": 2}, {"inputs": [1, 2, 3]}):  # what the runner refuses declares nothing
        doc = {"format": "pte-devconst-reference", "version": 1, "inputs": [{}, {}, {}], "outputs": [0], **other}
        assert declaration_of(REFERENCE, memoryview(json.dumps(doc).encode())) is None


@pytest.mark.parametrize("fold", [False, True], ids=["plain", "fold"])
def test_a_device_copy_under_a_declared_output_moves_in_both_encodings(fold: bool, tmp_path: Path) -> None:
    """LSTM's constant 3: its copy's destination (value 116) lies where delegate 5 later writes its output 329.  The
    reference blob says 329 is an output, so the constant moves; each rewrite passes its self-check, ``validate``
    (outputs bit for bit, per-call copies gone, the byte replay) against the original, and each conversion to the
    other encoding passes against both the original and the file it was converted from."""
    verdict = _constant_3(LSTM)
    assert verdict.eligible, verdict.reasons
    files = {}
    for runtime in ("1.6", "1.5"):
        out = tmp_path / f"{runtime}.pte"
        result = rewrite_file(LSTM, out, options=RewriteOptions(fold=fold, encoding=encoding_for(runtime)),
                              durable=False)
        assert 3 in {p.value for edit in result.plan.methods for p in edit.placements}
        _validated(LSTM, out)
        files[runtime] = out
    for runtime, other in (("1.6", "1.5"), ("1.5", "1.6")):
        converted = tmp_path / f"{runtime}-to-{other}.pte"
        rewrite_file(files[runtime], converted, options=RewriteOptions(fold=fold, encoding=encoding_for(other)),
                              durable=False)
        for before in (LSTM, files[runtime]):
            result = validate(before, converted, inputs=LSTM.with_name("lstm_mm_copy.inputs.pt"),
                              simulate_devices=True)
            assert result.passed, [c for mv in result.methods for c in mv.checks if not c.passed]


def test_without_a_readable_blob_the_copy_stays_and_the_reason_names_the_argument(tmp_path: Path) -> None:
    """The same program with delegate 5 renamed to a backend whose blob this tool does not read: argument 6 of its
    call could be a view of the copy, read again, so constant 3 keeps its copy, and says where."""
    def unread(program: m.Program) -> m.Program:
        plan = program.execution_plan[0]
        delegates = list(plan.delegates)
        delegates[5] = m.replace(delegates[5], id="SomeVendorBackend")
        return m.replace(program, execution_plan=(m.replace(plan, delegates=tuple(delegates)),))

    forged = edit_program(LSTM, tmp_path / "unread.pte", unread)
    verdict = _constant_3(forged)
    assert verdict.reasons == (UNDECLARED,)
    assert ("lies exactly where delegate 5 at instruction 129 has argument 6 (value 329): an output, or a view of the "
            "copy it reads again, which only its SomeVendorBackend blob says") in verdict.details[0]
    result = rewrite_file(forged, tmp_path / "out.pte", durable=False)
    moved = {p.value for edit in result.plan.methods for p in edit.placements}
    assert 3 not in moved and moved  # the others still move, and the self-check proves the file
