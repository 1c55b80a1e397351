"""The benchmark's sections, one module each: ``run(rounds, report, inputs)`` measures and adds its section.

``SECTIONS`` is their order in bench/RESULTS.md and the names ``python -m bench --only`` takes.
"""

from __future__ import annotations

from typing import Callable

from bench.common import Report
from bench.inputs import Inputs
from bench.sections import analysis, dryrun, executorch, fold, layout, rewrite, runner, seed, startup, validate

Section = Callable[[int, Report, Inputs], None]

SECTIONS: dict[str, Section] = {
    "rewrite": rewrite.run,
    "dryrun": dryrun.run,
    "executorch": executorch.run,
    "analysis": analysis.run,
    "startup": startup.run,
    "runner": runner.run,
    "fold": fold.run,
    "seed": seed.run,
    "layout": layout.run,
    "validate": validate.run,
}
