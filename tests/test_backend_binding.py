"""A delegate's arguments bound as its backend binds them (issue 44).

XNNPACK binds each external value to the call's argument at its external id (``XNNExecutor::prepare_args``:
``args[ext_id]``), so an output may come before an input.  The files here are real ExecuTorch 1.5.1 exports edited
with ExecuTorch's serializer and XNNPACK's own blob layout (``tests/binding_files.py``): a permuted binding whose
first output is a static view of the constant's device copy (the copy must run on every call), and a blob whose
``input_ids`` lists a value twice (a declaration no exporter writes: it declares nothing).  Each is refused cleanly
or rewritten to what computes the original's outputs, call after call, in the real runtime, in both encodings; and a
planted wrong reader (the count-based split this replaced) is caught by a proof, exit 1.
"""

from __future__ import annotations

import json

from pathlib import Path
from typing import Optional

import pytest

pytest.importorskip("executorch.exir")

import torch  # noqa: E402

import binding_files as files  # noqa: E402
from cli_runner import invoke  # noqa: E402
from pte_devconst.program import delegate_blobs  # noqa: E402
from pte_devconst.program.dataflow import Declaration, delegate_call_sites  # noqa: E402
from pte_devconst.program.delegate_blobs import XNNPACK, declaration_of, declared_splits  # noqa: E402
from pte_devconst.rewriter.load import analyze_file  # noqa: E402
from pte_devconst.schema.flatbuf import FlatReader  # noqa: E402
from pte_devconst.schema.pte_file import open_pte  # noqa: E402
from real_runtime import assert_runtime_agrees  # noqa: E402

