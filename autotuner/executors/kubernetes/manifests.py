"""The Kubernetes resources of one trial launch: a ConfigMap (the spec), a headless Service, an Indexed Job.

Small builders, one per resource (and the pod, container and resources inside the Job), all plain
dicts exactly as the API server receives them (golden-tested in tests/executors/golden/k8s-*.yaml,
checked against the client's models), made without the `kubernetes` package. Pod `i` of the Job runs
node rank `i` of torchrun with static rendezvous on the index-0 pod (see `kubernetes` for why).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import re
import uuid
from dataclasses import dataclass
from typing import Any

import yaml

from autotuner.executors.base import LaunchRequest
from autotuner.executors.kubernetes.options import KubernetesOptions

APP = "nccl-autotuner"
LAUNCH_LABEL = "nccl-autotuner/launch"
LAUNCH_NAME_ANNOTATION = "nccl-autotuner/launch-name"
# One value per `schedule`, on the three resources it creates: a create whose answer was lost, read back,
# is ours only if it carries it (the same launch name, spec and env may come from another tuner).
CREATE_ID_ANNOTATION = "nccl-autotuner/create-id"
# What the Job controller writes as the reason of a Job failed by its podFailurePolicy (`_job_spec`).
POD_FAILURE_POLICY_REASON = "PodFailurePolicy"
INDEX_KEY = "batch.kubernetes.io/job-completion-index"  # pod label (k8s >= 1.28) and annotation (>= 1.21)
CONTAINER = "trial"
SPEC_DIR = "/spec"
# With run_as_user: an emptyDir here, and HOME here. The uid that option names has, in most images, no
# passwd entry, so the runtime gives it HOME=/, which it cannot write (torch, triton and the CUDA driver
# keep their caches under HOME); and rank 0 must write RESULT_PATH whoever owns the image's /tmp.
TMP_DIR = "/tmp"
RESULT_PATH = f"{TMP_DIR}/result.json"
MAX_NAME = 52  # pod hostnames are "<job>-<index>" and must stay within 63 characters
MAX_CONFIGMAP_BYTES = 1_000_000  # the API server refuses ConfigMaps over 1 MiB
# The Job's activeDeadlineSeconds counts from its start, time waiting for GPUs included; the tuner's
# launch timeout counts from when the pods are scheduled (Executor.wait). So the deadline is the launch
# timeout plus the queue allowance (queue_timeout_s, else QUEUE_ALLOWANCE_S: a Job left by a tuner that
# died still ends), plus DEADLINE_SLACK_S: the tuner sees the pods scheduled a poll late (a poll is two
# API reads of at most 30 s each), and its own timeout, not Kubernetes', is to end the launch.
QUEUE_ALLOWANCE_S = 24 * 3600
DEADLINE_SLACK_S = 120
_POD_ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")


@dataclass(frozen=True)
class KubernetesRequest:
    """What `schedule` sends, in order: plain dicts, exactly as the API server receives them."""

    namespace: str
    name: str  # of all three resources
    config_map: dict[str, Any]
    service: dict[str, Any]
    job: dict[str, Any]

    @property
    def resources(self) -> list[dict[str, Any]]:
        return [self.config_map, self.service, self.job]

    def body(self, kind: str) -> dict[str, Any]:
        """The resource of this kind ("ConfigMap", "Service", "Job")."""
        return {"ConfigMap": self.config_map, "Service": self.service, "Job": self.job}[kind]


def create_id() -> str:
    """A value of CREATE_ID_ANNOTATION: unique to one `schedule`."""
    return uuid.uuid4().hex


def stamped(req: KubernetesRequest, token: str) -> KubernetesRequest:
    """`req` with `token` as the CREATE_ID_ANNOTATION of its three resources (not of the pods: only the
    objects created are read back)."""
    bodies: dict[str, Any] = {}
    for field, body in (("config_map", req.config_map), ("service", req.service), ("job", req.job)):
        body = copy.deepcopy(body)
        body["metadata"]["annotations"][CREATE_ID_ANNOTATION] = token
        bodies[field] = body
    return dataclasses.replace(req, **bodies)


class _Dumper(yaml.SafeDumper):
    pass


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None  # the spec reads as JSON in the rendering, not as "\n"s
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_representer)


def render(resources: list[dict[str, Any]]) -> str:
    return yaml.dump_all(resources, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000)


def resource_name(prefix: str, launch_name: str) -> str:
    """A DNS-1035 label (Service names need one) of at most MAX_NAME characters, unique per launch name:
    names changed by the cleanup or cut short get a hash of the original."""
    slug = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", launch_name.lower())).strip("-")
    name = f"{prefix}-{slug}" if slug else prefix
    if slug != launch_name or len(name) > MAX_NAME:
        digest = hashlib.sha256(launch_name.encode()).hexdigest()[:8]
        name = f"{name[: MAX_NAME - 9].rstrip('-')}-{digest}"
    return name


def manifests(launch: LaunchRequest, options: KubernetesOptions) -> KubernetesRequest:
    """The launch's three resources; ValueError for a launch that cannot run as asked."""
    gpus = _gpus(launch, options)
    spec_json = _spec_json(launch)
    o, name = options, resource_name(options.name_prefix, launch.name)

    def metadata() -> dict[str, Any]:
        return {"name": name, "namespace": o.namespace, "labels": _labels(name),
                "annotations": {LAUNCH_NAME_ANNOTATION: launch.name}}  # fmt: skip

    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(),
        "data": {"spec.json": spec_json},
    }
    service = {"apiVersion": "v1", "kind": "Service", "metadata": metadata(), "spec": _service_spec(name, o)}
    pod = _pod_spec(name, _container(name, launch, o, gpus), o)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(),
        "spec": _job_spec(name, launch, o, pod),
    }
    return KubernetesRequest(o.namespace, name, config_map, service, job)


