"""Imports every command module so that each registers itself on the app."""

import importlib

# Each entry is a module of pte_devconst.cli that registers its commands on `app`.
COMMAND_MODULES = ("inspect_cmd", "rewrite_cmd", "diff_cmd", "run_cmd", "validate_cmd", "check_cmd")

for _name in COMMAND_MODULES:
    importlib.import_module(f"pte_devconst.cli.{_name}")
