"""One registry of report formats: the format names, the set each command supports, and one dispatch from
(command, format) to the renderer.

Each command declares its ``Renderers``, typed with the record it renders (``Renderers[InspectReport]``): the
formats it supports are the renderers it has.  ``format_option`` builds its ``--format`` option from them,
``resolve`` turns ``--format``, ``--json``, a config file's default and ``-v`` into one ``Format``, and an
``Output`` prints what the command's results make in that format: text and concise lines as each result comes,
JSON in its envelope, markdown sized for a pull-request comment (``cli/markdown.py``), GitHub annotations capped
per level as GitHub shows them.  A new format is a member of ``Format`` and a renderer where it applies.

A fact about one file that every format should show (``Fact``: the oldest runtime that loads it, say) is one
function, ``Renderers.facts``: text and concise print its line, markdown a quoted line, JSON a ``facts`` list in
the result's object, GitHub a notice and SARIF the run's properties.
"""

from __future__ import annotations

import sys
from dataclasses import field
from typing import Any, Callable, Generic, Iterator, Optional, Sequence, TypeVar, Union

import typer

from pte_devconst.util.record import record
from pte_devconst.util.named_enum import NamedEnum
from pte_devconst.util.units import plural

from .markdown import MARKDOWN_LIMIT, Block, fit
from .output import (echo_lines, github_annotation, json_blocks, md_code, md_text, printable, printable_lines,
                     stdout_console)

__all__ = ["Annotation", "DEFAULT_ANNOTATIONS", "Fact", "Format", "GithubReport", "Output", "Renderers", "View",
           "format_option", "resolve"]

# GitHub shows at most 10 annotations of each level (error, warning, notice) per step; more are dropped.
DEFAULT_ANNOTATIONS = 10


class Format(NamedEnum):
    """Every report format of every command (each command supports those it has a renderer for)."""

    TEXT = "text"
    CONCISE = "concise"
    MARKDOWN = "markdown"
    JSON = "json"
    GITHUB = "github"
    SARIF = "sarif"


DESCRIPTIONS = {
    Format.TEXT: "rich tables",
    Format.CONCISE: "one line per file; -v: the tables",
    Format.MARKDOWN: "for pull requests",
    Format.JSON: "for CI",
    Format.GITHUB: "GitHub Actions annotations",
    Format.SARIF: "SARIF 2.1.0, for code scanning",
}


@record
class View:
    """How a command's results are shown: the global options and the per-format settings that matter."""

    quiet: bool = False
    verbose: bool = False
    max_annotations: int = DEFAULT_ANNOTATIONS  # github: per level; 0: all


@record
class Fact:
    """One fact about one file that every format shows (``key`` and ``value`` in JSON, ``text`` elsewhere)."""

    file: str
    key: str
    text: str
    value: Union[str, int, float, bool, None] = None

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "key": self.key, "text": self.text, "value": self.value}


@record
class Annotation:
    """One GitHub Actions annotation: its level (error, warning, notice), the line, and how bad it is (the worst
    of a level are shown first)."""

    level: str
    line: str
    weight: tuple[Any, ...] = ()


@record
class GithubReport:
    """What the ``github`` renderer makes: the annotations (capped per level by ``Output``) and plain lines after
    them (the summary)."""

    annotations: list[Annotation]
    lines: list[str] = field(default_factory=list)


R = TypeVar("R")


def _no_facts(result: Any) -> Sequence[Fact]:
    return ()


@record
class Renderers(Generic[R]):
    """A command's renderers, typed with the record it renders: the formats it supports are those it has."""

    command: str
    text: Callable[[R, View], None]
    markdown: Callable[[R, View], list[str]]
    json: Callable[[R], dict[str, Any]]
    concise: Optional[Callable[[R, View], str]] = None
    github: Optional[Callable[[R, View], GithubReport]] = None
    sarif: Optional[Callable[[R, View], dict[str, Any]]] = None
    heading: Optional[Callable[[R], str]] = None  # text: the line naming each of several results
    several: str = "results"  # JSON: the key holding several results
    facts: Callable[[R], Sequence[Fact]] = _no_facts
    what: str = "program"  # what one result is about, for "and 3 more programs"

    @property
    def formats(self) -> tuple[Format, ...]:
        given = {Format.TEXT: self.text, Format.CONCISE: self.concise, Format.MARKDOWN: self.markdown,
                 Format.JSON: self.json, Format.GITHUB: self.github, Format.SARIF: self.sarif}
        return tuple(f for f in Format if given[f] is not None)

    def help(self) -> str:
        names = [f"{f} ({DESCRIPTIONS[f]})" for f in self.formats]
        return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]


def _parse(formats: Sequence[Format]) -> Callable[[Optional[str]], Optional[Format]]:
    def parse(value: Optional[str]) -> Optional[Format]:
        if value is None or isinstance(value, Format):
            return value
        for f in formats:
            if f.value == value.lower():
                return f
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(f.value for f in formats)}")
    return parse


def format_option(renderers: Renderers[Any], default: str = "text") -> Any:
    """The command's ``--format`` option (``--output-format``, ruff's name, and ``-f``): the formats it has."""
    formats = renderers.formats
    return typer.Option("--format", "--output-format", "-f", metavar="[" + "|".join(f.value for f in formats) + "]",
                        callback=_parse(formats), show_default=False,
                        autocompletion=lambda: [f.value for f in formats],
                        help=f"{renderers.help()} [default: {default}].")