def _gpus(launch: LaunchRequest, o: KubernetesOptions) -> int:
    nnodes, nproc = launch.nnodes, launch.nproc_per_node
    if nnodes < 1 or nproc < 1:
        raise ValueError(f"launch {launch.name}: nnodes and nproc_per_node must be >= 1")
    gpus = nproc if o.gpus_per_node is None else o.gpus_per_node
    if 0 < gpus < nproc:
        raise ValueError(
            f"launch {launch.name}: nproc_per_node {nproc} > gpus_per_node {gpus}: each rank needs a GPU "
            "of its own (set gpus_per_node to 0 for CPU trials)"
        )
    for key, value in launch.env.items():
        if not _POD_ENV_NAME.fullmatch(key) or key == "JOB_COMPLETION_INDEX":
            raise ValueError(f"launch {launch.name}: {key!r} cannot be a pod environment variable name")
        if not isinstance(value, str):
            raise ValueError(f"launch {launch.name}: env {key} must be a string, got {value!r}")
    return gpus


def _spec_json(launch: LaunchRequest) -> str:
    spec_json = json.dumps(launch.spec, indent=2, sort_keys=True) + "\n"
    if len(spec_json.encode()) > MAX_CONFIGMAP_BYTES:
        raise ValueError(
            f"launch {launch.name}: the spec is {len(spec_json.encode())} bytes; a ConfigMap holds 1 MiB"
        )
    return spec_json


def _labels(name: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": APP,
        "app.kubernetes.io/component": "trial",
        "app.kubernetes.io/managed-by": APP,
        LAUNCH_LABEL: name,
    }


def _service_spec(name: str, o: KubernetesOptions) -> dict[str, Any]:
    return {
        "clusterIP": "None",
        # DNS records before readiness: ranks resolve <job>-0.<service> while pods start.
        "publishNotReadyAddresses": True,
        "selector": {LAUNCH_LABEL: name},
        "ports": [{"name": "rdzv", "port": o.rdzv_port, "protocol": "TCP"}],
    }


