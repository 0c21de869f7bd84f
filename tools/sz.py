"""Size budget: lines per module and in total, so modules stay small and named for what they do.

Run: python tools/sz.py  (exits 1 when over budget).
"""

from __future__ import annotations

import sys
from pathlib import Path

MAX_MODULE_LINES = 600
MAX_TOTAL_LINES = 31550


def main() -> int:
    root = Path(__file__).resolve().parent.parent / "src" / "partuner"
    total = 0
    over = []
    for path in sorted(root.rglob("*.py")):
        n = sum(1 for _ in path.open(encoding="utf-8"))
        total += n
        if n > MAX_MODULE_LINES:
            over.append(f"{path.relative_to(root.parent)}: {n} lines > {MAX_MODULE_LINES}")
    for line in over:
        print(line)
    print(f"partuner: {total} lines in src/partuner (budget {MAX_TOTAL_LINES})")
    if total > MAX_TOTAL_LINES:
        print("over the total budget")
    return 1 if over or total > MAX_TOTAL_LINES else 0


if __name__ == "__main__":
    sys.exit(main())
