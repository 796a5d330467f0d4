"""The Kubernetes executor when the cluster or its API server fails, not the trial: a launch's end must
say whose failure it was. A search launch that ends neither succeeded nor cancelled has its env config
quarantined (autotuner/tuning/ingest.py), so what is the API server's, the network's or the nodes' doing
ends CANCELLED, with the reason in words, and what the API server fails for a moment is tried again.

Against the fake API server of test_kubernetes.py (its `faults`: failures for a few requests in turn);
skipped with it where the kubernetes client is not installed.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import autotuner.executors.kubernetes.apicalls as apicalls
import autotuner.executors.kubernetes.executor as kexec
from autotuner.executors import LaunchState
from autotuner.executors.kubernetes.executor import KubernetesExecutor
from tests.executors.test_kubernetes import (
    BACKOFF,
    CREATE_ID,
    ENV,
    NOISE_LINE,
    NS,
    POD0_LOG,
    RESULT,
    STATUSES,
    Busy,
    FakeCluster,
    Lost,
    T,
    conditions,
    executor,
    fixed_create_id,  # noqa: F401 - autouse: the create id the tests know
    launch,
    scheduled,
    with_id,
)

FAILED_JOB = f"BackoffLimitExceeded: {BACKOFF}"
KILLED = {"exitCode": 137, "reason": "Error", "startedAt": T, "finishedAt": T}


@pytest.fixture
def cluster() -> FakeCluster:
    return FakeCluster()


@pytest.fixture(autouse=True)
def short_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    """No real pauses between tries: the tests count tries (one test looks at the pauses themselves)."""
    monkeypatch.setattr(KubernetesExecutor, "create_pauses_s", (0.0, 0.0, 0.0), raising=False)
    monkeypatch.setattr(KubernetesExecutor, "result_read_pauses_s", (0.0, 0.0, 0.0), raising=False)


def timeout() -> Exception:
    from urllib3.exceptions import ReadTimeoutError

    return ReadTimeoutError(None, "/", "Read timed out. (read timeout=30)")  # type: ignore[arg-type]


def broken(message: str) -> Exception:
    """What urllib3 raises for a response that breaks off."""
    from urllib3.exceptions import ProtocolError

    return ProtocolError(f"Connection broken: {message}")


def log_reads(cluster: FakeCluster) -> int:
    return sum(1 for s in cluster.sent if s.method == "GET" and s.path.endswith("/log"))


def finish(ex: KubernetesExecutor, job: str, request: Any) -> Any:
    """Follow a Job that has ended to the launch's outcome."""
    return ex.wait(job, request, started=time.monotonic(), poll_s=0.01)


# ------------------------------------------------------------------ 1. a result log that cannot be read


def broken_once(log: str) -> Callable[[], Iterator[bytes]]:
    """A pod log whose first read breaks off half way (the connection reset), read whole after that."""
    reads: list[int] = []

    def writes() -> Iterator[bytes]:
        reads.append(1)
        if len(reads) == 1:
            yield NOISE_LINE * 3
            raise broken("ConnectionResetError(104, 'Connection reset by peer')")
        yield log.encode()

    return writes


READ_FAULTS: dict[str, Callable[[FakeCluster], None]] = {
    "log-503": lambda c: c.faults.update({("GET", "pods/log"): [503]}),
    "log-reset-then-500": lambda c: c.faults.update({("GET", "pods/log"): [ConnectionResetError(104, "reset"), 500]}),
    "list-503-then-timeout": lambda c: c.faults.update({("GET", "pods"): [503, timeout()]}),
    "stream-broken": lambda c: c.logs.update({pod: broken_once(POD0_LOG) for pod in c.logs}),
}  # fmt: skip


@pytest.mark.parametrize("fault", list(READ_FAULTS))
def test_a_result_read_that_fails_for_a_moment_is_read_again(cluster, fault):
    """The Job completed and pod 0's log holds the result; the first reads of it fail (the API server
    restarting, a reset). Before: read once, "could not read" passed for "wrote nothing", and the launch
    failed ("no result written (exit code None)"), its env config quarantined."""
    ex, job, request = scheduled(cluster)
    cluster.set_status(job, STATUSES["succeeded"][0])
    cluster.add_pod(job, 0, log=POD0_LOG)
    READ_FAULTS[fault](cluster)
    outcome = finish(ex, job, request)
    assert (outcome.state, outcome.result, outcome.reason) == (LaunchState.SUCCEEDED, RESULT, "")


