"""The Kubernetes executor with no cluster: golden YAML of the whole request, every resource checked
against the client's models, and the API calls made by the real client against an in-memory server.

`UPDATE_GOLDEN=1 pytest tests/executors/test_kubernetes.py` rewrites tests/executors/golden/k8s-*.yaml;
review the diff: the committed files are what the test holds the executor to.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import os
import re
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
import yaml

import autotuner.executors.kubernetes.executor as kexec
from autotuner.executors import LaunchRequest, LaunchState
from autotuner.executors.kubernetes.executor import (
    INDEX_KEY,
    LAUNCH_LABEL,
    MAX_NAME,
    REQUIRED_PERMISSIONS,
    KubernetesExecutor,
    job_description,
    parse_result,
    resource_name,
)
from autotuner.executors.results import ResultError
from tests.helpers import WaitClock
from trials.result import SCHEMA_VERSION

kubernetes = pytest.importorskip("kubernetes")
from kubernetes.client import ApiClient, Configuration  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden"
NS = "nccl-autotuner"
IMAGE = "registry.example.com/nccl-autotuner-trial:0.1.0"
MODELS = {"ConfigMap": "V1ConfigMap", "Service": "V1Service", "Job": "V1Job"}

SPEC = {
    "workload": {"name": "dlrm-small", "tables": [{"name": f"t{i}", "num_embeddings": 100_000, "embedding_dim": 128,
                                                   "pooling_factor": 20} for i in range(2)]},
    "candidates": [{"fwd_precision": "fp16", "bwd_precision": "bf16", "batch_size": 2048},
                   {"fwd_precision": "fp8", "bwd_precision": "bf16", "batch_size": 2048}],
    "warmup": 3,
    "iterations": 30,
}  # fmt: skip
ENV = {
    "NCCL_NSOCKS_PERTHREAD": "4",
    "NCCL_SOCKET_NTHREADS": "2",
    "FI_EFA_USE_DEVICE_RDMA": "1",
    "NCCL_SOCKET_IFNAME": "eth0,eth1;rm -rf /",  # a value handed on verbatim, never through a shell
}

# Three clusters: plain GPU nodes, p4d (8 A100, 4 EFA), p5 (8 H100, 32 EFA).
EXECUTORS: dict[int, dict[str, Any]] = {
    1: dict(namespace=NS, image=IMAGE),
    2: dict(namespace=NS, image=IMAGE, efa_per_node=4, memory="256Gi", cpu="32", service_account="trial",
            node_selector={"node.kubernetes.io/instance-type": "p4d.24xlarge"},
            tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]),
    8: dict(namespace=NS, image=IMAGE, efa_per_node=32, hugepages_2mi="10Gi", memory="512Gi", cpu="96",
            shm_size="64Gi", image_pull_policy="IfNotPresent", rdzv_port=29400, ttl_seconds_after_finished=600,
            queue_timeout_s=3600,
            node_selector={"node.kubernetes.io/instance-type": "p5.48xlarge"},
            tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                         {"key": "vpc.amazonaws.com/efa", "operator": "Exists", "effect": "NoSchedule"}]),
}  # fmt: skip


def launch(nnodes: int = 2, **kw: Any) -> LaunchRequest:
    defaults: dict[str, Any] = dict(name="s1-l7", spec=SPEC, env=ENV, workdir=Path("/srv/autotuner/study-1/launch-0007"),
                                    nproc_per_node=8, nnodes=nnodes, timeout_s=900, python="/tuner/python")  # fmt: skip
    defaults.update(kw)
    return LaunchRequest(**defaults)


def executor(nnodes: int = 2, **kw: Any) -> KubernetesExecutor:
    return KubernetesExecutor(**{**EXECUTORS[nnodes], **kw})


def check_model(resource: dict[str, Any]) -> None:
    """The resource deserializes into the client's model and nothing is dropped on the way."""
    api = ApiClient()
    model = api._ApiClient__deserialize(copy.deepcopy(resource), MODELS[resource["kind"]])  # type: ignore[attr-defined]
    assert api.sanitize_for_serialization(model) == resource


# ---------------------------------------------------------------------------------------- the request


@pytest.mark.parametrize("nnodes", [1, 2, 8])
def test_dryrun_is_golden(nnodes):
    rendered = executor(nnodes).dryrun(launch(nnodes)).rendered
    path = GOLDEN / f"k8s-n{nnodes}.yaml"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(rendered)
    assert rendered == path.read_text()


@pytest.mark.parametrize("nnodes", [1, 2, 8])
def test_every_resource_is_a_valid_model_and_the_rendering_is_faithful(nnodes):
    request = executor(nnodes).dryrun(launch(nnodes)).request
    for resource in request.resources:
        check_model(resource)
    dryrun = executor(nnodes).dryrun(launch(nnodes))
    assert list(yaml.safe_load_all(dryrun.rendered)) == request.resources
    assert [r["kind"] for r in request.resources] == ["ConfigMap", "Service", "Job"]


@pytest.mark.parametrize(
    "options",
    [dict(gpus_per_node=0), dict(gpus_per_node=0, cpu="8"), dict(memory="32Gi"), dict(hugepages_2mi=1 << 30, memory=1 << 31)],
    ids=["cpu-only", "cpu-request", "memory", "integer-quantities"],  # integers are bytes, as in a quantity
)  # fmt: skip
def test_variants_are_valid_models(options):
    request = KubernetesExecutor(image=IMAGE, **options).dryrun(launch(4, nproc_per_node=2)).request
    for resource in request.resources:
        check_model(resource)


def test_a_model_check_catches_a_dropped_field():
    job = executor().dryrun(launch()).request.job
    job["spec"]["template"]["spec"]["containers"][0]["enviroment"] = []
    with pytest.raises(AssertionError):
        check_model(job)


@pytest.mark.parametrize("nnodes", [1, 2, 8, 64])
def test_multi_node_job_shape(nnodes):
    ex = KubernetesExecutor(namespace=NS, image=IMAGE, rdzv_port=29501)
    request = ex.dryrun(launch(nnodes, nproc_per_node=4, timeout_s=299.5)).request
    job, name = request.job, request.name
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", nnodes, nnodes)
    assert spec["backoffLimit"] == 0
    assert spec["activeDeadlineSeconds"] == math.ceil(299.5 + 24 * 3600) + 120  # queue allowance, slack
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["python", "-m", "torch.distributed.run"]
    args = container["args"]
    assert args[:6] == [f"--nnodes={nnodes}", "--nproc-per-node=4", "--node-rank=$(JOB_COMPLETION_INDEX)",
                        "--rdzv-backend=static", f"--master-addr={name}-0.{name}", "--master-port=29501"]  # fmt: skip
    assert args[6:] == ["-m", "trials.run", "--spec", "/spec/spec.json", "--out", "/tmp/result.json",
                        "--quiet", "--print-result"]  # fmt: skip
    # <job>-0.<service> resolves: pods take the Service as subdomain, the Service selects them, and
    # publishes them before they are ready.
    assert pod["subdomain"] == request.service["metadata"]["name"] == name
    assert request.service["spec"]["clusterIP"] == "None"
    assert request.service["spec"]["publishNotReadyAddresses"] is True
    assert request.service["spec"]["selector"].items() <= spec["template"]["metadata"]["labels"].items()
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
    # One template, so every pod exports the same launch env, values as strings.
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert env == ENV
    assert [e["name"] for e in container["env"]][1:] == sorted(ENV)
    index = container["env"][0]
    assert index["valueFrom"]["fieldRef"]["fieldPath"] == f"metadata.annotations['{INDEX_KEY}']"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts == {"spec": "/spec", "dshm": "/dev/shm"}
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in pod["volumes"]
    assert json.loads(request.config_map["data"]["spec.json"]) == SPEC


@pytest.mark.parametrize(
    ("queue_timeout_s", "deadline"),
    [(None, 900 + 24 * 3600 + 120), (600, 900 + 600 + 120), (0.5, 901 + 120)],
    ids=["default-allowance", "queue-timeout", "fraction"],
)
def test_the_job_deadline_leaves_room_for_the_queue(queue_timeout_s, deadline):
    """activeDeadlineSeconds counts from the Job's start, time waiting for GPUs included: the launch
    timeout (900 s) plus the queue allowance plus slack, so that a Job that waited long for nodes is not
    failed by Kubernetes (DeadlineExceeded) before it ran its time, yet one left behind still ends."""
    ex = KubernetesExecutor(namespace=NS, image=IMAGE, queue_timeout_s=queue_timeout_s)
    assert ex.dryrun(launch()).request.job["spec"]["activeDeadlineSeconds"] == deadline


@pytest.mark.parametrize("nnodes", [1, 2, 8])
def test_trial_pods_see_no_service_link_variables(nnodes):
    """Kubernetes injects variables for every Service of the namespace into a pod (NCCL_AUTOTUNER_PORT,
    NCCL_AUTOTUNER_SERVICE_HOST ... of the tuner's own Service `nccl-autotuner`) unless the pod opts out:
    a trial records the env it saw, and those would read as part of the config it measured."""
    pod = executor(nnodes).dryrun(launch(nnodes)).request.job["spec"]["template"]["spec"]
    assert pod["enableServiceLinks"] is False


def test_everything_carries_the_launch_labels():
    request = executor().dryrun(launch()).request
    for resource in request.resources:
        assert resource["metadata"]["labels"][LAUNCH_LABEL] == request.name
        assert resource["metadata"]["annotations"]["nccl-autotuner/launch-name"] == "s1-l7"
        assert resource["metadata"]["namespace"] == NS
    assert request.job["spec"]["template"]["metadata"]["labels"][LAUNCH_LABEL] == request.name