def _job_spec(name: str, launch: LaunchRequest, o: KubernetesOptions, pod: dict[str, Any]) -> dict[str, Any]:
    return {
        "completionMode": "Indexed",
        "completions": launch.nnodes,
        "parallelism": launch.nnodes,
        "backoffLimit": 0,  # a failed rank fails the launch: no reruns with a changed world
        # A pod the cluster takes away (preempted, evicted, its node drained or lost: the pod's
        # DisruptionTarget condition) fails the Job at once, and the Job's own condition (reason
        # PodFailurePolicy) still says so once the pod is gone: the executor reads it as cancelled, not as
        # the config's failure. FailJob, not Ignore: a replacement pod would join ranks that already failed
        # without their peer. The executor reads any PodFailurePolicy failure as a disruption: keep this
        # the only rule. Needs the pods' restartPolicy Never (`_pod_spec`).
        "podFailurePolicy": {
            "rules": [
                {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
            ]
        },
        "activeDeadlineSeconds": active_deadline_s(launch, o),
        "ttlSecondsAfterFinished": o.ttl_seconds_after_finished,
        "template": {"metadata": {"labels": _labels(name)}, "spec": pod},
    }


def active_deadline_s(launch: LaunchRequest, o: KubernetesOptions) -> int:
    """The Job's activeDeadlineSeconds: run time, queue allowance and slack (see QUEUE_ALLOWANCE_S)."""
    queue = QUEUE_ALLOWANCE_S if o.queue_timeout_s is None else o.queue_timeout_s
    return math.ceil(max(0.0, launch.timeout_s) + queue) + DEADLINE_SLACK_S


def _pod_spec(name: str, container: dict[str, Any], o: KubernetesOptions) -> dict[str, Any]:
    return {
        "restartPolicy": "Never",  # a rank is never rerun; and the Job's podFailurePolicy requires it
        "subdomain": name,  # with the Job's per-index hostnames: <job>-<i>.<service> resolves
        "automountServiceAccountToken": False,  # trials never talk to the API server
        # No <SERVICE>_PORT / _SERVICE_HOST variables of the namespace's Services (the tuner's own among
        # them): the trial records the env it saw, and those are no part of the config measured.
        "enableServiceLinks": False,
        **_given("serviceAccountName", o.service_account),
        **_given("nodeSelector", copy.deepcopy(o.node_selector)),
        **_given("tolerations", copy.deepcopy(o.tolerations)),
        **_given("securityContext", _pod_security(o)),
        "containers": [container],  # any other (init, sidecar) takes _container_security(o) too
        "volumes": [
            {"name": "spec", "configMap": {"name": name}},
            {"name": "dshm", "emptyDir": {"medium": "Memory", **_given("sizeLimit", o.shm_size)}},
            *([{"name": "tmp", "emptyDir": {}}] if o.run_as_user else []),
        ],
    }


def _pod_security(o: KubernetesOptions) -> dict[str, Any] | None:
    """What the "restricted" Pod Security Standard asks of the pod, with run_as_user (None without).
    No runAsGroup or fsGroup: the primary group stays the image's for that uid (0 where it has no passwd
    entry), which images made for any uid keep their writable paths open to; the pod's volumes need no
    fsGroup (emptyDirs are world-writable, the ConfigMap world-readable), and Pod Security Admission
    checks neither."""
    if not o.run_as_user:
        return None
    return {"runAsNonRoot": True, "runAsUser": o.run_as_user, "seccompProfile": {"type": "RuntimeDefault"}}


def _container_security(o: KubernetesOptions) -> dict[str, Any] | None:
    """The "restricted" standard's per-container part, with run_as_user (None without). No IPC_LOCK for
    EFA: pods without the option have none either (pinned memory rests on the node's RLIMIT_MEMLOCK), and
    a capability added to a non-root container never reaches its processes (kubernetes#56374: no ambient
    capabilities), while adding it would put the pods past "baseline" and "restricted"."""
    if not o.run_as_user:
        return None
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _container(name: str, launch: LaunchRequest, o: KubernetesOptions, gpus: int) -> dict[str, Any]:
    torchrun = [
        f"--nnodes={launch.nnodes}",
        f"--nproc-per-node={launch.nproc_per_node}",
        "--node-rank=$(JOB_COMPLETION_INDEX)",
        "--rdzv-backend=static",
        f"--master-addr={name}-0.{name}",
        f"--master-port={o.rdzv_port}",
    ]
    # The Job controller sets JOB_COMPLETION_INDEX too; declared here so $(JOB_COMPLETION_INDEX) above
    # never depends on that.
    index = {"name": "JOB_COMPLETION_INDEX",
             "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_KEY}']"}}}  # fmt: skip
    home = [{"name": "HOME", "value": TMP_DIR}] if o.run_as_user and "HOME" not in launch.env else []
    return {
        "name": CONTAINER,
        "image": o.image,
        **_given("imagePullPolicy", o.image_pull_policy),
        "command": [o.python, "-m", "torch.distributed.run"],
        "args": [*torchrun, *launch.trial_argv(f"{SPEC_DIR}/spec.json", RESULT_PATH, print_result=True)],
        # An empty value as the API server stores it (EnvVar.value is omitempty: "" is not kept, and the
        # variable is set empty all the same): a Job read back is compared with what was sent (is_ours).
        "env": [
            index,
            *home,
            *({"name": k, **({"value": v} if v else {})} for k, v in sorted(launch.env.items())),
        ],
        "ports": [{"name": "rdzv", "containerPort": o.rdzv_port, "protocol": "TCP"}],
        **_given("resources", _resources(o, gpus)),
        "volumeMounts": [
            {"name": "spec", "mountPath": SPEC_DIR, "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},
            *([{"name": "tmp", "mountPath": TMP_DIR}] if o.run_as_user else []),
        ],
        **_given("securityContext", _container_security(o)),
    }


def _resources(o: KubernetesOptions, gpus: int) -> dict[str, dict[str, str]]:
    amounts = {
        **_given("nvidia.com/gpu", str(gpus) if gpus else None),
        **_given("vpc.amazonaws.com/efa", str(o.efa_per_node) if o.efa_per_node else None),
        **_given("hugepages-2Mi", o.hugepages_2mi),
        **_given("memory", o.memory),
    }
    # Extended resources and huge pages: requests == limits. No CPU limit: CFS throttling would be
    # measured as comm time.
    requests = {**amounts, **_given("cpu", o.cpu)}
    return {**_given("requests", requests), **_given("limits", amounts)}


def _given(key: str, value: Any) -> dict[str, Any]:
    """`{key: value}` to splice into a resource, or nothing where the value is unset or empty."""
    return {key: value} if value else {}
