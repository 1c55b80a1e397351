"""The ``pte-devconst`` command: a thin typer layer over the library.

Exit codes are ``util.exit_code.ExitCode`` (ruff's convention: 0 clean, 1
findings, 2 abnormal end; 3 check could not judge everything; 130, 141).  Every
``PteDevconstError`` becomes one line on stderr; ``--debug`` shows the
traceback instead.  Commands register themselves from their own modules, call
``pte_devconst.api`` and render what it returns; the global options travel in
typer's context object (``GlobalOptions``), never in module state.
"""

from __future__ import annotations

import copy
import functools
import os
import sys
import threading
from pathlib import Path
from typing import Annotated, Any, Callable, Optional, Sequence, TypeVar, Union

import typer

from pte_devconst import __version__
from pte_devconst.util.env import env_flag
from pte_devconst.util.errors import PteDevconstError, ReportedError
from pte_devconst.util.exit_code import ExitCode
from pte_devconst.util.record import record

DEBUG_ENV = "PTE_DEVCONST_DEBUG"  # set (not 0, false, no, off): as --debug

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

def stop_on_broken_pipe() -> "typer.Exit":
    """The reader of stdout went away (``... | head``): stop quietly, as a program stopped by SIGPIPE does.

    Whatever is still buffered for stdout goes to /dev/null, so that flushing it at exit cannot fail again.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real file descriptor behind stdout (a test runner's buffer)
        pass
    return typer.Exit(ExitCode.BROKEN_PIPE)


def _click_exception(name: str) -> type[Exception]:
    """One of the exceptions of the click that typer vendors, without importing typer's private modules.

    typer exports one of them, ``typer.BadParameter``; ``UsageError`` (bad usage, exit 2) and
    ``ClickException`` (any error click reports) are its bases, found here by name.
    """
    for base in typer.BadParameter.__mro__:
        if base.__name__ == name:
            return base
    raise ImportError(f"typer.BadParameter no longer derives from click's {name}")  # pragma: no cover


UsageError, ClickException = _click_exception("UsageError"), _click_exception("ClickException")


@record
class GlobalOptions:
    """``--debug``, ``--quiet`` and ``--verbose``: set once by the root callback, carried in typer's context."""

    debug: bool = False
    quiet: bool = False
    verbose: bool = False


def global_options(ctx: Optional[typer.Context]) -> GlobalOptions:
    """The options the root callback put in the context (defaults when a command runs without it)."""
    found = ctx.obj if ctx is not None else None
    return found if isinstance(found, GlobalOptions) else GlobalOptions(debug=env_flag(DEBUG_ENV))


def _version(value: bool) -> None:
    if value:
        typer.echo(f"pte-devconst {__version__}")
        raise typer.Exit(ExitCode.OK)


@app.callback()
def _root(
    ctx: typer.Context,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks instead of one-line errors.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q",
                                        help="Print only errors and the machine-readable result.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Print more detail.")] = False,
    version: Annotated[Optional[bool], typer.Option("--version", "-V", callback=_version, is_eager=True,
                                                    help="Print the version and exit.")] = None,
) -> None:
    ctx.obj = GlobalOptions(debug or env_flag(DEBUG_ENV), quiet, verbose)


def fail(error: BaseException, debug: bool = False) -> "typer.Exit":
    """Print one line for an error and return the exit to raise (``debug`` re-raises instead)."""
    if debug:
        raise error
    if isinstance(error, ReportedError):  # a user's problem, or a bug our own checks caught ("internal error: ...")
        message = str(error)
    elif isinstance(error, OSError) and error.filename is not None:  # the system refused a file: not a bug
        message = f"{error.filename}: {error.strerror or error}"
    else:  # a bug: still one line, with the way to see more
        message = f"internal error: {type(error).__name__}: {error} (run with --debug for the traceback)"
    from pte_devconst.cli.output import printable

    typer.echo(f"pte-devconst: error: {printable(' '.join(message.split()))}", err=True)
    return typer.Exit(ExitCode.ERROR)


T = TypeVar("T")


def for_each_program(items: Sequence[Union[Path, str]], work: Callable[[Path], T],
                     show: Callable[[T], None], debug: bool = False) -> tuple[list[T], bool]:
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
        except (ReportedError, OSError) as error:  # a bug our checks caught is one line too, the rest still run
            fail(error, debug)
            failed = True
            continue
        results.append(result)
        show(result)
    return results, failed


def warn_empty(folders: Sequence[str], quiet: bool = False) -> None:
    """A folder named that holds no program is a warning, not an error (ruff's rule: nothing to do is no failure)."""
    if quiet:
        return
    from pte_devconst.cli.output import printable

    for folder in folders:
        typer.echo(f"pte-devconst: warning: {printable(folder)}: no .pte file in this directory", err=True)