def test_resources_follow_the_options():
    def resources(**kw: Any) -> dict[str, Any]:
        job = KubernetesExecutor(image=IMAGE, **kw).dryrun(launch(2, nproc_per_node=8)).request.job
        return job["spec"]["template"]["spec"]["containers"][0].get("resources", {})

    assert resources() == {"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}
    assert resources(gpus_per_node=0) == {}
    assert resources(gpus_per_node=0, cpu="4") == {"requests": {"cpu": "4"}}
    efa = resources(efa_per_node=4, memory="64Gi")
    assert efa["limits"] == {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "4", "hugepages-2Mi": "5120Mi",
                             "memory": "64Gi"}  # fmt: skip
    assert efa["requests"] == efa["limits"]  # extended resources and huge pages: requests == limits
    assert "cpu" not in resources(cpu="16")["limits"]  # a CPU limit would throttle the measurement


@pytest.mark.parametrize(
    "launch_name", ["s1-l7", "S12_L7", "s1.l7", "--x--", "x" * 200, "s1-l7-" + "y" * 60, "ünïcode"]
)
def test_names_are_dns_safe(launch_name):
    name = executor().dryrun(launch(name=launch_name)).request.name
    assert re.fullmatch(r"[a-z]([a-z0-9-]*[a-z0-9])?", name)
    assert len(name) <= MAX_NAME
    assert len(f"{name}-4095") <= 63  # the pod hostname of the last index


def test_names_are_readable_and_distinct():
    assert resource_name("autotuner", "s3-l12") == "autotuner-s3-l12"
    names = ["s1-l7", "S1-l7", "s1_l7", "x" * 100 + "a", "x" * 100 + "b"]
    assert len({resource_name("autotuner", n) for n in names}) == len(names)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(image=None), "image"),
        (dict(image="two words"), "image"),
        # the grammar holds, the kubelet refuses the length: every pod pending until the launch times out
        (dict(image="registry.example.com/" + "a" * 235 + ":1.0"), "an image name of 256 characters"),
        (dict(namespace="Bad_NS"), "namespace"),
        (dict(gpus_per_node=-1), "gpus_per_node"),
        (dict(gpus_per_node=True), "gpus_per_node"),
        (dict(efa_per_node="4"), "efa_per_node"),
        (dict(efa_per_node=4), "memory: needed with huge pages"),
        (dict(hugepages_2mi="2Gi"), "memory: needed with huge pages"),
        (dict(memory="64GB"), "quantity"),
        (dict(memory="lots"), "quantity"),
        (dict(cpu=0), "quantity"),
        (dict(memory="0Gi"), "quantity"),  # zero with a unit is still zero
        (dict(memory="0.0Mi"), "quantity"),
        (dict(cpu="0m"), "quantity"),
        (dict(hugepages_2mi="00k", memory="1Gi"), "quantity"),
        (
            dict(memory="1m"),
            r"memory='1m': 0.001 bytes, under 64Mi \('m' is milli",
        ),  # the API server takes it
        (dict(memory=16), "memory=16: 16 bytes, under 64Mi"),
        (dict(shm_size="512k"), "shm_size='512k': 512000 bytes, under 1Mi"),
        (dict(node_selector={"pool": 1}), "node_selector"),
        (dict(node_selector=["gpu"]), "node_selector"),
        (dict(tolerations={"key": "x"}), "tolerations"),
        (dict(tolerations=[{"key": "x", "operator": "Maybe"}]), "operator"),
        (dict(tolerations=[{"key": "x", "efect": "NoSchedule"}]), "keys among"),
        (dict(service_account="Not OK"), "service_account"),
        (dict(rdzv_port=0), "rdzv_port"),
        (dict(in_cluster="yes"), "in_cluster"),
        (dict(in_cluster=True, kubeconfig="/k"), "in_cluster"),
        (dict(name_prefix="1abc"), "name_prefix"),
        (dict(image_pull_policy="Sometimes"), "image_pull_policy"),
        (dict(ttl_seconds_after_finished=-1), "ttl_seconds_after_finished"),
        # the TTL controller would delete the finished Job before the tuner reads it: "gone", quarantined
        (
            dict(ttl_seconds_after_finished=0),
            r"ttl_seconds_after_finished=0: 0 s, under 300 s: Kubernetes would delete the finished Job before "
            r"the tuner reads its state and result",
        ),
        (dict(ttl_seconds_after_finished=299), r"ttl_seconds_after_finished=299: 299 s, under 300 s"),
        (dict(queue_timeout_s=0), r"queue_timeout_s=0: expected seconds > 0 \(at most 30 days\) or null"),
        (dict(queue_timeout_s=-60), r"queue_timeout_s=-60: expected seconds > 0 \(at most 30 days\) or null"),
        (
            dict(queue_timeout_s="abc"),
            r"queue_timeout_s='abc': expected seconds > 0 \(at most 30 days\) or null",
        ),
        # infinity overflowed the Job's deadline (a traceback at study creation); 1e300 is no int64
        (
            dict(queue_timeout_s=float("inf")),
            r"queue_timeout_s=inf: expected seconds > 0 \(at most 30 days\)",
        ),
        (dict(queue_timeout_s=1e300), r"queue_timeout_s=1e\+300: expected seconds > 0 \(at most 30 days\)"),
        (dict(gpu_per_node=8), "unknown kubernetes executor option.*gpu_per_node.*valid: namespace, image"),
    ],
)
def test_operator_options_are_validated(options, message):
    with pytest.raises(ValueError, match=message):
        KubernetesExecutor(**{"image": IMAGE, **options})


def test_options_from_operator_json_work():
    options = json.loads('{"namespace": "ml", "image": "r/t:1", "gpus_per_node": 8, "efa_per_node": 32, '
                         '"memory": "512Gi", "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}], '
                         '"in_cluster": true}')  # fmt: skip
    ex = KubernetesExecutor(**options)
    assert ex.hugepages_2mi == "5120Mi"
    assert ex.namespace == "ml"
    assert ex.queue_timeout_s is None  # the default: a launch waits in the queue as long as it takes


def test_queue_timeout_s_is_the_executors_own():
    """Executor.wait reads queue_timeout_s off the executor: the option must land there."""
    ex = KubernetesExecutor(**json.loads('{"image": "r/t:1", "queue_timeout_s": 600}'))
    assert ex.queue_timeout_s == 600.0
    assert KubernetesExecutor(image=IMAGE, queue_timeout_s=60.5).queue_timeout_s == 60.5


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (dict(nproc_per_node=8, options_gpus=4), "nproc_per_node 8 > gpus_per_node 4"),
        (dict(env={"BAD NAME": "1"}), "environment variable name"),
        (dict(env={"JOB_COMPLETION_INDEX": "3"}), "environment variable name"),
        (dict(env={"NCCL_NTHREADS": 64}), "must be a string"),
        (dict(spec={"blob": "x" * 1_100_000}), "ConfigMap holds 1 MiB"),
    ],
)
def test_launches_that_cannot_run_are_refused(kw, message):
    gpus = kw.pop("options_gpus", None)
    with pytest.raises(ValueError, match=message):
        KubernetesExecutor(image=IMAGE, gpus_per_node=gpus).dryrun(launch(**kw))