RUNTIMES = ("1.6", "1.5")


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The edited programs and the inputs of three calls, written once."""
    folder = tmp_path_factory.mktemp("binding")
    base = files.BASE.read_bytes()
    found = {}
    for name, make in (("constant", files.constant_only), ("permuted", files.permuted),
                       ("listed_twice", files.listed_twice)):
        found[name] = folder / f"{name}.pte"
        found[name].write_bytes(make(base))
    generator = torch.Generator().manual_seed(44)
    found["inputs"] = folder / "inputs.pt"
    torch.save({"forward": [(torch.randn(files.SHAPE, generator=generator),) for _ in range(3)]}, found["inputs"])
    return found


def _declaration(path: Path) -> Optional[Declaration]:
    with open_pte(path) as pte:
        return declared_splits(pte.program, pte.delegate_blob)[0].get(0)


def _calls(inputs: Path) -> dict[str, list[tuple[torch.Tensor, ...]]]:
    loaded: dict[str, list[tuple[torch.Tensor, ...]]] = torch.load(inputs)
    return loaded


def test_the_blob_is_read_as_the_runtime_binds_it(made: dict[str, Path]) -> None:
    """The export binds x, c, then the outputs; the permuted blob c -> 0, out1 -> 1, x -> 2, out2 -> 3: read
    positions 0 and 2, written 1 and 3, whatever order the list has.  The call site carries those positions."""
    assert files.external_ids(_blob(made["permuted"])) == [(2, 1), (0, 1), (1, 2), (3, 2)]
    plain, permuted = _declaration(made["constant"]), _declaration(made["permuted"])
    assert plain is not None and (plain.read, plain.written, plain.problem) == ((0, 1), (2, 3), "")
    assert permuted is not None and (sorted(permuted.read), sorted(permuted.written), permuted.problem) == (
        [0, 2], [1, 3], "")
    with open_pte(made["permuted"]) as pte:
        (site,) = delegate_call_sites(pte.program.execution_plan[0], declared={0: permuted})
    assert (site.read, site.written, site.declared, site.n_inputs) == ((0, 2), (1, 3), True, None)
    assert (site.inputs, site.outputs) == ((files.C_COPY, files.X_COPY), (files.OUT1, files.OUT2))


def test_a_value_listed_twice_declares_nothing_and_says_where(made: dict[str, Path]) -> None:
    declaration = _declaration(made["listed_twice"])
    assert declaration is not None and "its input_ids lists value 0 twice" in declaration.problem
    with open_pte(made["listed_twice"]) as pte:
        (site,) = delegate_call_sites(pte.program.execution_plan[0], declared={0: declaration})
    assert not site.declared and site.written == (2, 3)  # the program's rule
    note = ("delegate 0 (XnnpackBackend) at instruction 2: its XnnpackBackend blob cannot be the backend's: its "
            "input_ids lists value 0 twice; its arguments are split by the program alone")
    for command in ("inspect", "check"):
        assert note in " ".join(invoke(command, made["listed_twice"]).stdout.split()), command
    (method,) = analyze_file(made["listed_twice"]).methods
    (c,) = [v for v in method.constants if v.value == files.C_INDEX]
    assert not c.eligible
    assert ("is an argument of delegate 0 (XnnpackBackend) at instruction 2, whose blob declares nothing this tool "
            "can trust: its XnnpackBackend blob cannot be the backend's: its input_ids lists value 0 twice") in \
        c.details[0]


@pytest.mark.parametrize("blob_edit", ["id past the externals", "both read and written", "an id given twice"])
def test_other_declarations_no_backend_makes_declare_nothing(made: dict[str, Path], blob_edit: str) -> None:
    graph, constants = files.blob_graph(_blob(made["constant"]))
    values = [v["xvalue_union"] for v in graph["xvalues"] if v["xvalue_union"]["flags"] & 3]
    if blob_edit == "id past the externals":
        values[0]["external_id"] = 9
    elif blob_edit == "both read and written":
        values[0]["flags"] = 3
    else:
        values[1]["external_id"] = values[0]["external_id"]
    declaration = declaration_of(XNNPACK, memoryview(files.graph_blob(graph, constants)))
    assert declaration is not None and declaration.problem and declaration.disagreement(4), declaration


def test_a_declaration_that_does_not_bind_the_call_declares_nothing_for_it() -> None:
    declaration = Declaration(XNNPACK, (0, 2), (1, 3))
    assert declaration.disagreement(4) == ""
    assert "argument 4 named by nothing it declares" in declaration.disagreement(5)
    assert "binds argument 3, past the call's 3 arguments" in declaration.disagreement(3)


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("name", ["permuted", "listed_twice"])
def test_refused_cleanly_or_rewritten_to_the_same_outputs_in_the_real_runtime(made: dict[str, Path], name: str,
                                                                                runtime: str, tmp_path: Path) -> None:
    """Each file: the rewrite writes a file that computes what the original computes over three calls in the real
    1.5.1 runtime (here: c stays, with its reason), in either encoding, and ``validate --engine executorch`` never
    passes a pair that differs."""
    out = tmp_path / "out.pte"
    done = invoke("rewrite", made[name], "-o", out, "--runtime", runtime)
    assert done.exit_code == 0, done.stderr
    assert_runtime_agrees(made[name].read_bytes(), out.read_bytes(), _calls(made["inputs"]), probe=False)
    (method,) = analyze_file(made[name]).methods
    (c,) = [v for v in method.constants if v.value == files.C_INDEX]
    assert not c.eligible, c  # the delegate writes the copy's bytes (permuted), or may (listed twice)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_plain_file_still_moves_and_runs_the_same(made: dict[str, Path], runtime: str, tmp_path: Path) -> None:
    out = tmp_path / "out.pte"
    assert invoke("rewrite", made["constant"], "-o", out, "--runtime", runtime).exit_code == 0
    assert files.C_INDEX in {c.value for m in analyze_file(made["constant"]).methods for c in m.constants
                             if c.eligible}
    assert_runtime_agrees(made["constant"].read_bytes(), out.read_bytes(), _calls(made["inputs"]), probe=False)
    done = invoke("validate", made["constant"], out, "--engine", "executorch", "--inputs", made["inputs"])
    assert done.exit_code == 0, done.stdout


def _count_based(blob: memoryview) -> Optional[Declaration]:
    """The reading this replaced: the lengths of ``input_ids`` and ``output_ids``, the first arguments read."""
    graph = delegate_blobs._xnn_graph(blob)
    if graph is None:
        return None
    root = FlatReader(graph).root()
    inputs, outputs = root.vector(4, "I") or (), root.vector(5, "I") or ()
    return Declaration(XNNPACK, tuple(range(len(inputs))), tuple(range(len(inputs), len(inputs) + len(outputs))))


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_planted_count_based_reader_is_caught_by_a_proof(made: dict[str, Path], runtime: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """With the old count-based binding planted, the permuted file's constant moves (the delegate's first output,
    a view of its copy, taken as read), and the rewrite's own proofs share that reading.  ``validate`` does not:
    the real runtime (``--engine executorch``) sees the outputs differ, and the static checks with the backend's
    binding see a delegate write the moved constant; both exit 1."""
    out = tmp_path / "planted.pte"
    with monkeypatch.context() as patch:
        patch.setitem(delegate_blobs._READERS, XNNPACK, _count_based)
        done = invoke("rewrite", made["permuted"], "-o", out, "--runtime", runtime)
        assert done.exit_code in (0, 1), done.stderr
        if done.exit_code == 1 or not out.exists():  # refused: nothing written
            assert not out.exists()
            return
        moved = {c.value for m in analyze_file(made["permuted"]).methods for c in m.constants if c.eligible}
        assert files.C_INDEX in moved  # the plant took: the wrong file was written
    real = invoke("validate", made["permuted"], out, "--engine", "executorch", "--inputs", made["inputs"])
    assert real.exit_code == 1 and "FAIL" in real.stdout, real.stdout
    static = invoke("validate", made["permuted"], out, "--simulate-devices", "--inputs", made["inputs"],
                    "--format", "json")
    assert static.exit_code == 1, static.stdout + static.stderr
    (method,) = json.loads(static.stdout)["methods"]
    failed = {c["name"]: c["detail"] for c in method["checks"] if c["status"] == "fail"}
    assert "writes value 4 (argument 1), which shares bytes with moved value" in \
        failed["no delegate writes a moved constant"], failed
    assert "every read sees what the input's sees (byte replay)" in failed, failed


def _blob(path: Path) -> bytes:
    with open_pte(path) as pte:
        (plan,) = pte.program.execution_plan
        return bytes(pte.delegate_blob(plan.delegates[0]))


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_runner_observes_the_write_a_planted_reader_hides(made: dict[str, Path], runtime: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner's proof does not share the reading: with the count-based binding planted for the rewrite *and*
    for every check of ``validate`` (static checks, byte replay, self-check alike), the runner still sees, in the
    argument's bytes after the real XNNPACK call (the runtime reads and writes it in place, in shared memory),
    that the delegate wrote the argument the planted reading calls read-only: exit 1."""
    out = tmp_path / "planted.pte"
    with monkeypatch.context() as patch:
        patch.setitem(delegate_blobs._READERS, XNNPACK, _count_based)
        done = invoke("rewrite", made["permuted"], "-o", out, "--runtime", runtime)
        if done.exit_code != 0 or not out.exists():
            pytest.skip("the planted reading was refused: nothing to observe")
        run = invoke("validate", made["permuted"], out, "--simulate-devices", "--inputs", made["inputs"],
                     "--format", "json")
    assert run.exit_code == 1, run.stdout + run.stderr
    (method,) = json.loads(run.stdout)["methods"]
    failed = {c["name"]: c["detail"] for c in method["checks"] if c["status"] == "fail"}
    observed = failed["delegates wrote only what the program says they write (observed)"]
    assert "rewrite: delegate 0 (XnnpackBackend)" in observed and "wrote argument 1" in observed, failed


def test_the_runner_observes_no_write_in_a_faithful_pair(made: dict[str, Path], tmp_path: Path) -> None:
    """The observation passes where the delegate writes only its outputs: the plain file and its rewrite."""
    out = tmp_path / "plain.pte"
    assert invoke("rewrite", made["constant"], "-o", out).exit_code == 0
    run = invoke("validate", made["constant"], out, "--simulate-devices", "--inputs", made["inputs"],
                 "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    (method,) = json.loads(run.stdout)["methods"]
    (check,) = [c for c in method["checks"] if c["name"].startswith("delegates wrote only")]
    assert check["status"] == "pass" and "read-only argument" in check["detail"], check
