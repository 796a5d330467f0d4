"""The Kubernetes executor's options: namespace, image, resources, scheduling, as the manifests use them."""

import math
import re
from decimal import Decimal
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
    QueueTimeout,
    fullmatch,
    option,
)

# What an EFA pod needs besides the device (libfabric registers memory in huge pages); AWS's examples.
EFA_DEFAULT_HUGEPAGES_2MI = "5120Mi"

# Names as the API server checks them (k8s.io/apimachinery/pkg/util/validation): a value it would refuse
# fails every launch at create time, one the kubelet cannot use leaves every pod pending.
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_NAME_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
QUALIFIED_NAME = ("a qualified name: an optional DNS-1123 subdomain prefix of at most 253 characters and '/', "
                  "then at most 63 of A-Z a-z 0-9 - _ . that start and end with a letter or digit")  # fmt: skip
LABEL_VALUE = (
    "a label value: empty, or at most 63 of A-Z a-z 0-9 - _ . that start and end with a letter or digit"
)


def is_qualified_name(key: str) -> bool:
    """A label key, a taint or toleration key (IsQualifiedName): [subdomain/]name."""
    prefix, slash, name = key.rpartition("/")
    if slash and not (len(prefix) <= 253 and _DNS_SUBDOMAIN.fullmatch(prefix)):
        return False
    return len(name) <= 63 and _NAME_PART.fullmatch(name) is not None


def is_label_value(value: str) -> bool:
    return value == "" or (len(value) <= 63 and _NAME_PART.fullmatch(value) is not None)


def _label_key(key: str) -> str:
    if not is_qualified_name(key):
        raise OptionError(f"key {key!r} is not {QUALIFIED_NAME}")
    return key


def _label_value(value: str) -> str:
    if not is_label_value(value):
        raise OptionError(f"value {value!r} is not {LABEL_VALUE}")
    return value


def _dns_subdomain(name: str) -> str:
    if len(name) > 253:
        raise OptionError(f"{len(name)} characters: a DNS-1123 subdomain has at most 253")
    if not _DNS_SUBDOMAIN.fullmatch(name):
        raise OptionError("not a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', each part starting "
                          "and ending with a letter or digit)")  # fmt: skip
    return name


_TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}
_TOLERATION_EFFECTS = {"NoSchedule", "PreferNoSchedule", "NoExecute"}


def _toleration_problem(t: dict[str, Any]) -> str | None:
    """What the API server's validateTolerations would refuse in `t` (None: nothing)."""
    if not t or not set(t) <= _TOLERATION_KEYS:
        return f"keys among {sorted(_TOLERATION_KEYS)}"
    if not all(isinstance(t.get(k, ""), str) for k in ("key", "operator", "value", "effect")):
        return "string key, operator, value and effect"
    key, operator, value = t.get("key", ""), t.get("operator", "Equal"), t.get("value", "")
    if operator not in ("Equal", "Exists"):
        return "operator Equal or Exists"
    if t.get("effect", "") not in _TOLERATION_EFFECTS | {""}:
        return f"effect among {sorted(_TOLERATION_EFFECTS)}"
    if t.get("tolerationSeconds") is not None and type(t["tolerationSeconds"]) is not int:
        return "an integer tolerationSeconds"
    if t.get("tolerationSeconds") is not None and t.get("effect") != "NoExecute":
        return (
            "tolerationSeconds only with effect NoExecute (it says how long a pod stays on a NoExecute taint)"
        )
    if key and not is_qualified_name(key):
        return f"key {key!r} to be {QUALIFIED_NAME}"
    if not key and operator != "Exists":  # an empty key matches every taint: only with Exists
        return "operator Exists when key is empty (an empty key with Exists tolerates every taint)"
    if operator == "Exists" and value:
        return "no value with operator Exists"
    if operator == "Equal" and not is_label_value(value):
        return f"value {value!r} to be {LABEL_VALUE}"
    return None


