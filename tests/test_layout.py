"""The device-memory layout (program/layout.py ``plan_layout``): valid, no larger than the quadratic fits it
replaced, near-linear, and bounded by a work budget that falls back to the input's offsets.

* On random buffers (groups of one to three members, unaligned starts, every kind of lifetime) every fit is a
  valid layout (``layout_problems``, the independent check) and the layout kept is never larger than either fit
  the code had before (written here as the oracles they were: quadratic, obviously right).
* The layout's work, counted in its budget's units, grows about 10x from 1k to 10k values, all live at once or
  short-lived; 32,000 all-live values take well under a second of CPU where the old fit took minutes.
* ``check`` of 8,000 device copies all live at once (the seed's shape, bench/synth.py, with weights the host
  also reads): the layout takes a small part of a few CPU seconds (``rewrite``, and 32,000: ``-m slow``).
* A layout that runs out of its budget keeps the input's offsets with the constants appended: the rewrite is
  still written and checked, validates, and every report says so.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any, Callable, Optional

import jsonschema
import pytest

from bench.children.layout import short_groups
from bench.synth import seed_program
from cli_runner import invoke, invoke_json
from conftest import EXAMPLES
from pte_devconst import api
from pte_devconst.program import layout as layout_module
from pte_devconst.program.layout import LayoutWork, layout_problems, plan_layout
from pte_devconst.program.memory import Lifetime, StorageGroup
from pte_devconst.program.regions import Region
from pte_devconst.schema.pte_writer import write_pte
from test_report_schema import SCHEMA_FILE

MLP = EXAMPLES / "mlp_copy.pte"  # a real export whose device buffer a rewrite lays out again
ALIGN = 16


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


# --- the oracles: the quadratic fits the layout had before issue 26 -------------------------------------------

def _block(group: StorageGroup) -> int:
    return group.extent.nbytes + group.extent.start % ALIGN


def _meets(a: Lifetime, b: Lifetime) -> bool:
    return a.first <= b.last and b.first <= a.last


def _oracle_offsets(groups: list[StorageGroup]) -> int:
    """Largest first, each at the lowest aligned offset clear of every placed group whose lifetime it meets."""
    placed: list[tuple[int, int, Lifetime]] = []
    top = 0
    for group in groups:
        assert group.lifetime is not None
        candidate = 0
        for base, end in sorted((b, e) for b, e, life in placed if _meets(life, group.lifetime)):
            if candidate + _block(group) <= base:
                break
            candidate = max(candidate, _aligned(end))
        placed.append((candidate, candidate + _block(group), group.lifetime))
        top = max(top, _aligned(candidate + _block(group)))
    return top


def _oracle_objects(groups: list[StorageGroup]) -> int:
    """Largest first, each into the first shared object none of whose groups' lifetimes it meets."""
    objects: list[tuple[int, list[Lifetime]]] = []
    for group in groups:
        assert group.lifetime is not None
        for _, lives in objects:
            if not any(_meets(life, group.lifetime) for life in lives):
                lives.append(group.lifetime)
                break
        else:
            objects.append((_aligned(_block(group)), [group.lifetime]))
    return sum(size for size, _ in objects)


def _random_buffer(rng: random.Random) -> list[StorageGroup]:
    positions = rng.randint(3, 120)
    groups = []
    value = 0
    for _ in range(rng.randint(1, 90)):
        members, starts = [], []
        at = rng.randrange(ALIGN)  # the group's first byte, anywhere within 16 bytes
        hull = at
        for _ in range(rng.choice([1, 1, 1, 2, 3])):  # a holder and its static views share bytes
            start = at + rng.randrange(64)
            members.append(value)
            starts.append(start)
            hull = max(hull, start + rng.choice([1, 4, 16, 100, 1024, 4096]))
            value += 1
        first = rng.randint(-1, positions)
        kind = rng.random()
        if kind < 0.1:
            life: Optional[Lifetime] = None  # dead
        elif kind < 0.2:
            life = Lifetime(-1, positions)  # a method input that is an output too
        else:
            life = Lifetime(first, min(positions, first + int(rng.expovariate(1 / rng.choice([1, 5, 40])))))
        groups.append(StorageGroup(tuple(members), tuple(starts), Region(2, at, hull), life, rng.random() < 0.15))
    return groups


