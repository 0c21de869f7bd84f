"""docs/api.md's examples run, in order, in one Python session, as the page says (a new-user
trial found one using a store its earlier section had closed). They run in a child process:
the page registers a scheduler and a backend, which must not leak into the other tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

API_MD = Path(__file__).resolve().parent.parent / "docs" / "api.md"

RUNNER = r"""
import re, sys
blocks = re.findall(r"```python\n(.*?)```", open(sys.argv[1]).read(), re.S)
assert len(blocks) >= 10, len(blocks)
namespace = {"__name__": "__main__"}
for i, block in enumerate(blocks):
    try:
        exec(compile(block, f"docs/api.md block {i}", "exec"), namespace)
    except Exception as exc:
        first = block.strip().splitlines()[0]
        sys.exit(f"docs/api.md block {i} ({first!r}) raised {type(exc).__name__}: {exc}")
print(f"ran {len(blocks)} blocks")
"""


def test_the_api_page_examples_run_in_order(tmp_path):
    env = {**os.environ, "PARTUNER_DB": str(tmp_path / "default.db")}
    got = subprocess.run(
        [sys.executable, "-c", RUNNER, str(API_MD)],
        cwd=tmp_path,  # anything a block writes by a relative path lands here
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert got.returncode == 0, got.stderr[-3000:]
    assert got.stdout.strip().splitlines()[-1].startswith("ran "), got.stdout[-2000:]