def _tolerations(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for item in items:
        expected = _toleration_problem(item)
        if expected:
            raise OptionError(f"expected {expected} (in {item!r})")
    return items


def _positive_int_as_str(value: Any) -> Any:
    return str(value) if type(value) is int and value > 0 else value


_QUANTITY_RE = r"(?![0.]*[a-zA-Z]*$)[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?"
_SUFFIX = re.compile(r"[a-zA-Z]*$")
_MULTIPLIER: dict[str, int | Decimal] = {"": 1, "m": Decimal("0.001"), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
               "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}  # fmt: skip
_PAGE = 2**21


def _bytes(quantity: str) -> Decimal:
    suffix = _SUFFIX.search(quantity).group()  # type: ignore[union-attr]
    return Decimal(quantity[: len(quantity) - len(suffix)]) * _MULTIPLIER[suffix]


def _at_least(floor: int) -> AfterValidator:
    """A size in bytes no trial pod can run with is a slip of the unit: '1m' is a thousandth of a byte
    ('m' is milli), '16' is 16 bytes. The API server takes both; the pod is then killed or never starts."""

    def check(quantity: str) -> str:
        if _bytes(quantity) < floor:
            raise OptionError(
                f"{_bytes(quantity).normalize():f} bytes, under {floor // 2**20}Mi "
                "('m' is milli, a plain number is bytes); give the size with its unit, e.g. '64Gi'"
            )
        return quantity

    return AfterValidator(check)


def _whole_2mi_pages(quantity: str) -> str:
    """The API server takes a hugepages-2Mi request only as whole pages. A plain number is bytes, as
    everywhere in Kubernetes (512 is 512 bytes, not 512 pages): the rule of a quantity, not a new one."""
    suffix = _SUFFIX.search(quantity).group()  # type: ignore[union-attr]
    size = _bytes(quantity)
    if size % _PAGE == 0:
        return quantity
    pages = math.ceil(size / _PAGE)
    if suffix:
        raise OptionError(f"not a multiple of 2Mi (whole 2 MiB pages); e.g. '{pages * 2}Mi' (pages: {pages})")
    counted = int(size) if size == int(size) else pages
    raise OptionError(
        f"{quantity} bytes (a plain number is bytes in Kubernetes), not a multiple of 2Mi (2097152 bytes); "
        f"give the size with its unit, e.g. '{counted * 2}Mi' for {counted} pages"
    )


# The tuner reads a finished Job's status and its index-0 pod's log after the Job ends: a poll later, and
# each API read may take REQUEST_TIMEOUT_S (30 s). A Job the TTL controller deletes before that is "gone":
# the launch fails with no result, and a search launch's env config is quarantined for nothing.
MIN_TTL_S = 300


def _ttl_floor(seconds: int) -> int:
    if seconds < MIN_TTL_S:
        raise OptionError(
            f"{seconds} s, under {MIN_TTL_S} s: Kubernetes would delete the finished Job before the tuner "
            "reads its state and result (the launch fails as gone and its env config is quarantined)"
        )
    return seconds


NamePrefix = Annotated[StrictStr, fullmatch(r"[a-z]([a-z0-9-]{0,18}[a-z0-9])?")]  # DNS-1035, at most 20
DnsLabel = Annotated[StrictStr, fullmatch(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")]  # at most 63
DnsSubdomain = Annotated[StrictStr, AfterValidator(_dns_subdomain)]
# An image reference (github.com/distribution/reference): [host[:port]/]path[:tag][@digest], the path in
# lower case. The API server takes any string without surrounding spaces; the kubelet then refuses it
# (InvalidImageName) and the pods stay pending until the launch times out.
_DOMAIN_PART = r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?"
_DOMAIN = rf"({_DOMAIN_PART}(\.{_DOMAIN_PART})*|\[[0-9A-Fa-f:]+\])(:[0-9]+)?"
_PATH_PART = r"[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_NAME_MAX = 255  # distribution/reference's NameTotalLengthMax: the name, its tag and digest not counted


def _image_name_length(image: str) -> str:
    name = image.partition("@")[0]
    if name.rfind(":") > name.rfind("/"):
        name = name[: name.rfind(":")]  # the tag
    if len(name) > IMAGE_NAME_MAX:
        raise ValueError(
            f"an image name of {len(name)} characters: the kubelet refuses over {IMAGE_NAME_MAX}"
        )
    return image


Image = Annotated[
    StrictStr,
    fullmatch(rf"({_DOMAIN}/)?{_PATH_PART}(/{_PATH_PART})*(:{_TAG})?(@{_DIGEST})?"),
    AfterValidator(_image_name_length),
]
# A command in the container's argv: no surrounding spaces (" python" is no executable), no control characters.
Command = Annotated[StrictStr, fullmatch(r"[^\s\x00-\x1f\x7f]([^\x00-\x1f\x7f]*[^\s\x00-\x1f\x7f])?")]
LabelKey = Annotated[StrictStr, AfterValidator(_label_key)]
LabelValue = Annotated[StrictStr, AfterValidator(_label_value)]
Tolerations = Annotated[list[dict[str, Any]], AfterValidator(_tolerations)]
# '64Gi', '5120Mi', '16', or a positive integer (kept as its string); never zero.
Quantity = Annotated[StrictStr, BeforeValidator(_positive_int_as_str), fullmatch(_QUANTITY_RE)]
HugePages2Mi = Annotated[Quantity, AfterValidator(_whole_2mi_pages)]
MemorySize = Annotated[Quantity, _at_least(64 * 2**20)]
ShmSize = Annotated[Quantity, _at_least(2**20)]
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
        ..., "the trial container image", "the trial container image (torch, torchrec and trials/): "
        "[registry[:port]/]lower/case/path[:tag][@digest], e.g. registry.example.com/nccl-autotuner-trial:0.1.0",
    )  # fmt: skip
    gpus_per_node: _UP_TO_64 | None = option(
        None, "GPUs per pod; default: nproc_per_node; 0 runs CPU trials", "an integer from 0 to 64"
    )
    efa_per_node: _UP_TO_64 = option(0, "EFA devices per pod", "an integer from 0 to 64")
    hugepages_2mi: HugePages2Mi | None = option(
        None,
        f"memory in 2 MiB huge pages per pod (default {EFA_DEFAULT_HUGEPAGES_2MI} with EFA)",
        f"{_QUANTITY} in whole 2Mi pages, e.g. '1Gi' (a plain number is bytes)",
    )
    memory: MemorySize | None = option(
        None, "memory per pod (needed with huge pages)", "a Kubernetes quantity such as '64Gi', at least 64Mi"
    )
    cpu: Quantity | None = option(
        None, "CPU request per pod (a request only: a CPU limit would throttle the measurement)", _QUANTITY
    )
    shm_size: ShmSize | None = option(
        None,
        "size limit of the pods' /dev/shm (memory-backed)",
        "a Kubernetes quantity such as '8Gi', at least 1Mi",
    )
    service_account: DnsSubdomain | None = option(
        None, "the pods' ServiceAccount", "a ServiceAccount name in the namespace (a DNS-1123 subdomain)"
    )
    # Opt-in: unset, the pods have no securityContext (the image's user, root in most trial images).
    run_as_user: Annotated[StrictInt, Field(ge=1, le=2**31 - 1)] | None = option(
        None, "the uid the trial pods run as, with the securityContext the 'restricted' Pod Security "
        "Standard requires (null: the image's user and no securityContext)",
        "an integer uid from 1 to 2147483647 (0, root, is what it avoids)",
    )  # fmt: skip
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
    python: Command = option(
        "python", "the interpreter in the image", "the interpreter in the image: a name on its PATH or a path, "
        "without surrounding spaces or control characters",
    )  # fmt: skip
    rdzv_port: Port = option(29500, "the rank-0 pod's rendezvous port", "an integer from 1 to 65535")
    ttl_seconds_after_finished: Annotated[
        StrictInt, Field(le=365 * 86400), AfterValidator(_ttl_floor)
    ] = option(
        3600, "how long a finished Job (and its pods' logs) is kept",
        f"an integer from {MIN_TTL_S} to 31536000 (seconds)",
    )  # fmt: skip
    name_prefix: NamePrefix = option(
        "autotuner", "the prefix of every resource name", "a lowercase DNS-1035 label of at most 20 "
        "characters, e.g. 'autotuner' (tuners sharing a namespace need different prefixes)",
    )  # fmt: skip
    queue_timeout_s: QueueTimeout | None = option(
        None, "how long a launch may wait for its pods to be scheduled (null: as long as it takes, up to the "
        "Job's deadline of a day; a queued launch says why meanwhile); the launch timeout counts from when "
        "all its pods are on nodes", "seconds > 0 (at most 30 days) or null",
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
