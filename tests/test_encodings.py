"""An encoding is one unit (rewriter/encodings): chosen once from the runtime, and everything the tool says or does
about it comes from it.

The seam is held by a toy third encoding defined here, in this module only: registered, it is offered by every
command (``rewrite``, ``check``, the config file, the API), planned, written, proven by the self-check and by
``validate``, and named in every report with its own words, with no edit anywhere else.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator, Optional

import pytest

from cli_runner import invoke
from conftest import EXAMPLES
from test_layers import FOLDERS
from pte_devconst import api
from pte_devconst.program.runtime import DEFAULT_RUNTIME, Runtime
from pte_devconst.rewriter.model.analysis import ConstantVerdict
from pte_devconst.rewriter.encodings import (encoding_for, encoding_named, encodings, register, required_runtime,
                                             runtime_choices, unregister)
from pte_devconst.rewriter.encodings.initial_data import InitialDataEncoding
from pte_devconst.schema.pte_file import open_pte
from pte_devconst.util.exit_code import ExitCode

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


# --- a toy third encoding ----------------------------------------------------------------------------------


class ToyEncoding(InitialDataEncoding):
    """Device initial data for an imagined ExecuTorch 1.7 that keeps constants of fewer than 64 bytes on the host."""

    key = "toy"
    runtime = Runtime(1, 7)
    name = "toy initial data"
    when = "at toy load"
    TOO_SMALL = "toy: fewer than 64 bytes stay on the host"

    def admit(self, verdict: ConstantVerdict) -> Optional[str]:
        return self.TOO_SMALL if verdict.nbytes < 64 else None


@pytest.fixture
def toy() -> Iterator[ToyEncoding]:
    encoding = ToyEncoding()
    register(encoding)
    try:
        yield encoding
    finally:
        unregister(encoding)


def test_a_registered_encoding_is_chosen_from_its_runtime(toy: ToyEncoding) -> None:
    assert encoding_for("1.7") is toy and encoding_named("toy") is toy
    assert runtime_choices() == "1.5, 1.6, 1.7"
    with pytest.raises(ValueError, match="registered already"):
        register(ToyEncoding())
    # what a file needs is still the oldest runtime that loads it: the toy adds no need of its own
    with open_pte(MLP) as pte:
        assert required_runtime(pte.program).runtime == Runtime(1, 5)


def test_the_api_plans_writes_and_proves_with_it(toy: ToyEncoding, tmp_path: Path) -> None:
    out = tmp_path / "toy.pte"
    result = api.rewrite(MLP, out, runtime="1.7", verify="full")  # the self-check proves it, every byte
    plan = result.plan
    assert plan.options.runtime == Runtime(1, 7) and {edit.encoding for edit in plan.methods} == {"toy"}
    assert [s.reason for s in plan.kept_for_runtime] == [ToyEncoding.TOO_SMALL]  # its own admission rule
    assert len(plan.placements) == 3
    assert result.to_json()["runtime"]["encoding"] == "toy"
    checked = api.validate(MLP, out, inputs=EXAMPLES / "mlp_copy.inputs.pt",
                           expected=EXAMPLES / "mlp_copy.expected.pt", calls=3, simulate_devices=True)
    assert checked.passed


def test_every_command_offers_it_with_its_own_words(toy: ToyEncoding, tmp_path: Path) -> None:
    out = tmp_path / "toy.pte"
    done = invoke("rewrite", MLP, "-o", out, "--runtime", "1.7")
    assert done.exit_code == 0, done.stderr
    assert ToyEncoding.TOO_SMALL in done.stdout  # the constant it leaves, with its reason
    # the gate of a project that deploys it: the findings' fix names it, and its output passes
    gate = invoke("check", MLP, "--runtime", "1.7", "--format", "concise")
    assert gate.exit_code == 1 and "pte-devconst rewrite --runtime 1.7 --in-place" in gate.stdout
    assert invoke("check", out, "--runtime", "1.7").exit_code == 0
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
