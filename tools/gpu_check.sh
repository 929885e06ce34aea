#!/usr/bin/env bash
# The course on a GPU, end to end: pretrain the gpu profile's policy, every notebook under nbval in the
# gpu profile, `python -m grpo_lab train` per algorithm, `bench` on the GPU; one JSON of the costs.
#   tools/gpu_check.sh                  on a GPU machine (writes runs/gpu_check/gpu_check.json)
#   tools/gpu_check.sh --cpu-smoke      the same steps shortened, on the CPU (CI)
# Further options: tools/gpu_check.sh --help
#
# It runs the project's Python (.venv/bin/python, made by `make install`), or PYTHON when set; never
# the first `python` on PATH, which may be another install that lacks torch or the lab.
set -euo pipefail
cd "$(dirname "$0")/.."
py="${PYTHON:-.venv/bin/python}"
if ! [ -x "$py" ] && ! command -v -- "$py" >/dev/null 2>&1; then
    echo "tools/gpu_check.sh: no Python at ${PYTHON:-.venv/bin/python (the project environment)}: run \`make install\` first, or set PYTHON to the project's Python" >&2
    exit 2
fi
exec "$py" tools/gpu_check.py "$@"
