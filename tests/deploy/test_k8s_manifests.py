"""deploy/k8s with no cluster: every document against the client's models, the Role against what the
executor calls, the service wiring against the service's own settings and routes, and the example trial
against the executor's dryrun (`UPDATE_GOLDEN=1` rewrites deploy/k8s/examples/trial-job.yaml)."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from autotuner.executors import LaunchRequest
from autotuner.executors.kubernetes.executor import REQUIRED_PERMISSIONS, KubernetesExecutor
from trials.spec import parse_spec

kubernetes = pytest.importorskip("kubernetes")
from kubernetes.client import ApiClient  # noqa: E402

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
BASE = K8S / "base"
POSTGRES = K8S / "overlays" / "postgres"
EXAMPLE = K8S / "examples" / "trial-job.yaml"
NAMESPACE = "nccl-autotuner"
MODELS = {
    "Namespace": "V1Namespace",
    "ServiceAccount": "V1ServiceAccount",
    "Role": "V1Role",
    "RoleBinding": "V1RoleBinding",
    "ConfigMap": "V1ConfigMap",
    "Secret": "V1Secret",
    "PersistentVolumeClaim": "V1PersistentVolumeClaim",
    "Deployment": "V1Deployment",
    "Service": "V1Service",
    "Job": "V1Job",
    "PodDisruptionBudget": "V1PodDisruptionBudget",
}

EXAMPLE_HEADER = """\
# A 2-node trial exactly as the Kubernetes executor launches it, with the options of base/settings.yaml
# (2 x p4d.24xlarge: 8 A100 + 4 EFA each). Run it by hand to check a cluster before tuning:
#   kubectl apply -f deploy/k8s/examples/trial-job.yaml
#   kubectl -n nccl-autotuner logs -f -c trial \\
#     -l nccl-autotuner/launch=autotuner-smoke,batch.kubernetes.io/job-completion-index=0 | grep AUTOTUNER_RESULT
#   kubectl -n nccl-autotuner delete job,service,configmap -l nccl-autotuner/launch=autotuner-smoke
# Generated: `UPDATE_GOLDEN=1 pytest tests/deploy` rewrites it (tests/deploy keeps it equal to the dryrun).
"""
EXAMPLE_SPEC = {
    "workload": {"name": "smoke-dlrm", "sharding": "table_wise",
                 "tables": [{"name": f"t{i}", "num_embeddings": 50_000, "embedding_dim": 128, "pooling_factor": 16}
                            for i in range(8)]},
    "candidates": [{"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 512},
                   {"fwd_precision": "fp16", "bwd_precision": "bf16", "batch_size": 2048},
                   {"fwd_precision": "fp8", "bwd_precision": "bf16", "batch_size": 2048}],
    "warmup": 5,
    "iterations": 50,
}  # fmt: skip
EXAMPLE_ENV = {"NCCL_DEBUG": "INFO", "FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"}


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def manifests() -> list[tuple[str, int, dict[str, Any]]]:
    found = []
    for path in sorted(K8S.rglob("*.yaml")):
        for i, doc in enumerate(documents(path)):
            if doc.get("kind") != "Kustomization":
                found.append((str(path.relative_to(K8S)), i, doc))
    return found


def by_kind(kind: str, docs: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    docs = docs if docs is not None else [d for _, _, d in manifests()]
    return [d for d in docs if d["kind"] == kind]


def one(kind: str, docs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    (doc,) = by_kind(kind, docs)
    return doc


def check_model(doc: dict[str, Any]) -> None:
    api = ApiClient()
    model = api._ApiClient__deserialize(copy.deepcopy(doc), MODELS[doc["kind"]])  # type: ignore[attr-defined]
    assert api.sanitize_for_serialization(model) == doc, "the model dropped or changed a field"


def settings_env() -> dict[str, str]:
    return one("ConfigMap", documents(BASE / "settings.yaml"))["data"]


def executor_options() -> dict[str, Any]:
    return json.loads(settings_env()["AUTOTUNER_EXECUTOR_OPTIONS"])["kubernetes"]


def example_request() -> tuple[KubernetesExecutor, LaunchRequest]:
    launch = LaunchRequest(name="smoke", spec=EXAMPLE_SPEC, env=EXAMPLE_ENV, workdir=Path("/unused"),
                           nproc_per_node=8, nnodes=2, timeout_s=1800)  # fmt: skip
    return KubernetesExecutor(**executor_options()), launch


# ---------------------------------------------------------------------------------------- every document


def test_there_is_something_to_check():
    kinds = {d["kind"] for _, _, d in manifests()}
    assert set(MODELS) <= kinds


@pytest.mark.parametrize(("path", "index", "doc"), manifests(), ids=[f"{p}#{i}" for p, i, _ in manifests()])
def test_document_is_a_valid_model(path, index, doc):
    assert doc["kind"] in MODELS, f"{path}: no model known for {doc['kind']}"
    check_model(doc)


def test_kustomization_lists_every_base_file():
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    on_disk = {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk
    assert kustomization["namespace"] == NAMESPACE == one("Namespace")["metadata"]["name"]
    assert [i["name"] for i in kustomization["images"]] == [one("Deployment")["spec"]["template"]["spec"]
                                                             ["containers"][0]["image"]]  # fmt: skip


def test_overlay_patches_target_base_resources():
    overlay = yaml.safe_load((POSTGRES / "kustomization.yaml").read_text())
    base = {
        (d["kind"], d["metadata"]["name"])
        for p in BASE.glob("*.yaml")
        for d in documents(p)
        if d["kind"] != "Kustomization"
    }
    for patch in overlay["patches"]:
        target = patch.get("target") or yaml.safe_load(patch["patch"])
        name = target.get("name") or target["metadata"]["name"]
        assert (target["kind"], name) in base, target


# ---------------------------------------------------------------------------------------- RBAC


def role_permissions(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    granted = set()
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    granted.add((group, resource, verb))
    return granted


def test_role_grants_what_the_executor_calls_and_nothing_more():
    granted = role_permissions(one("Role"))
    missing = REQUIRED_PERMISSIONS - granted
    assert not missing, f"KubernetesExecutor calls these and the Role does not allow them: {sorted(missing)}"
    # Reads too: list/watch on jobs would read every Job's spec and env in the namespace.
    extra = granted - REQUIRED_PERMISSIONS
    assert not extra, f"the Role allows these and KubernetesExecutor never calls them: {sorted(extra)}"
    assert {r for _, r, _ in granted} <= {"jobs", "configmaps", "services", "pods", "pods/log"}
    assert not any("*" in x for p in granted for x in p), "no wildcards"


def test_nothing_cluster_wide():
    kinds = {d["kind"] for _, _, d in manifests()}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding"}
    role, binding = one("Role"), one("RoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}  # fmt: skip
    deployment = one("Deployment")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "namespace": NAMESPACE,
                                    "name": deployment["spec"]["template"]["spec"]["serviceAccountName"]}]  # fmt: skip
    assert one("ServiceAccount")["metadata"]["name"] == binding["subjects"][0]["name"]


# ---------------------------------------------------------------------------------------- the service


def test_deployment_runs_the_service_as_documented():
    from api.routes.system import router
    from api.settings import Settings

    deployment = one("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["autotuner", "serve", "--host", "0.0.0.0"]
    (port,) = container["ports"]
    assert port["containerPort"] == Settings.model_fields["port"].default == 8000
    routes = {r.path for r in router.routes}
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz" in routes
    # /readyz answers its own 503 (the database did not answer) before the kubelet gives up on it
    assert Settings.model_fields["ready_timeout_s"].default < container["readinessProbe"]["timeoutSeconds"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz" in routes
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["resources"]["requests"]
    assert container["resources"]["limits"]["memory"]
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    # Secret-backed settings point at keys the Secret has (database-url only in the postgres overlay).
    secret = one("Secret")
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}
    assert set(refs) == {"AUTOTUNER_TOKENS", "AUTOTUNER_DATABASE_URL"}
    assert all(r["name"] == secret["metadata"]["name"] for r in refs.values())
    assert refs["AUTOTUNER_TOKENS"]["key"] in secret["stringData"]
    assert refs["AUTOTUNER_DATABASE_URL"].get("optional") is True
    (env_from,) = container["envFrom"]
    assert (
        env_from["configMapRef"]["name"]
        == one("ConfigMap", documents(BASE / "settings.yaml"))["metadata"]["name"]
    )
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert (
        volumes["data"]["persistentVolumeClaim"]["claimName"]
        == one("PersistentVolumeClaim")["metadata"]["name"]
    )
    assert mounts["data"] == settings_env()["AUTOTUNER_DATA_DIR"]


def test_service_reaches_the_deployment_on_8000():
    service, deployment = one("Service", documents(BASE / "service.yaml")), one("Deployment")
    (port,) = service["spec"]["ports"]
    assert port["port"] == 8000
    assert port["targetPort"] == "http"
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert deployment["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    assert service["metadata"]["name"] == "nccl-autotuner"  # http://nccl-autotuner.<ns>:8000 in the README


def test_settings_are_valid_for_the_service_and_the_executor(monkeypatch):
    from api.settings import Settings

    env = settings_env()
    secret = one("Secret")["stringData"]
    for key, value in {**env, "AUTOTUNER_TOKENS": secret["tokens"]}.items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    assert "kubernetes" in settings.allowed_executors
    ex = KubernetesExecutor(**settings.options_for("kubernetes"))
    assert ex.namespace == NAMESPACE
    assert ex.in_cluster is True


def test_secret_values_are_placeholders():
    secrets = [d for _, _, d in manifests() if d["kind"] == "Secret"]
    assert secrets
    for secret in secrets:
        assert "data" not in secret
        assert all("CHANGE-ME" in v for v in secret["stringData"].values())
    overlay = (POSTGRES / "kustomization.yaml").read_text()
    assert "database-url" in overlay
    assert "CHANGE-ME" in overlay


# ---------------------------------------------------------------------------------------- example trial


def test_example_trial_is_what_the_executor_launches():
    ex, launch = example_request()
    dryrun = ex.dryrun(launch)
    text = EXAMPLE_HEADER + dryrun.rendered
    if os.environ.get("UPDATE_GOLDEN") == "1":
        EXAMPLE.write_text(text)
    assert EXAMPLE.read_text() == text
    parse_spec(EXAMPLE_SPEC)  # a spec the trial accepts


def test_example_trial_requests_gpus_efa_and_hugepages():
    job = one("Job", documents(EXAMPLE))
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == 2
    (container,) = job["spec"]["template"]["spec"]["containers"]
    limits = container["resources"]["limits"]
    assert {"nvidia.com/gpu", "vpc.amazonaws.com/efa", "hugepages-2Mi", "memory"} <= set(limits)


# ---------------------------------------------------------------------------------------- kustomize build


def kustomize(path: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: the kustomize builds are checked where it is")
    out = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def test_base_builds():
    docs = kustomize(BASE)
    for doc in docs:
        check_model(doc)
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == NAMESPACE
    container = one("Deployment", docs)["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example.com/nccl-autotuner:0.1.0"


def test_postgres_overlay_builds_two_replicas_without_a_volume_claim():
    docs = kustomize(POSTGRES)
    for doc in docs:
        check_model(doc)
    assert not by_kind("PersistentVolumeClaim", docs)
    deployment = one("Deployment", docs)
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    assert not any("persistentVolumeClaim" in v for v in deployment["spec"]["template"]["spec"]["volumes"])
    assert one("Secret", docs)["stringData"]["database-url"].startswith("postgresql+psycopg://")
    assert one("PodDisruptionBudget", docs)["spec"]["minAvailable"] == 1
