#!/bin/bash
# nccl-autotuner launch s1-l7 (slurm executor): 1 node(s) x 2 rank(s)
#SBATCH --job-name=s1-l7
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --output=/srv/autotuner/study-1/launch-0007/trial.log
#SBATCH --error=/srv/autotuner/study-1/launch-0007/trial.log
#SBATCH --open-mode=append
#SBATCH --chdir=/srv/autotuner/study-1/launch-0007
#SBATCH --time=11
#SBATCH --no-requeue
#SBATCH --exclusive

# (Fabric settings every trial needs but that are not tuned, e.g. FI_PROVIDER=efa for aws-ofi-nccl:
#  executor option env.)
# The launch's variables: srun hands this environment to every rank unchanged.
export NCCL_ALGO='Ring Tree'
export NCCL_NSOCKS_PERTHREAD=4
export NCCL_SOCKET_IFNAME='eth0,eth1;rm -rf /'
# The pre-job hook (TaskProlog) must not add a served config to a trial: every trial runs with
# exactly the variables above, the baseline with none.
export AUTOTUNER_DISABLE=1

# Rendezvous on the job's first node.
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
srun --kill-on-bad-exit=1 --export=ALL --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 \
  /opt/py/bin/python -m torch.distributed.run --nnodes="$SLURM_JOB_NUM_NODES" --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint="$head:29500" --rdzv-id="$SLURM_JOB_ID" \
  -m trials.run --spec /srv/autotuner/study-1/launch-0007/spec.json --out /srv/autotuner/study-1/launch-0007/result.json --quiet
rc=$?
echo $rc > /srv/autotuner/study-1/launch-0007/exit_code
exit $rc
