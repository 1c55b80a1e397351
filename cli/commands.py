"""Imports every command module so that each registers itself on the app."""

from pte_devconst.cli import inspect_cmd  # noqa: F401
