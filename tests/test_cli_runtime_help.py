"""``--runtime``'s help names each registered encoding in its own words (``cli/config.py: runtime_help``), composed
when ``--help`` prints it: an encoding registered later is offered with no edit of the command line, and a command
that shows no help never loads the registry to build its options."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from cli_runner import invoke
from test_encodings import toy  # noqa: F401 - the fixture registers the toy encoding
from pte_devconst.rewriter.encodings import encodings

if TYPE_CHECKING:
    from toy_encoding import ToyEncoding


def _help(command: str) -> str:
    done = invoke(command, "--help")
    assert done.exit_code == 0, done.stderr
    return " ".join(done.stdout.split())


@pytest.mark.parametrize("command", ["rewrite", "check"])
def test_the_help_names_every_encoding(command: str) -> None:
    text = _help(command)
    for encoding in encodings():
        assert f"{encoding.runtime.value}: {encoding.described}." in text
    assert "[default: 1.6, or runtime in the config]" in text


def test_a_registered_encoding_is_in_the_help(toy: "ToyEncoding") -> None:  # noqa: F811 - the fixture
    assert f"1.7: {toy.described}." in _help("rewrite")
    assert toy.name in toy.described and toy.when in toy.described  # the default sentence: its own words


def test_starting_a_command_loads_no_encoding_registry() -> None:
    code = ("import sys\nfrom pte_devconst.cli.app import main\ntry:\n    main(['--version'])\nexcept SystemExit:\n"
            "    pass\nprint('LOADED:' + ','.join(m for m in sys.modules if 'rewriter.encodings' in m))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "LOADED:\n" in done.stdout, done.stdout + done.stderr
