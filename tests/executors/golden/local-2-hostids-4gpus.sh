#!/bin/sh
# nccl-autotuner launch s1-l7 (local executor)
cd /srv/autotuner/study-1/launch-0007
export NCCL_NSOCKS_PERTHREAD=4
# emulated: 2 nodes as torchrun agents on one machine, each its own NCCL_HOSTID, NCCL's socket transport over loopback (unshaped), each on GPUs of its own
env NCCL_HOSTID=s1-l7-node0 NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 GLOO_SOCKET_IFNAME=lo CUDA_VISIBLE_DEVICES=0,1 /opt/py/bin/python -m torch.distributed.run --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:29533 --rdzv-id=s1-l7-TAG --rdzv-conf=is_host=true --local-addr=127.0.0.1 -m trials.run --spec /srv/autotuner/study-1/launch-0007/spec.json --out /srv/autotuner/study-1/launch-0007/result.json --quiet &
node0=$!
env NCCL_HOSTID=s1-l7-node1 NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 GLOO_SOCKET_IFNAME=lo CUDA_VISIBLE_DEVICES=2,3 /opt/py/bin/python -m torch.distributed.run --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:29533 --rdzv-id=s1-l7-TAG --rdzv-conf=is_host=false --local-addr=127.0.0.1 -m trials.run --spec /srv/autotuner/study-1/launch-0007/spec.json --out /srv/autotuner/study-1/launch-0007/result.json --quiet &
node1=$!
rc=0
wait "$node0"; r=$?; [ "$r" -gt "$rc" ] && rc=$r
wait "$node1"; r=$?; [ "$r" -gt "$rc" ] && rc=$r
echo $rc > /srv/autotuner/study-1/launch-0007/exit_code.tmp && mv /srv/autotuner/study-1/launch-0007/exit_code.tmp /srv/autotuner/study-1/launch-0007/exit_code
exit $rc
