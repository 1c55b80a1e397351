"""Reading ``fbs/*.fbs`` into a typed description: the one source of truth for the format.

``regenerate.py`` turns this description into the model's records, the decoder
and the encoder (``codegen.py``); ``tests/flatc_reference.py`` walks it to
drive the flatc-generated code it checks them against.

Why a parser of our own rather than flatc's reflection output (``flatc --bfbs``):
the description is needed at generation time and by the tests, and reading a
``.bfbs`` would need a reader for ``reflection.fbs`` written by hand, which is
the problem this module solves for ``program.fbs``. The schemas use a small part
of the language, so the parser accepts exactly that part (tables, enums, unions,
vectors, strings, scalar defaults, ``force_align``, includes, namespaces, the
root declarations) and refuses everything else with the file and line, rather
than guess at its meaning. flatc stays the authority: the tests compare the
decoder with flatc's accessors and the encoder with flatc's builders, byte for
byte, so a slot, type or default this parser got wrong cannot go unnoticed.

A field's *slot* is its position in its table's vtable, counted as flatc counts
it: in declaration order, a union field taking two (its type tag, then its value).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional, Union

from pte_devconst.util.record import record

# Canonical scalar names and their ``struct`` format characters; flatc's sized aliases map onto them.
SCALAR_FORMATS = {"bool": "?", "byte": "b", "ubyte": "B", "short": "h", "ushort": "H", "int": "i", "uint": "I",
                  "long": "q", "ulong": "Q", "float": "f", "double": "d"}
SCALAR_ALIASES = {"int8": "byte", "uint8": "ubyte", "int16": "short", "uint16": "ushort", "int32": "int",
                  "uint32": "uint", "int64": "long", "uint64": "ulong", "float32": "float", "float64": "double"}
INTEGER_SCALARS = frozenset({"byte", "ubyte", "short", "ushort", "int", "uint", "long", "ulong"})
Scalar = Union[bool, int, float]


class FbsError(ValueError):
    """A schema the parser cannot read: ``file:line: what``."""


@record
class TypeRef:
    """A field's type. ``kind``: scalar, enum, string, table or union; ``vector`` for ``[T]``."""

    kind: str
    name: str  # the canonical scalar name, "string", or the qualified name of the enum, table or union
    vector: bool = False


@record
class Field:
    name: str
    type: TypeRef
    slot: int  # for a union: the slot of its value (its type tag is the slot before)
    default: Optional[Scalar] = None  # scalars and enums only: the value an absent field reads as
    force_align: int = 0
    doc: str = ""


class _Named:
    """A declaration's ``name`` is qualified (``executorch_flatbuffer.Tensor``); ``short_name`` is ``Tensor``."""

    __slots__ = ()
    name: str

    @property
    def short_name(self) -> str:
        return self.name.rpartition(".")[2]


@record
class TableDef(_Named):
    name: str
    fields: tuple[Field, ...]
    doc: str = ""


@record
class Enum(_Named):
    name: str
    underlying: str  # a canonical integer scalar name
    values: tuple[tuple[str, int], ...]
    doc: str = ""


@record
class UnionType(_Named):
    name: str
    members: tuple[str, ...]  # qualified table names; member i has type tag i + 1 (0 is NONE)
    doc: str = ""


@record
class Root:
    """What one root schema file declares about its file format."""

    file: str  # the .fbs file name
    table: str  # the qualified name of the root table
    identifier: bytes
    extension: str


@record
class Schema:
    """Every declaration reachable from the root files, in declaration order."""

    tables: tuple[TableDef, ...]
    enums: tuple[Enum, ...]
    unions: tuple[UnionType, ...]
    roots: tuple[Root, ...]

    def table(self, name: str) -> TableDef:
        return next(t for t in self.tables if t.name == name)

    def enum(self, name: str) -> Enum:
        return next(e for e in self.enums if e.name == name)

    def union(self, name: str) -> UnionType:
        return next(u for u in self.unions if u.name == name)


