"""An encoding is one unit (rewriter/encodings): chosen once from the runtime, and everything the tool says or does
about it comes from it.

The seam is held by a toy third encoding defined here, in this module only: registered, it is offered by every
command (``rewrite``, ``check``, the config file, the API), planned, written, proven by the self-check and by
``validate``, and named in every report with its own words, with no edit anywhere else.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import pytest

from cli_runner import invoke
from conftest import EXAMPLES
from test_layers import FOLDERS
from pte_devconst import api
from pte_devconst.program.runtime import DEFAULT_RUNTIME, Runtime
from pte_devconst.rewriter.encodings import (encoding_for, encoding_named, encodings, register, required_runtime,
                                             runtime_choices, unregister)
from pte_devconst.rewriter.encodings.first_call import first_call_prologue
from pte_devconst.schema import model as m
from pte_devconst.schema.pte_file import open_pte
from pte_devconst.util.exit_code import ExitCode

if TYPE_CHECKING:
    from toy_encoding import ToyEncoding

MLP = EXAMPLES / "mlp_copy.pte"


# --- choosing one -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text,expected", [("1.5", Runtime(1, 5)), ("1.6", Runtime(1, 6)), ("v1.5", Runtime(1, 5)),
                                           ("1.5.1", Runtime(1, 5)), (" 1.6 ", Runtime(1, 6))])
def test_runtime_names_choose_an_encoding(text: str, expected: Runtime) -> None:
    assert encoding_for(text).runtime == expected


@pytest.mark.parametrize("text", ["1.4", "2.0", "1", "cuda", "1.5.x", ""])
def test_unknown_runtimes_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="choose one of: 1.5, 1.6"):
        encoding_for(text)


def test_the_default_is_written_once_and_chooses_device_initial_data() -> None:
    assert encoding_for(None).runtime == DEFAULT_RUNTIME == Runtime(1, 6)
    assert encoding_for(None).key == "initial-data" and encoding_named("").key == "initial-data"
    assert [e.key for e in encodings()] == ["first-call", "initial-data"]  # oldest runtime first


def test_no_module_outside_the_encodings_names_a_release() -> None:
    """The releases (1.5, 1.6) and the default are the encodings' and program/runtime.py's to name: no other
    module of the package builds a ``Runtime`` or compares a runtime's value with a literal."""
    root = Path(__file__).resolve().parents[1]
    allowed = {root / "program" / "runtime.py"} | set((root / "rewriter" / "encodings").glob("*.py"))
    offenders = []
    for folder in FOLDERS:
        for path in (root / folder).rglob("*.py"):
            if path in allowed:
                continue
            text = path.read_text()
            for needle in ("Runtime(1,", "runtime.value ==", 'value == "1.', "V1_5", "V1_6"):
                if needle in text:
                    offenders.append(f"{path.relative_to(root)}: {needle}")
    assert not offenders


# What names an encoding's mechanism: the 1.5 encoding's prologue, guard and first-call copies, and device initial
# data as what a runtime cannot load.  ("Initial data" alone is the format's, and "the first call" ExecuTorch's.)
MECHANISM = re.compile(r"prologue|guard|first[-_]call|firstcall|device[ _]initial[ _]data", re.IGNORECASE)
# Outside rewriter/encodings/ (the registry and each encoding's own module) and schema/ (the format's own words),
# these lines may still name one, each for the reason given: (path, text of the line that allows it).
NAMING_ALLOWED = (
    # "guard" in another sense: the command line's guard over a closed stdout, and its command wrapper
    ("cli/stdout_guard.py", "guard"), ("cli/app.py", "guard"),
    # the published reports' keys (cli/report.schema.json), which renaming would break for every reader of them
    ("inventory/summary.py", "first_call_h2d_bytes"), ("cli/inspect_cmd.py", "first_call_h2d_bytes"),
)


