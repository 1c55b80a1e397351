"""The command line at the terminal: --version, formats on every command, NO_COLOR, 80 columns, progress, -q/-v."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from cli_runner import invoke
from conftest import CASES, CORPUS, ptd_path, pte_path
from pte_devconst.cli import progress

SGR = re.compile(r"\x1b\[([0-9;]*)m")


def _colour_codes(text: str) -> list[str]:
    """SGR parameters that set a colour (30-37, 38;..., 40-47, 48;..., 90-97, 100-107)."""
    found = []
    for params in SGR.findall(text):
        for p in params.split(";"):
            if p and (30 <= int(p) <= 49 or 90 <= int(p) <= 107):
                found.append(params)
                break
    return found


def test_version_matches_the_installed_distribution() -> None:
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"pte-devconst {metadata.version('pte-devconst')}"


def test_help_lists_every_command() -> None:
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("inspect", "rewrite", "diff", "check", "run", "validate"):
        assert re.search(rf"\b{command}\b", result.stdout), command


@pytest.mark.parametrize("command", ["inspect", "rewrite", "diff", "check", "run", "validate"])
def test_every_command_offers_text_markdown_and_json(command: str) -> None:
    result = invoke(command, "--help", env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "--format" in result.stdout and "--json" in result.stdout
    assert "text" in result.stdout and "markdown" in result.stdout and "json" in result.stdout


@pytest.mark.parametrize("args", [
    ("inspect", "{bad}"), ("rewrite", "{bad}", "--dry-run"), ("diff", "{bad}", "{good}"), ("check", "{bad}"),
])
def test_bad_input_is_one_line_and_exit_2(args: tuple[str, ...], tmp_path: Path) -> None:
    bad = tmp_path / "broken.pte"
    bad.write_bytes(b"ET12" * 40)
    argv = [a.format(bad=bad, good=pte_path("v_h_cpu_only")) for a in args]
    result = invoke(*argv)
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("pte-devconst: error: ") and "broken.pte" in lines[0]
    assert "Traceback" not in result.output


def test_no_color_is_respected() -> None:
    """With colours forced on, check's summary is coloured; NO_COLOR removes every colour (bold may stay)."""
    args = ("check", pte_path("v_a_dtypes_copy"))
    forced = invoke(*args, env={"FORCE_COLOR": "1", "NO_COLOR": None, "TERM": "xterm-256color"})
    assert _colour_codes(forced.stdout), "the test needs colour to be on without NO_COLOR"
    plain = invoke(*args, env={"FORCE_COLOR": "1", "NO_COLOR": "1", "TERM": "xterm-256color"})
    assert plain.exit_code == 1 and _colour_codes(plain.stdout) == []
    assert "copied to a device on every call" in plain.stdout


def _too_wide(stdout: str, *paths: object) -> list[str]:
    """Lines over 80 columns, leaving out the record lines that name a file: those stay whole on purpose."""
    return [line for line in stdout.splitlines() if len(line) > 80 and not any(str(p) in line for p in paths)]


@pytest.mark.parametrize("name", CASES)
def test_inspect_text_fits_80_columns(name: str) -> None:
    ptd = ptd_path(name)
    result = invoke("inspect", pte_path(name), *(["--ptd", ptd] if ptd else []), env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.stderr
    assert result.stdout.count("\n") > 10
    wide = _too_wide(result.stdout, pte_path(name))
    assert not wide, f"{len(wide)} line(s) wider than 80 columns, e.g. {wide[0]!r}"


def test_rewrite_diff_and_check_text_fit_80_columns(work_copy) -> None:
    pte = work_copy("v_f_multi_method_copy")
    out = pte.with_name("v_f_multi_method_copy.devconst.pte")
    env = {"COLUMNS": "80"}
    for args in (("rewrite", pte), ("--verbose", "diff", pte, out), ("check", pte), ("check", out)):
        result = invoke(*args, env=env)
        assert result.exit_code in (0, 1), result.stderr
        assert not _too_wide(result.stdout, pte, out), args


def test_no_progress_bar_when_stderr_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    paths = [str(p) for p in (CORPUS / f"{name}.pte" for name in CASES)]
    assert len(paths) >= progress.MANY_FILES
    with progress.files_progress("checking", paths, quiet=False) as advance:
        assert advance is None
    with progress.write_progress("writing", 1 << 40, quiet=False) as update:
        assert update is None
    assert not progress.progress_wanted(1 << 40, quiet=False)


def test_progress_bar_only_on_a_terminal_and_not_when_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stderr", Tty())
    paths = [str(p) for p in (CORPUS / f"{name}.pte" for name in CASES)]
    with progress.files_progress("checking", paths, quiet=False) as advance:
        assert callable(advance)
        advance(1, "x.pte")
    with progress.files_progress("checking", paths, quiet=True) as advance:
        assert advance is None
    with progress.files_progress("checking", paths[:2], quiet=False) as advance:
        assert advance is None  # two small files: well under a second, no bar
    assert progress.progress_wanted(progress.PROGRESS_THRESHOLD, quiet=False)
    assert not progress.progress_wanted(progress.PROGRESS_THRESHOLD - 1, quiet=False)


def test_check_draws_a_bar_on_a_real_terminal_only(tmp_path: Path) -> None:
    """End to end: the same command shows a bar on a pseudo-terminal and nothing on a pipe."""
    pty = pytest.importorskip("pty")
    files = [str(p) for p in (CORPUS / f"{name}.pte" for name in CASES)]
    command = [sys.executable, "-m", "pte_devconst", "check", *files]
    env = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1"}
    piped = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert piped.returncode == 1 and piped.stderr == ""
    primary, secondary = pty.openpty()
    try:
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=secondary, env=env, timeout=120)
        os.close(secondary)
        secondary = -1
        drawn = b""
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        if secondary >= 0:
            os.close(secondary)
        os.close(primary)
    assert done.returncode == 1
    assert b"checking" in drawn
    assert b"checking" not in done.stdout  # the bar never mixes into stdout