# --- tokens --------------------------------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<space>[ \t\r]+) | (?P<newline>\n)
  | (?P<comment>//[^\n]*)
  | (?P<block>/\*.*?\*/)
  | (?P<string>"[^"\n]*")
  | (?P<number>[-+]?(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?))
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
  | (?P<punct>[{}\[\]():;,=])
""", re.VERBOSE | re.DOTALL)


@record
class _Token:
    kind: str
    text: str
    line: int
    doc: str = ""  # the comment block right above the token, plus the comment ending its line (declarations)


def _tokenize(text: str, file: str) -> list[_Token]:
    """Tokens with their line; comments become the ``doc`` of the declaration they document."""
    tokens: list[_Token] = []
    above: list[tuple[int, str]] = []  # (line, text) of the comments since the last token
    line, pos = 1, 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise FbsError(f"{file}:{line}: unexpected character {text[pos]!r}")
        kind, value = match.lastgroup, match.group()
        assert kind is not None  # every alternative of _TOKEN is a named group
        pos = match.end()
        if kind == "newline":
            line += 1
        elif kind == "block":
            line += value.count("\n")
        elif kind == "comment":
            comment = value[2:].lstrip("/").strip()
            if tokens and tokens[-1].line == line:
                _attach_trailing(tokens, comment)
            else:
                above.append((line, comment))
        elif kind != "space":
            block: list[str] = []
            expected = line - 1
            for at, comment in reversed(above):  # only the comments on the lines right above count
                if at != expected:
                    break
                block.insert(0, comment)
                expected -= 1
            above = []
            tokens.append(_Token(kind, value, line, "\n".join(block)))
    return tokens


def _attach_trailing(tokens: list[_Token], comment: str) -> None:
    """Add a comment that ends a line to the doc of the first token of that line's statement (a field's name)."""
    start = len(tokens) - 1
    while start > 0 and tokens[start - 1].text not in ";{}" and tokens[start - 1].line == tokens[-1].line:
        start -= 1
    first = tokens[start]
    tokens[start] = _Token(first.kind, first.text, first.line, "\n".join(filter(None, (first.doc, comment))))


def _integer(token: _Token, file: str) -> int:
    try:
        return int(token.text, 0)
    except ValueError:
        raise FbsError(f"{file}:{token.line}: {token.text!r} is not an integer") from None


# --- parsing ---------------------------------------------------------------------------------------

@record
class _RawField:
    name: str
    type_name: str
    vector: bool
    default: Optional[str]
    force_align: int
    doc: str
    line: int


@record
class _Declaration:
    """A table, enum or union as written, before its names are resolved."""

    kind: str  # "table", "enum" or "union"
    body: tuple[Any, ...]  # _RawFields, (underlying, values) or member names
    doc: str
    namespace: str
    file: str
    line: int


class _Parser:
    """One file's tokens into declarations; names are resolved once every file is read."""

    def __init__(self, tokens: list[_Token], file: str) -> None:
        self.tokens, self.file, self.at = tokens, file, 0
        self.namespace = ""

    def fail(self, what: str, token: Optional[_Token] = None) -> FbsError:
        if token is None and self.tokens:
            token = self.tokens[min(self.at, len(self.tokens) - 1)]
        return FbsError(f"{self.file}:{token.line if token else 1}: {what}")

    def peek(self) -> Optional[_Token]:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self, kind: Optional[str] = None, text: Optional[str] = None) -> _Token:
        token = self.peek()
        if token is None:
            raise self.fail(f"unexpected end of file, expected {text or kind}")
        if (kind and token.kind != kind) or (text and token.text != text):
            raise self.fail(f"expected {text or kind}, found {token.text!r}")
        self.at += 1
        return token

    def accept(self, text: str) -> bool:
        token = self.peek()
        if token is not None and token.kind == "punct" and token.text == text:
            self.at += 1
            return True
        return False

    def end(self) -> None:
        self.take("punct", ";")

    def declaration(self, kind: str, keyword: _Token, body: tuple[Any, ...], name: _Token) -> tuple[str, _Declaration]:
        qualified = f"{self.namespace}.{name.text}" if self.namespace else name.text
        return qualified, _Declaration(kind, body, keyword.doc, self.namespace, self.file, name.line)

    # --- declarations ---

    def table(self) -> tuple[_RawField, ...]:
        self.take("punct", "{")
        fields: list[_RawField] = []
        while not self.accept("}"):
            name = self.take("name")
            self.take("punct", ":")
            vector = self.accept("[")
            type_name = self.take("name").text
            if vector:
                if self.accept(":"):
                    raise self.fail("fixed-length arrays are outside the subset this parser reads")
                self.take("punct", "]")
            default = None
            if self.accept("="):
                token = self.take()
                if token.kind not in ("number", "name"):
                    raise self.fail(f"a default is a number, true, false or an enum value, not {token.text!r}", token)
                default = token.text
            force_align = self.field_attributes() if self.accept("(") else 0
            self.end()
            fields.append(_RawField(name.text, type_name, vector, default, force_align, name.doc, name.line))
        return tuple(fields)

    def field_attributes(self) -> int:
        """The attributes in ``( ... )``; only ``force_align: N`` is in the subset. Returns N (0 without)."""
        force_align = 0
        while True:
            attribute = self.take("name")
            if attribute.text != "force_align":
                raise self.fail(f"attribute {attribute.text!r} is outside the subset this parser reads "
                                "(only force_align)", attribute)
            self.take("punct", ":")
            force_align = _integer(self.take("number"), self.file)
            if force_align < 1 or force_align & (force_align - 1):
                raise self.fail(f"force_align {force_align} is not a power of two", attribute)
            if not self.accept(","):
                break
        self.take("punct", ")")
        return force_align

    def enum(self) -> tuple[str, tuple[tuple[str, int], ...]]:
        self.take("punct", ":")
        token = self.take("name")
        underlying = SCALAR_ALIASES.get(token.text, token.text)
        if underlying not in INTEGER_SCALARS:
            raise self.fail(f"an enum's type must be an integer type, not {token.text!r}", token)
        self.take("punct", "{")
        values: list[tuple[str, int]] = []
        following = 0
        while not self.accept("}"):
            member = self.take("name").text
            if self.accept("="):
                following = _integer(self.take("number"), self.file)
            values.append((member, following))
            following += 1
            if not self.accept(","):
                self.take("punct", "}")
                break
        return underlying, tuple(values)

    def union(self) -> tuple[str, ...]:
        self.take("punct", "{")
        members: list[str] = []
        while not self.accept("}"):
            members.append(self.take("name").text)
            token = self.peek()
            if token is not None and token.text in (":", "="):
                raise self.fail("union aliases and explicit union tags are outside the subset this parser reads")
            if not self.accept(","):
                self.take("punct", "}")
                break
        return tuple(members)


