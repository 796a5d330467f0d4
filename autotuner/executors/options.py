"""Executor options: declared once per executor, checked in one place (torchx's `runopts`, in pydantic).

Each executor's options are one model here: a field per option with its type, default and help, and
what values it allows (the message when a value is wrong). `ExecutorOptions.parse` is the only place
operator JSON is checked: a ValueError names the executor, the option, the value and what is allowed;
an unknown name gets a did-you-mean and the list of valid ones. Nothing here imports a backend, so the
options of every executor can be listed and checked where no cluster client is installed.
"""

import difflib
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, ClassVar, Literal, NamedTuple, TypeVar, Union, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

OptionsT = TypeVar("OptionsT", bound="ExecutorOptions")


class OptionError(ValueError):
    """A wrong option value, in words (raised by validators). `option` names it where a check spans
    several options (a model validator) and the error itself has no location."""

    def __init__(self, message: str, option: str | None = None) -> None:
        super().__init__(message)
        self.option = option


class OptionInfo(NamedTuple):
    name: str
    type: str
    default: Any  # None where required
    help: str
    required: bool


def option(default: Any, help: str, allowed: str | None = None) -> Any:
    """One option: its default (`...`: required), what it is for, and what values it takes (said when
    a value is wrong; default: the help)."""
    return Field(default, description=help, json_schema_extra={"allowed": allowed or help})


def fullmatch(pattern: str) -> AfterValidator:
    """For `Annotated[StrictStr, fullmatch(...)]`: the string must match `pattern` whole (Python's re),
    checked before it reaches a script or a manifest."""
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise PydanticCustomError("mismatch", "does not match {pattern}", {"pattern": pattern})
        return value

    return AfterValidator(check)


