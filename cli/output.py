"""Shared output plumbing for the commands: formats, JSON envelopes, consoles, sizes.

JSON output is one object per invocation with ``format_version`` and
``command`` first; its shape is described by ``cli/report.schema.json``.
Text goes through rich (NO_COLOR is honoured by rich itself); markdown is
plain GitHub-flavoured tables, fit for a pull-request comment or
``$GITHUB_STEP_SUMMARY``.
"""

from __future__ import annotations

import enum
import json
import re
import sys
from typing import TYPE_CHECKING, Annotated, Any, Iterable, Iterator, Optional, Sequence

import typer

if TYPE_CHECKING:  # rich is imported when something is printed, not at start-up
    from rich.console import Console
    from rich.table import Table

JSON_FORMAT_VERSION = 1


class OutputFormat(str, enum.Enum):
    text = "text"
    markdown = "markdown"
    json = "json"


class GateFormat(str, enum.Enum):
    """``check``'s formats: the common three, and GitHub workflow commands (inline annotations)."""

    text = "text"
    markdown = "markdown"
    json = "json"
    github = "github"


FormatOption = Annotated[OutputFormat, typer.Option(
    "--format", "-f", case_sensitive=False, help="text (rich tables), markdown (for pull requests) or json (for CI).")]
GateFormatOption = Annotated[GateFormat, typer.Option(
    "--format", "-f", case_sensitive=False, help="text (rich tables), markdown (for pull requests), json (for CI) or "
    "github (GitHub Actions annotations, one ::error line per finding).")]
JsonFlag = Annotated[bool, typer.Option("--json", help="Shorthand for --format json.")]


ProgramsArgument = Annotated[list[str], typer.Argument(
    help="Programs: .pte files, glob patterns ('**/*.pte') or directories.", show_default=False)]
DataOption = Annotated[Optional[list[str]], typer.Option(
    "--ptd", help="The .ptd of a program's external constants (repeatable): DATA.ptd pairs with the program at the "
    "same path (or the only program); PROGRAM.pte=DATA.ptd pairs explicitly [default: NAME.ptd next to NAME.pte, if "
    "there; for NAME.devconst.pte also NAME.ptd].")]


def resolve_format(fmt: OutputFormat, json_flag: bool) -> OutputFormat:
    return OutputFormat.json if json_flag else fmt


def stdout_console() -> "Console":
    from rich.console import Console

    return Console(soft_wrap=False, highlight=False)


def stderr_console() -> "Console":
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def emit_json(command: str, payload: dict[str, Any]) -> None:
    """Print one JSON document: the envelope, then a result's ``to_json()`` (the renderers format, never build)."""
    document = {"format_version": JSON_FORMAT_VERSION, "command": command, **payload}
    # Written in the encoder's chunks, never as one string: a program of a million values makes a document of
    # hundreds of megabytes, which must not be held twice.
    pending: list[str] = []
    size = 0
    for chunk in json.JSONEncoder(indent=2).iterencode(document):
        pending.append(chunk)
        size += len(chunk)
        if size > 1 << 20:
            sys.stdout.write("".join(pending))
            pending, size = [], 0
    pending.append("\n")
    sys.stdout.write("".join(pending))


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


def fold_hint(gain: Any) -> Optional[str]:
    """The one line ``inspect``, ``rewrite`` and ``check`` print when ``--fold`` would move more."""
    if gain is None or gain.tensors <= 0:
        return None
    return (f"{gain.tensors} more tensor{'s' if gain.tensors != 1 else ''} ({gain.bytes_per_call:,} bytes per call) "
            "would move with --fold")


def shape_text(shape: Optional[Sequence[int]]) -> str:
    return "[" + ", ".join(str(s) for s in shape or ()) + "]"


# What may not reach a terminal raw: C0 and C1 controls (ESC starts ANSI sequences, BEL, ...), and the
# invisible format characters that reorder or hide text: bidi embeddings, overrides and isolates, zero-width
# characters, line/paragraph separators, the soft hyphen, interlinear annotations and Unicode tag characters.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff"
                     "\ufff9-\ufffb\U000e0000-\U000e007f]")


def _escape_code_point(match: "re.Match[str]") -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: Any) -> str:
    """Text from a file made safe for a terminal: controls and bidi/invisible characters shown as ``\\x1b``, ``\\u202e``.

    The one escaping function for terminal output: every table cell, title, message and error line goes
    through it (``table``, ``markup_safe``, ``echo_lines``, ``cli.app.fail``).
    """
    return _UNSAFE.sub(_escape_code_point, str(text))


class MarkdownText(str):
    """Markdown made safe from file-derived text by ``md_text`` or ``md_code``: ``markdown_table`` keeps it as it is."""


