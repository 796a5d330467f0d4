"""What the pods of a launch's Job say (V1Pod models, as the client reads them): whether one waits for a
node, which is the index-0 pod and how it ended, and whether the cluster took one away (disruption)."""

from __future__ import annotations

import re
from typing import Any

from autotuner.executors import results
from autotuner.executors.kubernetes.manifests import CONTAINER, INDEX_KEY

POD_MESSAGE_CHARS = 300  # of a pod's scheduling message ("0/4 nodes are available: ..."), as a queued reason
# A pod's status.reason when the node, not the trial, ended it: kubelet eviction under node pressure,
# kubelet preemption for a critical pod, a node lost (before DisruptionTarget existed), a node shut down,
# or admission refused by the kubelet (its device plugin lost the GPUs: "UnexpectedAdmissionError",
# "OutOfnvidia.com/gpu").
DISRUPTED_REASONS = frozenset({"Evicted", "Preempting", "NodeLost", "Terminated", "NodeShutdown",
                               "UnexpectedAdmissionError"})  # fmt: skip


def unscheduled(pod: Any) -> str:
    """Why a pod waits for a node, as its PodScheduled condition says ("unschedulable: 0/4 nodes are
    available: 4 Insufficient nvidia.com/gpu."); "" for a pod on a node (pulling its image, creating
    its containers, running or done: not queued)."""
    status = pod.status
    if (status and status.phase not in (None, "Pending")) or (pod.spec and pod.spec.node_name):
        return ""
    conditions = {c.type: c for c in (status and status.conditions) or []}
    scheduled = conditions.get("PodScheduled")
    if scheduled is not None and scheduled.status == "True":
        return ""
    if scheduled is None or scheduled.status != "False":
        return "not scheduled yet"
    # CamelCase reason in words: Unschedulable -> unschedulable, SchedulingGated -> scheduling gated
    why = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", scheduled.reason or "not scheduled").lower()
    return f"{why}: {results.clip(scheduled.message, POD_MESSAGE_CHARS)}" if scheduled.message else why


def pod_order(pod: Any) -> tuple[int, str]:
    """Pods by completion index (then name): the reason shown is that of the lowest index waiting."""
    meta = pod.metadata
    index = (meta.labels or {}).get(INDEX_KEY) or (meta.annotations or {}).get(INDEX_KEY) or ""
    return (int(index) if index.isdigit() else 1 << 30, meta.name or "")


def waiting_on(pods: list[Any], nnodes: int, describe: str) -> str:
    """Why a Job of `nnodes` pods, these made, waits ("": it does not): its lowest-index pod not on a node,
    in Kubernetes' words, or the pods not made yet (`describe`: the kubectl command that says why)."""
    waiting = sorted((p for p in pods if unscheduled(p)), key=pod_order)
    if not waiting and 0 < len(pods) < nnodes:  # the rest not even made (a ResourceQuota, a LimitRange)
        return (
            f"{len(pods)} of {nnodes} pods made: the Job controller holds the rest back ({describe} says why)"
        )
    if not waiting:
        return ""
    others = len(waiting) - 1
    more = f" (and {others} more pod{'s' if others > 1 else ''} not scheduled)" if others else ""
    return f"pod {waiting[0].metadata.name} {unscheduled(waiting[0])}{more}"


def index0(pods: list[Any]) -> Any:
    """The pod of completion index 0 (node rank 0: global rank 0 prints the result), or None.
    Matched by label or by annotation: the label only exists from Kubernetes 1.28 on."""
    found = [p for p in pods if "0" in (
        (p.metadata.labels or {}).get(INDEX_KEY), (p.metadata.annotations or {}).get(INDEX_KEY))]  # fmt: skip
    return max(found, key=lambda p: str(p.metadata.creation_timestamp or ""), default=None)


def index0_exit(pods: list[Any]) -> tuple[int | None, str]:
    """The exit code of the index-0 pod's trial container and a line saying so ((None, ""): not known)."""
    pod = index0(pods)
    if pod is None:
        return None, ""
    for status in (pod.status and pod.status.container_statuses) or []:
        terminated = status.state and status.state.terminated
        if status.name == CONTAINER and terminated:
            why = f" ({terminated.reason})" if terminated.reason not in (None, "Error", "Completed") else ""
            return terminated.exit_code, f"pod {pod.metadata.name}: exit code {terminated.exit_code}{why}"
    return None, ""


def disruption(pods: list[Any]) -> str:
    """How the cluster took a pod of these away, in Kubernetes' words ("": it took none): preempted,
    evicted, its node lost or shut down. The pod's DisruptionTarget condition says so (Kubernetes >= 1.26),
    or its status.reason (the kubelet's own evictions and preemptions, older clusters)."""
    for pod in sorted(pods, key=pod_order):
        status = pod.status
        if status is None:
            continue
        target = next((c for c in status.conditions or [] if c.type == "DisruptionTarget" and c.status == "True"),
                      None)  # fmt: skip
        if target is not None:
            words = ": ".join(x for x in ("DisruptionTarget", target.reason, target.message) if x)
        elif status.reason in DISRUPTED_REASONS or (status.reason or "").startswith("OutOf"):
            words = ": ".join(x for x in (status.reason, status.message) if x)
        else:
            continue
        return f"pod {pod.metadata.name} was disrupted ({results.clip(words, POD_MESSAGE_CHARS)})"
    return ""