def test_module_imports_and_dryruns_without_the_kubernetes_package():
    code = """
import sys
sys.modules["kubernetes"] = None  # any import of it now fails
from pathlib import Path
from autotuner.executors import LaunchRequest
from autotuner.executors import make_executor
from autotuner.executors.kubernetes.executor import KubernetesExecutor
from autotuner.tuning import StudySettings
ex = make_executor(StudySettings(executor="kubernetes", executor_options={"image": "r/t:1"}))
assert isinstance(ex, KubernetesExecutor)
dryrun = ex.dryrun(LaunchRequest(name="s1-l1", spec={}, env={"NCCL_X": "1"}, workdir=Path("/x"), nnodes=2))
assert "kind: Job" in dryrun.rendered
try:
    ex.schedule(dryrun)
except RuntimeError as exc:
    print("schedule:", exc)
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "needs the kubernetes Python client" in proc.stdout


# ----------------------------------------------------------------------- the API, against a fake server


@dataclass
class Sent:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    content_type: str | None


class FakeResponse:
    """An answer as the client gets it from urllib3: read whole (`read()`, `data`) or, for a request made
    with _preload_content=False, in pieces (`stream`, `read(amt)`), each at most one of the server's
    `writes` (by default the payload in one)."""

    def __init__(
        self,
        status: int,
        payload: Any,
        content_type: str = "application/json",
        writes: Iterable[bytes] | None = None,
    ) -> None:
        self.status, self.reason = (
            status,
            {200: "OK", 201: "Created", 404: "Not Found", 409: "Conflict"}.get(status, "Error"),
        )
        body = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
        self.writes = iter([body] if writes is None else writes)
        self.pending = b""
        self.whole: bytes | None = None
        self.pieces: list[int] = []  # the size of each piece read with read(amt)
        self.closed = self.released = False
        self.headers = {"content-type": content_type}
        self.response = self

    def read(self, amt: int | None = None, decode_content: bool | None = None) -> bytes:
        if amt is None:  # the rest at once, kept: the client reads it, then looks at `data`
            if self.whole is None:
                self.whole, self.pending = self.pending + b"".join(self.writes), b""
            return self.whole
        while not self.pending and (write := next(self.writes, None)) is not None:
            self.pending = write
        piece, self.pending = self.pending[:amt], self.pending[amt:]
        self.pieces.append(len(piece))
        return piece

    @property
    def data(self) -> bytes:
        return self.read()

    def stream(self, amt: int = 1 << 16, decode_content: bool | None = None) -> Iterator[bytes]:
        while piece := self.read(amt):
            yield piece

    def close(self) -> None:
        self.closed = True

    def release_conn(self) -> None:
        self.released = True

    def getheaders(self) -> dict[str, str]:
        return self.headers

    def getheader(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name, default)


@dataclass
class Lost:
    """A fault that lets the request through, then loses its answer: `error`, raised (a timeout, a reset)
    or answered (a status: a proxy's 504)."""

    error: int | BaseException


@dataclass
class Busy:
    """A fault answered with `status` and these response `headers` (a Retry-After) and Status `details`
    (retryAfterSeconds), as the API server's flow control answers."""

    status: int
    headers: dict[str, str]
    details: dict[str, Any] | None = None


Fault = int | BaseException | Lost | Busy


_PATH = re.compile(
    r"^/(api/v1|apis/(?P<group>[a-z.]+)/v1)/namespaces/(?P<ns>[^/]+)/(?P<resource>[a-z]+)"
    r"(/(?P<name>[^/]+))?(/(?P<sub>[a-z]+))?$"
)


class FakeCluster(ApiClient):
    """An API server in memory, behind the real client: CoreV1Api / BatchV1Api build, validate and
    serialize each request as they would for a cluster; this records it and answers like the server."""

    def __init__(self) -> None:
        super().__init__(Configuration(host="https://k8s.test"))
        self.sent: list[Sent] = []
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (namespace, resource, name)
        # pod name -> log text, or what makes a log as it is read (so that a test need not hold it)
        self.logs: dict[str, str | bytes | Callable[[], Iterable[bytes]]] = {}
        self.log_write_bytes = 64 << 10  # how much of a log the server writes at a time
        self.log_responses: list[FakeResponse] = []
        self.errors: dict[tuple[str, str], int | Exception] = {}  # (method, resource) -> status or raise
        # (method, resource or resource/subresource, as "pods/log") -> faults, one per request in turn,
        # before `errors`: a failure for a while, not for good
        self.faults: dict[tuple[str, str], list[Fault]] = {}
        self.uids = itertools.count(1)

    def call_api(self, method, url, header_params=None, body=None, post_params=None, _request_timeout=None):
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        headers = header_params or {}
        self.sent.append(Sent(method, parts.path, query, copy.deepcopy(body), headers.get("Content-Type")))
        match = _PATH.match(parts.path)
        assert match, parts.path
        faults = self.faults.get(
            (method, f"{match['resource']}/{match['sub']}" if match["sub"] else match["resource"])
        )
        if not faults:
            return self.answer(method, url, headers, body)
        fault = faults.pop(0)
        if isinstance(fault, Lost):  # made, then its answer lost
            assert self.answer(method, url, headers, body).status < 300
            fault = fault.error
        if isinstance(fault, BaseException):
            raise fault
        if isinstance(fault, Busy):
            status = {"kind": "Status", "code": fault.status, "message": "injected", "reason": "TooManyRequests",
                      **({"details": fault.details} if fault.details else {})}  # fmt: skip
            response = FakeResponse(fault.status, status)
            response.headers.update(fault.headers)
            return response
        return FakeResponse(fault, {"kind": "Status", "code": fault, "message": "injected"})

    def answer(self, method: str, url: str, headers: dict[str, str], body: Any) -> FakeResponse:
        """What the server answers a request (`errors` and all)."""
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        match = _PATH.match(parts.path)
        assert match, parts.path
        ns, resource, name, sub = match["ns"], match["resource"], match["name"], match["sub"]
        if (method, resource) in self.errors:
            status = self.errors[(method, resource)]
            if isinstance(status, BaseException):
                raise status
            return FakeResponse(status, {"kind": "Status", "code": status, "message": "injected"})
        if method == "POST":
            name = body["metadata"]["name"]
            if (ns, resource, name) in self.objects:
                return FakeResponse(
                    409, {"kind": "Status", "code": 409, "message": f'"{name}" already exists'}
                )
            stored = copy.deepcopy(body)
            for container in (
                ((stored.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers", [])
            ):
                for var in container.get("env") or []:  # EnvVar.value is omitempty: "" is not stored
                    if var.get("value") == "":
                        del var["value"]
            stored["metadata"].update(uid=f"uid-{next(self.uids)}", creationTimestamp="2025-06-01T10:00:00Z")
            self.objects[(ns, resource, name)] = stored
            return FakeResponse(201, stored)
        if method == "GET" and name is None:
            selector = dict(s.split("=", 1) for s in query.get("labelSelector", "").split(",") if s)
            items = [o for (n, r, _), o in self.objects.items() if n == ns and r == resource
                     and selector.items() <= o["metadata"].get("labels", {}).items()]  # fmt: skip
            return FakeResponse(200, {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items})
        obj = self.objects.get((ns, resource, name))
        if obj is None:
            return FakeResponse(404, {"kind": "Status", "code": 404, "message": f'"{name}" not found'})
        if method == "GET" and sub == "log":
            self.log_responses.append(FakeResponse(200, "", "text/plain", self.log_writes(name, query)))
            return self.log_responses[-1]
        if method == "GET":
            return FakeResponse(200, obj)
        if method == "PATCH":
            assert headers.get("Content-Type") == "application/json-patch+json"
            for op in body:
                assert op["op"] == "add"
                *parents, leaf = op["path"].strip("/").split("/")
                target = obj
                for key in parents:
                    target = target[key]
                target[leaf] = op["value"]
            return FakeResponse(200, obj)
        if method == "DELETE":
            uid = ((body or {}).get("preconditions") or {}).get("uid")
            if uid is not None and uid != obj["metadata"].get("uid"):
                message = f"Precondition failed: UID in precondition: {uid}, UID in object meta: {obj['metadata'].get('uid')}"
                return FakeResponse(
                    409, {"kind": "Status", "code": 409, "reason": "Conflict", "message": message}
                )
            del self.objects[(ns, resource, name)]
            if resource == "services":
                return FakeResponse(200, obj)
            return FakeResponse(
                200, {"apiVersion": "v1", "kind": "Status", "status": "Success", "metadata": {}}
            )
        raise AssertionError(f"unexpected {method} {url}")

    def log_writes(self, pod: str, query: dict[str, str]) -> Iterable[bytes]:
        """The pod's log (its last tailLines lines if asked) as the server writes it: in pieces of
        log_write_bytes, or as a generated log yields them."""
        log = self.logs.get(pod, "")
        if callable(log):
            return log() if "tailLines" not in query else own_tail(log(), int(query["tailLines"]))
        data = log.encode() if isinstance(log, str) else log
        if "tailLines" in query:
            lines, tail = data.splitlines(keepends=True), int(query["tailLines"])
            data = b"".join(lines[-tail:] if tail else [])
        n = self.log_write_bytes
        return [data[at : at + n] for at in range(0, len(data), n)]

    # ---- what the Job controller and kubelet would do

    def job(self, name: str) -> dict[str, Any]:
        return self.objects[(NS, "jobs", name)]

    def set_status(self, name: str, status: dict[str, Any]) -> None:
        self.job(name)["status"] = status

    def add_pod(self, job: str, index: int, log: str | bytes | Callable[[], Iterable[bytes]] = "",
                terminated: dict[str, Any] | None = None, index_label: bool = True) -> str:  # fmt: skip
        pod = f"{job}-{index}-x7k2p"
        labels = {LAUNCH_LABEL: job, "job-name": job, **({INDEX_KEY: str(index)} if index_label else {})}
        self.objects[(NS, "pods", pod)] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod, "namespace": NS, "labels": labels, "annotations": {INDEX_KEY: str(index)},
                         "creationTimestamp": "2025-06-01T10:00:01Z"},
            "spec": {"containers": [{"name": "trial", "image": IMAGE}]},
            "status": {"phase": "Failed" if terminated else "Running", "containerStatuses": [
                {"name": "trial", "image": IMAGE, "imageID": "", "ready": not terminated, "restartCount": 0,
                 "state": {"terminated": terminated} if terminated else {"running": {}}}]},
        }  # fmt: skip
        self.logs[pod] = log
        return pod

    def permissions(self) -> set[tuple[str, str, str]]:
        """(API group, resource, verb) of every request sent, as RBAC sees it."""
        verbs = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}
        seen = set()
        for s in self.sent:
            m = _PATH.match(s.path)
            assert m
            resource = m["resource"] + (f"/{m['sub']}" if m["sub"] else "")
            verb = verbs.get(s.method) or (
                "get" if m["name"] else "watch" if s.query.get("watch") else "list"
            )
            seen.add((m["group"] or "", resource, verb))
        return seen


def own_tail(writes: Iterable[bytes], lines: int) -> Iterator[bytes]:
    """A generated log served as its own last `lines` lines, which it must be short enough to be (lines
    counted as they pass, so that nothing is held)."""
    count = 0
    for write in writes:
        count += write.count(b"\n")
        yield write
    assert count <= lines, f"a generated log of {count} lines served as its last {lines}"


RESULT = {
    "schema_version": SCHEMA_VERSION,
    "status": "ok",
    "world_size": 16,
    "backend": "nccl",
    "env": {"NCCL_NSOCKS_PERTHREAD": "4"},
    "candidates": [
        {"status": "ok", "iter_ms": {"median": 41.2}},
        {"status": "ok", "iter_ms": {"median": 40.1}},
    ],
}
POD0_LOG = f"""\
W0601 10:00:05.123000 1 torch/distributed/run.py:793] Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your system being overloaded
ip-10-0-1-17:42:42 [0] NCCL INFO NCCL version 2.23.4+cuda12.6
ip-10-0-1-17:42:42 [0] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)
{"AUTOTUNER_RESULT"} {json.dumps(RESULT, separators=(",", ":"))}
ip-10-0-1-17:42:42 [0] NCCL INFO comm 0x55d0 rank 0 nranks 16 cudaDev 0 busId 101c0 - Destroy COMPLETE
"""


@pytest.fixture
def cluster() -> FakeCluster:
    return FakeCluster()


@pytest.fixture(autouse=True)
def short_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tries again without the executor's real pauses (seconds): the tests count tries, not time."""
    monkeypatch.setattr(KubernetesExecutor, "create_pauses_s", (0.0, 0.0, 0.0), raising=False)
    monkeypatch.setattr(KubernetesExecutor, "result_read_pauses_s", (0.0, 0.0, 0.0), raising=False)


CREATE_ID_KEY = "nccl-autotuner/create-id"
CREATE_ID = "5ca1ab1e0ddba11c0ffee0ddf00d4b1d"


@pytest.fixture(autouse=True)
def fixed_create_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each `schedule` stamps what it creates with an id of its own (random): the tests know it."""
    monkeypatch.setattr(kexec, "create_id", lambda: CREATE_ID, raising=False)


def with_id(body: dict[str, Any], create_id: str = CREATE_ID) -> dict[str, Any]:
    """A dryrun's resource as `schedule` sends it: with its create id."""
    body = copy.deepcopy(body)
    body["metadata"]["annotations"][CREATE_ID_KEY] = create_id
    return body


def scheduled(cluster: FakeCluster, nnodes: int = 2) -> tuple[KubernetesExecutor, str, LaunchRequest]:
    ex = executor(nnodes, api_client=cluster)
    request = launch(nnodes)
    return ex, ex.schedule(ex.dryrun(request)), request


