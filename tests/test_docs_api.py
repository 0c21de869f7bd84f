"""docs/api.md's examples run, in order, in one Python session, as the page says (a new-user
trial found one using a store its earlier section had closed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

API_MD = Path(__file__).resolve().parent.parent / "docs" / "api.md"


def test_the_api_page_examples_run_in_order(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", API_MD.read_text(), re.S)
    assert len(blocks) >= 10
    monkeypatch.chdir(tmp_path)  # anything a block writes by a relative path lands here
    monkeypatch.setenv("PARTUNER_DB", str(tmp_path / "default.db"))
    namespace: dict[str, object] = {"__name__": "__main__"}
    for i, block in enumerate(blocks):
        try:
            exec(compile(block, f"docs/api.md block {i}", "exec"), namespace)  # noqa: S102
        except Exception as exc:  # pragma: no cover - the failure is the report
            first = block.strip().splitlines()[0]
            pytest.fail(f"docs/api.md block {i} ({first!r}) raised {type(exc).__name__}: {exc}")
