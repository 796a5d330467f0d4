#!/bin/bash
# Stop the single-node cluster of slurm-up.sh, by PID file, in order. Idempotent: what is not running is skipped.
# Running jobs are killed with slurmd; their state is kept in /var/spool/slurmctld for the next slurm-up.sh.
for f in /run/slurmd.pid /run/slurmctld.pid /run/slurmdbd.pid "${DBDIR:-/tmp/slurm-mysql}-run/mysql.pid" \
         /run/munge/munged.pid; do
  [ -s "$f" ] || continue
  P=$(cat "$f")
  [ -d "/proc/$P" ] || continue
  kill "$P"
  for _ in $(seq 100); do
    st=$(awk '{print $3}' "/proc/$P/stat" 2>/dev/null)
    if [ -z "$st" ] || [ "$st" = Z ]; then break; fi
    sleep 0.1
  done
  echo "stopped $f ($P)"
done
