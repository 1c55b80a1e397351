"""The ``pte-devconst`` command: a thin typer layer over the library.

Exit codes follow ruff's convention: 0 clean, 1 findings (check/validate
failed), 2 abnormal end (bad input, unreadable file, write error).  Every
``PteDevconstError`` becomes one line on stderr; ``--debug`` shows the
traceback instead.  Commands register themselves from their own modules and
import heavy dependencies (torch) only inside the commands that execute a model.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, TypeVar, Union

import typer

try:  # typer >= 0.22 vendors its own click; the exceptions it raises are that copy's
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover - older typer on stock click
    from click import exceptions as click_errors  # type: ignore[no-redef]

from pte_devconst import __version__
from pte_devconst.schema.errors import PteDevconstError

app = typer.Typer(
    name="pte-devconst",
    help="Rewrite ExecuTorch .pte programs so that constants read only by device delegates live in "
    "device memory, copied once at load instead of on every call.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help texts show brackets like [default: X] literally
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 80},
)

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


class GlobalOptions:
    debug: bool = False
    quiet: bool = False
    verbose: bool = False


OPTIONS = GlobalOptions()


def _version(value: bool) -> None:
    if value:
        typer.echo(f"pte-devconst {__version__}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks instead of one-line errors."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only errors and the machine-readable result."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Print more detail."),
    version: Optional[bool] = typer.Option(None, "--version", callback=_version, is_eager=True,
                                           help="Print the version and exit."),
) -> None:
    OPTIONS.debug = debug or bool(os.environ.get("PTE_DEVCONST_DEBUG"))
    OPTIONS.quiet = quiet
    OPTIONS.verbose = verbose


def fail(error: BaseException) -> "typer.Exit":
    """Print one line for an error and return the exit to raise (``--debug`` re-raises instead)."""
    if OPTIONS.debug:
        raise error
    if isinstance(error, PteDevconstError):
        message = str(error)
    elif isinstance(error, OSError) and error.filename is not None:  # the system refused a file: not a bug
        message = f"{error.filename}: {error.strerror or error}"
    else:  # a bug: still one line, with the way to see more
        message = f"internal error: {type(error).__name__}: {error} (run with --debug for the traceback)"
    from pte_devconst.cli.output import printable

    typer.echo(f"pte-devconst: error: {printable(' '.join(message.split()))}", err=True)
    return typer.Exit(EXIT_ERROR)


T = TypeVar("T")


def for_each_program(items: Sequence[Union[Path, str]], work: Callable[[Path], T],
                     show: Callable[[T], None]) -> tuple[list[T], bool]:
    """``work`` on each program in turn, then ``show`` its result; a problem (``str``, e.g. a pattern that
    matched nothing) or a program that fails is one line on stderr, and the others still run.

    Returns the results and whether anything failed (the command then exits 2).
    """
    results: list[T] = []
    failed = False
    for item in items:
        try:
            if isinstance(item, str):
                raise PteDevconstError(item)
            result = work(item)
        except (PteDevconstError, OSError) as error:
            fail(error)
            failed = True
            continue
        results.append(result)
        show(result)
    return results, failed


def command(*args: Any, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``app.command`` that turns every error escaping the command into one line and exit 2."""

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def guarded(*a: Any, **k: Any) -> Any:
            try:
                return function(*a, **k)
            except (typer.Exit, typer.Abort, click_errors.ClickException):
                raise
            except KeyboardInterrupt:
                typer.echo("pte-devconst: interrupted", err=True)
                raise typer.Exit(130)
            except ModuleNotFoundError as error:
                if error.name != "torch":
                    raise fail(error) from None
                raise fail(PteDevconstError(
                    f"'{function.__name__.removesuffix('_command')}' runs programs with torch, which is not "
                    "installed: pip install 'pte-devconst[runner]'")) from None
            except Exception as error:  # noqa: BLE001 - the one place errors become exit codes
                raise fail(error) from None

        return app.command(*args, **kwargs)(guarded)

    return decorate


GLOBAL_FLAGS = frozenset({"--debug", "--quiet", "-q", "--verbose", "-v", "--version"})


def hoist_global_flags(argv: list[str]) -> list[str]:
    """Let ``pte-devconst rewrite model.pte -q`` mean ``pte-devconst -q rewrite model.pte``.

    The global flags take no value and no command defines them, so moving them in
    front of the command changes nothing else (``--version`` then prints the version,
    wherever it stands); ``--`` ends the search.
    """
    flags, rest = [], []
    for position, arg in enumerate(argv):
        if arg == "--":
            rest.extend(argv[position:])
            break
        (flags if arg in GLOBAL_FLAGS else rest).append(arg)
    return flags + rest


def main(argv: Optional[list[str]] = None, prog_name: str = "pte-devconst") -> None:
    """Console-script entry point: usage errors are one line too (``--help`` shows the usage)."""
    argv = hoist_global_flags(list(sys.argv[1:] if argv is None else argv))
    try:
        code = app(args=argv, prog_name=prog_name, standalone_mode=False)
    except click_errors.NoArgsIsHelpError as error:
        typer.echo(error.format_message())
        raise SystemExit(EXIT_ERROR) from None
    except click_errors.UsageError as error:
        hint = f" (see '{error.ctx.command_path} --help')" if error.ctx is not None else ""
        from pte_devconst.cli.output import printable

        typer.echo(f"pte-devconst: error: {printable(error.format_message())}{hint}", err=True)
        raise SystemExit(EXIT_ERROR) from None
    except click_errors.ClickException as error:
        from pte_devconst.cli.output import printable

        typer.echo(f"pte-devconst: error: {printable(error.format_message())}", err=True)
        raise SystemExit(error.exit_code) from None
    except typer.Abort:
        typer.echo("pte-devconst: aborted", err=True)
        raise SystemExit(130) from None
    raise SystemExit(code if isinstance(code, int) else EXIT_OK)


# Command modules register themselves on `app` (after it exists); none imports torch at import time.
from pte_devconst.cli import commands  # noqa: E402,F401