def test_schedule_sends_the_dryrun_bodies_whole(cluster):
    ex = executor(8, api_client=cluster)
    dryrun = ex.dryrun(launch(8))
    job = ex.schedule(dryrun)
    assert job == dryrun.request.name == "autotuner-s1-l7"
    creates = [(s.path, s.body) for s in cluster.sent if s.method == "POST"]
    assert creates == [
        (f"/api/v1/namespaces/{NS}/configmaps", with_id(dryrun.request.config_map)),
        (f"/api/v1/namespaces/{NS}/services", with_id(dryrun.request.service)),
        (f"/apis/batch/v1/namespaces/{NS}/jobs", with_id(dryrun.request.job)),
    ]
    assert all(s.query == {} for s in cluster.sent if s.method == "POST")
    assert list(yaml.safe_load_all(dryrun.rendered)) == dryrun.request.resources  # sending changed nothing


def test_schedule_makes_the_job_own_its_configmap_and_service(cluster):
    _, job, _ = scheduled(cluster)
    uid = cluster.job(job)["metadata"]["uid"]
    for resource in ("configmaps", "services"):
        (owner,) = cluster.objects[(NS, resource, job)]["metadata"]["ownerReferences"]
        assert owner == {"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": uid,
                         "blockOwnerDeletion": False}  # fmt: skip
        stored = copy.deepcopy(cluster.objects[(NS, resource, job)])
        del stored["metadata"]["creationTimestamp"]  # comes back as a datetime
        check_model(stored)


def test_schedule_runs_even_when_adoption_is_refused(cluster, caplog):
    cluster.errors[("PATCH", "services")] = 403
    _, job, _ = scheduled(cluster)
    assert (NS, "jobs", job) in cluster.objects
    assert "could not make Job nccl-autotuner/autotuner-s1-l7 own its Service: HTTP 403" in caplog.text


def test_schedule_conflict_is_explained_and_rolled_back(cluster):
    ex = executor(2, api_client=cluster)
    dryrun = ex.dryrun(launch(2))
    cluster.objects[(NS, "services", dryrun.request.name)] = copy.deepcopy(dryrun.request.service)
    with pytest.raises(
        RuntimeError, match="Service nccl-autotuner/autotuner-s1-l7 already exists.*name_prefix"
    ):
        ex.schedule(dryrun)
    assert (NS, "configmaps", dryrun.request.name) not in cluster.objects  # ours, removed again
    assert (NS, "services", dryrun.request.name) in cluster.objects  # not ours: left alone
    assert not any(s.path.endswith("/jobs") for s in cluster.sent)


def undone(cluster: FakeCluster) -> list[tuple[str, str, str | None]]:
    """The reads and deletes sent: (method, resource, the delete's uid precondition)."""
    return [(s.method, s.path.rsplit("/", 2)[-2], ((s.body or {}).get("preconditions") or {}).get("uid"))
            for s in cluster.sent if s.method in ("GET", "DELETE")]  # fmt: skip


def test_schedule_api_error_is_explained_and_rolled_back(cluster):
    cluster.errors[("POST", "jobs")] = 403
    with pytest.raises(RuntimeError, match="could not create Job .*HTTP 403.*injected"):
        scheduled(cluster)
    assert not cluster.objects
    # What was made, each by its uid; the Job read back (it may exist after all): not there, not deleted.
    assert undone(cluster) == [("GET", "jobs", None), ("DELETE", "configmaps", "uid-1"),
                               ("DELETE", "services", "uid-2")]  # fmt: skip


def test_schedule_transport_error_is_explained_and_rolled_back(cluster):
    cluster.errors[("POST", "services")] = ConnectionResetError("peer went away")
    with pytest.raises(RuntimeError, match="could not create Service .*ConnectionResetError: peer went away"):
        scheduled(cluster)
    assert not cluster.objects


def test_schedule_interrupted_by_ctrl_c_rolls_back_what_it_made(cluster):
    """Ctrl-C of `autotuner tune` while the Job is created: it may exist, and no row records it."""
    cluster.errors[("POST", "jobs")] = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        scheduled(cluster)
    assert not cluster.objects
    assert undone(cluster) == [("GET", "jobs", None), ("DELETE", "configmaps", "uid-1"),
                               ("DELETE", "services", "uid-2")]  # fmt: skip


def test_a_job_made_as_ctrl_c_came_is_read_back_and_deleted_by_its_uid(cluster):
    """The Job was made and its answer lost to Ctrl-C: read back, it has this schedule's create id."""
    cluster.faults[("POST", "jobs")] = [Lost(KeyboardInterrupt())]
    with pytest.raises(KeyboardInterrupt):
        scheduled(cluster)
    assert not cluster.objects
    assert undone(cluster) == [("GET", "jobs", None), ("DELETE", "configmaps", "uid-1"),
                               ("DELETE", "services", "uid-2"), ("DELETE", "jobs", "uid-3")]  # fmt: skip


def server_delete_options(sent: Sent) -> dict[str, Any]:
    """The DeleteOptions the API server acts on (apiserver handlers/delete.go): a DELETE's body where it
    has one, its query parameters only where it has none (never both)."""
    return dict(sent.body) if sent.body else dict(sent.query)


def test_a_job_deleted_by_its_uid_takes_its_pods_with_it(cluster):
    """The uid precondition makes a body, so the propagation policy must be in it: as a query parameter
    beside a body the server ignores it, and batch/v1's default (orphan) leaves the pods running."""
    cluster.faults[("POST", "jobs")] = [Lost(KeyboardInterrupt())]
    with pytest.raises(KeyboardInterrupt):
        scheduled(cluster)
    (deleted,) = [s for s in cluster.sent if s.method == "DELETE" and s.path.rsplit("/", 2)[-2] == "jobs"]
    options = server_delete_options(deleted)
    assert options == {"preconditions": {"uid": "uid-3"}, "propagationPolicy": "Foreground"}


def test_a_failed_schedule_leaves_another_tuners_job_of_the_name_alone(cluster):
    """The Job's create refused (403), and a Job of the launch's name there: another tuner's, made
    meanwhile (another create id). Before: the undo deleted it by name, and that tuner's launch with it."""
    ex = executor(2, api_client=cluster)
    dryrun = ex.dryrun(launch(2))
    name = dryrun.request.name
    theirs = with_id(dryrun.request.job, "another-tuners-create-id")
    theirs["metadata"].update(uid="uid-theirs", creationTimestamp="2025-06-01T10:00:00Z")
    real_answer = cluster.answer

    def answer(method: str, url: str, headers: dict[str, str], body: Any) -> Any:
        if method == "POST" and url.endswith("/jobs"):
            cluster.objects[(NS, "jobs", name)] = theirs  # just before ours is refused
            return FakeResponse(403, {"kind": "Status", "code": 403, "message": "injected"})
        return real_answer(method, url, headers, body)

    cluster.answer = answer  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="could not create Job .*HTTP 403"):
        ex.schedule(dryrun)
    assert cluster.objects == {(NS, "jobs", name): theirs}
    assert undone(cluster) == [("GET", "jobs", None), ("DELETE", "configmaps", "uid-1"),
                               ("DELETE", "services", "uid-2")]  # fmt: skip


def test_a_failed_schedule_leaves_an_object_of_the_name_made_since_alone(cluster, caplog):
    """This schedule's ConfigMap deleted while it went on (by hand, or another tuner's clean-up) and one
    of the name made again by another tuner; then the Service's create refused. The undo deletes by uid:
    theirs is not the ConfigMap this schedule made. Before: deleted by name."""
    ex = executor(2, api_client=cluster)
    dryrun = ex.dryrun(launch(2))
    name = dryrun.request.name
    theirs = with_id(dryrun.request.config_map, "another-tuners-create-id")
    theirs["metadata"].update(uid="uid-theirs", creationTimestamp="2025-06-01T10:00:00Z")
    real_answer = cluster.answer

    def answer(method: str, url: str, headers: dict[str, str], body: Any) -> Any:
        if method == "POST" and url.endswith("/services"):
            cluster.objects[(NS, "configmaps", name)] = theirs
            return FakeResponse(422, {"kind": "Status", "code": 422, "message": "injected"})
        return real_answer(method, url, headers, body)

    cluster.answer = answer  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="could not create Service .*HTTP 422"):
        ex.schedule(dryrun)
    assert cluster.objects == {(NS, "configmaps", name): theirs}
    assert undone(cluster) == [("GET", "services", None), ("DELETE", "configmaps", "uid-1")]
    assert (
        "configmap nccl-autotuner/autotuner-s1-l7 not deleted: it is no longer the one this launch made"
        in (caplog.text)
    )


# Job statuses as the API server reports them (kubectl get job -o json), k8s 1.31.
T = "2025-06-01T10:00:00Z"
COMPLETED = "Reached expected number of succeeded pods"
BACKOFF = "Job has reached the specified backoff limit"
DEADLINE = "Job was active longer than specified deadline"


def conditions(
    *types: str, reason: str, message: str | None = None, status: str = "True"
) -> list[dict[str, Any]]:
    """Job conditions as the API server writes them, one per type."""
    return [{"type": t, "status": status, "reason": reason, **({"message": message} if message else {}),
             "lastProbeTime": T, "lastTransitionTime": T} for t in types]  # fmt: skip


