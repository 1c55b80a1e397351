"""``diff``'s room: what changed between two programs (``diff``: ``diff_files`` -> ``ProgramDiff``), on top of the
rewriter's analysis.

The room is named for what it does, not for the command: ``pte_devconst.diff`` is the API's function.  Nothing
below it imports it; ``api.py`` and ``cli/`` do (tests/test_layers.py).
"""