def test_quiet_and_verbose_change_rewrite_text(work_copy) -> None:
    pte = work_copy("v_c_shared_host_legacy")
    normal = invoke("rewrite", pte, "--dry-run")
    quiet = invoke("--quiet", "rewrite", pte, "--dry-run")
    assert normal.exit_code == quiet.exit_code == 0
    assert "left in place" in normal.stdout and quiet.stdout == ""
    verbose = invoke("-v", "diff", pte_path("v_a_dtypes_copy"), pte_path("v_b_dtypes_legacy"))
    assert verbose.exit_code == 0 and verbose.stdout


def test_shell_completion_completes_commands() -> None:
    env = {"_PTE_DEVCONST_COMPLETE": "complete_bash", "COMP_WORDS": "pte-devconst ch", "COMP_CWORD": "1"}
    result = subprocess.run([sys.executable, "-m", "pte_devconst"],
                            capture_output=True, text=True, env={**os.environ, **env}, timeout=60)
    assert "check" in result.stdout.split()
    # Without shell detection `--show-completion` takes the shell as its value, wherever the tests run (detection
    # looks at the parent processes and finds no shell when pytest runs detached, as in a background job).
    script = subprocess.run([sys.executable, "-m", "pte_devconst", "--show-completion", "bash"], capture_output=True,
                            text=True, env={**os.environ, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"},
                            timeout=60)
    assert script.returncode == 0 and "_pte_devconst_completion" in script.stdout


def test_lines_naming_a_file_stay_whole_in_a_narrow_terminal(work_copy) -> None:
    """inspect's header, rewrite's last line and diff's first line carry paths: never wrapped, at any width."""
    pte = work_copy("v_f_multi_method_copy")
    out = pte.with_name("v_f_multi_method_copy.devconst.pte")
    narrow = {"COLUMNS": "40"}
    inspect = invoke("inspect", pte, env=narrow).stdout.splitlines()
    assert inspect[0].startswith(f"{pte}: ") and inspect[0].endswith("2 methods"), inspect[0]
    rewrite = invoke("rewrite", pte, env=narrow).stdout.splitlines()
    assert rewrite[-1].startswith(f"wrote {out} ("), rewrite[-1]
    assert rewrite[-1].endswith("re-read and checked; needs ExecuTorch >= 1.6 (device initial data; for a 1.5 "
                                "runtime: --runtime 1.5)."), rewrite[-1]
    diff = invoke("diff", pte, out, env=narrow).stdout.splitlines()
    assert diff[0] == f"{pte} -> {out}", diff[0]


def test_many_constants_left_for_one_reason_are_one_row(tmp_path: Path) -> None:
    """A legacy-style model rewritten for 1.5 keeps each weight for the same reason: the text and markdown reports
    count them in one row per method and reason, and the JSON still lists each one."""
    import json

    source = Path(__file__).resolve().parent / "fixtures" / "xnnpack_device" / "deep_legacy.pte"
    out = tmp_path / "out.pte"
    text = invoke("rewrite", source, "-o", out, "--runtime", "1.5")
    assert text.exit_code == 0, text.stderr
    document = json.loads(invoke("rewrite", source, "-o", out, "--runtime", "1.5", "--format", "json").stdout)
    kept = document["runtime"]["kept_for_runtime"]
    assert len(kept) > 40  # enough to group
    assert f"{len(kept)} constants" in text.stdout and len(text.stdout.splitlines()) < 20
    assert f"{len(kept)} constants left in place for a reason they share" in text.stdout
    markdown = invoke("rewrite", source, "-o", out, "--runtime", "1.5", "--format", "markdown").stdout
    assert f"| {len(kept)} constants |" in markdown and markdown.count("legacy style") == 1
