"""What the rewrite's steps and its encodings share, below both: the analysis (``analysis``: every constant's
verdict, with fold's chains), the plan's records (``plan_model``: placements, edits, storage, the options) and
the self-check's byte requirements (``verify_bytes``: ``SameBytes``, ``ComputedBytes``, and the checker that
compares them).

The encodings (``rewriter/encodings/``) read the verdicts and fill in the records; the steps above them
(``plan``, ``edit``, ``apply``, ``verify``, ``rewrite``) ask the encodings.  So the packages import one way:
``rewriter`` -> ``encodings`` -> ``model`` -> ``fold`` -> ``program`` (``method_context``, ``copy_memory``), never
back (tests/test_structure.py fails on a cycle between packages).
"""