def _relaid(groups: list[StorageGroup], offsets: dict[int, Optional[int]]) -> list[StorageGroup]:
    """The groups at their new offsets (each member moved as the layout says); dead ones are unplanned."""
    moved = []
    for group in groups:
        if group.lifetime is None:
            assert all(offsets[v] is None for v in group.members)
            continue
        shift = offsets[group.members[0]] - group.starts[0]  # type: ignore[operator]
        assert all(offsets[v] == s + shift for v, s in zip(group.members, group.starts)), "members kept together"
        assert (group.extent.start + shift) % ALIGN == group.extent.start % ALIGN, "alignment kept"
        moved.append(StorageGroup(group.members, tuple(s + shift for s in group.starts),
                                  Region(2, group.extent.start + shift, group.extent.end + shift), group.lifetime,
                                  group.resident))
    return moved


def test_random_layouts_are_valid_and_no_larger_than_the_fits_they_replaced() -> None:
    rng = random.Random(26)
    smaller = 0
    for case in range(400):
        groups = _random_buffer(rng)
        layout = plan_layout(2, groups)
        assert layout is not None
        assert layout_problems(_relaid(groups, layout.offsets), layout.size) == [], case
        others = sorted((g for g in groups if g.lifetime is not None and not g.resident),
                        key=lambda g: (-_block(g), g.lifetime.first, g.members[0]))  # type: ignore[union-attr]
        before = layout.resident_bytes + min(_oracle_offsets(others), _oracle_objects(others))
        assert layout.bound <= layout.size <= before, case
        smaller += layout.size < before
    assert smaller > 0  # the sweeps find tighter layouts than both old fits now and then


def _by_size(index: int) -> Callable[..., Any]:
    def fit(*args: Any) -> Any:
        found = layout_module._size_ordered_fits(*args)
        assert found is not None
        return found[index]
    return fit


FITS: dict[str, Callable[..., Any]] = {"gaps": layout_module._gap_fit, "objects": layout_module._object_fit,
                                       "offsets by size": _by_size(0), "objects by size": _by_size(1)}


@pytest.mark.parametrize("fit", FITS)
def test_each_fit_alone_is_a_valid_layout(fit: str) -> None:
    """Any of the four may be the one kept: each must be right on its own, whatever the order of the groups."""
    rng = random.Random(len(fit))
    for case in range(200):
        groups = [g for g in _random_buffer(rng) if g.lifetime is not None and not g.resident]
        needs, lives = [_block(g) for g in groups], [g.lifetime for g in groups]
        bases, size = FITS[fit](needs, lives, LayoutWork(1 << 40))
        placed = [StorageGroup(g.members, g.starts, Region(2, base, base + need), g.lifetime, False)
                  for g, base, need in zip(groups, bases, needs)]
        assert all(base % ALIGN == 0 for base in bases)
        assert layout_problems(placed, size) == [], (fit, case)


# --- near-linear -----------------------------------------------------------------------------------------------

def _all_live(n: int) -> list[StorageGroup]:
    """``n`` device copies made one after another and all read by one call at the end."""
    return [StorageGroup((k,), (0,), Region(2, 0, 64), Lifetime(k, n), False) for k in range(n)]


def _steps(groups: list[StorageGroup]) -> int:
    work = LayoutWork.for_groups(len(groups))
    assert plan_layout(2, groups, work) is not None
    return work.limit - work.left


