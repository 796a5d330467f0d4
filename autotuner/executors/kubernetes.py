"""Kubernetes executor: one trial launch = a ConfigMap (the spec), a headless Service and an Indexed Job.

`dryrun` builds the three resources as plain dicts (golden-tested, validated against the client's
models) without importing the `kubernetes` package; only the methods that talk to the API server
import it. Pod `i` of the Job runs node rank `i` of torchrun:

    python -m torch.distributed.run --nnodes=N --nproc-per-node=G --node-rank=$(JOB_COMPLETION_INDEX)
        --rdzv-backend=static --master-addr=<job>-0.<service> --master-port=29500
        -m trials.bench --spec /spec/spec.json --out /tmp/result.json --quiet --print-result

Rendezvous is torchrun's static one (master address/port), not c10d. The node rank is already fixed
by the completion index and a trial never restarts (backoffLimit 0), so c10d's elastic membership buys
nothing; and c10d decides once, as the agent starts, whether it hosts the store, by resolving the
endpoint and comparing it with its own hostname and addresses. In a fresh pod `<job>-0.<service>`
often does not resolve yet (the headless Service's DNS record trails the pod by seconds; older torch
compares names only, which never match), so no agent hosts the store and every pod waits for nothing.
With static rendezvous node rank 0 always hosts it, and the others retry (DNS included) until it
answers. The Job's activeDeadlineSeconds bounds the wait.

Pods share no disk with the tuner: rank 0 prints the result as one `AUTOTUNER_RESULT {json}` line,
read back from the log of the index-0 pod.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
import logging
import math
import re
from dataclasses import dataclass
from typing import Any

import yaml

from autotuner.executors.base import AppDryrun, Description, Executor, LaunchRequest, LaunchState
from trials.result import RESULT_MARKER, SCHEMA_VERSION

log = logging.getLogger(__name__)

APP = "nccl-autotuner"
LAUNCH_LABEL = "nccl-autotuner/launch"
LAUNCH_NAME_ANNOTATION = "nccl-autotuner/launch-name"
INDEX_KEY = "batch.kubernetes.io/job-completion-index"  # pod label (k8s >= 1.28) and annotation (>= 1.21)
CONTAINER = "trial"
SPEC_DIR = "/spec"
RESULT_PATH = "/tmp/result.json"
MAX_NAME = 52  # pod hostnames are "<job>-<index>" and must stay within 63 characters
MAX_CONFIGMAP_BYTES = 1_000_000  # the API server refuses ConfigMaps over 1 MiB
REQUEST_TIMEOUT_S = 30  # a hung API server must not hang the study
# What an EFA pod needs besides the device (libfabric registers memory in huge pages); AWS's examples.
EFA_DEFAULT_HUGEPAGES_2MI = "5120Mi"

# Every (API group, resource, verb) the executor uses; deploy/k8s's Role grants these (tested).
REQUIRED_PERMISSIONS = frozenset({
    ("", "configmaps", "create"), ("", "configmaps", "patch"), ("", "configmaps", "delete"),
    ("", "services", "create"), ("", "services", "patch"), ("", "services", "delete"),
    ("batch", "jobs", "create"), ("batch", "jobs", "get"), ("batch", "jobs", "delete"),
    ("", "pods", "list"), ("", "pods/log", "get"),
})  # fmt: skip

_DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
_DNS_1035 = re.compile(r"^[a-z]([a-z0-9-]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}
_TOLERATION_EFFECTS = {"NoSchedule", "PreferNoSchedule", "NoExecute"}

# Job status -> launch state. Keys: a condition type that is True ("Failed"), refined by its reason
# where that matters ("Failed/DeadlineExceeded"), else what the counters say. Anything else: UNKNOWN.
_STATES: dict[str, LaunchState] = {
    "Failed": LaunchState.FAILED,
    "Failed/DeadlineExceeded": LaunchState.TIMEOUT,
    "FailureTarget": LaunchState.FAILED,  # k8s >= 1.31 sets it before Failed, while pods terminate
    "FailureTarget/DeadlineExceeded": LaunchState.TIMEOUT,
    "Complete": LaunchState.SUCCEEDED,
    "SuccessCriteriaMet": LaunchState.SUCCEEDED,
    "Suspended": LaunchState.PENDING,
    "Active": LaunchState.RUNNING,  # pods exist (possibly still pulling the image or in rendezvous)
    "Settling": LaunchState.RUNNING,  # no pod active, but the controller has not set Complete/Failed yet
    "Created": LaunchState.PENDING,  # the controller has not made pods yet
}
_CONDITION_ORDER = ("Failed", "FailureTarget", "Complete", "SuccessCriteriaMet", "Suspended")


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


class KubernetesExecutor(Executor):
    """Runs each launch as an Indexed Job of `nnodes` pods, `nproc_per_node` ranks each.

    Options (from the operator's JSON, AUTOTUNER_EXECUTOR_OPTIONS {"kubernetes": {...}}):
    namespace, image (required: torch, torchrec and this package's trials/), gpus_per_node (default:
    nproc_per_node; 0 runs CPU trials), efa_per_node, hugepages_2mi (default 5120Mi with EFA), memory
    (needed with huge pages), cpu (a request only: a CPU limit would throttle the measurement), shm_size,
    service_account, node_selector, tolerations, image_pull_policy, kubeconfig, context, in_cluster,
    python, rdzv_port, ttl_seconds_after_finished, name_prefix. `api_client` (a configured
    kubernetes.client.ApiClient) is for embedding and tests.
    """

    name = "kubernetes"

    def __init__(
        self,
        *,
        namespace: str = "default",
        image: str | None = None,
        gpus_per_node: int | None = None,
        efa_per_node: int = 0,
        hugepages_2mi: str | int | None = None,
        memory: str | int | None = None,
        cpu: str | int | None = None,
        shm_size: str | int | None = None,
        service_account: str | None = None,
        node_selector: dict[str, str] | None = None,
        tolerations: list[dict[str, Any]] | None = None,
        image_pull_policy: str | None = None,
        kubeconfig: str | None = None,
        context: str | None = None,
        in_cluster: bool = False,
        python: str = "python",
        rdzv_port: int = 29500,
        ttl_seconds_after_finished: int = 3600,
        name_prefix: str = "autotuner",
        api_client: Any = None,
        **unknown: Any,
    ) -> None:
        if unknown:
            valid = [p for p in inspect.signature(KubernetesExecutor.__init__).parameters
                     if p not in ("self", "unknown", "api_client")]  # fmt: skip
            raise ValueError(
                f"unknown kubernetes executor option(s) {', '.join(sorted(unknown))}; valid: {', '.join(valid)}"
            )
        _check(_DNS_LABEL.match(namespace or "") and len(namespace) <= 63, "namespace", namespace,
               "a DNS-1123 label (lowercase letters, digits, '-'), at most 63 characters")  # fmt: skip
        _check(isinstance(image, str) and image.strip() == image and image != "" and " " not in image,
               "image", image, "the trial container image (torch, torchrec and trials/), e.g. "
               "registry.example.com/nccl-autotuner-trial:0.1.0")  # fmt: skip
        if gpus_per_node is not None:
            _check_int("gpus_per_node", gpus_per_node, 0, 64)
        _check_int("efa_per_node", efa_per_node, 0, 64)
        _check_int("rdzv_port", rdzv_port, 1, 65535)
        _check_int("ttl_seconds_after_finished", ttl_seconds_after_finished, 0, 365 * 86400)
        hugepages = _quantity("hugepages_2mi", hugepages_2mi)
        if efa_per_node and hugepages is None:
            hugepages = EFA_DEFAULT_HUGEPAGES_2MI
        self.memory = _quantity("memory", memory)
        if hugepages is not None and self.memory is None:
            raise ValueError(
                "kubernetes executor option memory: needed with huge pages (EFA uses them): Kubernetes "
                "refuses a hugepages request without a memory request; give e.g. memory='64Gi'"
            )
        self.cpu = _quantity("cpu", cpu)
        self.shm_size = _quantity("shm_size", shm_size)
        if service_account is not None:
            _check(isinstance(service_account, str) and _DNS_SUBDOMAIN.match(service_account),
                   "service_account", service_account, "a ServiceAccount name in the namespace")  # fmt: skip
        _check(node_selector is None or (isinstance(node_selector, dict) and all(
            isinstance(k, str) and _LABEL_KEY.match(k) and isinstance(v, str) and _LABEL_VALUE.match(v)
            for k, v in node_selector.items())),
            "node_selector", node_selector, 'a map of label keys to label values, e.g. '
            '{"node.kubernetes.io/instance-type": "p5.48xlarge"}')  # fmt: skip
        if tolerations is not None:
            _check_tolerations(tolerations)
        _check(image_pull_policy in (None, "Always", "IfNotPresent", "Never"), "image_pull_policy",
               image_pull_policy, "Always, IfNotPresent or Never")  # fmt: skip
        _check(kubeconfig is None or (isinstance(kubeconfig, str) and kubeconfig), "kubeconfig", kubeconfig,
               "a path to a kubeconfig file")  # fmt: skip
        _check(context is None or (isinstance(context, str) and context), "context", context,
               "a context name of the kubeconfig")  # fmt: skip
        _check(isinstance(in_cluster, bool), "in_cluster", in_cluster, "true or false")
        if in_cluster and (kubeconfig or context):
            raise ValueError(
                "kubernetes executor: in_cluster uses the pod's service account; drop kubeconfig/context"
            )
        _check(isinstance(python, str) and python != "", "python", python, "the interpreter in the image")
        _check(isinstance(name_prefix, str) and _DNS_1035.match(name_prefix) and len(name_prefix) <= 20,
               "name_prefix", name_prefix, "a lowercase DNS-1035 label of at most 20 characters, e.g. "
               "'autotuner' (tuners sharing a namespace need different prefixes)")  # fmt: skip
        self.namespace = namespace
        self.image: str = image  # type: ignore[assignment]  # checked above
        self.gpus_per_node = gpus_per_node
        self.efa_per_node = efa_per_node
        self.hugepages_2mi = hugepages
        self.service_account = service_account
        self.node_selector = dict(node_selector) if node_selector else None
        self.tolerations = copy.deepcopy(tolerations) if tolerations else None
        self.image_pull_policy = image_pull_policy
        self.kubeconfig = kubeconfig
        self.context = context
        self.in_cluster = in_cluster
        self.python = python
        self.rdzv_port = rdzv_port
        self.ttl_seconds_after_finished = ttl_seconds_after_finished
        self.name_prefix = name_prefix
        self._api_client = api_client
        self._core: Any = None
        self._batch: Any = None

    # ------------------------------------------------------------------ the request

    def dryrun(self, launch: LaunchRequest) -> AppDryrun[KubernetesRequest]:
        nnodes, nproc = launch.nnodes, launch.nproc_per_node
        if nnodes < 1 or nproc < 1:
            raise ValueError(f"launch {launch.name}: nnodes and nproc_per_node must be >= 1")
        gpus = nproc if self.gpus_per_node is None else self.gpus_per_node
        if 0 < gpus < nproc:
            raise ValueError(
                f"launch {launch.name}: nproc_per_node {nproc} > gpus_per_node {gpus}: each rank needs a GPU "
                "of its own (set gpus_per_node to 0 for CPU trials)"
            )
        for key, value in launch.env.items():
            if not _ENV_NAME.match(key) or key == "JOB_COMPLETION_INDEX":
                raise ValueError(f"launch {launch.name}: {key!r} cannot be a pod environment variable name")
            if not isinstance(value, str):
                raise ValueError(f"launch {launch.name}: env {key} must be a string, got {value!r}")
        spec_json = json.dumps(launch.spec, indent=2, sort_keys=True) + "\n"
        if len(spec_json.encode()) > MAX_CONFIGMAP_BYTES:
            raise ValueError(
                f"launch {launch.name}: the spec is {len(spec_json.encode())} bytes; a ConfigMap holds 1 MiB"
            )

        name, ns = resource_name(self.name_prefix, launch.name), self.namespace
        labels = {
            "app.kubernetes.io/name": APP,
            "app.kubernetes.io/component": "trial",
            "app.kubernetes.io/managed-by": APP,
            LAUNCH_LABEL: name,
        }
        metadata = {
            "name": name,
            "namespace": ns,
            "labels": labels,
            "annotations": {LAUNCH_NAME_ANNOTATION: launch.name},
        }
        config_map = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": copy.deepcopy(metadata),
            "data": {"spec.json": spec_json},
        }
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": copy.deepcopy(metadata),
            "spec": {
                "clusterIP": "None",
                # DNS records before readiness: ranks resolve <job>-0.<service> while pods start.
                "publishNotReadyAddresses": True,
                "selector": {LAUNCH_LABEL: name},
                "ports": [{"name": "rdzv", "port": self.rdzv_port, "protocol": "TCP"}],
            },
        }
        args = [
            f"--nnodes={nnodes}",
            f"--nproc-per-node={nproc}",
            "--node-rank=$(JOB_COMPLETION_INDEX)",
            "--rdzv-backend=static",
            f"--master-addr={name}-0.{name}",
            f"--master-port={self.rdzv_port}",
            "-m", "trials.bench",
            "--spec", f"{SPEC_DIR}/spec.json",
            "--out", RESULT_PATH,
            "--quiet",
            "--print-result",
        ]  # fmt: skip
        env: list[dict[str, Any]] = [
            # The Job controller adds it too; declared here so $(JOB_COMPLETION_INDEX) above never
            # depends on that.
            {
                "name": "JOB_COMPLETION_INDEX",
                "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_KEY}']"}},
            },
            *({"name": k, "value": v} for k, v in sorted(launch.env.items())),
        ]
        container: dict[str, Any] = {
            "name": CONTAINER,
            "image": self.image,
            **({"imagePullPolicy": self.image_pull_policy} if self.image_pull_policy else {}),
            "command": [self.python, "-m", "torch.distributed.run"],
            "args": args,
            "env": env,
            "ports": [{"name": "rdzv", "containerPort": self.rdzv_port, "protocol": "TCP"}],
        }
        resources = self._resources(gpus)
        if resources:
            container["resources"] = resources
        container["volumeMounts"] = [
            {"name": "spec", "mountPath": SPEC_DIR, "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ]
        shm: dict[str, Any] = {"medium": "Memory"}
        if self.shm_size:
            shm["sizeLimit"] = self.shm_size
        pod_spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "subdomain": name,  # with the Job's per-index hostnames: <job>-<i>.<service> resolves
            "automountServiceAccountToken": False,  # trials never talk to the API server
            **({"serviceAccountName": self.service_account} if self.service_account else {}),
            **({"nodeSelector": dict(self.node_selector)} if self.node_selector else {}),
            **({"tolerations": copy.deepcopy(self.tolerations)} if self.tolerations else {}),
            "containers": [container],
            "volumes": [
                {"name": "spec", "configMap": {"name": name}},
                {"name": "dshm", "emptyDir": shm},
            ],
        }
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": copy.deepcopy(metadata),
            "spec": {
                "completionMode": "Indexed",
                "completions": nnodes,
                "parallelism": nnodes,
                "backoffLimit": 0,  # a failed rank fails the launch: no reruns with a changed world
                "activeDeadlineSeconds": max(1, math.ceil(launch.timeout_s)),
                "ttlSecondsAfterFinished": self.ttl_seconds_after_finished,
                "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
            },
        }
        request = KubernetesRequest(ns, name, config_map, service, job)
        return AppDryrun(request, render(request.resources), launch)

    def _resources(self, gpus: int) -> dict[str, dict[str, str]]:
        amounts: dict[str, str] = {}
        if gpus:
            amounts["nvidia.com/gpu"] = str(gpus)
        if self.efa_per_node:
            amounts["vpc.amazonaws.com/efa"] = str(self.efa_per_node)
        if self.hugepages_2mi:
            amounts["hugepages-2Mi"] = self.hugepages_2mi
        if self.memory:
            amounts["memory"] = self.memory
        requests = dict(amounts)
        if self.cpu:
            requests["cpu"] = self.cpu  # no CPU limit: CFS throttling would be measured as comm time
        return {k: v for k, v in (("requests", requests), ("limits", amounts)) if v}

    # ------------------------------------------------------------------ talking to the API server

    def _apis(self) -> tuple[Any, Any]:
        if self._core is None:
            try:
                from kubernetes import client, config
            except ImportError as exc:
                raise RuntimeError(
                    "the kubernetes executor needs the kubernetes Python client: "
                    "pip install 'nccl-autotuner[kubernetes]'"
                ) from exc
            api_client = self._api_client
            if api_client is None:
                if self.in_cluster:
                    configuration = client.Configuration()
                    config.load_incluster_config(client_configuration=configuration)
                    api_client = client.ApiClient(configuration)
                else:
                    api_client = config.new_client_from_config(
                        config_file=self.kubeconfig, context=self.context
                    )
            self._core, self._batch = client.CoreV1Api(api_client), client.BatchV1Api(api_client)
        return self._core, self._batch

    def schedule(self, dryrun: AppDryrun[KubernetesRequest]) -> str:
        """Create ConfigMap, Service and Job (bodies exactly as in the dryrun), then make the Job their
        owner so that its ttlSecondsAfterFinished garbage-collects them too."""
        req = dryrun.request
        core, batch = self._apis()
        from kubernetes.client.exceptions import ApiException

        ns, t = req.namespace, REQUEST_TIMEOUT_S
        created: list[str] = []
        try:
            core.create_namespaced_config_map(ns, copy.deepcopy(req.config_map), _request_timeout=t)
            created.append("configmap")
            core.create_namespaced_service(ns, copy.deepcopy(req.service), _request_timeout=t)
            created.append("service")
            job = batch.create_namespaced_job(ns, copy.deepcopy(req.job), _request_timeout=t)
        except Exception as exc:
            kind = ("ConfigMap", "Service", "Job")[len(created)]
            conflict = isinstance(exc, ApiException) and exc.status == 409
            # Undo what we made. A Job create that failed on the wire may have happened all the same;
            # one that conflicted is someone else's.
            self._delete(req.name, ns, created + (["job"] if kind == "Job" and not conflict else []))
            if conflict:
                raise RuntimeError(
                    f"{kind} {ns}/{req.name} already exists: a launch of this name ran before (another tuner "
                    "on this namespace? give it its own executor_options.name_prefix)"
                ) from exc
            raise RuntimeError(f"could not create {kind} {ns}/{req.name}: {_api_error(exc)}") from exc
        owner = [{
            "apiVersion": "batch/v1", "kind": "Job", "name": req.name, "uid": job.metadata.uid,
            "blockOwnerDeletion": False,  # True would need update on jobs/finalizers
        }]  # fmt: skip
        patch = [{"op": "add", "path": "/metadata/ownerReferences", "value": owner}]
        for kind, adopt in (("ConfigMap", core.patch_namespaced_config_map),
                            ("Service", core.patch_namespaced_service)):  # fmt: skip
            try:
                adopt(req.name, ns, patch, _request_timeout=t)
            except Exception as exc:  # the launch runs all the same; only the clean-up is left to do
                log.warning("could not make Job %s/%s own its %s: %s", ns, req.name, kind, _api_error(exc))
        return req.name

    def describe(self, backend_id: str, launch: LaunchRequest) -> Description:
        try:
            _, batch = self._apis()
            job = batch.read_namespaced_job(backend_id, self.namespace, _request_timeout=REQUEST_TIMEOUT_S)
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                return Description(
                    LaunchState.FAILED, None,
                    f"Job {self.namespace}/{backend_id} is gone (deleted, or removed by ttlSecondsAfterFinished)",
                )  # fmt: skip
            # A poll that fails (API server restarting, network) is not the trial's failure.
            return Description(
                LaunchState.UNKNOWN, None, f"could not read Job {backend_id}: {_api_error(exc)}"
            )
        desc = job_description(job.status)
        if desc.state in (LaunchState.FAILED, LaunchState.TIMEOUT):
            exit_code, detail = self._index0_exit(backend_id)
            desc.exit_code = exit_code
            if detail:
                desc.reason = f"{desc.reason}; {detail}" if desc.reason else detail
        return desc

    def how_cancelled(self, backend_id: str) -> str:
        return f"deleted Job {self.namespace}/{backend_id}"

    def cancel(self, backend_id: str, launch: LaunchRequest) -> None:
        """Delete the Job (Foreground: its pods go first), Service and ConfigMap. Errors are logged, not
        raised: the Job's activeDeadlineSeconds stops it anyway, and a study must not die of a clean-up."""
        self._delete(backend_id, self.namespace, ["job", "service", "configmap"])

    def logs(self, backend_id: str, launch: LaunchRequest, tail_lines: int = 60) -> str:
        return self._index0_log(backend_id, tail_lines) or ""

    def fetch_result(self, backend_id: str, launch: LaunchRequest) -> dict[str, Any] | None:
        return parse_result(self._index0_log(backend_id, None) or "")

    # ------------------------------------------------------------------ helpers

    def _delete(self, name: str, ns: str, kinds: list[str]) -> None:
        core, batch = self._apis()
        calls = {
            "job": lambda: batch.delete_namespaced_job(name, ns, propagation_policy="Foreground",
                                                       _request_timeout=REQUEST_TIMEOUT_S),
            "service": lambda: core.delete_namespaced_service(name, ns, _request_timeout=REQUEST_TIMEOUT_S),
            "configmap": lambda: core.delete_namespaced_config_map(name, ns, _request_timeout=REQUEST_TIMEOUT_S),
        }  # fmt: skip
        for kind in kinds:
            try:
                calls[kind]()
            except Exception as exc:
                if getattr(exc, "status", None) != 404:
                    log.warning("could not delete %s %s/%s: %s", kind, ns, name, _api_error(exc))

    def _index0_pod(self, job_name: str) -> Any:
        """The pod of completion index 0 (node rank 0: global rank 0 prints the result), or None.
        Matched by label or by annotation: the label only exists from Kubernetes 1.28 on."""
        core, _ = self._apis()
        pods = core.list_namespaced_pod(
            self.namespace, label_selector=f"{LAUNCH_LABEL}={job_name}", _request_timeout=REQUEST_TIMEOUT_S
        ).items
        index0 = [p for p in pods if "0" in (
            (p.metadata.labels or {}).get(INDEX_KEY), (p.metadata.annotations or {}).get(INDEX_KEY))]  # fmt: skip
        return max(index0, key=lambda p: str(p.metadata.creation_timestamp or ""), default=None)

    def _index0_log(self, job_name: str, tail_lines: int | None) -> str | None:
        try:
            pod = self._index0_pod(job_name)
            if pod is None:
                return None
            core, _ = self._apis()
            kwargs: dict[str, Any] = {"container": CONTAINER, "_request_timeout": REQUEST_TIMEOUT_S}
            if tail_lines is not None:
                kwargs["tail_lines"] = tail_lines
            return str(core.read_namespaced_pod_log(pod.metadata.name, self.namespace, **kwargs))
        except Exception as exc:  # logs are evidence, not control flow
            log.warning("could not read the log of Job %s/%s: %s", self.namespace, job_name, _api_error(exc))
            return None

    def _index0_exit(self, job_name: str) -> tuple[int | None, str]:
        try:
            pod = self._index0_pod(job_name)
        except Exception:
            return None, ""
        if pod is None:
            return None, ""
        for status in (pod.status and pod.status.container_statuses) or []:
            terminated = status.state and status.state.terminated
            if status.name == CONTAINER and terminated:
                why = (
                    f" ({terminated.reason})" if terminated.reason not in (None, "Error", "Completed") else ""
                )
                return terminated.exit_code, f"pod {pod.metadata.name}: exit code {terminated.exit_code}{why}"
        return None, ""


def job_description(status: Any) -> Description:
    """Map a V1JobStatus (None for a Job the controller has not looked at yet) to a Description."""
    if status is None:
        return Description(_STATES["Created"])
    true = {c.type: c for c in status.conditions or [] if c.status == "True"}
    condition = next((true[t] for t in _CONDITION_ORDER if t in true), None)
    if condition is not None:
        refined = f"{condition.type}/{condition.reason}"
        state = _STATES[refined] if refined in _STATES else _STATES[condition.type]
        reason = ": ".join(x for x in (condition.reason, condition.message) if x)
        return Description(state, None, reason if state != LaunchState.SUCCEEDED else "")
    unexpected = sorted(set(true) - set(_STATES))
    if status.active:
        key = "Active"
    elif unexpected:
        key = unexpected[0]
    elif status.succeeded or status.failed:
        key = "Settling"
    else:
        key = "Created"
    state = _STATES.get(key, LaunchState.UNKNOWN)
    return Description(state, None, f"Job condition {key}" if state == LaunchState.UNKNOWN else "")


def parse_result(log_text: str) -> dict[str, Any] | None:
    """The last `AUTOTUNER_RESULT {json}` line of a log, if it is a result of our schema."""
    marker = RESULT_MARKER + " "
    for line in reversed(log_text.splitlines()):
        at = line.find(marker)
        if at < 0:
            continue
        try:
            data = json.loads(line[at + len(marker) :])
        except ValueError:
            return None
        return data if isinstance(data, dict) and data.get("schema_version") == SCHEMA_VERSION else None
    return None


def _api_error(exc: BaseException) -> str:
    status, reason = getattr(exc, "status", None), getattr(exc, "reason", None)
    body = getattr(exc, "body", None)
    message = ""
    if isinstance(body, (str, bytes)):
        try:
            message = json.loads(body).get("message", "")
        except (ValueError, AttributeError):
            message = ""
    if status is not None:
        return f"HTTP {status} {reason or ''}{': ' + message if message else ''}".strip()
    return f"{type(exc).__name__}: {exc}"


def _check(ok: Any, option: str, value: Any, expected: str) -> None:
    if not ok:
        raise ValueError(f"kubernetes executor option {option}={value!r}: expected {expected}")


def _check_int(option: str, value: Any, low: int, high: int) -> None:
    _check(isinstance(value, int) and not isinstance(value, bool) and low <= value <= high, option, value,
           f"an integer from {low} to {high}")  # fmt: skip


def _quantity(option: str, value: str | int | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return str(value)
    _check(isinstance(value, str) and _QUANTITY.match(value) and value.strip("0.") != "", option, value,
           "a Kubernetes quantity such as '64Gi', '5120Mi' or '16'")  # fmt: skip
    return value  # type: ignore[return-value]


def _check_tolerations(tolerations: Any) -> None:
    expected = ('a list of tolerations, e.g. [{"key": "nvidia.com/gpu", "operator": "Exists", '
                '"effect": "NoSchedule"}]')  # fmt: skip
    _check(isinstance(tolerations, list), "tolerations", tolerations, expected)
    for item in tolerations:
        _check(isinstance(item, dict) and item and set(item) <= _TOLERATION_KEYS, "tolerations", item,
               f"keys among {sorted(_TOLERATION_KEYS)}")  # fmt: skip
        _check(item.get("operator", "Equal") in ("Equal", "Exists"), "tolerations", item,
               "operator Equal or Exists")  # fmt: skip
        _check(item.get("effect", "") in _TOLERATION_EFFECTS | {""}, "tolerations", item,
               f"effect among {sorted(_TOLERATION_EFFECTS)}")  # fmt: skip
        _check(all(isinstance(item.get(k, ""), str) for k in ("key", "operator", "value", "effect")),
               "tolerations", item, "string key, operator, value and effect")  # fmt: skip
        seconds = item.get("tolerationSeconds")
        _check(seconds is None or (isinstance(seconds, int) and not isinstance(seconds, bool)), "tolerations",
               item, "an integer tolerationSeconds")  # fmt: skip
        _check(not (item.get("operator") == "Exists" and item.get("value")), "tolerations", item,
               "no value with operator Exists")  # fmt: skip