@pytest.mark.parametrize("job_status", ["succeeded", "failed"])
@pytest.mark.parametrize(
    "error", [503, ConnectionResetError(104, "Connection reset by peer")], ids=["503", "reset"]
)
def test_a_result_that_stays_unreadable_cancels_the_launch(cluster, job_status, error):
    """Every read of pod 0's log fails: nothing is known of the result, so the launch is cancelled, the
    reason saying why, not failed (a failed Job too: exit 1 is "some candidate failed", with a result)."""
    ex, job, request = scheduled(cluster)
    cluster.set_status(job, STATUSES[job_status][0])
    pod0 = cluster.add_pod(job, 0, log=POD0_LOG)
    cluster.faults[("GET", "pods/log")] = [error] * 20
    outcome = finish(ex, job, request)
    assert outcome.state == LaunchState.CANCELLED
    assert outcome.result is None
    why = (
        "HTTP 503 Error: injected"
        if error == 503
        else "ConnectionResetError: [Errno 104] Connection reset by peer"
    )
    assert outcome.reason.startswith(
        "; ".join(filter(None, [STATUSES[job_status][2], "its result could not be read (4 tries in "]))
    )
    assert outcome.reason.endswith(f"s; the last: could not read the log of pod {pod0}: {why}): the API server's or "
                                   "the network's failure, not the config's")  # fmt: skip
    assert log_reads(cluster) == 4 + 1  # the tries, then the log tail for the record


def test_a_pod_list_that_stays_unreadable_cancels_the_launch(cluster):
    ex, job, request = scheduled(cluster)
    cluster.set_status(job, STATUSES["succeeded"][0])
    cluster.add_pod(job, 0, log=POD0_LOG)
    cluster.errors[("GET", "pods")] = 503
    outcome = finish(ex, job, request)
    assert outcome.state == LaunchState.CANCELLED
    assert f"could not read the pods of Job {NS}/{job}: HTTP 503" in outcome.reason


