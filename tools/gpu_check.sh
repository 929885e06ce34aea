#!/usr/bin/env bash
# The course on a GPU, end to end: pretrain the gpu profile's policy, every notebook under nbval in the
# gpu profile, `python -m grpo_lab train` per algorithm, `bench` on the GPU; one JSON of the costs.
#   tools/gpu_check.sh                  on a GPU machine (writes runs/gpu_check/gpu_check.json)
#   tools/gpu_check.sh --cpu-smoke      the same steps shortened, on the CPU (CI)
# Further options: tools/gpu_check.sh --help
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python}" tools/gpu_check.py "$@"
