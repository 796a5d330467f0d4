#!/usr/bin/env bash
# What the device tool carries a call, against its 64 MiB: the working tree it copies (tracked files and
# untracked ones git does not ignore) plus the carried .gpu, not .gpu alone. From the project root:
#   bash deploy/gpu/payload-size.sh       prints the three sizes; exit 1 over the limit
set -euo pipefail
[ -d .git ] || [ -f .git ] || { echo "run this from the project root (a git checkout)" >&2; exit 2; }
LIMIT=$((64 * 1048576))
sum() { xargs -0 -r stat -c %s -- 2>/dev/null | awk '{ s += $1 } END { print s + 0 }'; }
# (a tracked file deleted from the tree is not copied: stat skips it)
TREE=$(git ls-files -z --cached --others --exclude-standard | sum || true)
GPU=$( { [ -d .gpu ] && find .gpu -type f -print0 || true; } | sum)
TOTAL=$((TREE + GPU))
echo "device payload: $((TOTAL / 1048576)) MiB of $((LIMIT / 1048576)) (tree $((TREE / 1048576)) MiB + .gpu $((GPU / 1048576)) MiB; $TOTAL bytes)"
if [ "$TOTAL" -gt "$LIMIT" ]; then
  echo "over the device tool's 64 MiB a call (the tree it copies and .gpu together)" >&2
  exit 1
fi