@record
class _RawRoot:
    file: str
    table: str
    namespace: str
    identifier: bytes
    extension: str


def _parse_file(path: Path, declarations: dict[str, _Declaration], roots: list[_RawRoot], seen: set[Path]) -> None:
    path = path.resolve()
    if path in seen:
        return
    seen.add(path)
    p = _Parser(_tokenize(path.read_text(), path.name), path.name)
    root = identifier = None
    extension = ""
    while p.peek() is not None:
        keyword = p.take("name")
        if keyword.text == "include":
            _parse_file(path.parent / p.take("string").text.strip('"'), declarations, roots, seen)
        elif keyword.text == "namespace":
            p.namespace = p.take("name").text
        elif keyword.text == "attribute":
            p.take("string")
        elif keyword.text in ("table", "enum", "union"):
            name = p.take("name")
            qualified, declaration = p.declaration(keyword.text, keyword, getattr(p, keyword.text)(), name)
            if qualified in declarations:
                raise p.fail(f"{qualified} is declared twice", name)
            declarations[qualified] = declaration
            continue  # a declaration ends with its closing brace
        elif keyword.text == "root_type":
            root = p.take("name").text, p.namespace
        elif keyword.text == "file_identifier":
            token = p.take("string")
            identifier = token.text.strip('"').encode()
            if len(identifier) != 4:
                raise p.fail("a file identifier is 4 characters", token)
        elif keyword.text == "file_extension":
            extension = p.take("string").text.strip('"')
        else:
            raise p.fail(f"{keyword.text!r} is outside the subset this parser reads (table, enum, union, include, "
                         "namespace, attribute, root_type, file_identifier, file_extension)", keyword)
        p.end()
    if root is not None:
        if identifier is None:
            raise FbsError(f"{path.name}: a root schema needs a file_identifier")
        roots.append(_RawRoot(path.name, root[0], root[1], identifier, extension))


# --- resolution --------------------------------------------------------------------------------------

def _qualified(name: str, namespace: str, declarations: dict[str, _Declaration], where: str) -> str:
    """The declaration ``name`` means inside ``namespace``: the namespace's own first, then the name as written."""
    for candidate in (f"{namespace}.{name}" if namespace else name, name):
        if candidate in declarations:
            return candidate
    raise FbsError(f"{where}: unknown type {name!r}")