STATUSES = {
    "created": ({}, LaunchState.PENDING, ""),
    "running": ({"active": 2, "ready": 1, "startTime": T, "terminating": 0, "uncountedTerminatedPods": {}},
                LaunchState.RUNNING, ""),
    "rank-failed-not-yet-marked": ({"active": 1, "failed": 1, "startTime": T}, LaunchState.RUNNING, ""),
    "settling": ({"succeeded": 2, "completedIndexes": "0-1", "startTime": T}, LaunchState.RUNNING, ""),
    "succeeded": ({"succeeded": 2, "completedIndexes": "0-1", "startTime": T, "completionTime": T,
                   "conditions": conditions("SuccessCriteriaMet", "Complete", reason="CompletionsReached",
                                            message=COMPLETED)}, LaunchState.SUCCEEDED, ""),
    "failed": ({"failed": 1, "startTime": T, "conditions": conditions("FailureTarget", "Failed",
                reason="BackoffLimitExceeded", message=BACKOFF)},
               LaunchState.FAILED, "BackoffLimitExceeded: Job has reached the specified backoff limit"),
    "failing": ({"active": 1, "failed": 1, "terminating": 1, "startTime": T, "conditions": conditions(
                 "FailureTarget", reason="BackoffLimitExceeded", message=BACKOFF)},
                LaunchState.FAILED, "BackoffLimitExceeded: Job has reached the specified backoff limit"),
    "deadline-exceeded": ({"failed": 2, "startTime": T, "conditions": conditions("FailureTarget", "Failed",
                           reason="DeadlineExceeded", message=DEADLINE)},
                          LaunchState.TIMEOUT, "DeadlineExceeded: Job was active longer than specified deadline"),
    "suspended": ({"conditions": conditions("Suspended", reason="JobSuspended", message="Job suspended")},
                  LaunchState.PENDING, "JobSuspended: Job suspended"),
    "resumed": ({"active": 2, "conditions": conditions("Suspended", reason="JobResumed", status="False")},
                LaunchState.RUNNING, ""),
    "unknown-condition": ({"conditions": conditions("Stalled", reason="Mystery")},
                          LaunchState.UNKNOWN, "Job condition Stalled"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(STATUSES))
def test_describe_maps_recorded_job_status(cluster, case):
    status, state, reason = STATUSES[case]
    ex, job, request = scheduled(cluster)
    cluster.set_status(job, status)
    desc = ex.describe(job, request)
    assert (desc.state, desc.reason) == (state, reason)


def test_job_description_of_a_job_without_status():
    assert job_description(None).state == LaunchState.PENDING


def test_describe_adds_the_exit_of_the_index0_pod(cluster):
    ex, job, request = scheduled(cluster)
    cluster.set_status(job, STATUSES["failed"][0])
    cluster.add_pod(
        job, 0, terminated={"exitCode": 137, "reason": "OOMKilled", "startedAt": T, "finishedAt": T}
    )
    cluster.add_pod(job, 1, terminated={"exitCode": 1, "reason": "Error", "startedAt": T, "finishedAt": T})
    desc = ex.describe(job, request)
    assert desc.state == LaunchState.FAILED
    assert desc.exit_code == 137
    assert desc.reason.endswith(f"; pod {job}-0-x7k2p: exit code 137 (OOMKilled)")


def test_describe_a_job_that_is_gone_or_unreachable(cluster):
    ex, job, request = scheduled(cluster)
    del cluster.objects[(NS, "jobs", job)]
    desc = ex.describe(job, request)
    assert desc.state == LaunchState.FAILED
    assert "is gone" in desc.reason
    cluster.errors[("GET", "jobs")] = 503
    desc = ex.describe(job, request)
    assert desc.state == LaunchState.UNKNOWN
    assert "HTTP 503" in desc.reason


# Pod statuses as the API server reports them (kubectl get pod -o json), k8s 1.31: no free GPUs, then on
# a node creating its containers, pulling its image, running.
NO_GPUS = ("0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: "
           "4 No preemption victims found for incoming pod.")  # fmt: skip
SCHEDULED = {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": T}
POD_STATUSES: dict[str, tuple[dict[str, Any], str | None]] = {  # status, spec.nodeName
    "unschedulable": ({"phase": "Pending", "qosClass": "Guaranteed", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": NO_GPUS,
         "lastProbeTime": None, "lastTransitionTime": T}]}, None),
    "not-looked-at": ({"phase": "Pending", "qosClass": "Guaranteed"}, None),
    "container-creating": ({"phase": "Pending", "hostIP": "10.0.1.17", "startTime": T, "conditions": [
        {"type": "PodReadyToStartContainers", "status": "False", "lastProbeTime": None, "lastTransitionTime": T},
        {"type": "Initialized", "status": "True", "lastProbeTime": None, "lastTransitionTime": T},
        {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "lastProbeTime": None,
         "lastTransitionTime": T}, SCHEDULED],
        "containerStatuses": [{"name": "trial", "image": IMAGE, "imageID": "", "ready": False, "restartCount": 0,
                               "started": False, "state": {"waiting": {"reason": "ContainerCreating"}}}]},
        "ip-10-0-1-17"),
    "image-pull-backoff": ({"phase": "Pending", "hostIP": "10.0.1.17", "startTime": T, "conditions": [SCHEDULED],
        "containerStatuses": [{"name": "trial", "image": IMAGE, "imageID": "", "ready": False, "restartCount": 0,
                               "state": {"waiting": {"reason": "ImagePullBackOff",
                                                     "message": f'Back-off pulling image "{IMAGE}"'}}}]},
        "ip-10-0-1-17"),
    "running": ({"phase": "Running", "hostIP": "10.0.1.17", "startTime": T, "conditions": [SCHEDULED],
        "containerStatuses": [{"name": "trial", "image": IMAGE, "imageID": "", "ready": True, "restartCount": 0,
                               "state": {"running": {"startedAt": T}}}]}, "ip-10-0-1-17"),
}  # fmt: skip


def pod_in(cluster: FakeCluster, job: str, index: int, case: str) -> str:
    """A pod of the Job, its status and node as in POD_STATUSES[case]."""
    pod = cluster.add_pod(job, index)
    status, node = POD_STATUSES[case]
    stored = cluster.objects[(NS, "pods", pod)]
    stored["status"] = copy.deepcopy(status)
    if node:
        stored["spec"]["nodeName"] = node
    return pod


def pod_lists(cluster: FakeCluster) -> list[Sent]:
    return [s for s in cluster.sent if s.method == "GET" and s.path == f"/api/v1/namespaces/{NS}/pods"]


@pytest.mark.parametrize("job_status", ["running", "created"])
def test_describe_a_job_whose_pods_cannot_be_scheduled_is_queued(cluster, job_status):
    """No free GPUs: the Job counts its pods active, yet they wait for nodes. Queued, in Kubernetes'
    words, so that the launch timeout does not count the wait."""
    ex, job, request = scheduled(cluster)
    cluster.set_status(job, STATUSES[job_status][0])
    pod_in(cluster, job, 1, "unschedulable")
    pod0 = pod_in(cluster, job, 0, "unschedulable")
    desc = ex.describe(job, request)
    assert desc.state == LaunchState.PENDING
    assert desc.reason == f"pod {pod0} unschedulable: {NO_GPUS} (and 1 more pod not scheduled)"
    (listing,) = pod_lists(cluster)  # one list a poll, by the Job's label
    assert listing.query == {"labelSelector": f"{LAUNCH_LABEL}={job}"}


def test_describe_a_pod_the_scheduler_has_not_seen_is_queued(cluster):
    ex, job, request = scheduled(cluster)
    cluster.set_status(job, STATUSES["running"][0])
    pod_in(cluster, job, 0, "running")
    pod1 = pod_in(cluster, job, 1, "not-looked-at")
    desc = ex.describe(job, request)
    assert (desc.state, desc.reason) == (LaunchState.PENDING, f"pod {pod1} not scheduled yet")


def test_describe_clips_a_long_scheduling_message(cluster):
    ex, job, request = scheduled(cluster)
    cluster.set_status(job, STATUSES["running"][0])
    pod = pod_in(cluster, job, 0, "unschedulable")
    cluster.objects[(NS, "pods", pod)]["status"]["conditions"][0]["message"] = "0/900 nodes: " + "x" * 5000
    desc = ex.describe(job, request)
    assert desc.state == LaunchState.PENDING
    assert desc.reason.startswith(f"pod {pod} unschedulable: 0/900 nodes: xxx")
    assert desc.reason.endswith("[... 4,713 more characters]")
    assert len(desc.reason) < 400


@pytest.mark.parametrize("case", ["running", "container-creating", "image-pull-backoff"])
def test_describe_a_job_whose_pods_are_on_nodes_is_running(cluster, case):
    """A pod on a node runs, as far as the launch timeout goes: creating its containers or pulling its
    image is setup the timeout covers, not a queue. The unscheduled pod beside it is the one named."""
    ex, job, request = scheduled(cluster)
    cluster.set_status(job, STATUSES["running"][0])
    pod_in(cluster, job, 0, case)
    pod1 = pod_in(cluster, job, 1, "unschedulable")
    desc = ex.describe(job, request)
    assert (desc.state, desc.reason) == (LaunchState.PENDING, f"pod {pod1} unschedulable: {NO_GPUS}")
    cluster.objects[(NS, "pods", pod1)]["status"] = copy.deepcopy(POD_STATUSES[case][0])
    cluster.objects[(NS, "pods", pod1)]["spec"]["nodeName"] = "ip-10-0-1-18"
    desc = ex.describe(job, request)
    assert (desc.state, desc.reason) == (LaunchState.RUNNING, "")


@pytest.mark.parametrize("error", [503, ConnectionResetError("peer went away")], ids=["http", "transport"])
@pytest.mark.parametrize("job_status", ["running", "created"])
def test_describe_falls_back_to_the_job_when_pods_cannot_be_listed(cluster, error, job_status):
    ex, job, request = scheduled(cluster)
    cluster.set_status(job, STATUSES[job_status][0])
    pod_in(cluster, job, 0, "unschedulable")
    cluster.errors[("GET", "pods")] = error
    desc = ex.describe(job, request)
    _, state, reason = STATUSES[job_status]
    assert (desc.state, desc.reason) == (state, reason)
    assert len(pod_lists(cluster)) == 1  # it was asked, and its failure did not fail the launch


@pytest.mark.parametrize("case", ["succeeded", "unknown-condition"])
def test_describe_lists_no_pods_for_a_job_that_is_done_or_unknown(cluster, case):
    """Pods are only listed while the Job may be queued: a finished Job costs one read a poll."""
    ex, job, request = scheduled(cluster)
    cluster.set_status(job, STATUSES[case][0])
    pod_in(cluster, job, 0, "unschedulable")
    assert ex.describe(job, request).state == STATUSES[case][1]
    assert pod_lists(cluster) == []


