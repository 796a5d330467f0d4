#!/usr/bin/env bash
# End every process whose environment carries GPU_CHECK_RUN=TAG (what run-on-lent-gpu.sh exports to its
# run; every process the run starts inherits it, torchrun's workers in sessions of their own included):
# SIGTERM, up to 5 s for them to go, then SIGKILL until none is left. Says what it ended.
#   bash deploy/gpu/reap-run.sh TAG       (call it with GPU_CHECK_RUN unset, or it is skipped as our own)
set -u
TAG=${1:?usage: reap-run.sh TAG}
tagged() {  # pids, never this script's own
  grep -lzxF "GPU_CHECK_RUN=$TAG" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3 | grep -vxF -e "$$" -e "$BASHPID"
}
found=$(tagged)
if [ -z "$found" ]; then
  echo "reaped: none left running"
  exit 0
fi
for pid in $found; do echo "reaping $pid: $(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | cut -c1-200)"; done
# shellcheck disable=SC2086  # one argument per pid
kill -TERM $found 2>/dev/null
for _ in $(seq 50); do  # up to 5 s
  [ -z "$(tagged)" ] && break
  sleep 0.1
done
for _ in $(seq 20); do  # what is left, and what was forked meanwhile
  left=$(tagged)
  [ -z "$left" ] && break
  # shellcheck disable=SC2086
  kill -KILL $left 2>/dev/null
  sleep 0.1
done
left=$(tagged)
echo "reaped: $(echo "$found" | wc -w) process(es)${left:+; still running: $(echo $left)}"
[ -z "$left" ]
