"""The Slurm executor's options, and the sbatch arguments an operator may add (judged as sbatch reads them)."""

import re
from typing import Annotated

from pydantic import (
    AfterValidator,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
)

from autotuner.envvars import check_value, errors, lookup
from autotuner.executors.options import (
    ExecutorOptions,
    OptionError,
    Port,
    QueueTimeout,
    fullmatch,
    option,
)

# Set by the executor from the launch, or changing the environment a trial runs with: an extra sbatch
# argument may not fight them.
SLURM_OWN_ARGS = {
    "--job-name", "--nodes", "--ntasks-per-node", "--ntasks", "--output", "--error", "--open-mode", "--chdir",
    "--time", "--exclusive", "--partition", "--account", "--qos", "--gpus-per-node", "--cpus-per-task",
    "--constraint", "--parsable", "--wrap", "--export", "--requeue", "--no-requeue", "--array", "--wait",
    "--export-file", "--get-user-env",
}  # fmt: skip
# sbatch's long options (man sbatch, Slurm 23.02-24.11; --cluster is an unlisted alias of --clusters).
# sbatch reads them with getopt_long, which takes any unique prefix of an option as the option: `--outp=x`
# is --output, `--arr=1-1000` is --array. An extra argument is judged as the option sbatch will read it as.
SBATCH_LONG_OPTIONS = SLURM_OWN_ARGS | {
    f"--{name}" for name in (
        "acctg-freq", "batch", "bb", "bbf", "begin", "cluster-constraint", "clusters", "comment", "container",
        "container-id", "contiguous", "core-spec", "cores-per-socket", "cpu-freq", "cpus-per-gpu", "deadline",
        "delay-boot", "dependency", "distribution", "exclude", "extra", "extra-node-info", "gid", "gpu-bind",
        "gpu-freq", "gpus", "gpus-per-socket", "gpus-per-task", "gres", "gres-flags", "help", "hint", "hold",
        "ignore-pbs", "input", "kill-on-invalid-dep", "licenses", "mail-type", "mail-user", "mcs-label", "mem",
        "mem-bind", "mem-per-cpu", "mem-per-gpu", "mincpus", "network", "nice", "no-kill", "nodefile", "nodelist",
        "ntasks-per-core", "ntasks-per-gpu", "ntasks-per-socket", "oom-kill-step", "overcommit", "oversubscribe",
        "power", "prefer", "priority", "profile", "propagate", "quiet", "reboot", "reservation", "resv-ports",
        "segment", "signal", "sockets-per-node", "spread-job", "stepmgr", "switches", "test-only", "thread-spec",
        "threads-per-core", "time-min", "tmp", "tres-bind", "tres-per-task", "uid", "usage", "use-min-nodes",
        "verbose", "version", "wait-all-nodes", "wckey",
    )
} | {"--cluster"}  # fmt: skip
# Another cluster's job (--clusters, -M): squeue, scontrol, sacct and scancel would look for it on the
# default cluster, where it does not exist: it would be followed as gone and never cancelled.
SBATCH_OTHER_CLUSTER = {"--clusters", "--cluster"}
# What submits no job that runs now: sbatch prints help or checks and queues nothing, or the job is held
# or delayed (its launch would wait out queue_timeout_s for nothing): --dependency holds it until another
# job ends, which may be never; --deadline has Slurm drop it unrun when it is still pending then (followed
# as a timeout without a result: failed, and its env config quarantined).
SBATCH_NO_RUN = {"--hold", "--test-only", "--help", "--usage", "--version", "--begin", "--dependency",
                 "--deadline"}  # fmt: skip
_NO_RUN = "the launch would not run now (nothing queued, or held, delayed or dropped before it runs)"
# sbatch's short forms of what is refused here by name (any other short option is not a '--long-option').
SBATCH_SHORT = {"-M": "--clusters", "-b": "--begin", "-d": "--dependency", "-H": "--hold"}
_OTHER_CLUSTER = ("multi-cluster submission is not supported (the job would be followed and cancelled on "
                  "the default cluster); run the tuner or the service on that cluster instead")  # fmt: skip


def sbatch_reads_as(name: str) -> set[str]:
    """The options sbatch may read `--name` as: itself where it is an option, else every option it is
    a prefix of (one: getopt_long takes it as that option; several: sbatch refuses it as ambiguous).
    A name that is neither is left to sbatch."""
    if name in SBATCH_LONG_OPTIONS:
        return {name}
    return {option for option in SBATCH_LONG_OPTIONS if option.startswith(name)} or {name}


_SBATCH_ARG = re.compile(r"--[a-z][a-z0-9-]*(=[A-Za-z0-9_.,:/@+=%*\[\]-]+)?")
_TIME_LIMIT = re.compile(r"\d+(:\d{1,2}){0,2}|\d+-\d+(:\d{1,2}){0,2}|UNLIMITED|INFINITE")


