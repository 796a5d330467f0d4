#!/bin/bash
# Stop the cluster of slurm-up.sh, by PID file, in order, and remove what --nodes made (the emulated nodes'
# network namespaces slurm-nI, their hosts files, the bridge slurmbr0). Idempotent: what is not there is
# skipped. Running jobs are killed with slurmd; their state is kept in /var/spool/slurmctld for the next
# slurm-up.sh. slurm.conf stays as it is (a plain slurm-up.sh brings the same cluster back).
# stop PIDFILE COMM: only the daemon of that pid file (a pid since reused by something else is left alone)
stop() {
  local f=$1 P st
  [ -s "$f" ] || return 0
  P=$(cat "$f")
  [ "$(cat "/proc/$P/comm" 2>/dev/null)" = "$2" ] || return 0
  kill "$P"
  for _ in $(seq 100); do
    st=$(awk '{print $3}' "/proc/$P/stat" 2>/dev/null)
    if [ -z "$st" ] || [ "$st" = Z ]; then break; fi
    sleep 0.1
  done
  echo "stopped $f ($P)"
}
# every slurmd of this machine (/run/slurmd-NODE.pid; /run/slurmd.pid of a conf before %n), then the rest
for f in /run/slurmd.pid /run/slurmd-*.pid; do stop "$f" slurmd; done
stop /run/slurmctld.pid slurmctld
stop /run/slurmdbd.pid slurmdbd
stop "${DBDIR:-/tmp/slurm-mysql}-run/mysql.pid" mariadbd
stop /run/munge/munged.pid munged
# The emulated nodes. A job step that outlived its slurmd keeps its namespace alive after `ip netns del`
# (unnamed, unreachable); it ends with its job's processes.
for ns in $(ip netns list 2>/dev/null | cut -d' ' -f1 | grep -E '^slurm-n[0-9]+$'); do
  ip netns del "$ns" && echo "removed network namespace $ns"
done
rm -rf /etc/netns/slurm-n[0-9]*
if ip link show slurmbr0 >/dev/null 2>&1; then ip link del slurmbr0 && echo "removed bridge slurmbr0"; fi
exit 0
