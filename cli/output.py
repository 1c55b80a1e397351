"""Shared output plumbing for the commands: formats, JSON envelopes, consoles, sizes.

JSON output is one object per invocation with ``format_version`` and
``command`` first; its shape is described by ``cli/report.schema.json``.
Text goes through rich (NO_COLOR is honoured by rich itself); markdown is
plain GitHub-flavoured tables, fit for a pull-request comment or
``$GITHUB_STEP_SUMMARY``.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import sys
from typing import TYPE_CHECKING, Any, Iterable, Optional, Sequence

import typer

if TYPE_CHECKING:  # rich is imported when something is printed, not at start-up
    from rich.console import Console
    from rich.table import Table

JSON_FORMAT_VERSION = 1


class OutputFormat(str, enum.Enum):
    text = "text"
    markdown = "markdown"
    json = "json"


FORMAT_OPTION = typer.Option(OutputFormat.text, "--format", "-f", case_sensitive=False,
                             help="text (rich tables), markdown (for pull requests) or json (for CI).")
JSON_FLAG = typer.Option(False, "--json", help="Shorthand for --format json.")


def resolve_format(fmt: OutputFormat, json_flag: bool) -> OutputFormat:
    return OutputFormat.json if json_flag else fmt


def stdout_console() -> "Console":
    from rich.console import Console

    return Console(soft_wrap=False, highlight=False)


def stderr_console() -> "Console":
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def to_jsonable(obj: Any) -> Any:
    """Dataclasses, tuples, devices and enums -> JSON-ready values, recursively."""
    from pte_devconst.schema.model import Device

    if isinstance(obj, Device):  # a dataclass too: spell it the way compile specs do (cuda:0)
        return str(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return obj.name.lower()
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, bytes):
        return obj.hex()
    return obj


def emit_json(command: str, payload: dict[str, Any]) -> None:
    document = {"format_version": JSON_FORMAT_VERSION, "command": command, **to_jsonable(payload)}
    sys.stdout.write(json.dumps(document, indent=2) + "\n")


def human_bytes(count: int) -> str:
    """1536 -> '1.5 KiB'; exact below 1 KiB."""
    if count < 1024:
        return f"{count} B"
    value = float(count)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024:
            return f"{value:.1f} {unit}"
    return f"{value:.1f} PiB"


def shape_text(shape: Optional[Sequence[int]]) -> str:
    return "[" + ", ".join(str(s) for s in shape or ()) + "]"


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: Any) -> str:
    """Text from a file made safe for a terminal: control characters (ESC, BEL, ...) shown as ``\\x1b``."""
    return _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", str(text))


def echo_lines(lines: Iterable[str]) -> None:
    """Print plain (markdown) lines, each made printable: data from a file cannot reach the terminal raw."""
    typer.echo("\n".join(printable(line) for line in "\n".join(lines).split("\n")))


def markup_safe(text: Any) -> str:
    """File-derived text for a rich markup string: printable, and its brackets never read as markup."""
    from rich.markup import escape

    return escape(printable(text))


def table(title: Optional[str], columns: Sequence[str], rows: Iterable[Sequence[Any]], *,
          right: Sequence[str] = ()) -> "Table":
    from rich.table import Table
    from rich.text import Text

    t = Table(title=None if title is None else Text(printable(title), style="table.title"), title_justify="left",
              show_lines=False, expand=False, pad_edge=False)
    for column in columns:
        t.add_column(column, justify="right" if column in right else "left", overflow="fold")
    for row in rows:
        # Cells are data, never markup: strings become plain Text; styled Text passes through.
        t.add_row(*[cell if isinstance(cell, Text) else Text(printable(cell)) for cell in row])
    return t


def markdown_table(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    def cell(value: Any) -> str:
        return printable(value).replace("|", "\\|")

    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