MAX_MINUTES = 525_600
MAX_PER_NODE = 65_536  # GPUs or CPUs of one node: past it, a typo sbatch refuses at every submission


def _time_limit(value: int | str) -> int | str:
    if isinstance(value, int) and not 1 <= value <= MAX_MINUTES:  # 2**63 minutes went to sbatch as typed
        raise OptionError(f"{value} minutes; give 1 to {MAX_MINUTES} (a year), or 'UNLIMITED'")
    if isinstance(value, str) and not _TIME_LIMIT.fullmatch(value):
        raise OptionError("use minutes, 'MM:SS', 'HH:MM:SS', 'D-HH', 'D-HH:MM', 'D-HH:MM:SS' or 'UNLIMITED'")
    # sbatch reads --time=0 (however spelt) as no limit: the backstop would be gone
    if isinstance(value, str) and not value.strip("0:-"):
        raise OptionError("a zero time limit, which Slurm reads as no limit at all; give at least 1 minute")
    return value


def _sbatch_arg(arg: str) -> str:
    short = SBATCH_SHORT.get(arg[:2])
    if short:  # refused as its long form, in the same words
        why = _OTHER_CLUSTER if short in SBATCH_OTHER_CLUSTER else _NO_RUN
        raise OptionError(f"{arg!r} ({arg[:2]} is {short}): {why}")
    if not _SBATCH_ARG.fullmatch(arg):
        raise OptionError(
            f"{arg!r} is not a '--long-option' or '--long-option=value' (no spaces, quotes or shell "
            "characters; it becomes an #SBATCH line)"
        )
    name = arg.split("=", 1)[0]
    cluster = sorted(sbatch_reads_as(name) & SBATCH_OTHER_CLUSTER)
    if cluster:
        shown = name if cluster == [name] else f"{name} (sbatch may read it as {' or '.join(cluster)})"
        raise OptionError(f"{shown}: {_OTHER_CLUSTER}")
    idle = sorted(sbatch_reads_as(name) & SBATCH_NO_RUN)
    if idle:
        shown = name if idle == [name] else f"{name} (sbatch may read it as {' or '.join(idle)})"
        raise OptionError(f"{shown}: {_NO_RUN}")
    own = sorted(sbatch_reads_as(name) & SLURM_OWN_ARGS)
    if own:
        shown = name if own == [name] else f"{name} (sbatch reads it as {' or '.join(own)})"
        raise OptionError(
            f"{shown} is set by the executor; use its own option (partition, account, qos, time_limit, "
            "exclusive, gpus_per_node, cpus_per_task, constraint)"
        )
    return arg


# Variables a fixed export may not set: the trial's own (AUTOTUNER_DISABLE keeps the served config out
# of every trial), Slurm's, those that change which code runs instead of how NCCL behaves, the shell's
# own (IFS splits the script's unquoted words; PS4, SHELLOPTS and the like change how it runs;
# EXECIGNORE hides the srun on PATH as changing PATH would; UID and the like are read-only, RANDOM and
# the like bash's own: not what the ranks would see), the script's (head, rc), and the launcher's and
# Slurm's per rank (a fixed CUDA_VISIBLE_DEVICES overrode the GPUs Slurm bound each task to; torchrun
# sets RANK, MASTER_ADDR and the rest itself).
_NOT_FIXED_ENV = re.compile(r"AUTOTUNER_.*|SLURM_.*|SBATCH_.*|SALLOC_.*|SRUN_.*|PATH|LD_PRELOAD|LD_AUDIT|GCONV_PATH|PYTHON.*"
                            r"|CUDA_VISIBLE_DEVICES|ROCR_VISIBLE_DEVICES|NVIDIA_VISIBLE_DEVICES|TORCHELASTIC_.*"
                            r"|RANK|LOCAL_RANK|GROUP_RANK|ROLE_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|MASTER_ADDR|MASTER_PORT"
                            r"|BASH|BASH_.*|ENV|IFS|SHELLOPTS|BASHOPTS|PS4|PROMPT_COMMAND|CDPATH|GLOBIGNORE|EXECIGNORE"
                            r"|UID|EUID|PPID|GROUPS|RANDOM|SRANDOM|LINENO|SECONDS|BASHPID|SHLVL|PWD|OLDPWD|OPTIND"
                            r"|OPTARG|FUNCNAME|HOSTNAME|HOSTTYPE|MACHTYPE|OSTYPE|EPOCHREALTIME|EPOCHSECONDS|_|head|rc")  # fmt: skip


def _fixed_env_name(name: str) -> str:
    if _NOT_FIXED_ENV.fullmatch(name):
        raise OptionError(
            f"{name}: not settable here (AUTOTUNER_*, SLURM_*, SBATCH_*, SRUN_*, PATH, LD_PRELOAD, LD_AUDIT, PYTHON*, "
            "BASH_ENV and the shell's own, CUDA_VISIBLE_DEVICES, RANK, MASTER_ADDR and torchrun's others are the "
            "trial's, Slurm's, the launcher's, the shell's or change which code runs); give fabric settings only"
        )
    return name


