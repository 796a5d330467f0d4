#!/usr/bin/env bash
# Debian packages the test suite uses for real: Slurm + munge, PostgreSQL, Chromium, wrk, iproute2.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
need=()
command -v slurmctld >/dev/null || need+=(slurm-wlm munge)
[ -x /usr/lib/postgresql/15/bin/initdb ] || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v chromium >/dev/null || need+=(chromium)
command -v wrk >/dev/null || need+=(wrk)
command -v ip >/dev/null || need+=(iproute2)
command -v tc >/dev/null || need+=(iproute2)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
echo "system deps ok"
