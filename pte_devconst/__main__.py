"""``python -m pte_devconst`` runs the command line (the same as the ``pte-devconst`` script)."""

from pte_devconst.cli.app import entry

entry()