class _SleepClock:
    """time for the executor: sleeping moves it on, and nothing waits."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_result_read_tries_are_bounded_in_time(cluster, monkeypatch):
    """Reads that each fail after 2 s, pauses of 1 s, at most 5 s: a try begins only within the window
    (two here), and then the log is said unreadable, not empty (before: None, "no result")."""
    clock = _SleepClock()
    monkeypatch.setattr(kexec, "time", clock)

    def slow_failure() -> Iterator[bytes]:
        clock.now += 2
        raise broken("IncompleteRead(0 bytes read)")
        yield b""  # a generator

    ex, job, request = scheduled(cluster)
    ex.result_read_pauses_s, ex.result_read_window_s = (1.0,) * 10, 5.0
    cluster.add_pod(job, 0, log=slow_failure)
    with pytest.raises(
        Exception, match=r"^2 tries in 5\.0 s; the last: could not read the log of pod"
    ) as raised:
        ex.fetch_result(job, request)
    assert type(raised.value).__name__ == "ResultUnreadable"
    assert (clock.slept, clock.now - 1000) == ([1.0], 5.0)


@pytest.mark.parametrize("status", [429, 503])
def test_a_result_read_waits_as_long_as_the_server_asks(cluster, monkeypatch, status):
    """The log read answered 429 or 503 with Retry-After: 2: the next read comes 2 s later, not 0.5 s
    (the real pauses), and reads the result. Before: read again after 0.5 s."""
    clock = _SleepClock()
    monkeypatch.setattr(kexec, "time", clock)
    ex, job, request = scheduled(cluster)
    ex.result_read_pauses_s = kexec.RESULT_READ_PAUSES_S
    cluster.add_pod(job, 0, log=POD0_LOG)
    cluster.faults[("GET", "pods/log")] = [Busy(status, {"Retry-After": "2"})]
    assert ex.fetch_result(job, request) == RESULT
    assert clock.slept == [2.0]
    assert log_reads(cluster) == 2


def test_a_result_read_the_server_puts_off_past_its_window_is_unreadable_at_once(cluster, monkeypatch):
    """Retry-After: 60, past the 5 s the reads may take: no pause, no other try, and the log is said
    unreadable (the launch cancelled, not failed), saying why. Before: read again after 0.5 s."""
    clock = _SleepClock()
    monkeypatch.setattr(kexec, "time", clock)
    ex, job, request = scheduled(cluster)
    ex.result_read_pauses_s = kexec.RESULT_READ_PAUSES_S
    pod0 = cluster.add_pod(job, 0, log=POD0_LOG)
    cluster.faults[("GET", "pods/log")] = [Busy(429, {"Retry-After": "60"})]
    with pytest.raises(kexec.ResultUnreadable) as raised:
        ex.fetch_result(job, request)
    assert str(raised.value) == ("1 tries in 0.0 s; the API server asked to wait 60 s, more than the 5 s left to "
                                 f"try; the last: could not read the log of pod {pod0}: HTTP 429 Error: injected")  # fmt: skip
    assert (clock.slept, log_reads(cluster)) == ([], 1)


def test_the_real_result_read_pauses_are_short():
    assert sum(kexec.RESULT_READ_PAUSES_S) <= kexec.RESULT_READ_WINDOW_S <= 10


# ------------------------------------------------------------------ 2. pods the cluster took away

DISRUPTED: dict[str, tuple[dict[str, Any], str]] = {
    "preempted": ({"phase": "Failed", "conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
         "message": "Preempted in order to admit critical pod", "lastProbeTime": None, "lastTransitionTime": T}]},
        "DisruptionTarget: PreemptionByScheduler: Preempted in order to admit critical pod"),
    "node-tainted": ({"phase": "Failed", "conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
         "message": "Taint manager: deleting due to NoExecute taint", "lastProbeTime": None, "lastTransitionTime": T}]},
        "DisruptionTarget: DeletionByTaintManager: Taint manager: deleting due to NoExecute taint"),
    "node-gone": ({"phase": "Failed", "conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
         "message": "PodGC: node no longer exists", "lastProbeTime": None, "lastTransitionTime": T}]},
        "DisruptionTarget: DeletionByPodGC: PodGC: node no longer exists"),
    "evicted": ({"phase": "Failed", "reason": "Evicted",
                 "message": "The node was low on resource: memory. Threshold quantity: 100Mi, available: 42Mi."},
                "Evicted: The node was low on resource: memory. Threshold quantity: 100Mi, available: 42Mi."),
    "preempting": ({"phase": "Failed", "reason": "Preempting", "message": "Preempted in order to admit critical pod"},
                   "Preempting: Preempted in order to admit critical pod"),
}  # fmt: skip


def disrupt(cluster: FakeCluster, pod: str, case: str) -> None:
    status = cluster.objects[(NS, "pods", pod)]["status"]
    status.update(copy.deepcopy(DISRUPTED[case][0]))


@pytest.mark.parametrize("case", list(DISRUPTED))
def test_a_job_failed_by_a_disrupted_pod_is_cancelled(cluster, case):
    """A pod preempted, evicted or on a node lost: the Job fails (backoffLimit 0), and so did rank 0 when
    its peer went. Before: failed, the env config blamed and quarantined. As Slurm's NODE_FAIL and
    PREEMPTED: cancelled, the reason in Kubernetes' words."""
    ex, job, request = scheduled(cluster)
    cluster.set_status(job, STATUSES["failed"][0])
    pod0 = cluster.add_pod(job, 0, log="rank 0: peer 8 went away\n", terminated=KILLED)
    pod1 = cluster.add_pod(job, 1, terminated=KILLED)
    disrupt(cluster, pod1, case)
    outcome = finish(ex, job, request)
    assert outcome.state == LaunchState.CANCELLED
    assert outcome.reason == (f"pod {pod1} was disrupted ({DISRUPTED[case][1]}): the cluster's failure, not the "
                              f"config's; {FAILED_JOB}; pod {pod0}: exit code 137")  # fmt: skip


