"""Decoding, checking, encoding and analysis run with the cyclic collector paused, and restore it after."""

from __future__ import annotations

import gc

import pytest

from conftest import pte_path
from pte_devconst.rewriter.model.analysis import analyze_program
from pte_devconst.schema.decode import decode_program
from pte_devconst.schema.encode import encode_program
from pte_devconst.util.gc_pause import gc_paused
from pte_devconst.schema.pte_file import open_pte
from pte_devconst.schema.validate import check_program


def test_the_collector_is_paused_inside_and_restored_after_even_on_error() -> None:
    seen = []

    @gc_paused
    def work(fail: bool) -> None:
        seen.append(gc.isenabled())
        if fail:
            raise ValueError("boom")

    assert gc.isenabled()
    work(False)
    with pytest.raises(ValueError):
        work(True)
    assert seen == [False, False] and gc.isenabled()
    gc.disable()
    try:
        work(False)
        assert not gc.isenabled()  # a caller that had paused it keeps it paused
    finally:
        gc.enable()


@pytest.mark.parametrize("function", [decode_program, check_program, encode_program, analyze_program],
                         ids=lambda f: f.__name__)
def test_bulk_steps_run_paused(function, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each step that allocates per value runs with the collector off (checked from inside, via a hook)."""
    with open_pte(pte_path("v_f_multi_method_copy")) as pte:
        program, flatbuffer = pte.program, bytes(pte.data[:pte.flatbuffer_size])
        segment_size = pte.header.segment_data_size if pte.header else None
    states = []
    real_disable = gc.disable

    def disable() -> None:
        states.append("disabled")
        real_disable()

    monkeypatch.setattr(gc, "disable", disable)
    argument = {decode_program: (flatbuffer,), check_program: (program, segment_size)}.get(function, (program,))
    function(*argument)
    assert states == ["disabled"] and gc.isenabled()
