"""``pte-devconst validate``: run an original program and its rewrite and check the rewrite's promises."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional, Sequence

import typer

from pte_devconst.util.record import record
from pte_devconst.cli.app import command, fail, global_options
from pte_devconst.cli.formats import Format, Output, Renderers, View, format_option, resolve
from pte_devconst.cli.output import (EtrecordOption, JsonFlag, ProgressOption, echo_lines, markdown_table,
                                     markup_safe, md_code, md_text, printable, stdout_console, table)
from pte_devconst.cli.runner_options import (InputsOption, ProfileOption, PtdOption, SimulateOption,
                                              caller_memory_note, delegates_note, opaque_note)
from pte_devconst.util.errors import PteDevconstError, ReportedError
from pte_devconst.util.exit_code import ExitCode, worst_exit
from pte_devconst.util.units import exact_bytes, listing, plural

if TYPE_CHECKING:  # the runner imports torch: only when the command runs
    from pte_devconst.cli.app import GlobalOptions
    from pte_devconst.types import MethodValidation, ValidationResult

SUMMARY_COLUMNS = ["", "original", "rewritten"]
CHECK_COLUMNS = ["check", "result", "detail"]
MAX_DIFFERENCE_LINES = 10
MOVED_NAMES_SHOWN = 8


def _ms(values: list[float]) -> str:
    return f"{sum(values) / len(values) * 1e3:.3f} ms" if values else "-"


def summary_rows(mv: MethodValidation) -> list[list[str]]:
    """The method's bytes before and after, as the runner counted them (none where the runtime engine ran it)."""
    if mv.runs is None or not mv.calls:
        return []
    last = mv.calls[-1]
    moved = [c for c in mv.moved if not c.folded]
    folded = [c for c in mv.moved if c.folded]
    rows = [["moved constants", "", f"{len(moved):,} ({exact_bytes(sum(c.nbytes for c in moved))})"]]
    if folded:
        rows.append(["folded values", "", f"{len(folded):,} ({exact_bytes(sum(c.nbytes for c in folded))})"])
    return rows + [
        ["H2D at load", exact_bytes(mv.load_h2d_before), exact_bytes(mv.load_h2d_after)],
        ["H2D on the first call", exact_bytes(mv.calls[0].h2d_before), exact_bytes(mv.calls[0].h2d_after)],
        ["H2D per call", exact_bytes(last.h2d_before), exact_bytes(last.h2d_after)],
        ["  of which constant-derived", exact_bytes(last.derived_before), exact_bytes(last.derived_after)],
        ["D2H per call", exact_bytes(last.d2h_before), exact_bytes(last.d2h_after)],
    ] + profiler_rows(last)


def timing_note(mv: MethodValidation) -> str:
    """The calls' times, said as what they are: the two programs ran one after the other in one process (never
    both loaded: that would hold the model twice), so whichever ran first also warmed the process up, and the
    times are no A/B benchmark.  The first call is left out (it loads lazily, and makes the copies that run once)."""
    steady = mv.calls[1:] or mv.calls
    return (f"time per call, calls 2 and later (mean): original {_ms([c.wall_s_before for c in steady])}, rewritten "
            f"{_ms([c.wall_s_after for c in steady])}; the programs ran one after the other, so this is no "
            "comparison of their speed (examples/gpu_validate.sh times both on a GPU)")


def profiler_rows(last: Any) -> list[list[str]]:
    """The profiler's own per-call H2D/D2H bytes (--profile on a GPU), next to the ledger's rows."""
    if last.profiled_before is None and last.profiled_after is None:
        return []

    def cell(profiled: Any, direction: str) -> str:
        return "-" if profiled is None else exact_bytes(getattr(profiled, f"{direction}_bytes"))

    return [[f"{label} per call (profiler)", cell(last.profiled_before, key), cell(last.profiled_after, key)]
            for label, key in (("H2D", "h2d"), ("D2H", "d2h"))]


MARKDOWN_MARKS = {"pass": "✅ pass", "fail": "❌ FAIL", "skipped": "⏭️ skipped"}
VERDICT_STYLES = {"pass": "bold green", "fail": "bold red"}  # anything else (nothing moved): bold yellow


def text_marks() -> dict[str, Any]:
    """Each check status as the text tables show it (rich is imported only when something is printed)."""
    from rich.text import Text

    return {"pass": Text("pass", style="green"), "fail": Text("FAIL", style="red"),
            "skipped": Text("skipped", style="yellow")}


