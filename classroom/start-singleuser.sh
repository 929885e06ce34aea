#!/bin/bash
# A learner's server starts here. On the first start, the course's notebooks go into the learner's home
# (~/grpo_lab: theirs to change; a later start never overwrites them), then JupyterLab starts from the
# course's environment, whose kernels see the installed lab.
set -euo pipefail
cd "$HOME"
if [ ! -e grpo_lab ]; then
    mkdir -p grpo_lab.tmp
    cp -r "$GRPO_LAB_COURSE/notebooks" "$GRPO_LAB_COURSE/LICENSE" "$GRPO_LAB_COURSE/LICENSE-CONTENT" \
        "$GRPO_LAB_COURSE/CITATION.cff" grpo_lab.tmp/
    mv grpo_lab.tmp grpo_lab
fi
exec "$GRPO_LAB_PYTHON" -m jupyterhub.singleuser "$@"
