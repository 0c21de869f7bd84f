#!/usr/bin/env bash
# Set up partuner with its test dependencies and optional backends in ./.venv, then run the linter,
# the size budget and the tests. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[test,openvino,solver,ray]"
.venv/bin/ruff check src tests benchmarks tools
.venv/bin/python tools/sz.py
.venv/bin/python -m pytest "$@"