# Backslash-escaped: emphasis, code, links and images, HTML and entities, strikethrough, headings; and the
# ':' of a URL scheme and the '@' of an address, which GitHub would otherwise turn into links.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>~!#&@]|:(?=//))")
_WWW = re.compile(r"(?i)\b(www)\.")


def md_text(text: Any) -> MarkdownText:
    """File-derived text for markdown prose or a table cell: printable, with nothing that markdown would interpret.

    Names with backticks, ``<script>``, ``[links](...)``, emphasis or URLs render as the literal text.
    (A ``|`` matters only in tables, where ``markdown_table`` escapes it.)
    """
    return MarkdownText(_WWW.sub(r"\1\\.", _MD_SPECIAL.sub(r"\\\1", printable(text))))


def md_code(text: Any) -> MarkdownText:
    """File-derived text as a markdown code span: printable, fenced by more backticks than it contains.

    Inside a code span markdown and HTML are literal, so this is the way to show names, paths and kernels.
    """
    safe = printable(text)
    if not safe:
        return MarkdownText("")
    fence = "`" * (max((len(run) for run in re.findall("`+", safe)), default=0) + 1)
    pad = " " if safe[0] == "`" or safe[-1] == "`" else ""
    return MarkdownText(f"{fence}{pad}{safe}{pad}{fence}")


def echo_lines(lines: Iterable[str]) -> None:
    """Print plain (markdown) lines, each made printable: data from a file cannot reach the terminal raw."""
    typer.echo("\n".join(printable(line) for line in "\n".join(lines).split("\n")))


def markup_safe(text: Any) -> str:
    """File-derived text for a rich markup string: printable, and its brackets never read as markup."""
    from rich.markup import escape

    return escape(printable(text))


# The most rows a text or markdown table shows; the rest are counted in a last row (``--json`` lists all). A
# terminal table of a million rows takes minutes and gigabytes to lay out and nobody reads it.
MAX_TABLE_ROWS = 2000


def _bounded(rows: Iterable[Sequence[Any]], columns: int) -> Iterator[Sequence[Any]]:
    """The first ``MAX_TABLE_ROWS`` rows, then one row that says how many more there were."""
    rest = 0
    for index, row in enumerate(rows):
        if index < MAX_TABLE_ROWS:
            yield row
        else:
            rest += 1
    if rest:
        yield [f"... and {rest:,} more rows (--json lists them all)"] + [""] * (columns - 1)


def table(title: Optional[str], columns: Sequence[str], rows: Iterable[Sequence[Any]], *,
          right: Sequence[str] = ()) -> "Table":
    from rich.table import Table
    from rich.text import Text

    t = Table(title=None if title is None else Text(printable(title), style="table.title"), title_justify="left",
              show_lines=False, expand=False, pad_edge=False)
    for column in columns:
        t.add_column(column, justify="right" if column in right else "left", overflow="fold")
    for row in _bounded(rows, len(columns)):
        # Cells are data, never markup: strings become plain Text; styled Text passes through.
        t.add_row(*[cell if isinstance(cell, Text) else Text(printable(cell)) for cell in row])
    return t


def markdown_table(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub table; a cell is escaped with ``md_text`` unless it is ``MarkdownText`` already (``md_code``)."""

    def cell(value: Any) -> str:
        return (value if isinstance(value, MarkdownText) else md_text(value)).replace("|", "\\|")

    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in _bounded(rows, len(columns))]
    return "\n".join(lines)


# GitHub workflow commands (docs.github.com, "Workflow commands for GitHub Actions"): a line
# ``::error file=PATH,title=TITLE::MESSAGE``.  In the message %, CR and LF are escaped; in a property
# also ':' and ',', which would end it.
_GITHUB_MESSAGE = {"%": "%25", "\r": "%0D", "\n": "%0A"}
_GITHUB_PROPERTY = {**_GITHUB_MESSAGE, ":": "%3A", ",": "%2C"}


def _github_escape(text: Any, table: dict[str, str]) -> str:
    return "".join(table.get(ch, ch) for ch in printable(text))


def github_annotation(level: str, message: Any, *, file: Optional[str] = None, title: Optional[str] = None) -> str:
    """One GitHub Actions annotation (``level``: error, warning or notice), escaped as GitHub documents.

    The text is made printable first, so no file-derived name can start a line (a workflow command of its own).
    """
    props = []
    if file:
        props.append(f"file={_github_escape(file, _GITHUB_PROPERTY)}")
    if title:
        props.append(f"title={_github_escape(title, _GITHUB_PROPERTY)}")
    return f"::{level}{' ' + ','.join(props) if props else ''}::{_github_escape(message, _GITHUB_MESSAGE)}"