def test_a_disruption_seen_while_running_counts_when_the_pod_is_gone(cluster):
    """The Job controller may delete the disrupted pod before the Job reads failed: what a poll saw of it
    while the Job ran decides."""
    ex, job, request = scheduled(cluster)
    cluster.set_status(job, STATUSES["running"][0])
    cluster.add_pod(job, 0)
    pod1 = cluster.add_pod(job, 1)
    for pod in (f"{job}-0-x7k2p", pod1):
        cluster.objects[(NS, "pods", pod)]["spec"]["nodeName"] = "ip-10-0-1-17"
    disrupt(cluster, pod1, "preempted")
    cluster.objects[(NS, "pods", pod1)]["status"]["phase"] = "Running"  # terminating, its condition set
    polls: list[LaunchState] = []

    def controller(desc: Any) -> None:
        polls.append(desc.state)
        cluster.set_status(job, STATUSES["failed"][0])
        for key in [k for k in cluster.objects if k[1] == "pods"]:
            del cluster.objects[key]

    outcome = ex.wait(job, request, started=time.monotonic(), poll_s=0.01, on_poll=controller)
    assert polls == [LaunchState.RUNNING]
    assert outcome.state == LaunchState.CANCELLED
    assert outcome.reason == (f"pod {pod1} was disrupted ({DISRUPTED['preempted'][1]}) (at an earlier poll): the "
                              f"cluster's failure, not the config's; {FAILED_JOB}")  # fmt: skip
    assert ex._disrupted == {}  # nothing kept of a launch that ended


@pytest.mark.parametrize(
    "status",
    [
        {"phase": "Failed", "conditions": [{"type": "DisruptionTarget", "status": "False", "reason": "X"}]},
        {
            "phase": "Failed",
            "reason": "DeadlineExceeded",
            "message": "Pod was active on the node longer than",
        },
        {"phase": "Failed"},
    ],
    ids=["condition-false", "other-reason", "plain-failure"],
)
def test_a_job_failed_by_its_trial_still_fails(cluster, status):
    ex, job, request = scheduled(cluster)
    cluster.set_status(job, STATUSES["failed"][0])
    pod0 = cluster.add_pod(job, 0, log="Traceback: boom\n", terminated={**KILLED, "exitCode": 2})
    cluster.objects[(NS, "pods", pod0)]["status"].update(copy.deepcopy(status))
    outcome = finish(ex, job, request)
    assert outcome.state == LaunchState.FAILED
    assert outcome.reason == f"{FAILED_JOB}; pod {pod0}: exit code 2"


@pytest.mark.parametrize("nnodes", [1, 2, 8])
def test_a_pod_the_cluster_takes_away_fails_the_job_by_a_rule_that_outlives_the_pod(nnodes):
    """The Job's podFailurePolicy: a pod of it with DisruptionTarget fails the Job at once, its condition
    saying so (reason PodFailurePolicy) when the pod is gone. FailJob, not Ignore: a replacement pod would
    join ranks that failed without their peer. The rule needs restartPolicy Never."""
    spec = executor(nnodes).dryrun(launch(nnodes)).request.job["spec"]
    assert spec["podFailurePolicy"] == {
        "rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
    }
    assert spec["template"]["spec"]["restartPolicy"] == "Never"
    assert spec["backoffLimit"] == 0


