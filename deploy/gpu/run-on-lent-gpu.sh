#!/usr/bin/env bash
# `make gpu-check` on a bare single-GPU machine without network (how bench/out/gpu-check.json was made).
#
# On a machine with the package index, first: `bash deploy/gpu/build-payload.sh` (~15 min of CPU; it
# puts ../shared/gpu's payload in .gpu, ignored: sm_90 fbgemm-gpu 1.6.0, torchrec 1.6.1, pure wheels and
# the engine's own: optuna, SQLAlchemy, alembic, Mako, colorlog, greenlet, and the CLI's: typer, rich,
# PyYAML, tqdm, ...; the device tool carries it with `carry: [".gpu"]`, 64 MiB with the tree it copies:
# `bash deploy/gpu/payload-size.sh` says how much). The code run is the project root's, the tree the device tool
# copies (never a `.gpu/main` archived earlier: it may be days behind HEAD); name its commit with
# COMMIT=<hash> (the copy has no .git; uncommitted edits travel too: name them, e.g.
# COMMIT="$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo -dirty)" where you call the device
# tool), and gpu-check.json records it. On the GPU machine, from the project root:
#   bash deploy/gpu/run-on-lent-gpu.sh          OUT=folder for results; PHASES (default a,b,c); BUDGET (s, 330);
#                                                MPS=0 to run without CUDA MPS (default: started, since the
#                                                emulated nodes then run kernels side by side, as nodes with a
#                                                GPU each do; time-slicing one GPU inflated every overlapped
#                                                collective in run 2: the dense all-reduce 4.3 ms vs 0.6 ms)
#
# Time: one run is well under 7 minutes, so a rerun fits in the 15 a lent machine gives: unpack <= 60 s
# (it takes ~4), the import preflight <= 60 s (~15), the Python run BUDGET (default 330 s) + 45 s, hard
# (`timeout -k 10`), then the clean-up and the logs. $OUT/preflight.txt: the modules phases a-c import
# that do not import here (deploy/gpu/preflight.py); the run goes on either way.
set -u
[ -f bench/gpu_check.py ] && [ -f deploy/gpu/preflight.py ] || { echo "run this from the project root" >&2; exit 2; }
G=$(pwd)/.gpu
OUT=${OUT:-/tmp/gpu-check-out}
BUDGET=${BUDGET:-330}
mkdir -p "$OUT"
[ -f "$G/unpack.py" ] && [ -d "$G/whl" ] || { echo "no payload in $G: build it first (see the top of this script)" >&2; exit 2; }
export AUTOTUNER_COMMIT="${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"  # into gpu-check.json
if ! ldconfig -p 2>/dev/null | grep -q 'libnvidia-ml.so.1'; then  # fbgemm_gpu_py.so needs it
  NVML=$(find /usr/local/nvidia /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/cuda/lib64 -maxdepth 3 \
    -name 'libnvidia-ml.so.1' 2>/dev/null | head -1)
  [ -n "$NVML" ] && export LD_LIBRARY_PATH="$(dirname "$NVML")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
timeout 60 python3 "$G/unpack.py" /tmp/site > "$OUT/unpack.txt" 2>&1 || { echo "unpack failed: $OUT/unpack.txt" >&2; exit 1; }
export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1 CUDA_MODULE_LOADING=LAZY AUTOTUNER_TRIAL_PG_TIMEOUT_S=120
if ! timeout 60 python3 deploy/gpu/preflight.py "$OUT/preflight.txt" > /dev/null 2>&1; then
  echo "preflight: some modules phases a-c import do not import here ($(head -1 "$OUT/preflight.txt" 2>/dev/null || echo 'no answer')): the run goes on; see $OUT/preflight.txt" >&2
fi
MPS=${MPS:-1}
if [ "$MPS" = 1 ]; then  # nodes sharing the GPU then run kernels side by side instead of time-slicing it
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  MPS_CONTROL=$(command -v nvidia-cuda-mps-control || echo /usr/local/nvidia/bin/nvidia-cuda-mps-control)
  if ! "$MPS_CONTROL" -d 2>/dev/null; then
    echo "CUDA MPS did not start: running without it (time-sliced)" | tee "$OUT/mps.txt" >&2
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    MPS=0
  fi
fi
echo "MPS=$MPS" >> "$OUT/mps.txt"
# The launches' logs, results, NCCL logs, phase c's store (packed into logs.tar.gz): a fresh folder each run,
# so a rerun on the same machine never reads the last run's results or resumes its study.
WORK="${WORK:-/tmp/gpu-check-work}/run-$(date +%Y%m%d-%H%M%S)-$$"
mkdir -p "$WORK"
# Every process the run starts carries GPU_CHECK_RUN (launches keep it: only NCCL_*/AUTOTUNER_* are
# stripped): whatever outlives it (a run killed by the timeout below) is ended before the logs are packed.
export GPU_CHECK_RUN="run-$$-$(date +%s)"
# Into a file, not a pipe: a process left running with the pipe open would hold `| tee` (and the script) open.
timeout -k 10 $((BUDGET + 45)) python3 -m bench.gpu_check --out "$OUT/gpu-check.json" --work "$WORK" \
  --phases "${PHASES:-a,b,c}" --budget-s "$BUDGET" > "$OUT/gpu-check.txt" 2>&1
rc=$?
RUN_TAG=$GPU_CHECK_RUN && unset GPU_CHECK_RUN  # the clean-up's own processes do not carry it
bash deploy/gpu/reap-run.sh "$RUN_TAG" > "$OUT/reaped.txt" 2>&1
cat "$OUT/gpu-check.txt"
cat "$OUT/reaped.txt" >&2
[ "$MPS" = 1 ] && echo quit | "$MPS_CONTROL" 2>/dev/null  # the one that started it
tar -czf "$OUT/logs.tar.gz" -C "$WORK" --exclude='*.db' --exclude='torchelastic_*' . 2>/dev/null
exit "$rc"