@pytest.mark.parametrize("shape", [_all_live, short_groups], ids=["all live", "short lifetimes"])
def test_the_layouts_work_grows_near_linearly(shape: Callable[[int], list[StorageGroup]]) -> None:
    """Counted in the budget's own units (deterministic): 10x the values is at most 12x the work."""
    small, large = _steps(shape(1_000)), _steps(shape(10_000))
    assert large <= 12 * small, (small, large)


def test_32000_all_live_values_are_laid_out_in_well_under_a_second() -> None:
    """The old shared-object fit compared each group with every object: minutes of CPU here."""
    groups = _all_live(32_000)
    start = time.process_time()
    layout = plan_layout(2, groups)
    spent = time.process_time() - start
    assert layout is not None and layout.size == layout.bound == 32_000 * 64
    assert spent < 3.0, f"{spent:.2f} s of CPU"


# --- check and rewrite of N device copies all live at once ----------------------------------------------------

def _timed_layouts(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """CPU seconds of every ``plan_layout`` the plan runs, from now on."""
    spent: list[float] = []

    def timed(*args: Any, **kwargs: Any) -> Optional[layout_module.BufferLayout]:
        start = time.process_time()
        try:
            return plan_layout(*args, **kwargs)
        finally:
            spent.append(time.process_time() - start)

    monkeypatch.setattr(layout_module, "plan_layout", timed)
    return spent


def _live_copies(path: Path, n: int) -> Path:
    write_pte(path, *seed_program(n + 1, host_reads=n))  # the first weight moves; n copies stay, all live at once
    return path


@pytest.fixture(scope="module")
def live_8000(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _live_copies(tmp_path_factory.mktemp("layout") / "live_8000.pte", 8_000)


def _check_in_seconds(path: Path, monkeypatch: pytest.MonkeyPatch, layout_s: float, total_s: float) -> None:
    layouts = _timed_layouts(monkeypatch)
    start = time.process_time()
    report = api.check([path])
    spent = time.process_time() - start
    assert report.exit_code == 1 and len(report.findings) == 1
    memory_after = report.files[0].device_memory
    assert memory_after is not None and memory_after.after == memory_after.bound and not memory_after.kept_offsets
    assert len(layouts) == 1 and layouts[0] < layout_s and spent < total_s, (layouts, spent)


def _rewrite_in_seconds(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout_s: float,
                        total_s: float) -> None:
    layouts = _timed_layouts(monkeypatch)
    start = time.process_time()
    result = api.rewrite(path, tmp_path / "out.pte", fsync=False)
    spent = time.process_time() - start
    assert result.verified and len(result.plan.placements) == 1
    (buffer,) = result.plan.methods[0].buffers
    assert buffer.relaid and result.plan.memory.after == result.plan.memory.bound
    assert len(layouts) == 1 and layouts[0] < layout_s and spent < total_s, (layouts, spent)


def test_check_of_8000_all_live_device_copies_takes_seconds(live_8000: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: 10.5 s of CPU, 8 of them laying out; now the layout is a tenth of a second."""
    _check_in_seconds(live_8000, monkeypatch, layout_s=1.0, total_s=15.0)


@pytest.mark.slow
def test_rewrite_of_8000_all_live_device_copies_takes_seconds(live_8000: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: 13.7 s of CPU; now about 5 (reading, planning, writing and re-reading 3 MB: the layout is the
    same plan ``check`` makes, which the default suite times above)."""
    _rewrite_in_seconds(live_8000, tmp_path, monkeypatch, layout_s=1.0, total_s=20.0)


@pytest.mark.slow
def test_check_and_rewrite_of_32000_all_live_device_copies_take_seconds(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: 152 s of CPU for ``check`` and 243 s for ``rewrite`` (a 12 MB file); now about 14 and 22."""
    path = _live_copies(tmp_path / "live_32000.pte", 32_000)
    _check_in_seconds(path, monkeypatch, layout_s=3.0, total_s=60.0)
    _rewrite_in_seconds(path, tmp_path, monkeypatch, layout_s=3.0, total_s=80.0)


# --- the budget falls back ------------------------------------------------------------------------------------

def test_a_layout_past_its_budget_gives_up_and_one_within_it_does_not() -> None:
    groups = short_groups(500)
    assert plan_layout(2, groups, LayoutWork(100)) is None
    work = LayoutWork.for_groups(len(groups))
    assert plan_layout(2, groups, work) is not None and 0 < work.left


def test_the_size_ordered_fit_stopping_still_leaves_a_valid_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its share of the budget spent, the sweeps' layout is kept (not a refusal, not the input's offsets)."""
    monkeypatch.setattr(layout_module, "SIZE_ORDER_WORK_PER_GROUP", 0)
    monkeypatch.setattr(layout_module, "LAYOUT_WORK_FLOOR", 0)
    rng = random.Random(7)
    for _ in range(50):
        groups = _random_buffer(rng)
        layout = plan_layout(2, groups, LayoutWork(1 << 40))
        assert layout is not None and layout_problems(_relaid(groups, layout.offsets), layout.size) == []


def _no_layout_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every layout runs out at once (a stand-in for a program shaped to run it away)."""
    monkeypatch.setattr(layout_module, "LAYOUT_WORK_PER_GROUP", 0)
    monkeypatch.setattr(layout_module, "LAYOUT_WORK_FLOOR", 1)


@pytest.fixture()
def no_layout_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_layout_budget(monkeypatch)


def test_a_rewrite_whose_layout_runs_out_keeps_the_input_offsets_and_validates(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    relaid = api.rewrite(MLP, dry_run=True)  # with its budget, the layout needs about half of appending
    assert relaid.plan.memory.after < relaid.plan.memory.appended and not relaid.plan.memory.kept_offsets
    _no_layout_budget(monkeypatch)
    result = api.rewrite(MLP, tmp_path / "out.pte", fsync=False)
    assert result.verified and result.plan.placements
    (buffer,) = [b for e in result.plan.methods for b in e.buffers]
    assert not buffer.relaid and buffer.kept_offsets.endswith("needed more than 1 steps")
    memory_after = result.plan.memory
    assert memory_after.after == memory_after.appended > memory_after.before  # appended, as before the layout
    assert len(memory_after.kept_offsets) == 1 and memory_after.kept_offsets[0].startswith("method forward, buffer ")
    assert "ran out of its work budget" in (memory_after.note() or "")
    validation = api.validate(MLP, tmp_path / "out.pte", inputs=MLP.with_suffix(".inputs.pt"),
                              expected=MLP.with_suffix(".expected.pt"), simulate_devices=True)
    assert validation.passed, validation.to_json()


@pytest.mark.usefixtures("no_layout_budget")
def test_every_report_says_the_layout_kept_the_input_offsets(tmp_path: Path) -> None:
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text()))
    text = invoke("rewrite", MLP, "-o", tmp_path / "a.pte")
    assert text.exit_code == 0, text.stderr
    assert "note: device memory kept the input's offsets" in text.stdout
    assert "kept offsets (layout budget)" in text.stdout
    markdown = invoke("rewrite", MLP, "-o", tmp_path / "b.pte", "--format", "markdown")
    assert "**Note:** device memory kept the input" in markdown.stdout
    assert "ran out of its work budget" in markdown.stdout
    _, document = invoke_json("rewrite", MLP, "-o", tmp_path / "c.pte")
    assert not list(validator.iter_errors(document))
    assert document["device_memory"]["kept_offsets"][0].startswith("method forward, buffer ")
    assert [b["kept_offsets"] for m in document["methods"] for b in m["buffers"]][0].endswith("more than 1 steps")
    checked = invoke("check", MLP)
    assert "laying it out again ran out of its work budget in 1 file," in " ".join(checked.stdout.split())
    _, report = invoke_json("check", MLP)
    assert not list(validator.iter_errors(report))
    assert report["files"][0]["device_memory"]["kept_offsets"]