def check_rows(mv: MethodValidation, marks: dict[str, Any]) -> list[list[Any]]:
    """One row per check of a method."""
    return [[c.name, marks[c.status.value], c.detail] for c in mv.checks]


def notes(mv: MethodValidation) -> list[str]:
    """Lines under a method's tables: which delegates ran how, the calls' times, and each boundary difference
    (capped); none where the runtime engine ran the method (it measures none of these)."""
    runs = mv.runs
    if runs is None:
        return []
    lines = []
    named = [f"{c.name} (v{c.value})" for c in mv.moved if c.name]
    if named:  # the names an ETRecord gave them; the JSON lists every one
        lines.append(f"moved: {listing(named, MOVED_NAMES_SHOWN)}")
    before, after = runs[0].delegates, runs[1].delegates
    if before == after:
        lines += delegates_note(before)
    else:
        lines += delegates_note(before, "delegates (original)") + delegates_note(after, "delegates (rewritten)")
    lines += caller_memory_note(runs[1].caller_memory)
    if mv.calls:
        lines.append(timing_note(mv))
    if mv.opaque_backends:
        lines.append(opaque_note(mv.opaque_backends))
    differences = mv.difference_lines()
    lines += differences[:MAX_DIFFERENCE_LINES]
    if len(differences) > MAX_DIFFERENCE_LINES:
        lines.append(f"... and {plural(len(differences) - MAX_DIFFERENCE_LINES, 'more boundary difference')} "
                     "(--format json lists up to 100)")
    return lines


def skipped_lines(result: ValidationResult) -> list[str]:
    return [f"method {name} not validated: {why}" for name, why in result.skipped_methods]


def verdict_line(result: ValidationResult) -> str:
    """The verdict in capitals, and what it means when nothing moved (no vacuous PASS)."""
    from pte_devconst.types import Verdict

    word = result.verdict.value.upper()
    return f"{word}: {result.why_nothing_moved}" if result.verdict is Verdict.NOTHING_MOVED else word


def ran_line(result: ValidationResult) -> str:
    """How both programs ran: ``2 calls each, simulated devices``, or in the installed runtime."""
    if result.engine is not None:
        return (f"{result.calls:,} calls each in the installed ExecuTorch runtime ({result.engine.runtime}), both "
                "flipped to the CPU")
    return f"{result.calls:,} calls each, {'simulated' if result.simulated else 'real'} devices"


def engine_lines(result: ValidationResult) -> list[str]:
    """The runtime engine's facts: what it ran for real and what the flips changed (none for the runner)."""
    engine = result.engine
    if engine is None:
        return []
    probed = plural(engine.probed, engine.probed_copy)
    return [f"delegates run for real: {', '.join(engine.delegates) or 'none'}",
            f"flip of the original: {engine.flip_original.describe()}",
            f"flip of the rewrite: {engine.flip_rewritten.describe()}"
            + (f"; {probed} probed" if engine.probed else "")]


def render_text(result: ValidationResult, view: View) -> None:
    if view.quiet:
        typer.echo(result.verdict.value.upper())
        return
    from rich.text import Text

    console = stdout_console()
    console.print(f"[bold]{markup_safe(result.original)}[/] vs [bold]{markup_safe(result.rewritten)}[/]: "
                  f"{markup_safe(ran_line(result))}", soft_wrap=True)
    for line in engine_lines(result):
        console.print(Text(printable(line)), soft_wrap=True)
    marks = text_marks()
    for mv in result.methods:
        title: Optional[str] = f"method {mv.method}"
        summary = summary_rows(mv)
        if summary:
            console.print(table(title, SUMMARY_COLUMNS, summary, right=SUMMARY_COLUMNS[1:]))
            title = None
        console.print(table(title, CHECK_COLUMNS, check_rows(mv, marks)))
        for line in notes(mv):
            console.print(Text(printable(line)), soft_wrap=True)
    for line in skipped_lines(result):
        console.print(Text(printable(line)), soft_wrap=True)
    style = VERDICT_STYLES.get(result.verdict.value, "bold yellow")
    console.print(printable(verdict_line(result)), style=style, markup=False, soft_wrap=True)