# The prefixes of the variables the registry knows (autotuner.envvars): NCCL, PyTorch's NCCL, libfabric,
# aws-ofi-nccl. Others (LD_LIBRARY_PATH, HF_HOME, a site's own) are the operator's business.
_REGISTRY_PREFIXES = ("NCCL_", "TORCH_", "FI_", "OFI_")


def _fixed_env_values(env: dict[str, str]) -> dict[str, str]:
    """A registered integer, boolean or one-of-a-set's fixed value is checked as a tuned one is: NCCL
    reads NCCL_BUFFSIZE=4MB as 4, so every trial would measure something else. Text and lists are the
    site's own (NCCL_NET="AWS Libfabric", NCCL_ALGO=allreduce:tree): exported quoted, not judged here."""
    for name, value in env.items():
        var = lookup(name) if name.startswith(_REGISTRY_PREFIXES) else None
        found = (
            errors(check_value(name, value, var))
            if var is not None and var.kind in ("int", "bool", "enum")
            else []
        )
        if found:
            raise OptionError(f"{name}={value!r}: {found[0].message}")
    return env


SlurmName = Annotated[StrictStr, fullmatch(r"[A-Za-z0-9_.-]+")]
Partitions = Annotated[StrictStr, fullmatch(r"[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*")]
TimeLimit = Annotated[StrictInt | StrictStr, AfterValidator(_time_limit)]
Constraint = Annotated[StrictStr, fullmatch(r"[A-Za-z0-9_.,&|\[\]*()!:-]+")]
SbatchArg = Annotated[StrictStr, AfterValidator(_sbatch_arg)]
# never a leading '-': the path follows srun's options, where it would be read as one
NodePath = Annotated[StrictStr, fullmatch(r"[A-Za-z0-9._/+@][A-Za-z0-9._/+@-]*")]
EnvName = Annotated[StrictStr, fullmatch(r"[A-Za-z_][A-Za-z0-9_]*"), AfterValidator(_fixed_env_name)]
OneLine = Annotated[StrictStr, fullmatch(r"[ -~]*")]  # printable ASCII: a \r reached the ranks as a newline
FixedEnv = Annotated[dict[EnvName, OneLine], AfterValidator(_fixed_env_values)]


class SlurmOptions(ExecutorOptions):
    """The operator's settings for the Slurm executor (a study's `executor_options`)."""

    executor = "slurm"

    partition: Partitions | None = option(
        None, "the partition(s) to submit to", "a partition name or a comma-separated list"
    )
    account: SlurmName | None = option(None, "the account to charge", "an account name")
    qos: SlurmName | None = option(None, "the quality of service", "a QOS name")
    time_limit: TimeLimit | None = option(
        None, "the job's time limit; default: the launch timeout plus a minute, a backstop for when the "
        "tuner itself is gone (it cancels at the launch timeout)", "minutes or a Slurm time such as 'HH:MM:SS'",
    )  # fmt: skip
    exclusive: StrictBool = option(
        True, "trials own their nodes and NICs (to measure anything)", "true or false"
    )
    gpus_per_node: Annotated[StrictInt, Field(ge=0, le=MAX_PER_NODE)] | None = option(
        None, "GPUs to ask for; default: nproc_per_node when the launch uses GPUs (spec device 'cuda', or "
        "'auto' on a partition with GPU GRES); 0: never", "an integer >= 0",
    )  # fmt: skip
    cpus_per_task: Annotated[StrictInt, Field(ge=1, le=MAX_PER_NODE)] | None = option(
        None, "CPUs per node (one task per node)", "an integer >= 1"
    )
    constraint: Constraint | None = option(
        None, "node features to ask for", "a feature expression such as 'a100&efa' (no spaces)"
    )
    sbatch_args: tuple[SbatchArg, ...] = option(
        (), "more #SBATCH lines, e.g. ['--mem=0']", "a list of '--name=value' strings"
    )
    python: NodePath | None = option(
        None, "the interpreter on the nodes; default: the launch's (this interpreter)",
        "the interpreter's path on the nodes (letters, digits and ._/+@- only, not starting with '-')",
    )  # fmt: skip
    rdzv_port: Port = option(29500, "torchrun's c10d rendezvous port on the job's first node", "1..65535")
    env: FixedEnv = option(
        {}, "fixed exports the fabric needs but that are not tuned (e.g. FI_PROVIDER=efa for aws-ofi-nccl); "
        "the launch's own variables come after them and win", "an object of NAME: one-line string values",
    )  # fmt: skip
    queue_timeout_s: QueueTimeout | None = option(
        None, "how long a launch may wait in the queue (null: as long as it takes); the launch timeout "
        "counts from when the job runs", "seconds > 0 (at most 30 days) or null",
    )  # fmt: skip