def test_no_module_outside_the_encodings_names_a_mechanism() -> None:
    """An encoding's mechanism is its module's to name: program/ states the runtime's semantics (a run-once region,
    copies made once, values filled at load), and every other module asks the encodings (issue 46)."""
    root = Path(__file__).resolve().parents[1]
    skipped = (root / "rewriter" / "encodings", root / "schema")
    offenders = []
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            if any(path.is_relative_to(skip) for skip in skipped):
                continue
            where = path.relative_to(root).as_posix()
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if MECHANISM.search(line) and not any(where == allowed and text in line
                                                      for allowed, text in NAMING_ALLOWED):
                    offenders.append(f"{where}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


# --- a toy third encoding ----------------------------------------------------------------------------------
# tests/toy_encoding.py: a mechanism of its own (a clear-first run-once region), derived from base.Encoding alone.


@pytest.fixture
def toy() -> Iterator["ToyEncoding"]:
    """The toy, registered for one test (its module removed: the toy's tests skip, every other stays green)."""
    encoding = pytest.importorskip("toy_encoding").ToyEncoding()
    register(encoding)
    try:
        yield encoding
    finally:
        unregister(encoding)


def test_a_registered_encoding_is_chosen_from_its_runtime(toy: "ToyEncoding") -> None:
    assert encoding_for("1.7") is toy and encoding_named("toy") is toy
    assert runtime_choices() == "1.5, 1.6, 1.7"
    with pytest.raises(ValueError, match="registered already"):
        register(type(toy)())
    # what a file needs is still the oldest runtime that loads it: the toy adds no need of its own
    with open_pte(MLP) as pte:
        assert required_runtime(pte.program).runtime == Runtime(1, 5)


def test_the_api_plans_writes_and_proves_with_it(toy: "ToyEncoding", tmp_path: Path) -> None:
    out = tmp_path / "toy.pte"
    result = api.rewrite(MLP, out, runtime="1.7", verify="full")  # the self-check proves it, every byte
    plan = result.plan
    assert plan.options.runtime == Runtime(1, 7) and {edit.encoding for edit in plan.methods} == {"toy"}
    assert [s.reason for s in plan.kept_for_runtime] == [toy.TOO_SMALL]  # its own admission rule
    assert len(plan.placements) == 3
    document = result.to_json()
    assert document["runtime"]["encoding"] == "toy"
    assert document["runtime"]["output_needs"]["minimum"] == "1.7"  # the toy's own need, found in its output
    assert "first_call_copies" in document["runtime"]  # the built-in encodings' fields are still there
    with open_pte(out) as pte:
        plan_out = pte.program.execution_plan[0]  # type: ignore[index]
        first = (plan_out.chains[0].instructions or ())[:2]  # type: ignore[index]
        assert isinstance(first[0], m.JumpFalseCall) and isinstance(first[1], m.MoveCall)  # clear-first
        assert len(toy.held(plan_out)) == 3 and first_call_prologue(plan_out) is None  # not the 1.5 shape
        assert required_runtime(pte.program).runtime == Runtime(1, 7)
    checked = api.validate(MLP, out, inputs=EXAMPLES / "mlp_copy.inputs.pt",
                           expected=EXAMPLES / "mlp_copy.expected.pt", calls=3, simulate_devices=True)
    assert checked.passed, [c for mv in checked.methods for c in mv.checks]
    # nothing of the toy's is left per call: check of its output finds no copy to move
    again = api.check([out], runtime="1.7")
    assert again.exit_code is ExitCode.OK and not again.findings and again.bytes_per_call == 0


def test_the_executorch_engine_probes_its_copies(toy: "ToyEncoding", tmp_path: Path) -> None:
    """The real runtime runs the toy's region (format semantics alone), and the probe holds its copies to running
    once: found from what the toy's ``moved`` says, not from any shape the engine knows."""
    pytest.importorskip("executorch.runtime")
    fixtures = Path(__file__).resolve().parent / "fixtures" / "xnnpack_device"  # delegates the runtime registers
    source, out = fixtures / "mlp_copy.pte", tmp_path / "toy.pte"
    api.rewrite(source, out, runtime="1.7", verify="full")
    checked = api.validate(source, out, inputs=fixtures / "mlp_copy.inputs.pt", calls=3, engine="executorch")
    rows = [c.detail for mv in checked.methods for c in mv.checks if "accumulating probe" in c.name]
    assert checked.passed and rows and all("toy copies made accumulating adds" in row for row in rows), rows
    assert checked.engine is not None and checked.engine.probed_copy == "toy copy"  # its word, in the report too


def test_its_copies_are_probed_wherever_they_are(toy: "ToyEncoding", tmp_path: Path) -> None:
    from pte_devconst.rewriter.encodings import moved_by_encodings
    from pte_devconst.runner.executorch_engine import kernel_holders, probed_copies

    out = tmp_path / "toy.pte"
    api.rewrite(MLP, out, runtime="1.7")
    with open_pte(MLP) as before, open_pte(out) as after:
        a, b = before.program.execution_plan[0], after.program.execution_plan[0]  # type: ignore[index]
        probed = probed_copies(b, kernel_holders(moved_by_encodings(a, b)))
    assert [(c, k) for c, k, _, _ in probed] == [(0, 2), (0, 3), (0, 4)]
    assert {out_ for *_, out_ in probed} == toy.held(b)


def test_every_command_offers_it_with_its_own_words(toy: "ToyEncoding", tmp_path: Path) -> None:
    out = tmp_path / "toy.pte"
    done = invoke("rewrite", MLP, "-o", out, "--runtime", "1.7")
    assert done.exit_code == 0, done.stderr
    assert toy.TOO_SMALL in done.stdout  # the constant it leaves, with its reason
    # the gate of a project that deploys it: the findings' fix names it, and its output passes
    gate = invoke("check", MLP, "--runtime", "1.7", "--format", "concise")
    assert gate.exit_code == 1 and "pte-devconst rewrite --runtime 1.7 --in-place" in gate.stdout
    assert invoke("check", out, "--runtime", "1.7").exit_code == 0
    # inspect's runtime line and diff name it: its output needs the runtime it was written for
    shown = invoke("inspect", out)
    assert "Loads in ExecuTorch >= 1.7 (clear-first copies: 3 tensors)" in shown.stdout, shown.stdout
    diffed = invoke("diff", MLP, out)
    assert "clear-first copies" in diffed.stdout and "1.7" in diffed.stdout, diffed.stdout
    assert "clear-first copies" in done.stdout  # rewrite's own line
    # the project's config chooses it too
    (tmp_path / "pyproject.toml").write_text('[tool.pte-devconst]\nruntime = "1.7"\n')
    configured = invoke("rewrite", MLP, "-o", tmp_path / "cfg.pte", "--config", tmp_path / "pyproject.toml",
                        "--format", "json")
    assert configured.exit_code == 0, configured.stderr
    assert json.loads(configured.stdout)["runtime"]["encoding"] == "toy"


def test_without_it_the_runtime_is_refused_with_the_choices(tmp_path: Path) -> None:
    refused = invoke("rewrite", MLP, "-o", tmp_path / "out.pte", "--runtime", "1.7")
    assert refused.exit_code == 2 and len(refused.stderr.splitlines()) == 1
    assert "choose one of: 1.5, 1.6" in refused.stderr and not (tmp_path / "out.pte").exists()


def test_a_conversion_is_named_in_every_summary(tmp_path: Path) -> None:
    """rewrite's line, the hook's (concise) and the JSON say a file was converted from one encoding to another,
    with how many constants."""
    first = tmp_path / "first.pte"
    api.rewrite(MLP, first)
    text = invoke("rewrite", first, "-o", tmp_path / "a.pte", "--runtime", "1.5")
    assert "4 constants converted to first-call copies (for 1.5)" in text.stdout
    concise = invoke("rewrite", first, "-o", tmp_path / "b.pte", "--runtime", "1.5", "--format", "concise")
    line = concise.stdout.strip().splitlines()[0]
    assert "4 constants converted to first-call copies (for 1.5)" in line and "0 tensors moved" not in line
    back = invoke("rewrite", tmp_path / "b.pte", "-o", tmp_path / "c.pte", "--runtime", "1.6", "--format", "json")
    runtime = json.loads(back.stdout)["runtime"]
    assert runtime["converted"] == 4 and runtime["encoding"] == "initial-data"
    assert not api.rewrite(tmp_path / "c.pte", tmp_path / "d.pte").plan.converted  # settled: nothing converts


def test_an_unregistered_encoding_of_an_edit_is_an_error() -> None:
    with pytest.raises(KeyError, match="no encoding 'toy'"):
        encoding_named("toy")


def test_exit_codes_unchanged_by_the_registry(tmp_path: Path) -> None:
    assert api.check([MLP]).exit_code is ExitCode.FINDINGS