@pytest.mark.parametrize(
    "types", [("FailureTarget", "Failed"), ("FailureTarget",)], ids=["failed", "failing"]
)
@pytest.mark.parametrize("pods_left", ["index-0", "none"])
def test_a_job_failed_by_its_pod_failure_policy_is_cancelled_with_the_pod_gone(cluster, types, pods_left):
    """Preempted, drained or evicted, the pod was deleted before any poll saw it; the Job's own condition,
    written by its podFailurePolicy, says so (k8s >= 1.31 writes FailureTarget first, while the other pods
    terminate). Cancelled, not failed: the cluster's failure, measured again. Before: failed
    ("PodFailurePolicy: ..."), its env config quarantined."""
    ex, job, request = scheduled(cluster)
    message = f"Pod {NS}/{job}-1-x7k2p has condition DisruptionTarget matching FailJob rule at index 0"
    status = {
        "failed": 1,
        "startTime": T,
        "conditions": conditions(*types, reason="PodFailurePolicy", message=message),
    }
    cluster.set_status(job, status)
    detail = ""
    if pods_left == "index-0":  # rank 0 died with its peer: its exit says nothing of the config
        pod0 = cluster.add_pod(job, 0, log="rank 0: peer 8 went away\n", terminated=KILLED)
        detail = f"; pod {pod0}: exit code 137"
    outcome = finish(ex, job, request)
    assert outcome.state == LaunchState.CANCELLED
    assert outcome.reason == ("a pod was disrupted, as the Job's podFailurePolicy says: the cluster's failure, "
                              f"not the config's; PodFailurePolicy: {message}{detail}")  # fmt: skip
    assert outcome.result is None


# ------------------------------------------------------------------ 4. creating the Job


def job_posts(cluster: FakeCluster) -> list[Any]:
    return [s.body for s in cluster.sent if s.method == "POST" and s.path.endswith("/jobs")]


def deletes(cluster: FakeCluster) -> list[str]:
    return [s.path.rsplit("/", 2)[-2] for s in cluster.sent if s.method == "DELETE"]


def owned_by_the_job(cluster: FakeCluster, job: str) -> bool:
    uid = cluster.job(job)["metadata"]["uid"]
    return all(cluster.objects[(NS, r, job)]["metadata"]["ownerReferences"][0]["uid"] == uid
               for r in ("configmaps", "services"))  # fmt: skip


TRANSIENT: dict[str, Callable[[], Any]] = {
    **{str(status): (lambda status=status: status) for status in (429, 500, 502, 503, 504)},
    "reset": lambda: ConnectionResetError(104, "Connection reset by peer"),
    "timeout": timeout,
}


@pytest.mark.parametrize("fault", list(TRANSIENT))
def test_a_job_create_that_fails_for_a_moment_is_tried_again(cluster, fault):
    """Before: one 429, 5xx or reset connection on the Job create failed the whole study for good."""
    cluster.faults[("POST", "jobs")] = [TRANSIENT[fault](), TRANSIENT[fault]()]
    ex = executor(2, api_client=cluster)
    dryrun = ex.dryrun(launch(2))
    assert ex.schedule(dryrun) == dryrun.request.name
    assert job_posts(cluster) == [with_id(dryrun.request.job)] * 3
    assert owned_by_the_job(cluster, dryrun.request.name)
    assert deletes(cluster) == []


@pytest.mark.parametrize("lost", [504, "timeout", "reset"])
def test_a_job_made_whose_answer_was_lost_is_submitted_once(cluster, lost):
    """The server made the Job, and its answer was lost on the way (a proxy's 504, a timeout, a reset):
    read back, it is this launch's, so it is the launch. Before: the study failed, the Job deleted."""
    error = lost if isinstance(lost, int) else TRANSIENT[lost]()
    cluster.faults[("POST", "jobs")] = [Lost(error)]
    ex = executor(2, api_client=cluster)
    dryrun = ex.dryrun(launch(2))
    assert ex.schedule(dryrun) == dryrun.request.name
    assert len(job_posts(cluster)) == 1  # not made twice
    assert owned_by_the_job(cluster, dryrun.request.name)
    assert deletes(cluster) == []


def test_a_job_create_answered_409_for_our_own_job_is_submitted(cluster):
    """A create made, then answered AlreadyExists (a retry of it on the way, by the client or a proxy):
    the Job there is this launch's."""
    cluster.faults[("POST", "jobs")] = [Lost(409)]
    ex = executor(2, api_client=cluster)
    dryrun = ex.dryrun(launch(2))
    assert ex.schedule(dryrun) == dryrun.request.name
    assert owned_by_the_job(cluster, dryrun.request.name)
    assert deletes(cluster) == []


