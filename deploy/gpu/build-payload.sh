#!/usr/bin/env bash
# The payload deploy/gpu/run-on-lent-gpu.sh needs, in one command, on a machine with the package index
# (CPU is fine; ~15 minutes on 2 cores, most of it xz). From the project root, after `make setup`:
#   bash deploy/gpu/build-payload.sh [SHARED_GPU_RECIPE]      default ../shared/gpu
# It copies the recipe to .gpu/ (ignored), downloads fbgemm-gpu 1.6.0's CUDA wheel (cp312), builds the
# recipe's payload (sm_90 code only, torchrec 1.6.1, the pure wheels the GPU image lacks), adds the
# engine's own packages phase c's `autotuner tune` and the report's table import (the store's, the CLI's:
# typer, rich and theirs, PyYAML, tqdm, packaging; small: ~3 MiB), at the versions this checkout's .venv
# runs, drops the recipe's .gpu/main (a stale copy of the code: the run uses the project's tree), and
# checks what the device tool carries a call, the tree it copies and .gpu together, against 64 MiB
# (deploy/gpu/payload-size.sh). Not carried: numpy and scipy (large compiled wheels; numpy is in the
# image with torch as far as is known, scipy only serves phase c's confidence intervals, stats.t_quantile):
# run-on-lent-gpu.sh's preflight says in preflight.txt whether they, or anything else, are missing there.
set -euo pipefail
SHARED=${1:-../shared/gpu}
[ -f bench/gpu_check.py ] || { echo "run this from the project root" >&2; exit 2; }
[ -f "$SHARED/tools/build_payload.sh" ] || { echo "no GPU recipe at $SHARED: name its folder" >&2; exit 2; }
[ -x .venv/bin/python ] || { echo "no .venv here: run make setup first (its versions go to the GPU)" >&2; exit 2; }
ENGINE="optuna sqlalchemy alembic mako markupsafe colorlog greenlet typer rich pygments markdown-it-py mdurl
  shellingham annotated-doc pyyaml tqdm packaging"
PINS=$(.venv/bin/python - $ENGINE <<'EOF'
import sys
from importlib.metadata import version
print(" ".join(f"{name}=={version(name)}" for name in sys.argv[1:]))
EOF
)
download() {  # wheels for the GPU machine's Python 3.12 on x86_64 Linux, never this machine's
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any "$@"
}
WHEELS=$(mktemp -d)
trap 'rm -rf "$WHEELS"' EXIT
rm -rf .gpu && cp -r "$SHARED" .gpu && chmod -R u+w .gpu  # the recipe may be read-only
download -d "$WHEELS" fbgemm-gpu==1.6.0
bash .gpu/tools/build_payload.sh "$WHEELS"/fbgemm_gpu-1.6.0-*.whl "$PWD"  # it cds away: absolute
# shellcheck disable=SC2086  # one argument per pin
download -d .gpu/whl $PINS
rm -rf .gpu/main  # run-on-lent-gpu.sh runs the project's own tree, never this copy
echo "wheels added: $PINS"
bash deploy/gpu/payload-size.sh
