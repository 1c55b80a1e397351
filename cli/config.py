"""``[tool.pte-devconst]`` in ``pyproject.toml``: a project's settings for ``check`` and ``rewrite``.

Where it is found (ruff's rule, with one difference): from the working folder up, the first
``pyproject.toml`` that has a ``[tool.pte-devconst]`` table is the configuration; one without the table
is passed over.  Unlike ruff, the search also ends at the root of the repository (a folder holding
``.git``), so a stray pyproject above a checkout never changes a CI gate's verdict.  ``--config FILE``
names the file instead (a ``pyproject.toml``, read at ``[tool.pte-devconst]``, or any other TOML file,
read at its top level, as ruff reads ``ruff.toml``); ``--isolated`` ignores every configuration file.
The command line overrides the file.  Relative paths and globs in the file are relative to its folder.

An unknown key or a value of the wrong type is an error: one line naming the file and the key, exit 2.
"""

from __future__ import annotations

import os
import sys
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Callable, Optional

import typer

from pte_devconst.cli.formats import Format
from pte_devconst.types import DEFAULT_RUNTIME
from pte_devconst.util.errors import PteDevconstError
from pte_devconst.util.record import record

if TYPE_CHECKING:
    from pte_devconst.types import Acceptance, RewriteOptions

TABLE = "pte-devconst"
# key -> (type, description); `accept` entries are checked by _acceptances.
KEYS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "paths": (list, "a list of files, folders or globs"),
    "exclude": (list, "a list of globs"),
    "min-bytes": (int, "an integer >= 0"),
    "strict": (bool, "true or false"),
    "fold": (bool, "true or false"),
    "device": ((str, list), "a device (cuda:0) or a list of them"),
    "output-format": (str, "one of " + ", ".join(f.value for f in Format)),
    "runtime": (str, 'the ExecuTorch release the programs must load in, as "1.5"'),
    "progress": (bool, "true or false"),
    "etrecord": (str, "the path of the export's ETRecord (names the constants; relative to this file)"),
    "accept": (list, "an array of tables ([[tool.pte-devconst.accept]])"),
}
ConfigOption = Annotated[Optional[str], typer.Option(
    "--config", metavar="FILE", help="Read the settings from this file (a pyproject.toml's [tool.pte-devconst], or a "
    "TOML file's top level) instead of the pyproject.toml found from the working folder up.")]
IsolatedOption = Annotated[bool, typer.Option("--isolated", help="Ignore every configuration file.")]
RUNTIME_HELP = ("The ExecuTorch release the programs must load in; it chooses how a moved constant is kept on the "
                "device.")
RUNTIME_MORE = f"See docs/cli.md. [default: {DEFAULT_RUNTIME}, or runtime in the config]"
RuntimeOption = Annotated[Optional[str], typer.Option(
    "--runtime", metavar="VERSION", show_default=False, help=f"{RUNTIME_HELP} {RUNTIME_MORE}")]


def runtime_help() -> str:
    """``--runtime``'s help as ``--help`` prints it: each registered encoding, newest first, in its own words
    (``Encoding.described``), so that an encoding registered later is offered with no word of it here."""
    from pte_devconst.types import encodings

    kept = [f"{e.runtime.value}: {e.described}." for e in reversed(encodings())]
    return " ".join([RUNTIME_HELP, *kept, RUNTIME_MORE])


# Option -> its whole help, composed when --help prints it (app.HelpedCommand): the registry it names loads for the
# reader of the help, not at every start; until then (shell completion) the option's own help stands.
SHOWN_HELP: dict[str, Callable[[], str]] = {"--runtime": runtime_help}
ACCEPT_KEYS = {"program": str, "method": str, "constant": str, "value": int, "reason": str}


