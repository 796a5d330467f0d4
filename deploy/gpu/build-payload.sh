#!/usr/bin/env bash
# The payload deploy/gpu/run-on-lent-gpu.sh needs, in one command, on a machine with the package index
# (CPU is fine; ~15 minutes on 2 cores, most of it xz). From the project root, after `make setup`:
#   bash deploy/gpu/build-payload.sh [SHARED_GPU_RECIPE]      default ../shared/gpu
# It copies the recipe to .gpu/ (ignored), downloads fbgemm-gpu 1.6.0's CUDA wheel (cp312), builds the
# recipe's payload (sm_90 code only, torchrec 1.6.1, the pure wheels the GPU image lacks), adds the
# engine's own packages phase c's `autotuner tune` imports, at the versions this checkout's .venv runs,
# and says how big it came out: the device tool carries 64 MiB a call.
set -euo pipefail
SHARED=${1:-../shared/gpu}
[ -f bench/gpu_check.py ] || { echo "run this from the project root" >&2; exit 2; }
[ -f "$SHARED/tools/build_payload.sh" ] || { echo "no GPU recipe at $SHARED: name its folder" >&2; exit 2; }
[ -x .venv/bin/python ] || { echo "no .venv here: run make setup first (its versions go to the GPU)" >&2; exit 2; }
ENGINE="optuna sqlalchemy alembic mako colorlog greenlet"
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
SIZE=$(du -b --apparent-size -s .gpu | cut -f1)
echo "payload .gpu: $((SIZE / 1048576)) MiB ($PINS)"
if [ "$SIZE" -gt $((64 * 1048576)) ]; then
  echo "over the device tool's 64 MiB a call: drop .gpu/main (run-on-lent-gpu.sh runs the project's own tree)" >&2
  exit 1
fi