def render_markdown(result: ValidationResult, view: View) -> list[str]:
    facts = engine_lines(result)
    lines = [f"### pte-devconst validate: {md_code(Path(result.original).name)} → "
             f"{md_code(Path(result.rewritten).name)}", "",
             f"{md_text(ran_line(result))}: **{md_text(verdict_line(result))}**", ""]
    lines += [f"* {md_text(line)}" for line in facts] + ([""] if facts else [])
    lines += [f"> **warning:** {md_text(w)}" for w in result.warnings] + ([""] if result.warnings else [])
    for mv in result.methods:
        summary = summary_rows(mv)
        lines += [f"#### method {md_code(mv.method)}", ""]
        lines += [markdown_table(SUMMARY_COLUMNS, summary), ""] if summary else []
        lines += [markdown_table(CHECK_COLUMNS, check_rows(mv, MARKDOWN_MARKS)), ""]
        lines += [f"* {md_text(line)}" for line in notes(mv)] + ([""] if notes(mv) else [])
    return lines + [f"* {md_text(line)}" for line in skipped_lines(result)]


VALIDATE = Renderers["ValidationResult"]("validate", text=render_text, markdown=render_markdown,
                                         json=lambda result: result.to_json(), what="pair")


class Engine(str, Enum):
    """What runs the two programs (``--engine``): the choices its help and its errors list."""

    RUNNER = "runner"
    EXECUTORCH = "executorch"


ENGINE_HELP = ("What runs the two programs: runner (the project's torch runner: simulated or real devices, every "
               "copy counted, the delegate boundaries compared) or executorch (the installed ExecuTorch runtime, "
               "both programs flipped to the CPU: outputs bit for bit, each copy that must run once held to it; "
               'needs pip install "pte-devconst[executorch]").')


def warn(result: ValidationResult) -> None:
    for warning in result.warnings:
        typer.echo(f"pte-devconst: warning: {printable(warning)}", err=True)


@record
class Pair:
    """One original and its rewrite to validate, with the inputs and expected outputs found for it."""

    original: Path
    rewritten: Path
    inputs: Optional[Path] = None
    expected: Optional[Path] = None


def _beside(original: Path, suffix: str, given: Optional[Path]) -> Optional[Path]:
    """``given``, else ``NAME.inputs.pt`` / ``NAME.expected.pt`` next to the original when it is there."""
    if given is not None:
        return given
    found = original.with_name(original.name[:-len(original.suffix)] + suffix) if original.suffix else None
    return found if found is not None and found.is_file() else None


def pairs_of(programs: Sequence[Path], inputs: Optional[Path], expected: Optional[Path]
             ) -> tuple[list[Pair], list[str]]:
    """The pairs a command line names, and the originals without a rewrite (a problem each).

    Two folders pair every NAME.pte below the first with NAME.devconst.pte (else NAME.pte) at the same place below
    the second (one folder twice: each program with its rewrite beside it); otherwise the arguments are
    ORIGINAL REWRITTEN pairs.  With several pairs, each takes NAME.inputs.pt and NAME.expected.pt next to its
    original unless --inputs/--expected name files for all.
    """
    from pte_devconst.paths import REWRITTEN, default_output, walk

    if len(programs) == 2 and programs[0].is_dir() and programs[1].is_dir():
        originals, rewrites = programs
        found, problems = [], []
        for original in sorted(p for p in walk(originals) if p.suffix == ".pte" and not p.stem.endswith(REWRITTEN)):
            relative = original.relative_to(originals)
            candidates = [default_output(rewrites / relative), rewrites / relative]
            rewrite = next((c for c in candidates if c.is_file() and c.resolve() != original.resolve()), None)
            if rewrite is None:
                problems.append(f"{original}: no rewrite found (looked for {' and '.join(map(str, candidates))})")
            else:
                found.append(Pair(original, rewrite, _beside(original, ".inputs.pt", inputs),
                                  _beside(original, ".expected.pt", expected)))
        if not found and not problems:
            problems.append(f"{originals}: no .pte file in this directory")
        return found, problems
    if len(programs) % 2:
        given = plural(len(programs), "program") + (" was" if len(programs) == 1 else " were")
        raise PteDevconstError(f"validate takes ORIGINAL REWRITTEN pairs (or two folders), but {given} given")
    pairs = list(zip(programs[0::2], programs[1::2]))
    if len(pairs) == 1:
        return [Pair(pairs[0][0], pairs[0][1], inputs, expected)], []
    return [Pair(a, b, _beside(a, ".inputs.pt", inputs), _beside(a, ".expected.pt", expected)) for a, b in pairs], []