class ExecutorOptions(BaseModel):
    """The base of every executor's options: frozen, unknown names refused, errors in words."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    executor: ClassVar[str] = ""

    @classmethod
    def parse(cls: type[OptionsT], options: Mapping[str, Any]) -> OptionsT:
        """Check operator JSON; a ValueError names the option, the value and what is allowed."""
        what = f"{cls.executor} executor option"
        if not isinstance(options, Mapping):
            raise ValueError(f"{what}s: an object of name: value, got {options!r}")
        known = list(cls.model_fields)
        unknown = [str(key) for key in options if key not in known]
        if unknown:
            close = difflib.get_close_matches(unknown[0], known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"unknown {what}(s) {', '.join(map(repr, unknown))}{hint}; valid: {', '.join(known)}"
            )
        try:
            return cls.model_validate(dict(options))
        except ValidationError as exc:
            raise ValueError(cls._explain(exc.errors(include_url=False)[0], options)) from None

    @classmethod
    def _explain(cls, error: Any, options: Mapping[str, Any]) -> str:
        cause = error.get("ctx", {}).get("error")
        name = getattr(cause, "option", None) or (str(error["loc"][0]) if error["loc"] else "")
        what = f"{cls.executor} executor option {name}"
        if error["type"] == "missing":
            return f"{what} is required: {cls._allowed(name)}"
        shown = f"{what}={options[name]!r}" if name in options else what
        if isinstance(cause, ValueError):  # a validator's own words
            return f"{shown}: {cause}"
        return f"{shown}: expected {cls._allowed(name)}"

    @classmethod
    def _allowed(cls, name: str) -> str:
        field = cls.model_fields.get(name)
        extra = field.json_schema_extra if field is not None else None
        return str(extra["allowed"]) if isinstance(extra, dict) else "a valid value"

    @classmethod
    def describe(cls) -> list[OptionInfo]:
        """Every option as (name, type, default, help, required), in declaration order (for listings)."""
        return [
            OptionInfo(
                name,
                _type_name(f.annotation),
                None if f.is_required() else f.default,
                f.description or "",
                f.is_required(),
            )
            for name, f in cls.model_fields.items()
        ]


def _type_name(annotation: Any) -> str:
    """`int | None`, `tuple[str, ...]`: the type as an operator would write it (no validators)."""
    args = get_args(annotation)
    origin = get_origin(annotation)
    if origin is Annotated:
        return _type_name(args[0])
    if origin in (Union, UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin is Literal:
        return " | ".join(map(repr, args))
    if origin is not None:
        return f"{origin.__name__}[{', '.join('...' if a is Ellipsis else _type_name(a) for a in args)}]"
    return "None" if annotation is type(None) else getattr(annotation, "__name__", str(annotation))


# ---------------------------------------------------------------------------------------- shared types

Port = Annotated[StrictInt, Field(ge=1, le=65535)]
Count = Annotated[StrictInt, Field(ge=0)]
NonEmpty = Annotated[StrictStr, Field(min_length=1)]
FABRIC_RATE = r"[1-9][0-9]*(kbit|mbit|gbit)"


# ---------------------------------------------------------------------------------------- local, replay


class LocalOptions(ExecutorOptions):
    executor = "local"

    fabric: Annotated[StrictStr, fullmatch(FABRIC_RATE)] | None = option(
        None, "emulate a fabric: the ranks' loopback limited to this rate (tbf) in a network namespace (root)",
        "a number with kbit, mbit or gbit, e.g. 2gbit",
    )  # fmt: skip
    nodes: Literal["one", "ranks", "hostids", "namespaces"] = option(
        "one",
        "how a launch of N nodes runs here: one (refused), ranks (N x nproc_per_node ranks in one torchrun), "
        "hostids (a torchrun agent per node, each its own NCCL_HOSTID, NCCL's socket transport over "
        "loopback: NCCL's own knobs act, also with every node on one GPU), "
        "namespaces (a network namespace and hostname per node, a shaped bridge between them, a torchrun "
        "agent each; root)",
        "one, ranks, hostids or namespaces",
    )


class ReplayOptions(ExecutorOptions):
    executor = "replay"

    landscape: Path = option(..., "the recorded landscape file (JSON) whose results answer the launches")
    delay_s: Annotated[float, Field(ge=0)] = option(
        0.0,
        "seconds each launch 'runs' (lets a demo or a browser test watch a study progress)",
        "seconds >= 0",
    )
    seed: Count = option(0, "which recorded repeat answers a point (the study's seed)", "an integer >= 0")


# ---------------------------------------------------------------------------------------- slurm

# Set by the executor from the launch, or changing the environment a trial runs with: an extra sbatch
# argument may not fight them.
SLURM_OWN_ARGS = {
    "--job-name", "--nodes", "--ntasks-per-node", "--ntasks", "--output", "--error", "--open-mode", "--chdir",
    "--time", "--exclusive", "--partition", "--account", "--qos", "--gpus-per-node", "--cpus-per-task",
    "--constraint", "--parsable", "--wrap", "--export", "--requeue", "--no-requeue", "--array", "--wait",
    "--export-file", "--get-user-env",
}  # fmt: skip
# sbatch's long options (man sbatch, Slurm 23.02-24.11). sbatch reads them with getopt_long, which takes
# any unique prefix of an option as the option: `--outp=x` is --output, `--arr=1-1000` is --array. An
# extra argument is judged as the option sbatch will read it as.
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
}  # fmt: skip


def sbatch_reads_as(name: str) -> set[str]:
    """The options sbatch may read `--name` as: itself where it is an option, else every option it is
    a prefix of (one: getopt_long takes it as that option; several: sbatch refuses it as ambiguous).
    A name that is neither is left to sbatch."""
    if name in SBATCH_LONG_OPTIONS:
        return {name}
    return {option for option in SBATCH_LONG_OPTIONS if option.startswith(name)} or {name}


_SBATCH_ARG = re.compile(r"--[a-z][a-z0-9-]*(=[A-Za-z0-9_.,:/@+=%*\[\]-]+)?")
_TIME_LIMIT = re.compile(r"\d+(:\d{1,2}){0,2}|\d+-\d+(:\d{1,2}){0,2}|UNLIMITED|INFINITE")


def _time_limit(value: int | str) -> int | str:
    if isinstance(value, int) and value < 1:
        raise OptionError(f"{value} minutes; give at least 1")
    if isinstance(value, str) and not _TIME_LIMIT.fullmatch(value):
        raise OptionError("use minutes, 'MM:SS', 'HH:MM:SS', 'D-HH', 'D-HH:MM', 'D-HH:MM:SS' or 'UNLIMITED'")
    return value


def _sbatch_arg(arg: str) -> str:
    if not _SBATCH_ARG.fullmatch(arg):
        raise OptionError(
            f"{arg!r} is not a '--long-option' or '--long-option=value' (no spaces, quotes or shell "
            "characters; it becomes an #SBATCH line)"
        )
    name = arg.split("=", 1)[0]
    own = sorted(sbatch_reads_as(name) & SLURM_OWN_ARGS)
    if own:
        shown = name if own == [name] else f"{name} (sbatch reads it as {' or '.join(own)})"
        raise OptionError(
            f"{shown} is set by the executor; use its own option (partition, account, qos, time_limit, "
            "exclusive, gpus_per_node, cpus_per_task, constraint)"
        )
    return arg


SlurmName = Annotated[StrictStr, fullmatch(r"[A-Za-z0-9_.-]+")]
Partitions = Annotated[StrictStr, fullmatch(r"[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*")]
TimeLimit = Annotated[StrictInt | StrictStr, AfterValidator(_time_limit)]
Constraint = Annotated[StrictStr, fullmatch(r"[A-Za-z0-9_.,&|\[\]*()!:-]+")]
SbatchArg = Annotated[StrictStr, AfterValidator(_sbatch_arg)]
NodePath = Annotated[StrictStr, fullmatch(r"[A-Za-z0-9._/+@-]+")]
EnvName = Annotated[StrictStr, fullmatch(r"[A-Za-z_][A-Za-z0-9_]*")]
OneLine = Annotated[StrictStr, fullmatch(r"[^\n\0]*")]


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
    gpus_per_node: Count | None = option(
        None, "GPUs to ask for; default: nproc_per_node when the launch uses GPUs (spec device 'cuda', or "
        "'auto' on a partition with GPU GRES); 0: never", "an integer >= 0",
    )  # fmt: skip
    cpus_per_task: Annotated[StrictInt, Field(ge=1)] | None = option(
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
        "the interpreter's path on the nodes (letters, digits and ._/+@- only)",
    )  # fmt: skip
    rdzv_port: Port = option(29500, "torchrun's c10d rendezvous port on the job's first node", "1..65535")
    env: dict[EnvName, OneLine] = option(
        {}, "fixed exports the fabric needs but that are not tuned (e.g. FI_PROVIDER=efa for aws-ofi-nccl); "
        "the launch's own variables come after them and win", "an object of NAME: one-line string values",
    )  # fmt: skip
    queue_timeout_s: Annotated[StrictFloat, Field(gt=0)] | None = option(
        None, "how long a launch may wait in the queue (null: as long as it takes); the launch timeout "
        "counts from when the job runs", "seconds > 0 or null",
    )  # fmt: skip


# ---------------------------------------------------------------------------------------- kubernetes

# What an EFA pod needs besides the device (libfabric registers memory in huge pages); AWS's examples.
EFA_DEFAULT_HUGEPAGES_2MI = "5120Mi"
_TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}
_TOLERATION_EFFECTS = {"NoSchedule", "PreferNoSchedule", "NoExecute"}
_TOLERATION_RULES: tuple[tuple[Callable[[dict[str, Any]], bool], str], ...] = (
    (lambda t: bool(t) and set(t) <= _TOLERATION_KEYS, f"keys among {sorted(_TOLERATION_KEYS)}"),
    (lambda t: t.get("operator", "Equal") in ("Equal", "Exists"), "operator Equal or Exists"),
    (lambda t: t.get("effect", "") in _TOLERATION_EFFECTS | {""}, f"effect among {sorted(_TOLERATION_EFFECTS)}"),
    (lambda t: all(isinstance(t.get(k, ""), str) for k in ("key", "operator", "value", "effect")),
     "string key, operator, value and effect"),
    (lambda t: t.get("tolerationSeconds") is None or type(t["tolerationSeconds"]) is int,
     "an integer tolerationSeconds"),
    (lambda t: not (t.get("operator") == "Exists" and t.get("value")), "no value with operator Exists"),
)  # fmt: skip


def _tolerations(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for item in items:
        for ok, expected in _TOLERATION_RULES:
            if not ok(item):
                raise OptionError(f"expected {expected} (in {item!r})")
    return items


def _positive_int_as_str(value: Any) -> Any:
    return str(value) if type(value) is int and value > 0 else value


_DNS_PART = r"[a-z0-9]([a-z0-9-]*[a-z0-9])?"
DnsLabel = Annotated[StrictStr, fullmatch(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")]  # at most 63
DnsSubdomain = Annotated[StrictStr, fullmatch(rf"{_DNS_PART}(\.{_DNS_PART})*")]
NamePrefix = Annotated[StrictStr, fullmatch(r"[a-z]([a-z0-9-]{0,18}[a-z0-9])?")]  # DNS-1035, at most 20
Image = Annotated[StrictStr, fullmatch(r"\S+")]
LabelKey = Annotated[
    StrictStr, fullmatch(r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
]
LabelValue = Annotated[StrictStr, fullmatch(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")]
Tolerations = Annotated[list[dict[str, Any]], AfterValidator(_tolerations)]
# '64Gi', '5120Mi', '16', or a positive integer (kept as its string); never zero.
Quantity = Annotated[
    StrictStr, BeforeValidator(_positive_int_as_str),
    fullmatch(r"(?![0.]*$)[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?"),
]  # fmt: skip
_QUANTITY = "a Kubernetes quantity such as '64Gi', '5120Mi' or '16'"
_UP_TO_64 = Annotated[StrictInt, Field(ge=0, le=64)]


class KubernetesOptions(ExecutorOptions):
    """The operator's settings for the Kubernetes executor (AUTOTUNER_EXECUTOR_OPTIONS {"kubernetes": ...})."""

    executor = "kubernetes"

    namespace: DnsLabel = option(
        "default", "the namespace trials run in",
        "a DNS-1123 label (lowercase letters, digits, '-'), at most 63 characters",
    )  # fmt: skip
    image: Image = option(
        ..., "the trial container image", "the trial container image (torch, torchrec and trials/), e.g. "
        "registry.example.com/nccl-autotuner-trial:0.1.0",
    )  # fmt: skip
    gpus_per_node: _UP_TO_64 | None = option(
        None, "GPUs per pod; default: nproc_per_node; 0 runs CPU trials", "an integer from 0 to 64"
    )
    efa_per_node: _UP_TO_64 = option(0, "EFA devices per pod", "an integer from 0 to 64")
    hugepages_2mi: Quantity | None = option(
        None, f"2 MiB huge pages per pod (default {EFA_DEFAULT_HUGEPAGES_2MI} with EFA)", _QUANTITY
    )
    memory: Quantity | None = option(None, "memory per pod (needed with huge pages)", _QUANTITY)
    cpu: Quantity | None = option(
        None, "CPU request per pod (a request only: a CPU limit would throttle the measurement)", _QUANTITY
    )
    shm_size: Quantity | None = option(None, "size limit of the pods' /dev/shm (memory-backed)", _QUANTITY)
    service_account: DnsSubdomain | None = option(
        None, "the pods' ServiceAccount", "a ServiceAccount name in the namespace"
    )
    node_selector: dict[LabelKey, LabelValue] | None = option(
        None, "which nodes trials may run on", "a map of label keys to label values, e.g. "
        '{"node.kubernetes.io/instance-type": "p5.48xlarge"}',
    )  # fmt: skip
    tolerations: Tolerations | None = option(
        None, "taints the pods tolerate", 'a list of tolerations, e.g. [{"key": "nvidia.com/gpu", '
        '"operator": "Exists", "effect": "NoSchedule"}]',
    )  # fmt: skip
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = option(
        None, "the trial container's imagePullPolicy", "Always, IfNotPresent or Never"
    )
    kubeconfig: NonEmpty | None = option(None, "the kubeconfig file", "a path to a kubeconfig file")
    context: NonEmpty | None = option(None, "the kubeconfig context", "a context name of the kubeconfig")
    in_cluster: StrictBool = option(
        False, "talk to the API server as the tuner pod's service account", "true or false"
    )
    python: NonEmpty = option("python", "the interpreter in the image")
    rdzv_port: Port = option(29500, "the rank-0 pod's rendezvous port", "an integer from 1 to 65535")
    ttl_seconds_after_finished: Annotated[StrictInt, Field(ge=0, le=365 * 86400)] = option(
        3600, "how long a finished Job (and its pods' logs) is kept", "an integer from 0 to 31536000"
    )
    name_prefix: NamePrefix = option(
        "autotuner", "the prefix of every resource name", "a lowercase DNS-1035 label of at most 20 "
        "characters, e.g. 'autotuner' (tuners sharing a namespace need different prefixes)",
    )  # fmt: skip

    @model_validator(mode="before")
    @classmethod
    def _efa_uses_huge_pages(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("efa_per_node") and data.get("hugepages_2mi") is None:
            return {**data, "hugepages_2mi": EFA_DEFAULT_HUGEPAGES_2MI}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> "KubernetesOptions":
        if self.hugepages_2mi is not None and self.memory is None:
            raise OptionError(
                "needed with huge pages (EFA uses them): Kubernetes refuses a hugepages request without a "
                "memory request; give e.g. memory='64Gi'", option="memory",
            )  # fmt: skip
        if self.in_cluster and (self.kubeconfig or self.context):
            raise OptionError("uses the pod's service account; drop kubeconfig/context", option="in_cluster")
        return self
