#!/bin/bash
# A real single-node Slurm 22.05 cluster on this machine (Debian 12, no systemd), for tests, CI and demos.
# Run as root. Idempotent: installs slurm-wlm + munge only if missing, starts only the daemons that are not
# running, and rewrites slurm.conf (then `scontrol reconfigure`) only when it changed.
#
#   TASK_PROLOG=/path   the TaskProlog to configure (default: task_prolog.sh beside this script; "" for none)
#   WITH_DBD=1          also start MariaDB + slurmdbd so that sacct works (~3 s more)
#   PARTITION=debug     the partition name
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TASK_PROLOG=${TASK_PROLOG-$HERE/task_prolog.sh}
PARTITION=${PARTITION:-debug}
export DEBIAN_FRONTEND=noninteractive

# alive PIDFILE COMM: the daemon of that pid file runs (and the pid was not reused by something else)
alive() { [ -s "$1" ] && [ "$(cat "/proc/$(cat "$1")/comm" 2>/dev/null)" = "$2" ]; }

# 0) packages (a stale apt index is refreshed once)
pkgs=()
command -v slurmctld >/dev/null || pkgs+=(slurm-wlm)
command -v munged >/dev/null || pkgs+=(munge)
if [ "${WITH_DBD:-0}" = 1 ]; then
  command -v slurmdbd >/dev/null || pkgs+=(slurmdbd)
  command -v mariadbd >/dev/null || pkgs+=(mariadb-server)
fi
if [ ${#pkgs[@]} -gt 0 ]; then
  apt-get install -y "${pkgs[@]}" || { apt-get update && apt-get install -y "${pkgs[@]}"; }
fi
NODE=$(hostname -s)
HW=$(slurmd -C | head -1)
CPUS=$(sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' <<<"$HW")
MEM=$(( $(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$HW") - 256 ))   # above the real value drains the node

# 1) munge: /run/munge is not created without systemd-tmpfiles; the key is made by the package postinst
mkdir -p /run/munge && chown munge:munge /run/munge && chmod 755 /run/munge
[ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
alive /run/munge/munged.pid munged || su -s /bin/sh munge -c /usr/sbin/munged   # daemonizes
munge -n | unmunge >/dev/null

# 2) optional accounting DB
ACCT="AccountingStorageType=accounting_storage/none"
if [ "${WITH_DBD:-0}" = 1 ]; then
  D=${DBDIR:-/tmp/slurm-mysql}; R=$D-run; mkdir -p "$D" "$R"; chown mysql:mysql "$D" "$R"
  [ -d "$D/mysql" ] || mariadb-install-db --user=mysql --datadir="$D" --skip-test-db >/dev/null
  if ! alive "$R/mysql.pid" mariadbd; then
    (setsid /usr/sbin/mariadbd --user=mysql --datadir="$D" --socket="$R/mysql.sock" --bind-address=127.0.0.1 \
        --port=33306 --pid-file="$R/mysql.pid" --log-error="$R/mysql.err" >/dev/null 2>&1 &)
  fi
  for _ in $(seq 100); do mariadb -S "$R/mysql.sock" -e 'select 1' >/dev/null 2>&1 && break; sleep 0.1; done
  mariadb -S "$R/mysql.sock" -e "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmpw';
     CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmpw';
     GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
  cat > /etc/slurm/slurmdbd.conf <<EOC
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6819
SlurmUser=root
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=33306
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
EOC
  chmod 600 /etc/slurm/slurmdbd.conf           # slurmdbd refuses a world-readable conf
  mkdir -p /var/log/slurm
  alive /run/slurmdbd.pid slurmdbd || /usr/sbin/slurmdbd
  for _ in $(seq 100); do ss -ltn | grep -q ':6819 ' && break; sleep 0.1; done
  ACCT=$'AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=127.0.0.1\nAccountingStoragePort=6819'
fi

# 3) slurm.conf. The TaskProlog exports each job's tuned NCCL variables into every task (see README.md).
PROLOG_LINE="#TaskProlog= (none)"
if [ -n "$TASK_PROLOG" ]; then
  [ -x "$TASK_PROLOG" ] || { echo "slurm-up: TaskProlog $TASK_PROLOG is not an executable file" >&2; exit 1; }
  PROLOG_LINE="TaskProlog=$TASK_PROLOG"
fi
CONF=$(cat <<EOC
# written by nccl-autotuner deploy/slurm/slurm-up.sh
ClusterName=local
SlurmctldHost=${NODE}(127.0.0.1)
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
${ACCT}
JobCompType=jobcomp/filetxt
JobCompLoc=/var/log/slurm/jobcomp.log
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
ReturnToService=2
SlurmUser=root
SlurmdUser=root
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
# finished jobs stay visible to squeue / scontrol this long (the executor's fallback without sacct)
MinJobAge=300
# scancel: SIGTERM, then SIGKILL after KillWait seconds (a hung trial rank is gone quickly)
KillWait=5
${PROLOG_LINE}
NodeName=${NODE} NodeAddr=127.0.0.1 CPUs=${CPUS} RealMemory=${MEM} State=UNKNOWN
PartitionName=${PARTITION} Nodes=${NODE} Default=YES MaxTime=INFINITE State=UP
EOC
)
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
changed=0
if [ "$(cat /etc/slurm/slurm.conf 2>/dev/null)" != "$CONF" ]; then
  printf '%s\n' "$CONF" > /etc/slurm/slurm.conf.new && mv /etc/slurm/slurm.conf.new /etc/slurm/slurm.conf
  changed=1
fi
if alive /run/slurmctld.pid slurmctld; then
  [ $changed = 1 ] && scontrol reconfigure && echo "slurm-up: slurm.conf changed, reconfigured"
else
  /usr/sbin/slurmctld            # daemonizes; pid in /run/slurmctld.pid
fi
alive /run/slurmd.pid slurmd || /usr/sbin/slurmd

# 4) wait for the node; a node drained by an earlier run (e.g. killed daemons) is resumed
for _ in $(seq 100); do
  st=$(sinfo -h -n "$NODE" -o %T 2>/dev/null || true)
  case "$st" in
    idle|mixed|allocated) break ;;
    drain*|down*) scontrol update nodename="$NODE" state=resume 2>/dev/null || true ;;
  esac
  sleep 0.1
done
sinfo
