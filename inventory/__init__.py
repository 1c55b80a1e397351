"""``inspect``'s room: what is in a program, at a glance (``summary``: ``summarize`` -> ``ProgramSummary``), on top
of the rewriter's analysis.

The room is named for what it holds, not for the command: ``pte_devconst.inspect`` is the API's function.
``compare`` (``diff``) reads its segment roles; nothing below it imports it (tests/test_layers.py).
"""