class HelpedCommand(typer.core.TyperCommand):
    """A command whose options' help may name what a registry holds (``config.SHOWN_HELP``: ``--runtime`` names the
    registered encodings): that help is composed when ``--help`` prints it, so the registry loads for the reader of
    the help, not for every command that only builds its options."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        from pte_devconst.cli.config import SHOWN_HELP

        for param in self.params:
            compose = next((SHOWN_HELP[o] for o in param.opts if o in SHOWN_HELP), None)
            if compose is not None and isinstance(param, typer.core.TyperOption):
                param.help = compose()
        super().format_help(ctx, formatter)


def command(*args: Any, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``app.command`` that turns every error escaping the command into one line and exit 2."""

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def guarded(*a: Any, **k: Any) -> Any:
            debug = global_options(k.get("ctx")).debug  # every command takes the context as ``ctx``
            try:
                return function(*a, **k)
            except (typer.Exit, typer.Abort, ClickException):
                raise
            except KeyboardInterrupt:
                typer.echo("pte-devconst: interrupted", err=True)
                raise typer.Exit(ExitCode.INTERRUPTED)
            except BrokenPipeError:  # stdout's reader is gone: every command, every format, stops quietly
                raise stop_on_broken_pipe() from None
            except ModuleNotFoundError as error:
                if error.name not in ("torch", "executorch"):
                    raise fail(error, debug) from None
                from pte_devconst.cli.preflight import ENGINE_EXTRA, RUNNER_EXTRA

                name = function.__name__.removesuffix('_command')
                engine = str(getattr(k.get("engine_choice"), "value", ""))  # validate --engine executorch
                raise fail(PteDevconstError(
                    f"'{name} --engine executorch' runs programs in the ExecuTorch runtime, which is not installed: "
                    f"{ENGINE_EXTRA}" if engine == "executorch" else
                    f"'{name}' runs programs with torch, which is not installed: {RUNNER_EXTRA}"), debug) from None
            except Exception as error:  # noqa: BLE001 - the one place errors become exit codes
                raise fail(error, debug) from None

        return app.command(*args, cls=HelpedCommand, **kwargs)(guarded)

    return decorate


GLOBAL_FLAGS = frozenset({"--debug", "--quiet", "-q", "--verbose", "-v", "--version", "-V"})


def hoist_global_flags(argv: list[str]) -> list[str]:
    """Let ``pte-devconst rewrite model.pte -q`` mean ``pte-devconst -q rewrite model.pte``.

    The global flags take no value and no command defines them, so moving them in front of the command
    changes nothing else (``--version`` then prints the version, wherever it stands); ``--`` ends the search.
    An option of the command that takes a value keeps it, whatever it looks like (``-o -v`` writes to ``-v``).
    """
    if not any(arg in GLOBAL_FLAGS for arg in argv):
        return argv
    takes_value = _value_options(argv)
    flags: list[str] = []
    rest: list[str] = []
    position, count = 0, len(argv)
    while position < count:
        arg = argv[position]
        if arg == "--":
            rest.extend(argv[position:])
            break
        if arg in takes_value and position + 1 < count:
            rest.extend(argv[position:position + 2])
            position += 2
            continue
        (flags if arg in GLOBAL_FLAGS else rest).append(arg)
        position += 1
    return flags + rest


def _value_options(argv: list[str]) -> frozenset[str]:
    """The option names of the command named in ``argv`` that take a value (``-o``, ``--ptd``, ...)."""
    name = invoked_command(argv)
    command = getattr(click_group(name), "commands", {}).get(name) if name else None
    if command is None:
        return frozenset()
    return frozenset(opt for param in command.params
                     if getattr(param, "param_type_name", "") == "option" and not getattr(param, "is_flag", False)
                     and not getattr(param, "count", False) for opt in (*param.opts, *param.secondary_opts))


# Options of the group itself that act before a command is chosen: with one of them in front of the command's
# name, the group must list every command (``pte-devconst --help rewrite``).
GROUP_ACTIONS = frozenset({"-h", "--help", "--install-completion", "--show-completion"})


def invoked_command(argv: Sequence[str]) -> Optional[str]:
    """The command ``argv`` runs (its first word that is no option: the group's own options take no value), or
    None when the whole group is needed: no command, an unknown one (click suggests the near ones), a group action
    in front of it, or the shell's completion (driven by an environment variable, over every command)."""
    name = next((arg for arg in argv if not arg.startswith("-")), None)
    completing = any(key.startswith("_") and key.endswith("_COMPLETE") for key in os.environ)  # click's variable
    if name is None or name not in _command_names() or completing:
        return None
    if any(arg in GROUP_ACTIONS for arg in argv[:argv.index(name)]):
        return None
    return name


@functools.lru_cache(maxsize=1)
def _command_names() -> frozenset[str]:
    return frozenset(_command_name(info) for info in app.registered_commands)


def _command_name(info: Any) -> str:
    return str(info.name or typer.main.get_command_name(info.callback.__name__))