def summary_line(results: Sequence[ValidationResult], failed: int) -> str:
    """Several pairs in one line: how many passed, failed, moved nothing, or could not be validated."""
    counts = {verdict: sum(1 for r in results if r.verdict.value == verdict)
              for verdict in ("pass", "fail", "nothing moved")}
    parts = [f"{counts['pass']:,} passed", f"{counts['fail']:,} failed", f"{counts['nothing moved']:,} with nothing "
             "moved"] + ([f"{failed:,} could not be validated"] if failed else [])
    return f"{plural(len(results) + failed, 'pair')} validated: " + ", ".join(parts) + "."


@command("validate")
def validate_command(
    ctx: typer.Context,
    programs: Annotated[list[Path], typer.Argument(
        help="ORIGINAL REWRITTEN: a program and its rewrite; several pairs one after another; or two folders, "
        "pairing each NAME.pte below the first with NAME.devconst.pte (else NAME.pte) at the same place below the "
        "second (one folder twice: each program with the rewrite beside it).", metavar="ORIGINAL REWRITTEN...",
        show_default=False)],
    ptd: PtdOption = None,
    rewritten_ptd: Annotated[Optional[Path], typer.Option(
        "--rewritten-ptd", metavar="FILE", help="The rewrite's .ptd [default: its NAME.ptd if there, else the "
        "original's data].")] = None,
    inputs: InputsOption = None,
    expected: Annotated[Optional[Path], typer.Option(
        "--expected", "-e", metavar="FILE", help="torch.save file of expected outputs ({method: [outputs, ...]}; "
        "what run -o saves). With several pairs: for every pair [default: NAME.expected.pt next to each "
        "original, if there; likewise NAME.inputs.pt for --inputs].")] = None,
    method: Annotated[Optional[list[str]], typer.Option(
        "--method", "-m", metavar="METHOD", help="Method(s) to validate (default: every method with inputs).")]
        = None,
    calls: Annotated[int, typer.Option("--calls", "-n", metavar="N", help="Calls per program (at least 2).")] = 2,
    rtol: Annotated[Optional[float], typer.Option(
        "--rtol", metavar="R", show_default=False, help="Relative tolerance for floating outputs against --expected "
        "(and between the programs when they run different kernels); integer and bool outputs always compare "
        "exactly [default: torch.testing.assert_close's for the output's dtype: float32 1.3e-6, float16 1e-3, "
        "bfloat16 1.6e-2, float64 1e-7].")] = None,
    atol: Annotated[Optional[float], typer.Option(
        "--atol", metavar="A", show_default=False, help="Absolute tolerance, as --rtol [default: 1e-5; float64 "
        "1e-7].")] = None,
    simulate_devices: SimulateOption = False,
    opaque_delegates: Annotated[bool, typer.Option(
        "--opaque-delegates", help="Run every delegate as an opaque stand-in (seeded outputs from its inputs' "
        "bytes), not only those nothing here executes: fast, and enough for a CI gate.")] = False,
    profile: ProfileOption = False,
    etrecord: EtrecordOption = None,
    fmt: Annotated[Optional[str], format_option(VALIDATE)] = None,
    json_flag: JsonFlag = False,
    progress: ProgressOption = None,
    engine_choice: Annotated[Engine, typer.Option("--engine", metavar="[runner|executorch]", help=ENGINE_HELP)]
        = Engine.RUNNER,
) -> None:
    """Check that a rewrite computes the same outputs, gives every delegate call the same bytes, and copies
    each moved constant once, when the rewrite's runtime encoding says (at load, or on the first call), and never
    again.

    Delegates that neither an executor nor the installed ExecuTorch runtime (XNNPACK) executes run as opaque
    stand-ins. Several pairs are validated in one process
    (torch is loaded once). Exit 0 when every check passes; 1 when one fails; 3 when no check fails but nothing
    moved between the two programs (there is no rewrite to vouch for); 2 on bad input (with several pairs: a
    pair that could not be validated; the others still are).
    """
    engine = engine_choice.value
    _refuse_early(engine, calls, ((inputs, "inputs"), (expected, "expected outputs"), (ptd, "data (.ptd)"),
                                  (rewritten_ptd, "data (.ptd)"), (etrecord, "ETRecord")))
    options = global_options(ctx)
    view = View(options.quiet, options.verbose)
    output = Output(VALIDATE, resolve(VALIDATE, fmt, json_flag, view), view)
    pairs, problems = pairs_of(programs, inputs, expected)
    output.several = len(pairs) + len(problems) > 1 or programs[0].is_dir()
    if output.several and (ptd is not None or rewritten_ptd is not None):
        raise PteDevconstError("--ptd and --rewritten-ptd name the data of one pair; with several, each program "
                               "takes its own by the .ptd rule (NAME.ptd next to NAME.pte)")
    settings = Settings(ptd, rewritten_ptd, calls, rtol, atol, simulate_devices, tuple(method or ()), profile,
                        opaque_delegates, etrecord, engine,
                        beside_expected=engine != "executorch" or expected is not None)
    results, failed = _validate_pairs(pairs, problems, settings, output, options, bool(progress))
    _finish(output, results, failed, options.quiet)


