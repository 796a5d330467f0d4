"""The Kubernetes executor's options: namespace, image, resources, scheduling, as the manifests use them."""

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    model_validator,
)

from autotuner.executors.options import (
    ExecutorOptions,
    NonEmpty,
    OptionError,
    Port,
    fullmatch,
    option,
)

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
    fullmatch(r"(?![0.]*[a-zA-Z]*$)[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?"),
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
