"""The ``partuner`` console script: Ctrl-C while the command line is still importing (click,
rich, numpy: the first second) gets the same one line and exit code 130 as in any stage."""

from __future__ import annotations

import sys

__all__ = ["run"]


def run() -> None:
    try:
        from partuner.cli import main
    except KeyboardInterrupt:
        sys.stderr.write("partuner: error: interrupted while starting; nothing was written\n")
        sys.exit(130)
    main()
