"""The sbatch script of a Slurm launch: one template, filled from the launch and the executor's options.

The script (golden-tested in tests/executors/golden/sbatch-*.sh): #SBATCH lines, the launch's
variables exported once in the batch shell (srun hands that environment to every rank unchanged),
a c10d rendezvous on the job's first node, and the trial's exit code written to `workdir/exit_code`
so that how a launch ended is known even after Slurm has forgotten the job.
"""

from __future__ import annotations

import math
import re
import shlex
import string

from autotuner.executors.base import LaunchRequest
from autotuner.executors.script import ENV_NAME, EXIT_CODE_FILE, exports
from autotuner.executors.slurm.options import SlurmOptions


class _Template(string.Template):
    delimiter = "@"  # the script is full of shell `$`s


SBATCH_TEMPLATE = _Template("""\
#!/bin/bash
# nccl-autotuner launch @name (slurm executor): @nnodes node(s) x @nproc rank(s)
@sbatch

@{fixed_env}@{launch_env}# The pre-job hook (TaskProlog) must not add a served config to a trial: every trial runs with
# exactly the variables above, the baseline with none.
export AUTOTUNER_DISABLE=1

# Rendezvous on the job's first node.
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
srun --kill-on-bad-exit=1 --export=ALL --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 \\
  @python -m torch.distributed.run --nnodes="$SLURM_JOB_NUM_NODES" --nproc-per-node=@nproc \
--rdzv-backend=c10d --rdzv-endpoint="$head:@port" --rdzv-id="$SLURM_JOB_ID" \\
  @trial
rc=$?
echo $rc > @exit_file
exit $rc
""")
NO_FIXED_ENV = """\
# (Fabric settings every trial needs but that are not tuned, e.g. FI_PROVIDER=efa for aws-ofi-nccl:
#  executor option env.)
"""

# What may sit unquoted in an #SBATCH line: sbatch has its own tokenizer there, and '%' is a filename
# pattern in --output.
_SBATCH_PATH = re.compile(r"/[A-Za-z0-9._/+@,:=~-]*")


def check_launch(launch: LaunchRequest) -> None:
    """ValueError for a launch that cannot go into an sbatch script (its directory, its env)."""
    workdir = str(launch.workdir)
    if not _SBATCH_PATH.fullmatch(workdir):
        raise ValueError(
            f"launch directory {workdir!r}: the Slurm executor needs an absolute path of letters, digits "
            "and ._/+@,:=~- (it goes into #SBATCH lines, where spaces and '%' are not safe)"
        )
    for name, value in launch.env.items():
        if not ENV_NAME.fullmatch(name) or "\n" in value:
            raise ValueError(f"launch variable {name!r}: not a variable name or not a one-line value")


def sbatch_script(launch: LaunchRequest, options: SlurmOptions, gpus: int | None) -> str:
    """The whole script, for `gpus` GPUs per node (None: ask for none)."""
    check_launch(launch)
    fixed = "# Cluster-fixed fabric settings (executor option env); the launch's variables win.\n"
    own = "# The launch's variables: srun hands this environment to every rank unchanged.\n"
    return SBATCH_TEMPLATE.substitute(
        name=launch.name,
        nnodes=launch.nnodes,
        nproc=launch.nproc_per_node,
        sbatch="\n".join(f"#SBATCH {arg}" for arg in sbatch_args(launch, options, gpus)),
        fixed_env=_block(fixed, exports(options.env)) if options.env else NO_FIXED_ENV,
        launch_env=_block(own, exports(launch.env)) if launch.env else "",
        python=shlex.quote(options.python or launch.python),
        port=options.rdzv_port,
        trial=shlex.join(launch.trial_argv()),
        exit_file=shlex.quote(str(launch.workdir / EXIT_CODE_FILE)),
    )


def sbatch_args(launch: LaunchRequest, options: SlurmOptions, gpus: int | None) -> list[str]:
    """The job's sbatch arguments: what the launch fixes, then the operator's options and extras."""
    o = options
    time_limit = o.time_limit if o.time_limit is not None else math.ceil(launch.timeout_s / 60) + 1
    args = [
        f"--job-name={job_name(launch.name)}",
        f"--nodes={launch.nnodes}",
        "--ntasks-per-node=1",  # one torchrun agent per node; it starts the node's ranks
        f"--output={launch.log_path}",
        f"--error={launch.log_path}",
        "--open-mode=append",
        f"--chdir={launch.workdir}",
        f"--time={time_limit}",
        "--no-requeue",  # a requeued trial would run again behind the tuner's back
    ]
    optional = [
        ("--exclusive", o.exclusive),
        (f"--partition={o.partition}", o.partition),
        (f"--account={o.account}", o.account),
        (f"--qos={o.qos}", o.qos),
        (f"--gpus-per-node={gpus}", gpus),
        (f"--cpus-per-task={o.cpus_per_task}", o.cpus_per_task),
        (f"--constraint={o.constraint}", o.constraint),
    ]
    return [*args, *(arg for arg, wanted in optional if wanted), *o.sbatch_args]


def job_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "-", name)[:64] or "autotuner-trial"


def _block(comment: str, lines: list[str]) -> str:
    return comment + "".join(f"{line}\n" for line in lines)
