#!/bin/bash
# A real Slurm 22.05 cluster on this machine (Debian 12, no systemd), for tests, CI and demos: this host as
# node of partition `debug`, and with --nodes N also N emulated nodes n1..nN in partition `emu`.
# Run as root. Idempotent: installs slurm-wlm + munge only if missing, starts only the daemons that are not
# running, and rewrites slurm.conf (then `scontrol reconfigure`) only when it changed.
#
#   --nodes N           N emulated nodes (0 removes them). Default: as many as the current slurm.conf has.
#   TASK_PROLOG=/path   the TaskProlog to configure (default: task_prolog.sh beside this script; "" for none)
#   WITH_DBD=1          also start MariaDB + slurmdbd so that sacct works (~3 s more); WITH_DBD=0 turns it
#                       off. Default: as the current slurm.conf has it.
#   PARTITION=debug     the host's partition name (the default partition)
#   EMU_PARTITION=emu   the emulated nodes' partition name
#
# Emulated nodes (EMULATION on one machine: every node shares this host's CPUs, memory and file system):
# node nI is a slurmd in a network namespace `slurm-nI` of its own and a UTS namespace of its own
# (`hostname` says nI), with its own loopback and an `eth0` (10.78.0.(10+I)/24) on a bridge `slurmbr0`
# that this script makes in the root namespace with address 10.78.0.1/24. The controller listens on all
# addresses; SlurmctldHost names it by 10.78.0.1, an address both the host and every namespace reach.
# 10.78.0.0/24, not the local executor's 10.77.0.0/24: the two kinds of namespaces never meet. Nothing is
# routed anywhere else: no default route in the namespaces, no NAT, the host's own interfaces untouched.
# Names resolve inside a node through /etc/netns/slurm-nI/hosts, mounted on its /etc/hosts (as `ip netns
# exec` would): every nI and the host's name, which torchrun's c10d rendezvous (on the job's first node)
# and gloo (a rank binds to the address of its host name) need.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TASK_PROLOG=${TASK_PROLOG-$HERE/task_prolog.sh}
PARTITION=${PARTITION:-debug}
EMU_PARTITION=${EMU_PARTITION:-emu}
CONF_FILE=/etc/slurm/slurm.conf
BR=slurmbr0 NET=10.78.0   # the emulated nodes' bridge (root namespace) and /24
export DEBIAN_FRONTEND=noninteractive

