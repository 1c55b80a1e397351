"""The release users pin exists as the docs describe it (issue 38): one version, the CHANGELOG's newest section,
every pin and the release's surface agree, and nothing the pinned examples use is newer than the release.

Was: the pre-commit config and the workflow pinned v0.1.0, which no tag named, whose CHANGELOG section lacked
``--runtime 1.5`` and the ``runtime`` key the docs showed, while ``--version`` on main said 0.1.0 too.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import release  # noqa: E402  (tests/release.py: the maintainers' release tool)

from pte_devconst import __version__  # noqa: E402

ROOT = release.ROOT


def _tree(tmp_path: Path) -> Path:
    """The files the release rules read, copied into a scratch tree that a test may break."""
    files = {release.VERSION_FILE, Path("CHANGELOG.md"), release.SURFACE,
             *(Path(name) for name in (*release.PIN_FILES, *release.DOCUMENTED))}
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path}: {old!r} not found"
    path.write_text(text.replace(old, new, 1))


def test_the_checkout_agrees_with_its_release() -> None:
    assert release.problems() == []
    assert release.version() == __version__
    assert release.sections()[1][0] == __version__  # the newest release is this version
    assert all(named and set(named) == {__version__} for named in release.pins().values())


def test_the_version_the_tool_reports_is_the_release() -> None:
    done = subprocess.run([sys.executable, "-m", "pte_devconst", "--version"], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert done.returncode == 0 and __version__ in done.stdout


@pytest.mark.parametrize("breakage, expected", [
    ((".pre-commit-hooks.yaml", "rev: v{v}", "rev: v0.1.0"), ".pre-commit-hooks.yaml: pins v0.1.0"),
    (("examples/ci/pte-devconst.yml", "pte-devconst@v{v}", "pte-devconst@v9.9.9"),
     "examples/ci/pte-devconst.yml: pins v9.9.9"),
    (("README.md", "rev: v{v}", "rev: v0.0.1"), "README.md: pins v0.0.1"),
    (("docs/cli.md", "pte-devconst@v{v}", "pte-devconst@v1.0.0"), "docs/cli.md: pins v1.0.0"),
    (("pte_devconst/__init__.py", '__version__ = "{v}"', '__version__ = "0.9.0"'),
     "CHANGELOG.md: the newest release is {v}, but __version__ is 0.9.0"),
    (("CHANGELOG.md", "## [{v}] - ", "## [{v}-rc] - "), "CHANGELOG.md: the newest release is"),
    (("CHANGELOG.md", "[{v}]: https://github.com/pte-devconst/pte-devconst/releases/tag/v{v}", ""),
     "CHANGELOG.md: no link line '[{v}]:"),
])
def test_a_disagreement_is_caught(tmp_path: Path, breakage: tuple[str, str, str], expected: str) -> None:
    root = _tree(tmp_path)
    name, old, new = (part.replace("{v}", __version__) for part in breakage)
    _edit(root / name, old, new)
    found = release.problems(root)
    assert any(line.startswith(expected.replace("{v}", __version__)) for line in found), found


def test_an_option_newer_than_the_release_is_caught_where_users_copy_it(tmp_path: Path) -> None:
    """An option the release lacks (as --runtime was to v0.1.0): the workflow must not use it, the docs must not
    show it as available, and [Unreleased] must announce it."""
    root = _tree(tmp_path)
    surface = json.loads((root / release.SURFACE).read_text())
    surface["options"].remove("--progress")
    surface["options"].remove("--no-progress")
    (root / release.SURFACE).write_text(json.dumps(surface))
    found = release.problems(root)
    assert "CHANGELOG.md: --progress is newer than v{} but [Unreleased] does not list it".format(__version__) in found
    assert any(re.match(r"docs/cli\.md:\d+: documents --progress, which v", line) for line in found), found
    workflow = root / "examples/ci/pte-devconst.yml"
    _edit(workflow, "pte-devconst check ", "pte-devconst check --progress ")
    assert f"examples/ci/pte-devconst.yml: uses --progress, which v{__version__} does not have" in \
        release.problems(root)


def test_a_config_key_newer_than_the_release_is_caught(tmp_path: Path) -> None:
    """Was: docs/cli.md showed ``runtime = "1.5"``, which the pinned release refused (unknown key, exit 2)."""
    root = _tree(tmp_path)
    surface = json.loads((root / release.SURFACE).read_text())
    surface["config_keys"].remove("runtime")
    (root / release.SURFACE).write_text(json.dumps(surface))
    found = release.problems(root)
    assert f"docs/cli.md: shows config key runtime, which v{__version__} does not have" in found
    assert f"CHANGELOG.md: config key runtime is newer than v{__version__} but [Unreleased] does not list it" in found


def test_an_unreleased_option_may_be_named_as_such(tmp_path: Path) -> None:
    """Between releases the docs may say what comes next, on a line that says so."""
    root = _tree(tmp_path)
    surface = json.loads((root / release.SURFACE).read_text())
    surface["options"] = [o for o in surface["options"] if o not in ("--progress", "--no-progress")]
    (root / release.SURFACE).write_text(json.dumps(surface))
    docs = root / "docs/cli.md"
    docs.write_text("\n".join(line for line in docs.read_text().splitlines() if "progress" not in line)
                    + "\n* `--progress` (unreleased): progress lines in CI logs.\n")
    for name in ("README.md", ".pre-commit-hooks.yaml"):
        path = root / name
        path.write_text("\n".join(line for line in path.read_text().splitlines() if "--progress" not in line))
    _edit(root / "CHANGELOG.md", "## [Unreleased]\n", "## [Unreleased]\n\n### Added\n\n- `--progress` and "
          "`--no-progress` on rewrite and check.\n")
    assert release.problems(root) == []


def test_cutting_the_next_release_keeps_every_rule(tmp_path: Path) -> None:
    """The maintainers' one command: after it, the tree agrees with the new release."""
    root = _tree(tmp_path)
    changed = release.cut("9.8.7", root, date="2027-01-02")
    assert str(release.SURFACE) in changed and "CHANGELOG.md" in changed
    assert release.problems(root) == []
    assert release.version(root) == "9.8.7"
    assert release.sections(root)[:3] == [("Unreleased", None), ("9.8.7", "2027-01-02"),
                                         (__version__, release.sections()[1][1])]
    assert all(set(named) == {"9.8.7"} for named in release.pins(root).values())
    with pytest.raises(ValueError, match="X.Y.Z"):
        release.cut("v1.0", root)


def test_docs_say_how_to_pin_a_commit_and_how_to_cut_a_release() -> None:
    docs = (ROOT / "docs" / "cli.md").read_text()
    assert "python tests/release.py cut" in docs and "git tag -a v" in docs and "git push origin" in docs
    assert re.search(r"rev: [0-9a-f]{40}", docs) and re.search(r"pte-devconst@[0-9a-f]{40}", docs)