def others_job(cluster: FakeCluster, how: str) -> dict[str, Any]:
    """A Job of this launch's name that is not this launch's, stored as the server would."""
    env = {**ENV, "NCCL_NSOCKS_PERTHREAD": "8"} if how == "another-env" else ENV
    # This schedule's create id (but for "another-schedule"): each other difference must tell alone.
    create_id = "another-schedules-create-id" if how == "another-schedule" else CREATE_ID
    job = with_id(executor(2).dryrun(launch(2, env=env)).request.job, create_id)
    if how == "another-launch":
        job["metadata"]["annotations"]["nccl-autotuner/launch-name"] = "S1-L7"
    job["metadata"].update(uid="uid-other", creationTimestamp="2025-06-01T10:00:00Z")
    if how == "older":
        job["metadata"]["creationTimestamp"] = "2025-05-31T10:00:00Z"
    if how == "being-deleted":
        job["metadata"]["deletionTimestamp"] = "2025-06-01T10:00:00Z"
    return job


@pytest.mark.parametrize(
    "how", ["another-env", "another-launch", "older", "being-deleted", "another-schedule"]
)
@pytest.mark.parametrize("first", [409, 503])
def test_a_job_of_the_name_that_is_not_ours_is_a_conflict(cluster, how, first):
    """Read back, the Job of the launch's name is another's (another env, another launch name, made before
    this launch's ConfigMap, on its way out, or made by another schedule: another tuner's launch of this
    name, env and spec): a conflict, explained, and that Job left alone."""
    ex = executor(2, api_client=cluster)
    dryrun = ex.dryrun(launch(2))
    name = dryrun.request.name
    theirs = others_job(cluster, how)
    if first == 409:
        cluster.objects[(NS, "jobs", name)] = theirs
    else:  # it appears while the create fails
        cluster.faults[("POST", "jobs")] = [503]
        real_answer = cluster.answer

        def answer(method: str, url: str, headers: dict[str, str], body: Any) -> Any:
            if method == "GET" and url.endswith(f"/jobs/{name}"):
                cluster.objects[(NS, "jobs", name)] = theirs
            return real_answer(method, url, headers, body)

        cluster.answer = answer  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match=f"Job {NS}/{name} already exists: .*name_prefix"):
        ex.schedule(dryrun)
    assert cluster.objects[(NS, "jobs", name)] is theirs
    assert deletes(cluster) == ["configmaps", "services"]  # ours, and only ours


@pytest.mark.parametrize("status", [400, 403, 422])
def test_a_job_create_the_server_refuses_is_not_tried_again(cluster, status):
    cluster.errors[("POST", "jobs")] = status
    with pytest.raises(
        RuntimeError, match=rf"could not create Job {NS}/autotuner-s1-l7: HTTP {status} .*injected"
    ):
        scheduled(cluster)
    assert len(job_posts(cluster)) == 1
    # Not read back between tries: none. Only by the undo (the Job, had it been made): not there.
    assert [s.path for s in cluster.sent if s.method == "GET"] == [
        f"/apis/batch/v1/namespaces/{NS}/jobs/autotuner-s1-l7"
    ]
    assert deletes(cluster) == ["configmaps", "services"]


def test_a_job_create_that_keeps_failing_fails_after_bounded_tries(cluster, monkeypatch):
    """A server that answers 503 for good: 4 tries, paused 1, 2 and 4 s, then the study's error as before,
    what was made rolled back."""
    clock = _SleepClock()
    monkeypatch.setattr(apicalls, "time", clock)
    monkeypatch.setattr(KubernetesExecutor, "create_pauses_s", apicalls.CREATE_PAUSES_S, raising=False)
    cluster.errors[("POST", "jobs")] = 503
    with pytest.raises(
        RuntimeError, match=rf"could not create Job {NS}/autotuner-s1-l7 \(4 tries\): HTTP 503"
    ):
        scheduled(cluster)
    assert len(job_posts(cluster)) == 4
    assert clock.slept == [1.0, 2.0, 4.0]
    assert deletes(cluster) == ["configmaps", "services"]  # the Job read back: not there
    assert not cluster.objects
