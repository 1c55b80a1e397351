"""Run mypy on the installed layout of the package: ``python tests/typecheck.py [mypy options]``.

The source folders (``schema/``, ``rewriter/``, ...) install as ``pte_devconst.schema`` and so on (pyproject's
package-dir), a layout mypy cannot see from the checkout. This builds it from symbolic links in a temporary
folder and runs mypy on ``pte_devconst`` there, with the options of ``[tool.mypy]`` in pyproject.toml;
messages name the files of the checkout. ``tests/test_lint.py`` runs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from test_layers import FOLDERS  # the source folders, as pyproject maps them

ROOT = Path(__file__).resolve().parents[1]
SUBPACKAGES = tuple(folder for folder in FOLDERS if folder != "pte_devconst")


def link_farm(into: Path) -> Path:
    """``into/pte_devconst``: the top package's files, each source folder linked in as its subpackage."""
    package = into / "pte_devconst"
    package.mkdir()
    for entry in (ROOT / "pte_devconst").iterdir():
        if entry.suffix == ".py":
            (package / entry.name).symlink_to(entry)
    for folder in SUBPACKAGES:
        (package / folder).symlink_to(ROOT / folder, target_is_directory=True)
    return package


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        link_farm(Path(tmp))
        env = {**os.environ, "MYPYPATH": tmp}
        done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                               "--cache-dir", str(ROOT / ".mypy_cache"), "-p", "pte_devconst", *argv],
                              cwd=tmp, env=env, capture_output=True, text=True)
        # Report the checkout's paths, not the link farm's: pte_devconst/schema/x.py is schema/x.py, while the top
        # package's own files (pte_devconst/api.py) are where the farm has them.
        out = done.stdout.replace(f"{tmp}/", "")
        for folder in SUBPACKAGES:
            out = out.replace(f"pte_devconst/{folder}/", f"{folder}/")
        sys.stdout.write(out)
        sys.stderr.write(done.stderr)
        return done.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