@record
class Config:
    """The settings a configuration file gives (None: not set there; the command's default applies)."""

    path: Optional[Path] = None  # the file read (None: no configuration)
    paths: Optional[tuple[str, ...]] = None
    exclude: tuple[str, ...] = ()
    min_bytes: Optional[int] = None
    strict: Optional[bool] = None
    fold: Optional[bool] = None
    device: Optional[tuple[str, ...]] = None
    output_format: Optional[str] = None
    runtime: Optional[str] = None  # the release the project deploys, as "1.5" (rewrite's encoding, check's rule)
    progress: Optional[bool] = None  # progress lines also where stderr is no terminal (a CI log)
    etrecord: Optional[str] = None  # the export's ETRecord, as written (relative to the file's folder)
    accept: tuple["Acceptance", ...] = field(default=())

    @property
    def root(self) -> Optional[Path]:
        """The folder relative paths and globs in the file are relative to."""
        return self.path.parent if self.path is not None else None

    def files(self) -> list[str]:
        """``paths`` as the command line would give them (relative to the working folder)."""
        root = self.root or Path.cwd()
        return [p if os.path.isabs(p) else os.path.relpath(root / p) for p in self.paths or ()]

    def etrecord_path(self, given: Optional[Path]) -> Optional[Path]:
        """``--etrecord``, else the file's ``etrecord`` (relative to the file's folder), else None."""
        if given is not None or self.etrecord is None:
            return given
        return Path(self.etrecord) if os.path.isabs(self.etrecord) else Path(os.path.relpath(
            (self.root or Path.cwd()) / self.etrecord))

    def plan_options(self, device: Optional[list[str]], min_bytes: Optional[int], fold: Optional[bool],
                     duplicate_shared: bool = False, runtime: Optional[str] = None) -> RewriteOptions:
        """The plan's options from the command line, else this file (``--device`` parsed once, here): what
        ``rewrite`` and ``check`` resolve before they look at any program."""
        from pte_devconst import api  # the API loads the rewriter: only a command that runs needs it

        chosen = runtime if runtime is not None else self.runtime
        try:
            encoding = api.resolve_encoding(chosen)
        except PteDevconstError as error:
            where = "--runtime" if runtime is not None or self.runtime is None else f"{self.path}: runtime"
            raise PteDevconstError(f"{where}: {error}") from None
        return api.rewrite_options(
            devices=device or self.device or None,
            min_bytes=min_bytes if min_bytes is not None else self.min_bytes or 0,
            fold=fold if fold is not None else bool(self.fold), duplicate_shared=duplicate_shared,
            device_option="--device" if device or not self.device else f"{self.path}: device",
            runtime=encoding)

    def programs(self, files: Optional[list[str]], ctx: typer.Context) -> list[str]:
        """The programs a command works on: those named, else ``paths``; neither is click's usage error."""
        given = files or self.files()
        if not given:
            from pte_devconst.cli.output import no_programs_given

            raise no_programs_given(ctx, config=True, config_path=self.path)
        return given


def _toml() -> Any:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    return tomllib


