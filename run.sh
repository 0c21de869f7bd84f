#!/usr/bin/env bash
# Set up partuner in ./.venv and run the main job: tune the built-in GoogLeNet demo on this machine
# (profile -> plan -> export -> run concurrently -> check). Extra arguments go to `partuner tune`.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[openvino]"
.venv/bin/partuner zoo googlenet -o partuner-out/googlenet.onnx
.venv/bin/partuner tune partuner-out/googlenet.onnx -o partuner-out/googlenet "$@"