def resolve(renderers: Renderers[Any], fmt: Optional[str], json_flag: bool, view: View,
            default: Optional[str] = None) -> Format:
    """The one format shown: ``--json``, else ``--format``, else the config file's, else text; ``-v`` turns
    concise into the tables."""
    if json_flag:
        return Format.JSON
    chosen = _parse(renderers.formats)(fmt if fmt is not None else default) or Format.TEXT
    return Format.TEXT if chosen is Format.CONCISE and view.verbose else chosen


def capped(annotations: Sequence[Annotation], most: int) -> list[str]:
    """Annotations as GitHub shows them: errors, then warnings, then notices, the worst of each first, at most
    ``most`` of each (0: all), each level's overflow said in one plain line."""
    lines: list[str] = []
    for level in ("error", "warning", "notice"):
        of_level = sorted((a for a in annotations if a.level == level), key=lambda a: a.weight)
        shown = of_level if most == 0 else of_level[:most]
        lines += [a.line for a in shown]
        if len(of_level) > len(shown):
            lines.append(f"{plural(len(of_level) - len(shown), f'more {level}')} not annotated (GitHub shows "
                         f"{most} of each level per step; --max-annotations {len(of_level)} shows them all)")
    return lines


class Output(Generic[R]):
    """One command's output in one format: ``add`` each result as it comes, ``close`` at the end.

    Text and concise are printed as results come; JSON, markdown, GitHub annotations and SARIF are whole
    documents, printed by ``close`` (one result: its document; several: one document holding them all).
    """

    def __init__(self, renderers: Renderers[R], fmt: Format, view: View, several: bool = False) -> None:
        if fmt not in renderers.formats:
            raise ValueError(f"{renderers.command} has no {fmt} format")
        self.renderers, self.fmt, self.view, self.several = renderers, fmt, view, several
        self.results: list[R] = []

    def add(self, result: R) -> None:
        self.results.append(result)
        facts = self.renderers.facts(result)
        if self.fmt is Format.TEXT:
            if self.several and self.renderers.heading is not None and not self.view.quiet:
                stdout_console().print(printable(self.renderers.heading(result)), markup=False, soft_wrap=True,
                                       style="bold")
            self.renderers.text(result, self.view)
            if facts and not self.view.quiet:
                echo_lines([f"{fact.file}: {fact.text}" for fact in facts])
            if self.several and not self.view.quiet:
                typer.echo("")
        elif self.fmt is Format.CONCISE:
            assert self.renderers.concise is not None
            typer.echo(self.renderers.concise(result, self.view))
            if facts:
                echo_lines([f"{fact.file}: {fact.text}" for fact in facts])

    def close(self, limit: int = MARKDOWN_LIMIT, **extra: Any) -> None:
        """Print the documents (``extra``: more keys of several results' JSON document)."""
        for block in self.blocks(limit, **extra):
            sys.stdout.write(block)
        sys.stdout.flush()  # a reader that went away (| head) is found here, where the command handles it

    def blocks(self, limit: int = MARKDOWN_LIMIT, **extra: Any) -> Iterator[str]:
        """The documents of a whole-document format (JSON, markdown, GitHub, SARIF) as text, each block ending in a
        newline: what ``close`` prints, and what ``check --report FORMAT=FILE`` writes to a file (one rendering)."""
        if self.fmt is Format.JSON:
            documents = [self._json(result) for result in self.results]
            if self.several:
                yield from json_blocks(self.renderers.command, {self.renderers.several: documents, **extra})
            elif documents:
                yield from json_blocks(self.renderers.command, documents[0])
        elif self.fmt is Format.MARKDOWN:
            blocks = [Block.of(self.renderers.markdown(result, self.view) + self._quoted(result))
                      for result in self.results]
            if blocks:
                yield printable_lines([fit(blocks, limit, self.renderers.what)]) + "\n"
        elif self.fmt is Format.GITHUB:
            assert self.renderers.github is not None
            for result in self.results:
                report = self.renderers.github(result, self.view)
                notices = [Annotation("notice", github_annotation("notice", fact.text, file=fact.file or None,
                                                                  title=f"pte-devconst: {fact.key}"))
                           for fact in self.renderers.facts(result)]
                yield printable_lines(capped(report.annotations + notices, self.view.max_annotations)
                                      + report.lines) + "\n"
        elif self.fmt is Format.SARIF:
            assert self.renderers.sarif is not None
            import json

            for result in self.results:
                document = self.renderers.sarif(result, self.view)
                facts = self.renderers.facts(result)
                if facts:
                    document["runs"][0].setdefault("properties", {})["facts"] = [f.to_json() for f in facts]
                yield json.dumps(document, indent=2) + "\n"

    def _json(self, result: R) -> dict[str, Any]:
        document = self.renderers.json(result)
        facts = self.renderers.facts(result)
        return {**document, "facts": [f.to_json() for f in facts]} if facts else document

    def _quoted(self, result: R) -> list[str]:
        facts = self.renderers.facts(result)
        return ["", *(f"> {md_code(fact.file)}: {md_text(fact.text)}" for fact in facts)] if facts else []
