"""``python -m partuner``: the ``partuner`` command, for environments without its script."""

from partuner.console import run

run()
