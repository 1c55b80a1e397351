"""Code generated from schema/fbs by schema/regenerate.py: ours (*.py) and flatc's (the reference)."""
