"""Shared output plumbing for the commands: consoles, the JSON envelope, escaping, tables, UTF-8 stdout.

JSON output is one object per invocation with ``format_version``, ``command`` and ``tool_version`` first; its
shape is described by ``cli/report.schema.json``.  Text goes through rich: ``NO_COLOR`` turns colour off,
``CLICOLOR_FORCE`` on (also into a pipe), ``NO_COLOR`` winning.  Markdown is plain GitHub-flavoured tables, fit
for a pull-request comment or ``$GITHUB_STEP_SUMMARY``.  The formats themselves, and which command has which,
are ``cli/formats.py``'s; counts and byte figures are ``util/units.py``'s.
"""

from __future__ import annotations

import codecs
import io
import json
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Iterable, Iterator, Optional, Sequence, TextIO

import typer

from pte_devconst.types import name_cell
from pte_devconst.util.units import human_bytes, plural

if TYPE_CHECKING:  # rich is imported when something is printed, not at start-up
    from rich.console import Console

    from pte_devconst.types import DeviceMemory, FoldGain, ProgramNames

JSON_FORMAT_VERSION = 1


JsonFlag = Annotated[bool, typer.Option("--json", help="Shorthand for --format json.")]


ProgramsArgument = Annotated[Optional[list[str]], typer.Argument(
    help="Programs: .pte files, glob patterns ('**/*.pte') or directories.", metavar="FILE...", show_default=False)]
DataOption = Annotated[Optional[list[str]], typer.Option(
    "--ptd", metavar="FILE", help="The .ptd of a program's external constants (repeatable): DATA.ptd pairs with the "
    "program at the same path (or the only program); PROGRAM.pte=DATA.ptd pairs explicitly [default: NAME.ptd next "
    "to NAME.pte, if there; for NAME.devconst.pte also NAME.ptd].")]


EtrecordOption = Annotated[Optional[Path], typer.Option(
    "--etrecord", metavar="FILE", help="An ETRecord of the export (executorch.devtools.etrecord): names the "
    "constants the program leaves unnamed (fc1.weight instead of value 3). Read without torch.", show_default=False)]
DeviceOption = Annotated[Optional[list[str]], typer.Option(
    "--device", metavar="DEVICE", show_default=False,
    help="Only constants that could move to this device (repeatable, e.g. cuda:0); a device no program uses is an "
    "error.")]
ProgressOption = Annotated[Optional[bool], typer.Option(
    "--progress/--no-progress", show_default=False,
    help="Show progress on stderr also where it is no terminal (a CI log: a line per file, per call, or per phase "
    "of a large rewrite); on a terminal bars show anyway (never with --quiet). [default: no, or progress in the "
    "config for rewrite and check]")]
MinBytesOption = Annotated[Optional[int], typer.Option(
    "--min-bytes", metavar="N", min=0, show_default=False, help="Leave constants smaller than this out [default: 0].")]


def md_name(name: str, value: int) -> "MarkdownText":
    """``name_cell`` for a markdown table: the name as code, or a plain ``-``."""
    cell = name_cell(name, value)
    return MarkdownText("-") if cell == "-" else md_code(cell)


def names_notes(names: Optional[ProgramNames]) -> tuple[str, ...]:
    """What a report says of its names (a ``ProgramNames``, or None): an ETRecord of another program, the constants
    it could not name."""
    return tuple(names.notes) if names is not None else ()


def no_programs_given(ctx: typer.Context, config: bool = False, config_path: Optional[Path] = None) -> Exception:
    """The usage error of a command given no program, the same words for every command (``config``: the
    command also takes them from the config file's ``paths``)."""
    from pte_devconst.cli.app import UsageError

    hint = "name the programs: .pte files, glob patterns or folders" + (
        ", or set paths in [tool.pte-devconst]" if config else "")
    where = f"; {config_path} sets no paths" if config_path else ""
    return UsageError(f"Missing argument 'FILE...' ({hint}){where}", ctx)


# --------------------------------------------------------------------------------------------- streams

