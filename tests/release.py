"""The release users pin: one version, one newest CHANGELOG section, one tag in every pin, and what it offers.

    python tests/release.py check           # every disagreement, one line each (exit 1 when there is one)
    python tests/release.py cut 0.3.0       # cut the next release in the working tree (docs/cli.md, "Releases")

Users copy a pin from the docs (the pre-commit ``rev:``, the workflow's ``PTE_DEVCONST``) and the options and
config keys the docs show.  Everything they copy must exist at that tag: the version (``__version__``), the
newest CHANGELOG section, every pin and the release's surface (``tests/fixtures/release_surface.json``: each
command's options and the config keys, as the release shipped them) agree, and an option or key newer than the
release is announced under [Unreleased] and shown by no pinned example (docs/cli.md may name it on a line that
says "unreleased").  ``tests/test_release.py`` holds these rules; ``cut`` makes a tree that keeps them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
from pathlib import Path
from typing import Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
REPOSITORY = "https://github.com/pte-devconst/pte-devconst"
# Every file a user copies a pin from; each holds at least one, and every one names the current release.
PIN_FILES = (".pre-commit-hooks.yaml", "examples/ci/pte-devconst.yml", "README.md", "docs/cli.md")
PIN = re.compile(r"(?:pte-devconst@|rev: )v(\d+\.\d+\.\d+)\b")
# What users run at the pinned tag: the hooks' entries and the workflow's commands.
PINNED_EXAMPLES = (".pre-commit-hooks.yaml", "examples/ci/pte-devconst.yml")
# Files that document options and config keys for users of the release.
DOCUMENTED = ("docs/cli.md", "README.md", ".pre-commit-hooks.yaml")
SURFACE = Path("tests/fixtures/release_surface.json")
VERSION_FILE = Path("pte_devconst/__init__.py")
VERSION = re.compile(r'^__version__ = "(\d+\.\d+\.\d+)"', re.M)
SECTION = re.compile(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?\s*$", re.M)
# Options of other tools that the docs compare with (ruff's, click's own --help).
FOREIGN_OPTIONS = frozenset({"--force-exclude", "--exit-non-zero-on-fix", "--help"})
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]+)")
# A command line of the tool in a document: ``pte-devconst [global options] COMMAND ...`` up to the line's end.
COMMAND_LINE = re.compile(r"pte-devconst(?:\s+-{1,2}[a-z-]+)*\s+(?:inspect|rewrite|diff|run|validate|check)\b[^\n]*")


def version(root: Path = ROOT) -> str:
    """The version in ``pte_devconst/__init__.py`` (pyproject.toml and ``--version`` read it from there)."""
    found = VERSION.search((root / VERSION_FILE).read_text())
    if found is None:
        raise ValueError(f"{VERSION_FILE}: no __version__ = \"X.Y.Z\" line")
    return found.group(1)


def sections(root: Path = ROOT) -> list[tuple[str, Optional[str]]]:
    """CHANGELOG.md's sections, newest first: (name, date), ``("Unreleased", None)`` first."""
    return [(m.group(1), m.group(2)) for m in SECTION.finditer((root / "CHANGELOG.md").read_text())]


def section_text(root: Path, name: str) -> str:
    """The body of CHANGELOG.md's section ``name`` (up to the next section)."""
    text = (root / "CHANGELOG.md").read_text()
    found = [m for m in SECTION.finditer(text)]
    for index, match in enumerate(found):
        if match.group(1) == name:
            end = found[index + 1].start() if index + 1 < len(found) else len(text)
            return text[match.end():end]
    return ""


def pins(root: Path = ROOT) -> dict[str, list[str]]:
    """The release each pin names, per file of ``PIN_FILES``."""
    return {name: PIN.findall((root / name).read_text()) for name in PIN_FILES}


def surface() -> dict[str, list[str]]:
    """What this checkout offers: every option of every command (and the global ones), and the config keys."""
    import typer

    from pte_devconst.cli import commands  # noqa: F401  (registers every command on the app)
    from pte_devconst.cli.app import app
    from pte_devconst.cli.config import ACCEPT_KEYS, KEYS

    group = typer.main.get_command(app)
    options = {option for param in group.params for option in (*param.opts, *param.secondary_opts)}
    for command in getattr(group, "commands", {}).values():
        options |= {option for param in command.params for option in (*param.opts, *param.secondary_opts)}
    return {"options": sorted(o for o in options if o.startswith("--")),
            "config_keys": sorted(KEYS), "accept_keys": sorted(ACCEPT_KEYS)}


def released(root: Path = ROOT) -> dict[str, object]:
    """The surface the current release shipped (``tests/fixtures/release_surface.json``; empty when missing)."""
    path = root / SURFACE
    loaded: dict[str, object] = json.loads(path.read_text()) if path.exists() else {}
    return loaded


def config_keys_shown(text: str) -> set[str]:
    """The keys a document's TOML examples set in ``[tool.pte-devconst]`` (``accept.KEY`` for its entries)."""
    keys: set[str] = set()
    for block in re.findall(r"```toml\n(.*?)```", text, re.S):
        table = ""
        for line in block.splitlines():
            heading = re.match(r"\s*\[\[?([^\]]+)\]\]?", line)
            if heading:
                table = heading.group(1).strip()
                continue
            key = re.match(r"\s*([A-Za-z][\w-]*)\s*=", line)
            if key and table == "tool.pte-devconst":
                keys.add(key.group(1))
            elif key and table == "tool.pte-devconst.accept":
                keys.add(f"accept.{key.group(1)}")
    return keys


def options_used(text: str) -> set[str]:
    """The options of the tool's command lines in a document (``pte-devconst check --strict ...``)."""
    return {option for line in COMMAND_LINE.findall(text) for option in OPTION.findall(line)} - FOREIGN_OPTIONS