def _refuse_early(engine: str, calls: int, files: tuple[tuple[Optional[Path], str], ...]) -> None:
    """Mistakes in the options, reported at once, before torch or the runtime is imported (seconds)."""
    from pte_devconst.cli import preflight

    preflight.before_running("validate", engine, files)
    if calls < 2:
        raise PteDevconstError(f"validate needs --calls of at least 2 (load once, then steady calls), got {calls}")


@record
class Settings:
    """What every pair is validated with: the options of ``api.validate`` that are not the pair's own."""

    ptd: Optional[Path]
    rewritten_ptd: Optional[Path]
    calls: int
    rtol: Optional[float]
    atol: Optional[float]
    simulate_devices: bool
    methods: tuple[str, ...]  # none: every method with inputs
    profile: bool
    opaque_delegates: bool
    etrecord: Optional[Path]
    engine: str
    # The real runtime compares the two programs with each other: NAME.expected.pt found beside a program is the
    # runner's, not asked for (--expected named with the engine is refused by the API).
    beside_expected: bool = True


def _validate_pair(pair: Pair, settings: Settings, label: str, quiet: bool, forced: bool) -> ValidationResult:
    """One pair through the API, after the preflight's hint, with a progress bar (loading torch takes seconds)."""
    from pte_devconst import api
    from pte_devconst.cli import preflight
    from pte_devconst.cli.progress import steps_progress

    hint = preflight.before_validating(pair.original, pair.rewritten, settings.ptd, settings.rewritten_ptd,
                                       settings.simulate_devices, settings.engine)
    if hint and not quiet:
        typer.echo(f"pte-devconst: hint: {printable(hint)}", err=True)
    with steps_progress(label, quiet, forced=forced) as advance:
        return api.validate(pair.original, pair.rewritten, ptd=settings.ptd, rewritten_ptd=settings.rewritten_ptd,
                            inputs=pair.inputs, expected=pair.expected if settings.beside_expected else None,
                            calls=settings.calls, rtol=settings.rtol, atol=settings.atol,
                            simulate_devices=settings.simulate_devices, methods=settings.methods or None,
                            profile=settings.profile, opaque_delegates=settings.opaque_delegates, progress=advance,
                            etrecord=settings.etrecord, engine=settings.engine)


def _validate_pairs(pairs: Sequence[Pair], problems: Sequence[str], settings: Settings,
                    output: Output[ValidationResult], options: GlobalOptions, forced: bool
                    ) -> tuple[list[ValidationResult], int]:
    """Every pair validated and added to ``output`` as it comes: (the results, how many could not be validated).
    With several pairs, one that cannot be validated is one error line, and the others are still validated."""
    failed = 0
    for problem in problems:
        fail(PteDevconstError(problem), options.debug)
        failed += 1
    results: list[ValidationResult] = []
    for index, pair in enumerate(pairs):
        label = f"validating {pair.original.name}" + (f" ({index + 1}/{len(pairs)})" if output.several else "")
        try:
            result = _validate_pair(pair, settings, label, options.quiet, forced)
        except (ReportedError, OSError) as error:
            if not output.several:
                raise
            fail(error, options.debug)  # one line; the other pairs are still validated
            failed += 1
            continue
        if not options.quiet:
            warn(result)
        results.append(result)
        output.add(result)
    return results, failed


def _finish(output: Output[ValidationResult], results: Sequence[ValidationResult], failed: int, quiet: bool) -> None:
    """The report closed, several pairs summed up in one line, and the exit code: the worst pair's."""
    output.close()
    if output.several and not quiet and output.fmt is Format.TEXT:
        echo_lines([summary_line(results, failed)])
    code = worst_exit([r.verdict.exit_code for r in results] + [ExitCode.ERROR] * bool(failed))
    if code != ExitCode.OK:
        raise typer.Exit(code)