def test_wait_gives_up_a_launch_still_queued_at_queue_timeout_s(cluster, monkeypatch):
    """Pods that never get nodes: given up at queue_timeout_s, not the launch timeout, the Job deleted,
    and the reason says what it waited on."""
    import autotuner.executors.base as base

    clock = WaitClock()
    monkeypatch.setattr(base, "time", clock)
    ex = executor(2, api_client=cluster, queue_timeout_s=1800)
    request = launch(2, timeout_s=900)
    job = ex.schedule(ex.dryrun(request))
    cluster.set_status(job, STATUSES["running"][0])
    pod0 = pod_in(cluster, job, 0, "unschedulable")
    pod_in(cluster, job, 1, "unschedulable")
    waiting: list[str] = []
    outcome = ex.wait(job, request, started=clock.now, poll_s=60, on_poll=lambda d: waiting.append(d.reason))
    assert outcome.state == LaunchState.CANCELLED
    assert outcome.reason == (f"still queued after 1800 s (queue_timeout_s): pod {pod0} unschedulable: {NO_GPUS} "
                              "(and 1 more pod not scheduled)")  # fmt: skip
    assert 1800 < clock.now - 1000 <= 1860  # past the 900 s launch timeout: queue time is not run time
    assert (NS, "jobs", job) not in cluster.objects
    assert set(waiting) == {outcome.reason.split(": ", 1)[1]}  # said on every poll while queued


@pytest.mark.parametrize("queue_timeout_s", [None, 7200])
def test_wait_does_not_count_queue_time_in_the_launch_timeout(cluster, monkeypatch, queue_timeout_s):
    """An hour without free GPUs, then 800 s of running against a 900 s launch timeout: it succeeds.
    Then a launch that runs on past 900 s of running is timed out at 900 s, however long it queued."""
    import autotuner.executors.base as base

    clock = WaitClock()
    monkeypatch.setattr(base, "time", clock)
    ex = executor(2, api_client=cluster, queue_timeout_s=queue_timeout_s)
    job_name = resource_name("autotuner", "s1-l7")
    schedule_after, finish_after = 3600.0, 800.0
    began, ran_from = clock.now, []

    def controller(desc: Any) -> None:  # what the cluster does while the tuner polls
        if clock.now - began >= schedule_after and not ran_from:
            for pod in [k[2] for k in cluster.objects if k[1] == "pods"]:
                cluster.objects[(NS, "pods", pod)]["status"] = copy.deepcopy(POD_STATUSES["running"][0])
                cluster.objects[(NS, "pods", pod)]["spec"]["nodeName"] = "ip-10-0-1-17"
            ran_from.append(clock.now)
        elif ran_from and clock.now - ran_from[0] >= finish_after:
            cluster.set_status(job_name, STATUSES["succeeded"][0])
            cluster.logs[f"{job_name}-0-x7k2p"] = POD0_LOG

    def start() -> tuple[LaunchRequest, str]:
        cluster.objects.clear()
        request = launch(2, timeout_s=900)
        job = ex.schedule(ex.dryrun(request))
        cluster.set_status(job, STATUSES["running"][0])
        pod_in(cluster, job, 0, "unschedulable")
        pod_in(cluster, job, 1, "unschedulable")
        return request, job

    request, job = start()
    outcome = ex.wait(job, request, started=began, poll_s=30, on_poll=controller)
    assert (outcome.state, outcome.result) == (LaunchState.SUCCEEDED, RESULT)
    assert clock.now - ran_from[0] < 900
    assert clock.now - began > 3600 + 800

    ran_from.clear()
    finish_after = 10_000.0  # runs on past its timeout
    began = clock.now
    request, job = start()
    outcome = ex.wait(job, request, started=began, poll_s=30, on_poll=controller)
    assert outcome.state == LaunchState.TIMEOUT
    assert 900 < clock.now - ran_from[0] <= 960
    assert clock.now - began > 3600 + 900


def test_cancel_deletes_job_service_and_configmap(cluster):
    ex, job, request = scheduled(cluster)
    cluster.sent.clear()
    ex.cancel(job, request)
    deletes = [(s.path, s.query) for s in cluster.sent if s.method == "DELETE"]
    assert deletes == [
        (f"/apis/batch/v1/namespaces/{NS}/jobs/{job}", {"propagationPolicy": "Foreground"}),
        (f"/api/v1/namespaces/{NS}/services/{job}", {}),
        (f"/api/v1/namespaces/{NS}/configmaps/{job}", {}),
    ]
    assert not cluster.objects
    ex.cancel(job, request)  # already gone: nothing to complain about


def test_cancel_keeps_going_past_an_error(cluster, caplog):
    ex, job, request = scheduled(cluster)
    cluster.errors[("DELETE", "jobs")] = 500
    ex.cancel(job, request)
    assert [k[1] for k in cluster.objects] == ["jobs"]
    assert "could not delete job" in caplog.text


def test_fetch_result_parses_the_index0_pod_log(cluster):
    ex, job, request = scheduled(cluster)
    cluster.add_pod(job, 1, log="rank 8 done\n")
    pod0 = cluster.add_pod(job, 0, log=POD0_LOG)
    assert ex.fetch_result(job, request) == RESULT
    (read,) = [s for s in cluster.sent if s.path.endswith("/log")]
    assert read.path == f"/api/v1/namespaces/{NS}/pods/{pod0}/log"
    assert read.query == {"container": "trial"}  # the whole log: the marker need not be in the tail
    (response,) = cluster.log_responses
    assert streamed(response)
    (listing,) = [s for s in cluster.sent if s.path.endswith("/pods")]
    assert listing.query == {"labelSelector": f"{LAUNCH_LABEL}={job}"}


def test_fetch_result_finds_index0_by_annotation_on_older_clusters(cluster):
    ex, job, request = scheduled(cluster)
    cluster.add_pod(job, 1, log="", index_label=False)
    cluster.add_pod(job, 0, log=POD0_LOG, index_label=False)
    assert ex.fetch_result(job, request) == RESULT


@pytest.mark.parametrize(
    "log", ["torchrun: worker failed\nTraceback (most recent call last):\n", ""], ids=["no-marker", "empty"]
)
def test_fetch_result_is_none_without_a_result_line(cluster, log):
    ex, job, request = scheduled(cluster)
    cluster.add_pod(job, 0, log=log)
    assert ex.fetch_result(job, request) is None


@pytest.mark.parametrize(
    ("log", "why"),
    [
        ("AUTOTUNER_RESULT {not json\n", "not JSON"),
        ('AUTOTUNER_RESULT {"schema_version": 999, "status": "ok"}\n', "schema_version is 999, expected 1"),
        ("AUTOTUNER_RESULT [1, 2]\n", "a JSON list, not an object"),
        ("AUTOTUNER_RESULT " + "[" * 100_000 + "]" * 100_000 + "\n", "nests deeper than 32 levels"),
        (f"AUTOTUNER_RESULT {json.dumps({**RESULT, 'candidates': RESULT['candidates'][:1]})}\n",
         "1 candidate results for the 2 candidates the launch asked for"),
        (b'noise\nAUTOTUNER_RESULT {"status": "\xff"}\n', "not JSON (UnicodeDecodeError('utf-8'"),
    ],
    ids=["malformed", "other-schema", "not-an-object", "nested", "one-short", "not-utf-8"],
)  # fmt: skip
def test_fetch_result_refuses_a_result_line_it_cannot_use(cluster, log, why):
    """A marker line that is not a usable result fails the launch with the reason (autotuner.executors
    .results), rather than reading as "no result written"."""
    ex, job, request = scheduled(cluster)
    cluster.add_pod(job, 0, log=log)
    with pytest.raises(ResultError, match=re.escape(why)):
        ex.fetch_result(job, request)


def test_fetch_result_is_none_without_a_pod(cluster):
    ex, job, request = scheduled(cluster)
    assert ex.fetch_result(job, request) is None
    assert ex.logs(job, request) == ""


def test_parse_result_takes_the_last_marker_and_tolerates_a_prefix():
    first = {**RESULT, "status": "partial"}
    text = f"AUTOTUNER_RESULT {json.dumps(first)}\n[default0]:AUTOTUNER_RESULT {json.dumps(RESULT)}\n"
    assert parse_result(text) == RESULT


def test_logs_tail_the_index0_pod(cluster):
    ex, job, request = scheduled(cluster)
    cluster.add_pod(job, 0, log="".join(f"line {i}\n" for i in range(100)))
    tail = ex.logs(job, request, tail_lines=5)
    assert tail.splitlines() == [f"line {i}" for i in range(95, 100)]
    (read,) = [s for s in cluster.sent if s.path.endswith("/log")]
    assert read.query == {"container": "trial", "tailLines": "5"}


# ------------------------------------------------------------- a pod log is the pod's to write, any size

NOISE_LINE = b"ip-10-0-1-17:42:42 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read\n"
RESULT_LINE = f"[default0]:AUTOTUNER_RESULT {json.dumps(RESULT)}\n".encode()
SHUTDOWN = b"ip-10-0-1-17:42:42 [0] NCCL INFO comm 0x55d0 rank 0 nranks 16 - Destroy COMPLETE\n" * 3
MiB = 1 << 20


def streamed(response: FakeResponse) -> bool:
    """The body was read in pieces, never whole, and its connection closed and given back."""
    return response.whole is None and bool(response.pieces) and response.closed and response.released


