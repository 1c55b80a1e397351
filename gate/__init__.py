"""``check``'s room: the gate that judges programs before they ship, on top of the rewriter's analysis and plan.

* ``check``: the request (``CheckRequest``), the per-program judgement (``check_programs``: the placements and
  folds of the very plan ``rewrite`` makes), the findings as data (``Finding``, ``Diagnostic``), the accepted
  findings (``Acceptance``) and the report (``FileCheck``, ``CheckReport``);
* ``rules``: the rules as data (``RULES``: one row per rule, its id, level, exit code and words).

The room is named for what it is, not for the command: ``pte_devconst.check`` is the API's function.  Nothing
below it (``rewriter/``, ``program/``, ...) imports it; ``api.py`` and ``cli/`` do (tests/test_layers.py).
"""