@functools.lru_cache(maxsize=None)
def click_group(command: Optional[str] = None) -> Any:
    """The click group typer builds from ``app`` (typer's own click: looked at by attribute, not by class), built
    once per process.  Building it converts every command's options (about 3 ms a command); a process that runs
    ``command`` gets a group that holds only it, the same in everything it does, since one command's run never
    looks at another's options (tests/test_cli_usage.py)."""
    if command is None:
        return _plain_metavars(typer.main.get_command(app))
    alone = copy.copy(app)
    alone.registered_commands = [info for info in app.registered_commands if _command_name(info) == command]
    return _plain_metavars(typer.main.get_command(alone))


def _plain_metavars(group: Any) -> Any:
    """Usage lines show an argument as its metavar (``diff [OPTIONS] BEFORE AFTER``), an optional one in brackets;
    typer would wrap a required one in braces (``{BEFORE}``), which reads as a choice."""
    for command in getattr(group, "commands", {}).values():
        for param in command.params:
            if getattr(param, "param_type_name", "") == "argument" and param.metavar:
                param.make_metavar = functools.partial(_metavar, param)
    return group


def _metavar(param: Any, ctx: Any = None, *, usage: bool = False) -> str:
    var = str(param.metavar)
    return f"[{var}]" if usage and not param.required and not var.startswith("[") else var


def main(argv: Optional[list[str]] = None, prog_name: str = "pte-devconst") -> None:
    """Console-script entry point: usage errors are one line too (``--help`` shows the usage); stdout holds every
    report whatever the locale (``output.utf8_stdout``)."""
    from pte_devconst.cli.output import utf8_stdout
    from pte_devconst.cli.stdout_guard import guard_stdout, stdout_lost

    utf8_stdout()
    guard_stdout()  # stdout closed or full: the work still finishes, then one line (cli/stdout_guard.py)
    argv = hoist_global_flags(list(sys.argv[1:] if argv is None else argv))
    try:
        code = click_group(invoked_command(argv)).main(args=argv, prog_name=prog_name, standalone_mode=False)
        lost = stdout_lost()  # flushed here, not at exit: a reader gone by now is a broken pipe like any other
    except BrokenPipeError:
        raise SystemExit(stop_on_broken_pipe().exit_code) from None
    except UsageError as error:
        if not argv:  # no arguments at all (click's NoArgsIsHelpError): the usage, as --help prints it; exit 2
            typer.echo(error.format_message())  # type: ignore[attr-defined]
            raise SystemExit(ExitCode.ERROR) from None
        context = getattr(error, "ctx", None)
        hint = f" (see '{context.command_path} --help')" if context is not None else ""
        from pte_devconst.cli.output import printable

        typer.echo(f"pte-devconst: error: {printable(error.format_message())}{hint}", err=True)  # type: ignore[attr-defined]
        raise SystemExit(ExitCode.ERROR) from None
    except ClickException as error:
        from pte_devconst.cli.output import printable

        typer.echo(f"pte-devconst: error: {printable(error.format_message())}", err=True)  # type: ignore[attr-defined]
        raise SystemExit(error.exit_code) from None  # type: ignore[attr-defined]
    except typer.Abort:
        typer.echo("pte-devconst: aborted", err=True)
        raise SystemExit(ExitCode.INTERRUPTED) from None
    status = code if isinstance(code, int) else ExitCode.OK
    if lost is not None:  # the work is done (files written and checked), its report is not: say so, never as 2
        typer.echo(f"pte-devconst: error: {lost}", err=True)
        status = status or ExitCode.REPORT_LOST
    raise SystemExit(status)


def entry() -> None:
    """The console script (and ``python -m pte_devconst``): ``main``, then the process ends at once.

    By the time ``main`` returns, every output is renamed into place and stdout is flushed; what Python's own
    shutdown would still do is free every module and object one by one, about 20 ms of a command's time
    (docs/performance.md, "Start-up").  A process that imported torch, or still runs a thread of its own, shuts
    down the usual way, so that their exit handlers run.
    """
    import signal

    from pte_devconst import cli

    if signal.getsignal(signal.SIGINT) is getattr(cli, "_interrupted_at_start_up", None):
        signal.signal(signal.SIGINT, signal.default_int_handler)  # imports done: commands handle KeyboardInterrupt
    try:
        main()
        code: object = ExitCode.OK
    except SystemExit as done:
        code = done.code
    except KeyboardInterrupt:  # between the imports and a command (click turns it into Abort while it parses)
        typer.echo("pte-devconst: interrupted", err=True)
        code = ExitCode.INTERRUPTED
    if "torch" in sys.modules or sum(1 for t in threading.enumerate() if not t.daemon) > 1:
        raise SystemExit(code)
    status = _exit_status(code)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader gone at the last moment: nothing more can be said anyway
            pass
    os._exit(status)


def _exit_status(code: object) -> int:
    """What ``SystemExit(code)`` would make the process's status: None is 0, a message is printed and is 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


# Command modules register themselves on `app` (after it exists); none imports torch at import time.
from pte_devconst.cli import commands  # noqa: E402,F401
