"""The trial pods as a non-root uid (the executor option run_as_user): the whole request (golden), what the
"restricted" Pod Security Standard checks, and no change at all without the option.

`UPDATE_GOLDEN=1 pytest tests/executors/test_kubernetes_security.py` rewrites
tests/executors/golden/k8s-n*-run-as-user.yaml; review the diff.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import yaml

from autotuner.executors import LaunchRequest
from tests.executors.test_kubernetes import ENV, GOLDEN, check_model, executor, launch

UID = 10001
# What Pod Security Admission's "restricted" level checks (k8s.io/pod-security-admission, policy/):
# "baseline" lets a container add only these capabilities, "restricted" only NET_BIND_SERVICE.
BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}  # fmt: skip
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}  # fmt: skip


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """The controls of the "restricted" standard (baseline's among them) that `pod` (a pod spec) fails."""
    found = []
    pod_sc = pod.get("securityContext") or {}
    containers = [*pod.get("initContainers", []), *pod["containers"]]
    scs = [c.get("securityContext") or {} for c in containers]
    if any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")):
        found.append("host namespaces")
    if any(sc.get("privileged") for sc in scs):
        found.append("privileged")
    if any(set(sc.get("capabilities", {}).get("add", [])) - BASELINE_CAPABILITIES for sc in scs):
        found.append("capabilities (baseline)")
    if any(p.get("hostPort") for c in containers for p in c.get("ports", [])):
        found.append("host ports")
    if any(set(v) - {"name"} - RESTRICTED_VOLUMES for v in pod.get("volumes", [])):
        found.append("volume types")
    if any(sc.get("allowPrivilegeEscalation") is not False for sc in scs):
        found.append("privilege escalation")
    if not all(sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True for sc in scs):
        found.append("running as non-root")
    if 0 in [pod_sc.get("runAsUser"), *(sc.get("runAsUser") for sc in scs)]:
        found.append("running as non-root user")
    seccomp = [(sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type") for sc in scs]
    if not all(t in ("RuntimeDefault", "Localhost") for t in seccomp):
        found.append("seccomp")
    caps = [sc.get("capabilities") or {} for sc in scs]
    if not all("ALL" in c.get("drop", []) and set(c.get("add", [])) <= {"NET_BIND_SERVICE"} for c in caps):
        found.append("capabilities (restricted)")
    return found


def pod_of(nnodes: int, launched: LaunchRequest | None = None, **options: Any) -> dict[str, Any]:
    request = executor(nnodes, **options).dryrun(launched or launch(nnodes)).request
    return request.job["spec"]["template"]["spec"]


@pytest.mark.parametrize("nnodes", [1, 2], ids=["gpus", "efa"])
def test_dryrun_as_a_non_root_user_is_golden(nnodes):
    dryrun = executor(nnodes, run_as_user=UID).dryrun(launch(nnodes))
    path = GOLDEN / f"k8s-n{nnodes}-run-as-user.yaml"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(dryrun.rendered)
    assert dryrun.rendered == path.read_text()
    assert list(yaml.safe_load_all(dryrun.rendered)) == dryrun.request.resources


@pytest.mark.parametrize("nnodes", [1, 2, 8])
def test_a_non_root_pod_meets_the_restricted_standard_efa_included(nnodes):
    assert restricted_violations(pod_of(nnodes)) != []  # the check sees today's pods fail it
    pod = pod_of(nnodes, run_as_user=UID)
    assert restricted_violations(pod) == []
    assert pod["securityContext"]["runAsUser"] == UID
    for resource in executor(nnodes, run_as_user=UID).dryrun(launch(nnodes)).request.resources:
        check_model(resource)


@pytest.mark.parametrize("nnodes", [1, 2, 8])
def test_without_the_option_the_request_is_unchanged(nnodes):
    """No securityContext, HOME or /tmp volume: `run_as_user: null` is the request of old, byte for byte."""
    given_null = executor(nnodes, run_as_user=None).dryrun(launch(nnodes))
    assert given_null.rendered == executor(nnodes).dryrun(launch(nnodes)).rendered
    assert given_null.rendered == (GOLDEN / f"k8s-n{nnodes}.yaml").read_text()
    assert "securityContext" not in given_null.rendered
    assert "HOME" not in given_null.rendered


def test_a_non_root_pod_has_a_writable_home_and_tmp():
    """A uid with no passwd entry gets HOME=/ (not writable): caches go to /tmp, an emptyDir, where the
    result file is written too."""
    pod = pod_of(2, run_as_user=UID)
    (container,) = pod["containers"]
    assert container["env"][1] == {"name": "HOME", "value": "/tmp"}
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert {"name": "tmp", "emptyDir": {}} in pod["volumes"]


def test_the_launchs_own_home_wins():
    (container,) = pod_of(2, launch(env={**ENV, "HOME": "/home/trial"}), run_as_user=UID)["containers"]
    assert [e for e in container["env"] if e["name"] == "HOME"] == [{"name": "HOME", "value": "/home/trial"}]
