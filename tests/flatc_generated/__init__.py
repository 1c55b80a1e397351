"""flatc's Python code for schema/fbs, written by schema/regenerate.py: the tests' reference codec."""