def problems(root: Path = ROOT) -> list[str]:
    """Every disagreement between the version, the CHANGELOG, the pins, the release's surface and the docs."""
    found: list[str] = []
    current = version(root)
    listed = sections(root)
    if not listed or listed[0] != ("Unreleased", None):
        found.append("CHANGELOG.md: the first section is not [Unreleased]")
    releases = [(name, date) for name, date in listed if name != "Unreleased"]
    if not releases or releases[0][0] != current:
        newest = releases[0][0] if releases else "none"
        found.append(f"CHANGELOG.md: the newest release is {newest}, but __version__ is {current}")
    elif releases[0][1] is None:
        found.append(f"CHANGELOG.md: [{current}] has no date (## [{current}] - YYYY-MM-DD)")
    changelog = (root / "CHANGELOG.md").read_text()
    for link in (f"[Unreleased]: {REPOSITORY}/compare/v{current}...HEAD",
                 f"[{current}]: {REPOSITORY}/releases/tag/v{current}"):
        if link not in changelog:
            found.append(f"CHANGELOG.md: no link line '{link}'")
    for name, named in pins(root).items():
        if not named:
            found.append(f"{name}: no pin (pte-devconst@vX.Y.Z or rev: vX.Y.Z)")
        found += [f"{name}: pins v{other}, but the release is v{current}" for other in sorted(set(named) - {current})]
    shipped = released(root)
    if shipped.get("version") != current:
        found.append(f"{SURFACE}: the surface of {shipped.get('version')}, but the release is {current} "
                     "(python tests/release.py cut regenerates it)")
    now = surface()
    options_then, keys_then = set(shipped.get("options", ())), set(shipped.get("config_keys", ()))  # type: ignore[call-overload]
    accept_then = {f"accept.{key}" for key in shipped.get("accept_keys", ())}  # type: ignore[attr-defined]
    newer_options, newer_keys = set(now["options"]) - options_then, set(now["config_keys"]) - keys_then
    unreleased = section_text(root, "Unreleased")
    for option in sorted(newer_options):
        if f"`{option}" not in unreleased:
            found.append(f"CHANGELOG.md: {option} is newer than v{current} but [Unreleased] does not list it")
    for key in sorted(newer_keys):
        if f"`{key}" not in unreleased:
            found.append(f"CHANGELOG.md: config key {key} is newer than v{current} but [Unreleased] does not list it")
    for name in PINNED_EXAMPLES:
        text = (root / name).read_text()
        for option in sorted(options_used(text) - options_then):
            found.append(f"{name}: uses {option}, which v{current} does not have")
    for name in DOCUMENTED:
        text = (root / name).read_text()
        for key in sorted(config_keys_shown(text) - keys_then - accept_then):
            found.append(f"{name}: shows config key {key}, which v{current} does not have")
        for number, line in enumerate(text.splitlines(), 1):
            if "unreleased" in line.lower():
                continue
            for option in sorted(set(OPTION.findall(line)) & (newer_options - FOREIGN_OPTIONS)):
                found.append(f"{name}:{number}: documents {option}, which v{current} does not have (say "
                             "'unreleased' on its line, or cut a release)")
    return found


def cut(new: str, root: Path = ROOT, date: Optional[str] = None) -> list[str]:
    """Cut release ``new`` in ``root``'s working tree: the version, [Unreleased] moved under ``## [new] - date``
    (a new empty [Unreleased] above it), the link lines, every pin and the release's surface.  Returns the files
    changed; the tree then keeps every rule of ``problems``."""
    if not re.fullmatch(r"\d+\.\d+\.\d+", new):
        raise ValueError(f"{new!r}: a release is X.Y.Z")
    day = date or datetime.date.today().isoformat()
    init = root / VERSION_FILE
    init.write_text(VERSION.sub(f'__version__ = "{new}"', init.read_text(), count=1))
    log = root / "CHANGELOG.md"
    text = log.read_text().replace("## [Unreleased]\n", f"## [Unreleased]\n\n## [{new}] - {day}\n", 1)
    links = f"[Unreleased]: {REPOSITORY}/compare/v{new}...HEAD\n[{new}]: {REPOSITORY}/releases/tag/v{new}"
    text = re.sub(r"^\[Unreleased\]: .*$", lambda _: links, text, count=1, flags=re.M)
    log.write_text(text)
    for name in PIN_FILES:
        path = root / name
        path.write_text(PIN.sub(lambda m: m.group(0).replace(f"v{m.group(1)}", f"v{new}"), path.read_text()))
    (root / SURFACE).write_text(json.dumps({"version": new, **surface()}, indent=2) + "\n")
    return [str(VERSION_FILE), "CHANGELOG.md", *PIN_FILES, str(SURFACE)]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python tests/release.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("check", help="list every disagreement (exit 1 when there is one)")
    cutting = sub.add_parser("cut", help="cut a release in the working tree")
    cutting.add_argument("version", help="the new release, X.Y.Z")
    cutting.add_argument("--date", help="its date, YYYY-MM-DD [default: today]")
    args = parser.parse_args(argv)
    if args.action == "cut":
        changed = cut(args.version, date=args.date)
        left = problems()
        print("changed: " + ", ".join(changed))
        for line in left:
            print(f"still wrong: {line}", file=sys.stderr)
        if not left:
            print(f"next: review the diff and the [{args.version}] section, run the README's test command, then\n"
                  f"  git commit -am 'Release {args.version}' && git tag -a v{args.version} -m 'pte-devconst "
                  f"{args.version}'\n  git push origin main v{args.version}")
        return 1 if left else 0
    found = problems()
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