def generated_log(
    head: bytes, block: bytes, mib: int, tail: bytes
) -> tuple[Callable[[], Iterator[bytes]], int]:
    """A log of `head`, `mib` MiB of `block` over and over, then `tail`, made as it is read (the same
    64 KiB object written each time: the test holds none of it); and its size."""
    piece = block * ((64 << 10) // len(block))
    count = mib * MiB // len(piece)

    def writes() -> Iterator[bytes]:
        yield head
        for _ in range(count):
            yield piece
        yield tail

    return writes, len(head) + count * len(piece) + len(tail)


def peak_memory(call: Callable[[], Any]) -> tuple[Any, int]:
    """What `call` returns and the most memory Python held at once while it ran: the executor, the
    client and the fake server together, all of it in the tuner's process."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        return call(), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_fetch_result_reads_a_huge_log_holding_little_of_it(cluster):
    """64 MiB of NCCL chatter, then the result and the shutdown: found, and the log never held (kubelet's
    log rotation bounds it on most clusters; the tuner does not count on that)."""
    ex, job, request = scheduled(cluster)
    writes, size = generated_log(b"", NOISE_LINE, 64, RESULT_LINE + SHUTDOWN)
    cluster.add_pod(job, 0, log=writes)
    result, peak = peak_memory(lambda: ex.fetch_result(job, request))
    assert result == RESULT
    assert peak < size / 16, f"held {peak:,} bytes at once of a {size:,} byte log"
    assert streamed(cluster.log_responses[-1])


@pytest.mark.parametrize("end", [b"", b"\n", b"\r"], ids=["same-line", "newline", "carriage-return"])
def test_fetch_result_finds_the_result_after_one_enormous_line(cluster, end):
    """32 MiB without a line break or a marker (binary junk, a progress bar), then the result: on that
    line still, on the next, or after a carriage return."""
    ex, job, request = scheduled(cluster)
    writes, size = generated_log(b"", bytes(range(32, 127)), 32, end + RESULT_LINE)
    cluster.add_pod(job, 0, log=writes)
    result, peak = peak_memory(lambda: ex.fetch_result(job, request))
    assert result == RESULT
    assert peak < size / 16, f"held {peak:,} bytes at once of a {size:,} byte log"


def test_fetch_result_holds_no_more_of_a_result_line_than_the_cap(cluster, monkeypatch):
    """A result line of 32 MiB under a cap of 1 MiB: refused, naming the cap and how to raise it,
    after holding no more than the cap of it."""
    monkeypatch.setenv("AUTOTUNER_MAX_RESULT_BYTES", str(MiB))
    ex, job, request = scheduled(cluster)
    writes, size = generated_log(b'noise\nAUTOTUNER_RESULT {"padding": "', b"x", 32, b'"}\nshutdown\n')
    cluster.add_pod(job, 0, log=writes)
    result_bytes = size - len(b"noise\nAUTOTUNER_RESULT \nshutdown\n")
    refused, peak = peak_memory(lambda: pytest.raises(ResultError, ex.fetch_result, job, request))
    refused.match(re.escape(f"is {result_bytes:,} bytes, above the limit of 1,048,576 bytes (raise it with "
                            "AUTOTUNER_MAX_RESULT_BYTES)"))  # fmt: skip
    assert peak < 4 * MiB, f"held {peak:,} bytes at once of a {size:,} byte log"


def test_only_the_last_result_line_must_fit_the_cap(cluster, monkeypatch):
    result = json.dumps(RESULT)
    padded = json.dumps({**RESULT, "padding": "x" * 5000})
    ex, job, request = scheduled(cluster)
    cluster.add_pod(job, 0, log=f"AUTOTUNER_RESULT {padded}\n[default0]:AUTOTUNER_RESULT {result}\n")
    monkeypatch.setenv("AUTOTUNER_MAX_RESULT_BYTES", str(len(result)))
    assert ex.fetch_result(job, request) == RESULT
    monkeypatch.setenv("AUTOTUNER_MAX_RESULT_BYTES", str(len(result) - 1))
    with pytest.raises(ResultError, match=re.escape(f"is {len(result):,} bytes, above the limit of")):
        ex.fetch_result(job, request)


PARTIAL = json.dumps({**RESULT, "status": "partial"})
# Logs whose last result line is RESULT, each a way a line can end or a line may look.
LINES = {
    "last-wins": b"noise\nAUTOTUNER_RESULT " + PARTIAL.encode() + b"\n" + NOISE_LINE * 3 + RESULT_LINE + SHUTDOWN,
    "carriage-returns": f"step 1\rstep 2\rAUTOTUNER_RESULT {PARTIAL}\rAUTOTUNER_RESULT {json.dumps(RESULT)}\r\n"
    .encode(),
    # str.splitlines broke lines there too: U+2028 (3 bytes in UTF-8) and U+0085 (2)
    "unicode-breaks": f"AUTOTUNER_RESULT {PARTIAL}\u2028AUTOTUNER_RESULT {json.dumps(RESULT)}\x85trailing\n"
    .encode(),
    "no-final-newline": b"noise\n" + RESULT_LINE.rstrip(b"\n"),
    "not-utf-8-noise": b"\xff\xfe binary \x80\n" + RESULT_LINE + b"\xc3( cut\n",
}  # fmt: skip


@pytest.mark.parametrize("write_bytes", [1, 2, 7, 16, 17, 64 << 10])
@pytest.mark.parametrize("log", list(LINES))
def test_fetch_result_reads_lines_alike_however_the_log_is_cut(cluster, log, write_bytes):
    """The server's writes cut lines, markers and line breaks anywhere (7 bytes: odd places; 16 and 17:
    a marker's length, give or take): the last result line wins all the same, and bytes that are not
    UTF-8 only matter in a result."""
    ex, job, request = scheduled(cluster)
    cluster.log_write_bytes = write_bytes
    cluster.add_pod(job, 0, log=LINES[log])
    assert ex.fetch_result(job, request) == RESULT
    response = cluster.log_responses[-1]
    assert streamed(response)
    assert max(response.pieces) <= write_bytes
    assert len(response.pieces) > len(LINES[log]) // write_bytes


def test_a_log_that_breaks_off_is_unreadable_not_without_a_result(cluster, caplog):
    """A result line may yet follow where the stream broke: none is taken, nor is "no result" (the read
    is tried again, then called unreadable: test_kubernetes_faults.py), and each connection is
    closed rather than handed back half read."""
    from urllib3.exceptions import ProtocolError

    def writes() -> Iterator[bytes]:
        yield NOISE_LINE * 10 + RESULT_LINE
        raise ProtocolError("Connection broken: IncompleteRead(1024 bytes read, 1 more expected)")

    ex, job, request = scheduled(cluster)
    cluster.add_pod(job, 0, log=writes)
    with pytest.raises(
        kexec.ResultUnreadable, match=f"could not read the log of pod {job}-0-x7k2p: ProtocolError"
    ):
        ex.fetch_result(job, request)
    assert f"could not read the log of Job {NS}/{job}: ProtocolError: Connection broken" in caplog.text
    assert len(cluster.log_responses) == len(ex.result_read_pauses_s) + 1
    assert all(response.closed and response.released for response in cluster.log_responses)


def test_logs_keep_a_bounded_tail_of_a_huge_line(cluster):
    """The server tails lines, not bytes: one line of 32 MiB in the last 60 is cut to what a log tail
    keeps, and says so, and it is never held."""
    ex, job, request = scheduled(cluster)
    writes, size = generated_log(b"starting\n", b"x", 32, b"\nTraceback: boom\n")
    cluster.add_pod(job, 0, log=writes)
    tail, peak = peak_memory(lambda: ex.logs(job, request))
    assert tail == "[...] Traceback: boom"
    assert peak < size / 16, f"held {peak:,} bytes at once of a {size:,} byte log"
    (read,) = [s for s in cluster.sent if s.path.endswith("/log")]
    assert read.query == {"container": "trial", "tailLines": "60"}
    assert streamed(cluster.log_responses[-1])


def test_run_end_to_end_against_the_fake_server(cluster, tmp_path):
    ex = executor(2, api_client=cluster)
    request = launch(2, workdir=tmp_path / "launch-0007")
    polls = []

    def controller(desc: Any) -> None:  # what the cluster does while the tuner polls
        polls.append(1)
        job = resource_name("autotuner", "s1-l7")
        if len(polls) == 1:
            cluster.set_status(job, STATUSES["running"][0])
            cluster.add_pod(job, 0, log="starting\n")
            cluster.add_pod(job, 1)
        elif len(polls) == 2:
            cluster.set_status(job, STATUSES["succeeded"][0])
            cluster.logs[f"{job}-0-x7k2p"] = POD0_LOG

    outcome = ex.run(request, poll_s=0.01, on_poll=controller)
    assert outcome.state == LaunchState.SUCCEEDED
    assert outcome.result == RESULT
    assert outcome.backend_id == "autotuner-s1-l7"
    assert outcome.request == ex.dryrun(request).rendered
    assert json.loads((tmp_path / "launch-0007" / "spec.json").read_text()) == SPEC  # the tuner's record


def test_a_failed_job_with_a_result_is_a_launch_whose_candidates_failed(cluster, tmp_path):
    """torchrun exits 1 when a candidate failed, so Kubernetes marks the Job failed; the result decides."""
    ex, job, request = scheduled(cluster)
    cluster.set_status(job, STATUSES["failed"][0])
    partial = {**RESULT, "status": "partial"}
    cluster.add_pod(job, 0, log=f"AUTOTUNER_RESULT {json.dumps(partial)}\n",
                    terminated={"exitCode": 1, "reason": "Error", "startedAt": T, "finishedAt": T})  # fmt: skip
    outcome = ex.wait(job, request, started=time.monotonic(), poll_s=0.01)
    assert outcome.state == LaunchState.SUCCEEDED
    assert outcome.result == partial


def test_a_job_past_its_deadline_is_recorded_with_the_reason(cluster):
    ex, job, request = scheduled(cluster)
    cluster.set_status(job, STATUSES["deadline-exceeded"][0])
    outcome = ex.wait(job, request, started=time.monotonic(), poll_s=0.01)
    assert outcome.state == LaunchState.TIMEOUT  # the Job's deadline: a timeout, with no result or one
    assert outcome.result is None
    assert outcome.reason.startswith("DeadlineExceeded: Job was active longer than specified deadline")


NEVER_RAN = (
    f"never ran: still queued when its Job reached activeDeadlineSeconds (DeadlineExceeded: {DEADLINE})"
)


def test_a_job_past_its_deadline_with_pods_still_queued_never_ran(cluster):
    """The deadline passed while no pod had a node (no free GPUs for a day): nothing was measured, so the
    launch is cancelled, not failed (a failed search launch quarantines its env config)."""
    ex, job, request = scheduled(cluster)
    cluster.set_status(job, STATUSES["deadline-exceeded"][0])
    pod0 = pod_in(cluster, job, 0, "unschedulable")
    pod_in(cluster, job, 1, "running")  # had a node: one pod on a node is no run (ranks wait for all)
    outcome = ex.wait(job, request, started=time.monotonic(), poll_s=0.01)
    assert outcome.state == LaunchState.CANCELLED
    assert outcome.reason == f"{NEVER_RAN}: pod {pod0} unschedulable: {NO_GPUS}"
    assert outcome.given_up  # its queue allowance spent: a study does not queue it again for another day


def test_a_job_whose_pods_are_gone_at_its_deadline_never_ran_if_its_last_poll_saw_it_queued(
    cluster, monkeypatch
):
    """The Job controller deletes the pods of a Job past its deadline (those on no node at once): what
    the executor's last poll saw decides. Queued: cancelled. On nodes (then the tuner was away while the
    trial ran into the deadline): the trial ran, and its launch timed out."""
    import autotuner.executors.base as base

    monkeypatch.setattr(base, "time", WaitClock())
    ex, job, request = scheduled(cluster)
    request = launch(2, timeout_s=10**6)  # the tuner's own timeout is not what ends it here
    pods = [pod_in(cluster, job, index, "unschedulable") for index in range(2)]
    polls: list[LaunchState] = []

    def controller(gets_nodes: bool) -> Callable[[Any], None]:
        def poll(desc: Any) -> None:
            polls.append(desc.state)
            if gets_nodes and len(polls) == 1:
                for pod in pods:
                    cluster.objects[(NS, "pods", pod)]["status"] = copy.deepcopy(POD_STATUSES["running"][0])
                    cluster.objects[(NS, "pods", pod)]["spec"]["nodeName"] = "ip-10-0-1-17"
                return
            cluster.set_status(job, STATUSES["deadline-exceeded"][0])  # the deadline: the pods deleted
            for key in [k for k in cluster.objects if k[1] == "pods"]:
                del cluster.objects[key]

        return poll

    cluster.set_status(job, STATUSES["running"][0])
    outcome = ex.wait(job, request, started=0.0, poll_s=60, on_poll=controller(gets_nodes=False))
    assert (polls, outcome.state) == ([LaunchState.PENDING], LaunchState.CANCELLED)
    assert outcome.reason == (f"{NEVER_RAN}: pod {pods[0]} unschedulable: {NO_GPUS} (and 1 more pod not "
                              "scheduled) (at the last poll)")  # fmt: skip
    assert ex._waiting == {}  # nothing kept of a launch that ended

    polls.clear()
    cluster.objects.clear()
    job = ex.schedule(ex.dryrun(request))
    pods = [pod_in(cluster, job, index, "unschedulable") for index in range(2)]
    cluster.set_status(job, STATUSES["running"][0])
    outcome = ex.wait(job, request, started=0.0, poll_s=60, on_poll=controller(gets_nodes=True))
    assert (polls, outcome.state) == ([LaunchState.PENDING, LaunchState.RUNNING], LaunchState.TIMEOUT)
    assert outcome.reason.startswith(f"DeadlineExceeded: {DEADLINE}")


def test_required_permissions_are_exactly_what_the_executor_uses(cluster):
    """deploy/k8s's Role is checked against REQUIRED_PERMISSIONS: keep that list honest. (Creates whose
    answers are lost: each is read back.)"""
    for resource in ("configmaps", "services", "jobs"):
        cluster.faults[("POST", resource)] = [Lost(504)]
    ex, job, request = scheduled(cluster)
    cluster.add_pod(job, 0, log=POD0_LOG, terminated={"exitCode": 1, "startedAt": T, "finishedAt": T})
    cluster.set_status(job, STATUSES["failed"][0])
    ex.describe(job, request)
    ex.logs(job, request)
    ex.fetch_result(job, request)
    ex.cancel(job, request)
    assert cluster.permissions() == REQUIRED_PERMISSIONS


@pytest.mark.slow
def test_the_pod_command_runs_as_two_nodes_under_torchrun(tmp_path):
    """Each pod's command, with what Kubernetes fills in (completion index, the rank-0 pod's DNS name ->
    127.0.0.1, the spec mount), run as two local "pods" on CPU: static rendezvous joins them, and the
    node-0 output alone carries a result that fetch_result would parse."""
    pytest.importorskip("torchrec")
    spec = {"workload": {"name": "w", "tables": [{"name": f"t{i}", "num_embeddings": 1000, "embedding_dim": 32,
                                                  "pooling_factor": 2} for i in range(4)]},
            "candidates": [{"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 32}],
            "warmup": 1, "iterations": 3}  # fmt: skip
    ex = KubernetesExecutor(image=IMAGE, gpus_per_node=0, rdzv_port=29517, python=sys.executable)
    request = ex.dryrun(launch(2, nproc_per_node=1, spec=spec)).request
    (container,) = request.job["spec"]["template"]["spec"]["containers"]
    (tmp_path / "spec.json").write_text(request.config_map["data"]["spec.json"])
    fills = {f"{request.name}-0.{request.name}": "127.0.0.1", "/spec/spec.json": str(tmp_path / "spec.json")}
    pods = []
    for index in range(2):
        args = [a.replace("$(JOB_COMPLETION_INDEX)", str(index)) for a in container["args"]]
        for old, new in fills.items():
            args = [a.replace(old, new) for a in args]
        args = [a.replace("/tmp/result.json", str(tmp_path / f"result{index}.json")) for a in args]
        env = {**os.environ, **{e["name"]: e["value"] for e in container["env"] if "value" in e}}
        pods.append(subprocess.Popen([*container["command"], *args], env=env, cwd=REPO, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT))  # fmt: skip
    logs = [pod.communicate(timeout=300)[0] for pod in pods]
    assert [pod.returncode for pod in pods] == [0, 0], logs[0][-3000:]
    result = parse_result(logs[0])
    assert result is not None
    assert result["world_size"] == 2
    assert result["status"] == "ok"
    assert result["env"]["NCCL_NSOCKS_PERTHREAD"] == "4"  # the pod env reached the ranks
    assert parse_result(logs[1]) is None


class _Clock:
    """time.monotonic for the executor, moved on by the server's writes."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_a_log_that_trickles_in_fails_the_launch_naming_why(cluster, monkeypatch, caplog):
    """Each read answers within REQUEST_TIMEOUT_S, yet the whole log takes longer than LOG_READ_S: the
    result is refused (before: the study waited for as long as the server kept trickling), and a log
    tail gives up alike without stopping anything."""
    clock = _Clock()
    monkeypatch.setattr(kexec, "time", clock)

    def trickle() -> Iterator[bytes]:
        for _ in range(40):
            clock.now += 10  # a few bytes every 10 s: every read in time, the whole far too slow
            yield NOISE_LINE
        yield RESULT_LINE

    ex, job, request = scheduled(cluster)
    cluster.add_pod(job, 0, log=trickle)
    with pytest.raises(
        ResultError, match=rf"took more than {kexec.LOG_READ_S} s to read \([\d,]+ bytes read\)"
    ):
        ex.fetch_result(job, request)
    response = cluster.log_responses[-1]
    assert response.closed
    assert response.released
    assert ex.logs(job, request) == ""
    assert "API server answers too slowly" in caplog.text