# The few symbols reports use beyond ASCII, and what stands for them where the output cannot hold them.
ASCII_FALLBACK = {"✅": "[ok]", "❌": "[x]", "❔": "[?]", "⛔": "[error]", "⏭️": "[skipped]", "⏭": "[skipped]",
                  "→": "->", "…": "...", "️": ""}
_FALLBACK = "pte_devconst_ascii"


def _ascii_fallback(error: UnicodeError) -> tuple[str, int]:
    """The error handler of a stream that cannot encode a report's symbols: ASCII stand-ins, else escapes."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start:error.end]
    return "".join(ASCII_FALLBACK.get(ch, ch.encode("ascii", "backslashreplace").decode()) for ch in text), error.end


codecs.register_error(_FALLBACK, _ascii_fallback)


def _utf(encoding: Optional[str]) -> bool:
    try:
        return codecs.lookup(encoding or "ascii").name.startswith("utf")
    except LookupError:
        return False


def utf8_stdout(stream: Optional[TextIO] = None) -> None:
    """Make the report stream hold every report, whatever the locale: UTF-8 when it is a file or a pipe (a
    ``$GITHUB_STEP_SUMMARY`` on a Windows runner, whose Python writes cp1252 there); on a terminal that cannot
    show UTF-8, its own encoding with ASCII stand-ins for the few symbols reports use (``❌`` -> ``[x]``)."""
    stream = stream if stream is not None else sys.stdout
    if not isinstance(stream, io.TextIOWrapper) or _utf(stream.encoding):
        return
    try:
        terminal = stream.isatty()
    except (OSError, ValueError):
        terminal = False
    if terminal:
        stream.reconfigure(errors=_FALLBACK)
    else:
        stream.reconfigure(encoding="utf-8")


def _raise_broken_pipe() -> None:
    raise BrokenPipeError


def colour_forced() -> Optional[bool]:
    """``CLICOLOR_FORCE`` (set and not ``0``) forces colour, also into a pipe; ``NO_COLOR`` (set, not empty) wins."""
    if os.environ.get("NO_COLOR"):
        return None
    return True if os.environ.get("CLICOLOR_FORCE", "0") not in ("", "0") else None


def console(stderr: bool = False) -> "Console":
    """A rich console for stdout or stderr, with ``colour_forced``'s rule."""
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, force_terminal=colour_forced(), soft_wrap=False)


# Spaces (and the colour codes among them) at the end of a line: rich pads a table's title to the table's width
# and leaves the space a line was wrapped at.
_LINE_END_PADDING = re.compile(r"(?:[ \t]|\x1b\[[0-9;]*m)+(?=\n|\Z)")
_COLOUR_CODE = re.compile(r"\x1b\[[0-9;]*m")


def without_trailing_spaces(text: str) -> str:
    """``text`` with no space at the end of any line; colour codes there are kept, in order."""
    return _LINE_END_PADDING.sub(lambda found: "".join(_COLOUR_CODE.findall(found.group())), text)


