#!/bin/sh
# nccl-autotuner launch s1-l7 (local executor)
cd /srv/autotuner/study-1/launch-0007
export NCCL_NSOCKS_PERTHREAD=4
# emulated: 2 nodes as network namespaces, inter-node links 1gbit (tbf) through a bridge, intra-node loopback unshaped
for ns in $(ip netns list | cut -d' ' -f1 | grep '^at-ba8d7c-s1-l'); do ip netns del "$ns"; done
(old=$(ip netns list 2>/dev/null | cut -d' ' -f1 | grep -E '^at-s[0-9]+(-l?[0-9]*)?(-br|-n[0-9]+)?$'); for g in $(printf '%s\n' $old | sed -E 's/-(br|n[0-9]+)$//' | sort -u); do set --; for ns in $old; do [ "$(printf %s "$ns" | sed -E 's/-(br|n[0-9]+)$//')" = "$g" ] && set -- "$@" "$ns"; done; busy=; for ns in "$@"; do p=$(ip netns pids "$ns" 2>/dev/null) || busy=1; [ -n "$p" ] && busy=1; done; [ -n "$busy" ] || for ns in "$@"; do ip netns del "$ns"; done; done; true)
trap 'ip netns del at-ba8d7c-s1-l7-br 2>/dev/null; ip netns del at-ba8d7c-s1-l7-n0 2>/dev/null; ip netns del at-ba8d7c-s1-l7-n1 2>/dev/null' EXIT
trap 'exit 143' TERM INT HUP
ip netns add at-ba8d7c-s1-l7-br || exit 97
ip -n at-ba8d7c-s1-l7-br link set lo up || exit 97
ip -n at-ba8d7c-s1-l7-br link add br0 type bridge || exit 97
ip -n at-ba8d7c-s1-l7-br link set br0 up || exit 97
ip netns add at-ba8d7c-s1-l7-n0 || exit 97
ip -n at-ba8d7c-s1-l7-n0 link set lo up || exit 97
ip -n at-ba8d7c-s1-l7-n0 link add eth0 type veth peer name v0 netns at-ba8d7c-s1-l7-br || exit 97
ip -n at-ba8d7c-s1-l7-n0 addr add 10.77.0.1/24 dev eth0 || exit 97
ip -n at-ba8d7c-s1-l7-n0 link set eth0 up || exit 97
ip -n at-ba8d7c-s1-l7-br link set v0 master br0 || exit 97
ip -n at-ba8d7c-s1-l7-br link set v0 up || exit 97
ip netns exec at-ba8d7c-s1-l7-n0 tc qdisc add dev eth0 root tbf rate 1gbit burst 128kb latency 50ms || exit 97
ip netns add at-ba8d7c-s1-l7-n1 || exit 97
ip -n at-ba8d7c-s1-l7-n1 link set lo up || exit 97
ip -n at-ba8d7c-s1-l7-n1 link add eth0 type veth peer name v1 netns at-ba8d7c-s1-l7-br || exit 97
ip -n at-ba8d7c-s1-l7-n1 addr add 10.77.0.2/24 dev eth0 || exit 97
ip -n at-ba8d7c-s1-l7-n1 link set eth0 up || exit 97
ip -n at-ba8d7c-s1-l7-br link set v1 master br0 || exit 97
ip -n at-ba8d7c-s1-l7-br link set v1 up || exit 97
ip netns exec at-ba8d7c-s1-l7-n1 tc qdisc add dev eth0 root tbf rate 1gbit burst 128kb latency 50ms || exit 97
ip netns exec at-ba8d7c-s1-l7-n0 unshare --uts sh -c 'hostname "$0" && exec "$@"' at-ba8d7c-s1-l7-n0 taskset -c 0-0 env GLOO_SOCKET_IFNAME=eth0 NCCL_SOCKET_IFNAME=eth0 /opt/py/bin/python -m torch.distributed.run --nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=10.77.0.1:29500 --rdzv-id=s1-l7-TAG --rdzv-conf=is_host=true --local-addr=10.77.0.1 -m trials.run --spec /srv/autotuner/study-1/launch-0007/spec.json --out /srv/autotuner/study-1/launch-0007/result.json --quiet &
node0=$!
ip netns exec at-ba8d7c-s1-l7-n1 unshare --uts sh -c 'hostname "$0" && exec "$@"' at-ba8d7c-s1-l7-n1 taskset -c 1-1 env GLOO_SOCKET_IFNAME=eth0 NCCL_SOCKET_IFNAME=eth0 /opt/py/bin/python -m torch.distributed.run --nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=10.77.0.1:29500 --rdzv-id=s1-l7-TAG --rdzv-conf=is_host=false --local-addr=10.77.0.2 -m trials.run --spec /srv/autotuner/study-1/launch-0007/spec.json --out /srv/autotuner/study-1/launch-0007/result.json --quiet &
node1=$!
rc=0
wait "$node0"; r=$?; [ "$r" -gt "$rc" ] && rc=$r
wait "$node1"; r=$?; [ "$r" -gt "$rc" ] && rc=$r
echo $rc > /srv/autotuner/study-1/launch-0007/exit_code.tmp && mv /srv/autotuner/study-1/launch-0007/exit_code.tmp /srv/autotuner/study-1/launch-0007/exit_code
exit $rc