def _resolve_type(raw: _RawField, owner: _Declaration, declarations: dict[str, _Declaration]) -> TypeRef:
    scalar = SCALAR_ALIASES.get(raw.type_name, raw.type_name)
    if scalar in SCALAR_FORMATS:
        return TypeRef("scalar", scalar, raw.vector)
    if raw.type_name == "string":
        return TypeRef("string", "string", raw.vector)
    where = f"{owner.file}:{raw.line}"
    name = _qualified(raw.type_name, owner.namespace, declarations, where)
    kind = declarations[name].kind
    if kind == "union" and raw.vector:
        raise FbsError(f"{where}: vectors of unions are outside the subset this parser reads")
    return TypeRef(kind, name, raw.vector)


def _default(raw: _RawField, ref: TypeRef, enums: dict[str, Enum], where: str) -> Optional[Scalar]:
    """The value an absent field reads as, from the written default (flatc's rules: 0, false, an enum's 0)."""
    where = f"{where}: field {raw.name}"
    text = raw.default
    if ref.vector or ref.kind not in ("scalar", "enum"):
        if text is not None:
            raise FbsError(f"{where}: only scalars and enums take a default")
        return None
    if ref.kind == "enum":
        values = dict(enums[ref.name].values)
        if text is None:
            if 0 not in values.values():
                raise FbsError(f"{where}: {ref.name} has no value 0, so the field needs a default")
            return 0
        if text in values:
            return values[text]
        if re.fullmatch(r"[-+]?\d+", text) and int(text) in values.values():
            return int(text)
        raise FbsError(f"{where}: {text!r} is not a value of {ref.name}")
    if ref.name == "bool":
        if text in (None, "false", "0"):
            return False
        if text in ("true", "1"):
            return True
        raise FbsError(f"{where}: {text!r} is not a bool")
    if text is None:
        return 0.0 if ref.name in ("float", "double") else 0
    try:
        return float(text) if ref.name in ("float", "double") else int(text, 0)
    except ValueError:
        raise FbsError(f"{where}: {text!r} is not a {ref.name}") from None


def _table(name: str, declaration: _Declaration, declarations: dict[str, _Declaration],
           enums: dict[str, Enum]) -> TableDef:
    fields: list[Field] = []
    slot = 0
    for raw in declaration.body:
        where = f"{declaration.file}:{raw.line}"
        if any(f.name == raw.name for f in fields):
            raise FbsError(f"{where}: field {raw.name} is declared twice in {name}")
        ref = _resolve_type(raw, declaration, declarations)
        slot += ref.kind == "union"  # a union's type tag takes the slot before its value
        if raw.force_align and not (ref.vector and ref.kind == "scalar"):
            raise FbsError(f"{where}: force_align applies to vectors of scalars only")
        fields.append(Field(raw.name, ref, slot, _default(raw, ref, enums, where), raw.force_align, raw.doc))
        slot += 1
    return TableDef(name, tuple(fields), declaration.doc)


def parse_schemas(fbs_dir: Path, root_files: tuple[str, ...]) -> Schema:
    """Parse the root files of ``fbs_dir`` (and what they include) into one ``Schema``."""
    declarations: dict[str, _Declaration] = {}
    raw_roots: list[_RawRoot] = []
    seen: set[Path] = set()
    for name in root_files:
        _parse_file(Path(fbs_dir) / name, declarations, raw_roots, seen)
    enums = {name: Enum(name, d.body[0], d.body[1], d.doc) for name, d in declarations.items() if d.kind == "enum"}
    unions, tables = [], []
    for name, d in declarations.items():
        if d.kind == "union":
            members = tuple(_qualified(m, d.namespace, declarations, f"{d.file}:{d.line}") for m in d.body)
            if any(declarations[m].kind != "table" for m in members):
                raise FbsError(f"{d.file}:{d.line}: every member of union {name} must be a table")
            unions.append(UnionType(name, members, d.doc))
        elif d.kind == "table":
            tables.append(_table(name, d, declarations, enums))
    roots = tuple(Root(r.file, _qualified(r.table, r.namespace, declarations, r.file), r.identifier, r.extension)
                  for r in raw_roots)
    for root in roots:
        if declarations[root.table].kind != "table":
            raise FbsError(f"{root.file}: root_type {root.table} is not a table")
    return Schema(tuple(tables), tuple(enums.values()), tuple(unions), roots)