usage() { sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
NODES=
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) NODES=${2-}; shift 2 || { echo "slurm-up: --nodes needs a number" >&2; exit 2; } ;;
    --nodes=*) NODES=${1#*=}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "slurm-up: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
# What is not asked for stays as the running cluster has it: a plain re-run (the tests' fixture makes one
# to set the TaskProlog) neither drops the emulated nodes nor accounting that someone else started.
ours=0; [ -f "$CONF_FILE" ] && grep -q '^# written by nccl-autotuner deploy/slurm/slurm-up.sh' "$CONF_FILE" && ours=1
if [ -z "$NODES" ]; then
  NODES=0
  [ $ours = 1 ] && NODES=$(sed -n 's/^# emulated nodes: \([0-9]*\).*/\1/p' "$CONF_FILE" | head -1)
  NODES=${NODES:-0}
fi
case "$NODES" in ''|*[!0-9]*) echo "slurm-up: --nodes $NODES: not a number" >&2; exit 2 ;; esac
NODES=$((10#$NODES))
[ "$NODES" -le 50 ] || { echo "slurm-up: --nodes $NODES: at most 50" >&2; exit 2; }
if [ -z "${WITH_DBD:-}" ]; then
  WITH_DBD=0
  [ $ours = 1 ] && grep -q '^AccountingStorageType=accounting_storage/slurmdbd' "$CONF_FILE" && WITH_DBD=1
fi

# alive PIDFILE COMM: the daemon of that pid file runs (and the pid was not reused by something else)
alive() { [ -s "$1" ] && [ "$(cat "/proc/$(cat "$1")/comm" 2>/dev/null)" = "$2" ]; }
# stop PIDFILE COMM: SIGTERM the daemon of that pid file and wait (10 s at most) until it is gone
stop() {
  alive "$1" "$2" || return 0
  local pid; pid=$(cat "$1"); kill "$pid" 2>/dev/null || true
  for _ in $(seq 100); do
    st=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)
    if [ -z "$st" ] || [ "$st" = Z ]; then break; fi
    sleep 0.1
  done
  echo "slurm-up: stopped $2 ($pid)"
}
ns_exists() { ip netns list | cut -d' ' -f1 | grep -qx "$1"; }

# 0) packages (a stale apt index is refreshed once)
pkgs=()
command -v slurmctld >/dev/null || pkgs+=(slurm-wlm)
command -v munged >/dev/null || pkgs+=(munge)
if [ "$WITH_DBD" = 1 ]; then
  command -v slurmdbd >/dev/null || pkgs+=(slurmdbd)
  command -v mariadbd >/dev/null || pkgs+=(mariadb-server)
fi
if [ "$NODES" -gt 0 ]; then
  command -v ip >/dev/null || pkgs+=(iproute2)
  command -v unshare >/dev/null || pkgs+=(util-linux)
fi
if [ ${#pkgs[@]} -gt 0 ]; then
  apt-get install -y "${pkgs[@]}" || { apt-get update && apt-get install -y "${pkgs[@]}"; }
fi
NODE=$(hostname -s)
HW=$(slurmd -C | head -1)
CPUS=$(sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' <<<"$HW")
MEM=$(( $(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$HW") - 256 ))   # above the real value drains the node

# 1) munge: /run/munge is not created without systemd-tmpfiles; the key is made by the package postinst.
# Its socket is a file: slurmd in a network namespace reaches it too.
mkdir -p /run/munge && chown munge:munge /run/munge && chmod 755 /run/munge
[ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
alive /run/munge/munged.pid munged || su -s /bin/sh munge -c /usr/sbin/munged   # daemonizes
munge -n | unmunge >/dev/null

# 2) optional accounting DB
ACCT="AccountingStorageType=accounting_storage/none"
if [ "$WITH_DBD" = 1 ]; then
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
  DBD_CONF=$(cat <<EOC
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
)
  [ "$(cat /etc/slurm/slurmdbd.conf 2>/dev/null)" = "$DBD_CONF" ] || printf '%s\n' "$DBD_CONF" > /etc/slurm/slurmdbd.conf
  chmod 600 /etc/slurm/slurmdbd.conf           # slurmdbd refuses a world-readable conf
  mkdir -p /var/log/slurm
  alive /run/slurmdbd.pid slurmdbd || /usr/sbin/slurmdbd
  for _ in $(seq 100); do ss -ltn | grep -q ':6819 ' && break; sleep 0.1; done
  ACCT=$'AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=127.0.0.1\nAccountingStoragePort=6819'
fi

# 3) the emulated nodes' network: bridge, namespaces, veths, hosts files (each step only if missing)
node_addr() { echo "$NET.$((10 + $1))"; }
if [ "$NODES" -gt 0 ]; then
  ip link show "$BR" >/dev/null 2>&1 || ip link add "$BR" type bridge
  ip -4 addr show dev "$BR" | grep -q "inet $NET.1/24" || ip addr add "$NET.1/24" dev "$BR"
  ip link set "$BR" up
  HOSTS=$(printf '127.0.0.1 localhost\n%s %s\n' "$NET.1" "$NODE"; for i in $(seq "$NODES"); do
            printf '%s n%s\n' "$(node_addr "$i")" "$i"; done)
  for i in $(seq "$NODES"); do
    ns=slurm-n$i
    ns_exists "$ns" || ip netns add "$ns"
    ip -n "$ns" link set lo up                  # intra-node traffic (ranks of one node) stays on it
    ip -n "$ns" link show eth0 >/dev/null 2>&1 || ip link add "$ns" type veth peer name eth0 netns "$ns"
    ip link set "$ns" master "$BR"
    ip link set "$ns" up
    ip -n "$ns" -4 addr show dev eth0 | grep -q "inet $(node_addr "$i")/24" ||
      ip -n "$ns" addr add "$(node_addr "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    mkdir -p "/etc/netns/$ns"
    # rewritten in place (not replaced): a running slurmd has the file itself mounted on its /etc/hosts
    [ "$(cat "/etc/netns/$ns/hosts" 2>/dev/null)" = "$HOSTS" ] || printf '%s\n' "$HOSTS" > "/etc/netns/$ns/hosts"
  done
fi

# 4) slurm.conf. The TaskProlog exports each job's tuned NCCL variables into every task (see README.md).
PROLOG_LINE="#TaskProlog= (none)"
if [ -n "$TASK_PROLOG" ]; then
  [ -x "$TASK_PROLOG" ] || { echo "slurm-up: TaskProlog $TASK_PROLOG is not an executable file" >&2; exit 1; }
  PROLOG_LINE="TaskProlog=$TASK_PROLOG"
fi
CTLD_ADDR=127.0.0.1
EMU_LINES=
if [ "$NODES" -gt 0 ]; then
  CTLD_ADDR=$NET.1   # the bridge: the same controller address from the host and from every namespace
  for i in $(seq "$NODES"); do
    EMU_LINES+="NodeName=n$i NodeAddr=$(node_addr "$i") CPUs=${CPUS} RealMemory=${MEM} State=UNKNOWN"$'\n'
  done
  EMU_LINES+="PartitionName=${EMU_PARTITION} Nodes=n[1-${NODES}] MaxTime=INFINITE State=UP"
fi
CONF=$(cat <<EOC
# written by nccl-autotuner deploy/slurm/slurm-up.sh
# emulated nodes: ${NODES} (slurm-up.sh --nodes: nI in namespaces slurm-nI, bridge ${BR}, ${NET}.0/24)
ClusterName=local
SlurmctldHost=${NODE}(${CTLD_ADDR})
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
# %n (the node name): every slurmd of this machine has its own spool, pid file and log
SlurmdSpoolDir=/var/spool/slurmd-%n
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
# finished jobs stay visible to squeue / scontrol this long (the executor's fallback without sacct)
MinJobAge=300
# scancel: SIGTERM, then SIGKILL after KillWait seconds (a hung trial rank is gone quickly)
KillWait=5
${PROLOG_LINE}
NodeName=${NODE} NodeAddr=127.0.0.1 CPUs=${CPUS} RealMemory=${MEM} State=UNKNOWN
PartitionName=${PARTITION} Nodes=${NODE} Default=YES MaxTime=INFINITE State=UP
${EMU_LINES}
EOC
)
mkdir -p /etc/slurm /var/spool/slurmctld /var/log/slurm "/var/spool/slurmd-$NODE"
for i in $(seq "$NODES"); do mkdir -p "/var/spool/slurmd-n$i"; done
# Which nodes there are, where the controller is and where slurmd keeps its files: Slurm 22.05 takes a
# change of these only with a restart of slurmctld and of every slurmd (state is saved; jobs running on a
# restarted slurmd are lost). Anything else: `scontrol reconfigure`.
topology() { grep -E '^(SlurmctldHost|NodeName|PartitionName|Slurmd(SpoolDir|PidFile|LogFile))=' || true; }
old=$(cat "$CONF_FILE" 2>/dev/null || true)
changed=0 restart=0
if [ "$old" != "$CONF" ]; then
  changed=1
  [ "$(topology <<<"$old")" = "$(topology <<<"$CONF")" ] || restart=1
fi
if [ $restart = 1 ]; then
  for f in /run/slurmd.pid /run/slurmd-*.pid; do   # /run/slurmd.pid: of a conf before %n
    if [ -e "$f" ]; then stop "$f" slurmd; fi
  done
  stop /run/slurmctld.pid slurmctld
fi

# emulated nodes no longer asked for: their slurmd, namespace and hosts file go (and the bridge with the last)
for ns in $(ip netns list 2>/dev/null | cut -d' ' -f1 | grep -E '^slurm-n[0-9]+$' || true); do
  i=${ns#slurm-n}
  [ "$i" -le "$NODES" ] && continue
  stop "/run/slurmd-n$i.pid" slurmd
  ip netns del "$ns"; rm -rf "/etc/netns/$ns"
done
if [ "$NODES" = 0 ] && ip link show "$BR" >/dev/null 2>&1; then ip link del "$BR"; fi

if [ $changed = 1 ]; then
  printf '%s\n' "$CONF" > "$CONF_FILE.new" && mv "$CONF_FILE.new" "$CONF_FILE"
fi
if alive /run/slurmctld.pid slurmctld; then
  [ $changed = 1 ] && scontrol reconfigure && echo "slurm-up: slurm.conf changed, reconfigured"
else
  /usr/sbin/slurmctld            # daemonizes; pid in /run/slurmctld.pid
fi
stop /run/slurmd.pid slurmd      # a slurmd started before the pid file had %n (a conf of an older slurm-up.sh)
alive "/run/slurmd-$NODE.pid" slurmd || /usr/sbin/slurmd
for i in $(seq "$NODES"); do
  ns=slurm-n$i pidf=/run/slurmd-n$i.pid
  # a slurmd left in a namespace that was since deleted (and made anew) cannot be reached: replaced
  if alive "$pidf" slurmd && [ "$(ip netns identify "$(cat "$pidf")" 2>/dev/null)" != "$ns" ]; then
    stop "$pidf" slurmd
  fi
  # Not `ip netns exec`: it mounts a fresh /sys, without the cgroup mounts slurmd 22.05 needs ("No
  # filesystem mounted on /sys/fs/cgroup", initialization failed). So: the namespace's network, a mount
  # namespace of its own (for the hosts file; the host's mounts propagate in) and a UTS one (the name).
  alive "$pidf" slurmd ||
    nsenter --net="/run/netns/$ns" unshare --mount --propagation slave --uts sh -c \
      "mount --bind /etc/netns/$ns/hosts /etc/hosts && hostname n$i && exec /usr/sbin/slurmd -N n$i"   # daemonizes
done

# 5) wait for the nodes; a node drained by an earlier run (e.g. killed daemons) is resumed
ALL=$NODE; if [ "$NODES" -gt 0 ]; then ALL+=",n[1-$NODES]"; fi
for _ in $(seq 300); do
  states=$(sinfo -h -N -n "$ALL" -o '%N %T' 2>/dev/null | sort -u || true)
  waiting=0
  while read -r n st; do
    case "$st" in
      idle|mixed|allocated|completing) ;;
      drain*|down*) waiting=1; scontrol update nodename="$n" state=resume 2>/dev/null || true ;;
      *) waiting=1 ;;
    esac
  done <<<"$states"
  [ "$(grep -c . <<<"$states")" -ge $((NODES + 1)) ] && [ $waiting = 0 ] && break
  sleep 0.1
done
sinfo