class TrimmedStream:
    """A text stream that writes every line without trailing spaces (what rich prints to stdout goes through it):
    plain output compares byte for byte, and a log or a diff shows no padding.  Everything else is the stream's."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(without_trailing_spaces(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def reasons_line(reasons: Iterable[str]) -> str:
    """Why copies stay, after a sentence that counted them: one kind of reason as it is (``32 bytes is below
    --min-bytes 64``), several each with its count (``read by host kernel aten::mul.out (2); transposed on the host
    (1)``), never a count glued to a reason's own words (``1 32 bytes``, ``12 legacy style: ...``)."""
    from pte_devconst.types import reason_kind

    counts: dict[str, int] = {}
    for reason in reasons:
        kind = reason_kind(reason)
        counts[kind] = counts.get(kind, 0) + 1
    if len(counts) == 1:
        return next(iter(counts))
    return "; ".join(f"{kind} ({n:,})" for kind, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def stdout_console() -> "Console":
    """The console for a command's report: lines without trailing spaces (``TrimmedStream``).  A reader of stdout
    that went away (``| head``) raises BrokenPipeError, which every command turns into one quiet exit
    (``app.stop_on_broken_pipe``), rather than rich's own exit 1, which would read as "findings"."""
    out = console()
    out.file = TrimmedStream(sys.stdout)  # type: ignore[assignment]
    out.on_broken_pipe = _raise_broken_pipe  # type: ignore[method-assign]
    return out


def stderr_console() -> "Console":
    return console(stderr=True)


def json_blocks(command: str, payload: dict[str, Any]) -> Iterator[str]:
    """One JSON document (the envelope: the format's version, the command, the tool's version; then a result's
    ``to_json()``) in blocks of about a megabyte, ending in a newline: a program of a million values makes a
    document of hundreds of megabytes, which must not be held twice."""
    from pte_devconst import __version__

    document = {"format_version": JSON_FORMAT_VERSION, "command": command, "tool_version": __version__, **payload}
    pending: list[str] = []
    size = 0
    for chunk in json.JSONEncoder(indent=2).iterencode(document):
        pending.append(chunk)
        size += len(chunk)
        if size > 1 << 20:
            yield "".join(pending)
            pending, size = [], 0
    pending.append("\n")
    yield "".join(pending)


def emit_json(command: str, payload: dict[str, Any]) -> None:
    """Print one JSON document (``json_blocks``; the renderers format, never build)."""
    for block in json_blocks(command, payload):
        sys.stdout.write(block)


def write_report(path: str, blocks: Iterable[str]) -> None:
    """A report written to a file instead of stdout: UTF-8 whatever the locale, replaced atomically (a reader never
    sees half a report), an unwritable path one ``OutputError`` line."""
    from pte_devconst.util.atomic import atomic_output, write_all

    if is_stream(path):  # /dev/stdout, a pipe, a terminal: written as it is, nothing to replace
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        except OSError as error:
            from pte_devconst.util.errors import OutputError

            raise OutputError(f"cannot write the report: {error.strerror or error}", file=path) from None
        try:
            for block in blocks:
                write_all(fd, block.encode("utf-8"))
        finally:
            os.close(fd)
        return
    with atomic_output(path, durable=False) as fd:
        for block in blocks:
            write_all(fd, block.encode("utf-8"))


def is_stream(path: str) -> bool:
    """A FIFO or a character device (``/dev/stdout``, ``/dev/stderr``, a named pipe): written to, never replaced."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)


def device_memory_line(memory: Optional["DeviceMemory"]) -> Optional[str]:
    """``device memory planned: 62.8 KiB -> 62.8 KiB (unchanged)``; None for a program that plans none."""
    if memory is None or not (memory.before or memory.after):
        return None
    return f"device memory planned: {human_bytes(memory.before)} -> {human_bytes(memory.after)} " \
           f"({memory_change(memory.before, memory.after)})"


def memory_change(before: int, after: int) -> str:
    """``unchanged``, ``+96 B``, ``-1.0 KiB``: how planned device memory changes."""
    change = after - before
    return "unchanged" if change == 0 else f"{'+' if change > 0 else '-'}{human_bytes(abs(change))}"


def fold_hint(gain: Optional["FoldGain"]) -> Optional[str]:
    """The one line ``inspect``, ``rewrite`` and ``check`` print when ``--fold`` would move more."""
    if gain is None or gain.tensors <= 0:
        return None
    return f"{plural(gain.tensors, 'more tensor')} ({human_bytes(gain.bytes_per_call)} per call) would move with --fold"


def shape_text(shape: Optional[Sequence[int]]) -> str:
    return "[" + ", ".join(str(s) for s in shape or ()) + "]"


# What may not reach a terminal raw: C0 and C1 controls (ESC starts ANSI sequences, BEL, ...), and the
# invisible format characters that reorder or hide text: bidi embeddings, overrides and isolates, zero-width
# characters, line/paragraph separators, the soft hyphen, interlinear annotations and Unicode tag characters.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff"
                     "\ufff9-\ufffb\U000e0000-\U000e007f]")


def _escape_code_point(match: "re.Match[str]") -> str:
    code = ord(match.group())
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def printable(text: Any) -> str:
    """Text from a file made safe for a terminal: controls and bidi/invisible characters shown as ``\\x1b``,
    ``\\u202e``.

    The one escaping function for terminal output: every table cell, title, message and error line goes
    through it (``table``, ``markup_safe``, ``echo_lines``, ``cli.app.fail``).
    """
    return _UNSAFE.sub(_escape_code_point, str(text))


class MarkdownText(str):
    """Markdown made safe from file-derived text by ``md_text`` or ``md_code``: ``markdown_table`` keeps it as it is."""


# HTML's own: as entities, so no tag (``<img``, ``<script``) or entity survives even as raw text in the source.
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}
# Backslash-escaped: emphasis, code, links and images, strikethrough, headings, table pipes, the '(' after a
# link's ']' and the ':' of a URL scheme and the '@' of an address, which GitHub would otherwise turn into links.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]~!#|@]|(?<=\])\(|:(?=//))")
_WWW = re.compile(r"(?i)\b(www)\.")


def md_text(text: Any) -> MarkdownText:
    """File-derived text for markdown prose or a table cell: printable, with nothing markdown or HTML would interpret.

    Names with backticks, ``<script>``, ``[links](...)``, emphasis, pipes or URLs render as the literal text,
    and no tag or link appears even in the markdown's source (``&lt;script``, ``\\]\\(https\\://``).
    """
    escaped = _MD_SPECIAL.sub(r"\\\1", printable(text))
    return MarkdownText(_WWW.sub(r"\1\\.", "".join(_HTML.get(ch, ch) for ch in escaped)))


def md_code(text: Any) -> MarkdownText:
    """File-derived text shown as code (names, paths, kernels): ``md_text`` inside ``<code>``.

    A markdown code span cannot hold an escaped ``<`` (entities are literal there), so a name with ``<img`` in it
    would reach the source raw; ``<code>`` with escaped content renders the same and holds no raw tag.
    """
    safe = md_text(text)
    return MarkdownText(f"<code>{safe}</code>" if safe else "")


def printable_lines(lines: Iterable[str]) -> str:
    """Plain (markdown) lines, each made printable: data from a file cannot reach a terminal or a report raw."""
    return "\n".join(printable(line) for line in "\n".join(lines).split("\n"))


def echo_lines(lines: Iterable[str]) -> None:
    """Print plain (markdown) lines, each made printable (``printable_lines``)."""
    typer.echo(printable_lines(lines))


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


_SEPARATORS = frozenset(":./,=;-)]}>")


def atoms(line: str) -> list[str]:
    """A line cut where a table may wrap it: at spaces (kept with the word before) and after a separator
    (``eligible:`` ``cuda:0``, ``_h2d_copy.`` ``out``), never before a digit: not inside a device (``cuda:0``) or a
    number (``12.0``, ``1,024``)."""
    pieces: list[str] = []
    current = ""
    for index, ch in enumerate(line):
        current += ch
        after = line[index + 1] if index + 1 < len(line) else ""
        if ch.isspace():
            if after and not after.isspace():
                pieces.append(current)
                current = ""
        elif ch in _SEPARATORS and after and not after.isspace() and after not in _SEPARATORS \
                and not after.isdigit():
            pieces.append(current)
            current = ""
    if current:
        pieces.append(current)
    return pieces


def wrap_cell(text: str, width: int) -> str:
    """``text`` in lines of at most ``width`` characters, broken only where ``atoms`` allows; a piece longer than
    the width alone is folded (the last resort, when no width lets the table fit)."""
    out: list[str] = []
    for line in text.split("\n"):
        current = ""
        for piece in atoms(line):
            if len((current + piece).rstrip()) <= width:
                current += piece
                continue
            if current.strip():
                out.append(current.rstrip())
            current = piece.lstrip()
            while len(current.rstrip()) > width:
                out.append(current[:width])
                current = current[width:]
        out.append(current.rstrip())
    return "\n".join(out)


def fit_widths(natural: Sequence[int], least: Sequence[int], available: int) -> list[int]:
    """Column widths that fit ``available``: the widest column that can shrink gives one character at a time, none
    below its longest unbreakable piece (``least``) while another can still give; only then are pieces folded."""
    widths = list(natural)
    floor = [min(n, max(1, m)) for n, m in zip(natural, least)]
    while sum(widths) > available:
        shrinkable = [i for i, w in enumerate(widths) if w > floor[i]] or [i for i, w in enumerate(widths) if w > 1]
        if not shrinkable:
            break
        widest = max(shrinkable, key=lambda i: widths[i])
        widths[widest] -= 1
    return widths


class FitTable:
    """A rich table laid out for the width it is printed at: cells wrap at spaces and after separators, never
    inside a name or number (rich alone folds ``eligible:cuda:0`` into ``eligible:cuda:`` / ``0``)."""

    def __init__(self, title: Optional[str], columns: Sequence[str], rows: Iterable[Sequence[Any]],
                 right: Sequence[str] = ()) -> None:
        from rich.text import Text

        self.title = title
        self.columns = list(columns)
        self.right = set(right)
        # Cells are data, never markup: strings become plain Text (made printable); styled Text passes through.
        self.rows = [[cell if isinstance(cell, Text) else Text(printable(cell)) for cell in row] for row in rows]

    def measure(self) -> tuple[list[int], list[int]]:
        """Each column's natural width (its longest line) and least width (its longest unbreakable piece)."""
        natural, least = [], []
        for index, header in enumerate(self.columns):
            texts = [header] + [row[index].plain for row in self.rows if index < len(row)]
            lines = [line for text in texts for line in text.split("\n")]
            natural.append(max((len(line) for line in lines), default=1))
            least.append(max((len(piece.rstrip()) for line in lines for piece in atoms(line)), default=1))
        return natural, least

    def layout(self, max_width: int) -> tuple[list[int], bool]:
        """The column widths for ``max_width``, and whether the table is drawn compact: without vertical rules,
        one space between columns, when the boxed table cannot fit without breaking a piece."""
        natural, least = self.measure()
        columns = len(self.columns)
        boxed = (columns + 1) + 2 * columns - 2  # rules, and one space each side of a cell but the edges
        compact = sum(min(n, m) for n, m in zip(natural, least)) > max_width - boxed
        overhead = columns - 1 if compact else boxed
        return fit_widths(natural, least, max(columns, max_width - overhead)), compact

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich import box
        from rich.table import Table
        from rich.text import Text

        widths, compact = self.layout(options.max_width)
        narrow: dict[str, Any] = {"box": box.SIMPLE_HEAD, "show_edge": False, "padding": (0, 0)} if compact else {}
        t = Table(title=None if self.title is None else Text(printable(self.title), style="table.title"),
                  title_justify="left", show_lines=False, expand=False, pad_edge=False, **narrow)
        for column, width in zip(self.columns, widths):
            t.add_column(wrap_cell(column, width), justify="right" if column in self.right else "left",
                         width=width, overflow="fold")
        for row in self.rows:
            t.add_row(*[Text(wrap_cell(cell.plain, width), style=cell.style, justify=cell.justify)
                        if not cell.spans else cell for cell, width in zip(row, widths)])
        yield t


def table(title: Optional[str], columns: Sequence[str], rows: Iterable[Sequence[Any]], *,
          right: Sequence[str] = ()) -> FitTable:
    """A table for the terminal (``FitTable``): wraps at separators to fit the width, never inside a token."""
    return FitTable(title, columns, _bounded(rows, len(columns)), right)


def markdown_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], right: Sequence[str] = ()) -> str:
    """A GitHub table; a cell is escaped with ``md_text`` (pipes included) unless it is ``MarkdownText`` already
    (``md_code``).  The ``right`` columns (numbers) are right-aligned."""

    def cell(value: Any) -> str:
        return value if isinstance(value, MarkdownText) else md_text(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---:" if c in right else "---" for c in columns) + "|"]
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