def _read(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            table: dict[str, Any] = _toml().load(handle)
            return table
    except OSError as error:
        raise PteDevconstError(f"{path}: {error.strerror or error}") from None
    except ValueError as error:  # tomllib.TOMLDecodeError
        raise PteDevconstError(f"{path}: not valid TOML: {error}") from None


def _table(document: dict[str, Any], pyproject: bool, path: Path) -> Optional[dict[str, Any]]:
    if not pyproject:
        return document
    tool = document.get("tool")
    found = tool.get(TABLE) if isinstance(tool, dict) else None
    if found is not None and not isinstance(found, dict):
        raise PteDevconstError(f"{path}: tool.{TABLE} must be a table ([tool.{TABLE}])")
    return found


def discover(start: Optional[Path] = None) -> Optional[Path]:
    """The ``pyproject.toml`` with a ``[tool.pte-devconst]`` table nearest ``start`` (the working folder), searching
    up to the repository's root (a folder with ``.git``) or the file system's; None if there is none."""
    folder = Path(os.path.abspath(start or Path.cwd()))
    for candidate in [folder, *folder.parents]:
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file() and _table(_read(pyproject), True, pyproject) is not None:
            return pyproject
        if (candidate / ".git").exists():
            return None
    return None


def load(config: Optional[str] = None, isolated: bool = False, start: Optional[Path] = None) -> Config:
    """The configuration a command runs with: ``--config FILE``, else the discovered pyproject, else none."""
    if isolated and config:
        raise typer.BadParameter("--config and --isolated exclude each other", param_hint="--isolated")
    if isolated:
        return Config()
    path = Path(config) if config else discover(start)
    if path is None:
        return Config()
    pyproject = path.name == "pyproject.toml"
    table = _table(_read(path), pyproject, path)
    if table is None:
        raise PteDevconstError(f"{path}: no [tool.{TABLE}] table")
    return parse(table, path, pyproject)


def _where(path: Path, pyproject: bool, key: str) -> str:
    return f"{path}: {'[tool.' + TABLE + '] ' if pyproject else ''}{key}"


def parse(table: dict[str, Any], path: Path, pyproject: bool = True) -> Config:
    """Check every key and value of the table (one line naming the file and the key for the first wrong one)."""
    for key, value in table.items():
        if key not in KEYS:
            known = ", ".join(KEYS)
            raise PteDevconstError(f"{_where(path, pyproject, key)}: unknown key (known: {known})")
        kind, what = KEYS[key]
        not_a_count = isinstance(value, bool) or (isinstance(value, int) and value < 0)
        if not isinstance(value, kind) or (key == "min-bytes" and not_a_count):
            raise PteDevconstError(f"{_where(path, pyproject, key)}: must be {what}, not {value!r}")
        if key in ("paths", "exclude") and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise PteDevconstError(f"{_where(path, pyproject, key)}: must be {what} (strings)")
        if key == "output-format" and value not in {f.value for f in Format}:
            raise PteDevconstError(f"{_where(path, pyproject, key)}: must be {what}, not {value!r}")
    device = table.get("device")
    devices: Optional[tuple[Any, ...]] = None
    if isinstance(device, str):
        devices = (device,)
    elif device is not None:
        devices = tuple(device)
    if devices is not None and not all(isinstance(d, str) for d in devices):
        raise PteDevconstError(f"{_where(path, pyproject, 'device')}: must be a device (cuda:0) or a list of them")
    return Config(path=path, paths=tuple(table["paths"]) if "paths" in table else None,
                  exclude=tuple(table.get("exclude", ())), min_bytes=table.get("min-bytes"),
                  strict=table.get("strict"), fold=table.get("fold"), device=devices,
                  output_format=table.get("output-format"), runtime=table.get("runtime"),
                  progress=table.get("progress"), etrecord=table.get("etrecord"),
                  accept=_acceptances(table.get("accept", []), path, pyproject))


def _acceptances(entries: list[Any], path: Path, pyproject: bool) -> tuple["Acceptance", ...]:
    from pte_devconst.types import Acceptance

    accepted = []
    for index, entry in enumerate(entries):
        where = _where(path, pyproject, f"accept[{index}]")
        if not isinstance(entry, dict):
            raise PteDevconstError(f"{where}: must be a table (program, method, constant or value, reason)")
        for key, value in entry.items():
            if key not in ACCEPT_KEYS:
                raise PteDevconstError(f"{where}.{key}: unknown key (known: {', '.join(ACCEPT_KEYS)})")
            if not isinstance(value, ACCEPT_KEYS[key]) or isinstance(value, bool):
                raise PteDevconstError(f"{where}.{key}: must be {ACCEPT_KEYS[key].__name__}, not {value!r}")
        for required in ("program", "reason"):
            if not str(entry.get(required, "")).strip():
                raise PteDevconstError(f"{where}.{required}: required" + (" (say why the finding is accepted)"
                                                                          if required == "reason" else ""))
        if "constant" not in entry and "value" not in entry:
            raise PteDevconstError(f"{where}: name the constant (constant = \"NAME\") or its index (value = N)")
        accepted.append(Acceptance(entry["program"], entry["reason"], entry.get("method"), entry.get("constant"),
                                   entry.get("value"), str(path.parent), f"{path}: accept[{index}]"))
    return tuple(accepted)