def test_a_log_read_in_time_is_read_whole(cluster, monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(kexec, "time", clock)

    def steady() -> Iterator[bytes]:
        for _ in range(20):
            clock.now += 10  # 200 s in all: within LOG_READ_S
            yield NOISE_LINE
        yield RESULT_LINE

    ex, job, request = scheduled(cluster)
    cluster.add_pod(job, 0, log=steady)
    assert ex.fetch_result(job, request) == RESULT


def test_describe_a_job_with_pods_not_yet_made_is_queued(cluster):
    """A ResourceQuota (or a LimitRange) stops the Job controller from making some of the pods: the Job is
    active, the pods made run, the launch waits for the rest, and that wait is no run time either."""
    ex, job, request = scheduled(cluster)
    cluster.set_status(job, STATUSES["running"][0])
    pod_in(cluster, job, 0, "running")
    desc = ex.describe(job, request)
    assert (desc.state, desc.reason) == (
        LaunchState.PENDING,
        f"1 of 2 pods made: the Job controller holds the rest back (kubectl -n {NS} describe job {job} says why)",
    )
    pod_in(cluster, job, 1, "running")
    assert ex.describe(job, request).state == LaunchState.RUNNING


def test_a_poll_that_cannot_read_a_queued_launch_leaves_it_queued(cluster, monkeypatch):
    """One failed read of the Job (the API server restarting) while its pods wait for nodes: it is still
    queued, not running (that read started the run clock: 20 minutes more in the queue, then 600 s of
    running against a 900 s timeout, and the launch was timed out having run 600 s)."""
    import autotuner.executors.base as base

    clock = WaitClock()
    monkeypatch.setattr(base, "time", clock)
    ex = executor(2, api_client=cluster)
    request = launch(2, timeout_s=900)
    job = ex.schedule(ex.dryrun(request))
    cluster.set_status(job, STATUSES["running"][0])
    for index in range(2):
        pod_in(cluster, job, index, "unschedulable")
    began, polls = clock.now, []

    def controller(desc: Any) -> None:
        polls.append(desc.state)
        cluster.errors.pop(("GET", "jobs"), None)
        if len(polls) == 2:  # the next read fails
            cluster.errors[("GET", "jobs")] = 503
        if clock.now - began >= 1200 and LaunchState.RUNNING not in polls:  # the pods get nodes
            for pod in [k[2] for k in cluster.objects if k[1] == "pods"]:
                cluster.objects[(NS, "pods", pod)]["status"] = copy.deepcopy(POD_STATUSES["running"][0])
                cluster.objects[(NS, "pods", pod)]["spec"]["nodeName"] = "ip-10-0-1-17"
        if LaunchState.RUNNING in polls and clock.now - began >= 1200 + 600:
            cluster.set_status(job, STATUSES["succeeded"][0])
            cluster.logs[f"{job}-0-x7k2p"] = POD0_LOG

    outcome = ex.wait(job, request, started=began, poll_s=60, on_poll=controller)
    assert LaunchState.UNKNOWN in polls
    assert (outcome.state, outcome.result) == (LaunchState.SUCCEEDED, RESULT)


def test_an_image_name_at_the_kubelet_s_limit_is_taken_its_tag_and_digest_aside():
    name = "registry.example.com:5000/" + "a" * (255 - len("registry.example.com:5000/"))
    digest = "@sha256:" + "0" * 64
    assert KubernetesExecutor(image=f"{name}:{'t' * 128}{digest}").options.image.startswith(name)
