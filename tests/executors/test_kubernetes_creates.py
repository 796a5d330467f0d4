"""The Kubernetes executor creating a launch's ConfigMap and Service through a busy or restarting API
server, as it creates the Job: a create the server fails for now is tried again, one whose answer was lost
is read back and followed when it carries this schedule's create id (never made twice, never another
tuner's taken for ours), and a 429's or 503's Retry-After lengthens the pause, within the create's window.

Against the fake API server of test_kubernetes.py; skipped with it where the kubernetes client is not
installed.
"""

from __future__ import annotations

import copy
import re
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

import autotuner.executors.kubernetes.apicalls as apicalls
from autotuner.executors.kubernetes.executor import KubernetesExecutor
from tests.executors.test_kubernetes import (
    CREATE_ID_KEY,
    NS,
    Busy,
    FakeCluster,
    Lost,
    T,
    executor,
    fixed_create_id,  # noqa: F401 - autouse: the create id the tests know
    launch,
    scheduled,
    short_pauses,  # noqa: F401 - autouse: no real pauses but where a test looks at them
    with_id,
)
from tests.executors.test_kubernetes_faults import (
    TRANSIENT,
    _SleepClock,
    deletes,
    job_posts,
    owned_by_the_job,
)

NAME = "autotuner-s1-l7"
RESOURCES = {"ConfigMap": "configmaps", "Service": "services"}


@pytest.fixture
def cluster() -> FakeCluster:
    return FakeCluster()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _SleepClock:
    """The creates' pauses, slept on a clock that moves on and waits for nothing; the real pauses."""
    clock = _SleepClock()
    monkeypatch.setattr(apicalls, "time", clock)
    monkeypatch.setattr(KubernetesExecutor, "create_pauses_s", apicalls.CREATE_PAUSES_S, raising=False)
    return clock


def posts(cluster: FakeCluster, resource: str) -> list[Any]:
    return [s.body for s in cluster.sent if s.method == "POST" and s.path.endswith(f"/{resource}")]


def reads(cluster: FakeCluster, resource: str) -> int:
    return sum(1 for s in cluster.sent if s.method == "GET" and s.path.endswith(f"/{resource}/{NAME}"))


def sent(kind: str) -> dict[str, Any]:
    """The resource of this kind as `schedule` sends it."""
    return with_id(executor(2).dryrun(launch(2)).request.body(kind))


# ------------------------------------------------------------------ 1. ConfigMap and Service creates


def test_each_schedule_stamps_what_it_creates_with_an_id_of_its_own(cluster, monkeypatch):
    """What tells this schedule's objects from others of the same name (another tuner's launch of the same
    name, spec and env): a random id, one per schedule, on the three objects it creates."""
    monkeypatch.undo()  # the real ids
    ids = []
    for name in ("s1-l7", "s1-l8"):
        ex = executor(2, api_client=cluster)
        request = ex.dryrun(launch(2, name=name)).request
        ex.schedule(ex.dryrun(launch(2, name=name)))
        stamped = {r: cluster.objects[(NS, r, request.name)]["metadata"]["annotations"].get(CREATE_ID_KEY)
                   for r in ("configmaps", "services", "jobs")}  # fmt: skip
        assert len(set(stamped.values())) == 1, stamped
        ids.append(stamped["jobs"])
        assert re.fullmatch(r"[0-9a-f]{32}", ids[-1] or ""), ids
        assert CREATE_ID_KEY not in request.job["metadata"]["annotations"]  # the dryrun stays as it was
    assert ids[0] != ids[1]


@pytest.mark.parametrize("fault", list(TRANSIENT))
@pytest.mark.parametrize("kind", list(RESOURCES))
def test_a_create_that_fails_for_a_moment_is_tried_again(cluster, kind, fault):
    """Before: only the Job's create was tried again; one 429, 5xx or reset connection on the ConfigMap or
    the Service failed the whole study for good."""
    resource = RESOURCES[kind]
    cluster.faults[("POST", resource)] = [TRANSIENT[fault](), TRANSIENT[fault]()]
    assert scheduled(cluster)[1] == NAME
    assert posts(cluster, resource) == [sent(kind)] * 3
    assert len(job_posts(cluster)) == 1
    assert owned_by_the_job(cluster, NAME)
    assert deletes(cluster) == []


@pytest.mark.parametrize("lost", [504, "timeout", "reset", 409])
@pytest.mark.parametrize("kind", list(RESOURCES))
def test_a_create_whose_answer_was_lost_is_made_once(cluster, kind, lost):
    """The server made it, and its answer was lost on the way (a proxy's 504, a timeout, a reset; or a
    retry on the way answered AlreadyExists): read back, it carries this schedule's create id, so it is
    the launch's, made once. Before: the study failed (a 409: "a launch of this name ran before")."""
    resource = RESOURCES[kind]
    cluster.faults[("POST", resource)] = [Lost(lost if isinstance(lost, int) else TRANSIENT[lost]())]
    assert scheduled(cluster)[1] == NAME
    assert posts(cluster, resource) == [sent(kind)]  # not made twice
    assert reads(cluster, resource) == 1
    stored = copy.deepcopy(cluster.objects[(NS, resource, NAME)])
    stored["metadata"] = {k: v for k, v in stored["metadata"].items()
                          if k not in ("uid", "creationTimestamp", "ownerReferences")}  # fmt: skip
    assert stored == sent(kind)
    assert owned_by_the_job(cluster, NAME)
    assert deletes(cluster) == []


def test_a_job_with_an_empty_env_value_whose_answer_was_lost_is_ours(cluster):
    """The API server stores an env var's empty value as no value (omitempty): read back, the Job is still
    what was sent. Before: a conflict ("already exists"), and the launch undone."""
    cluster.faults[("POST", "jobs")] = [Lost(504)]
    ex = executor(2, api_client=cluster)
    assert ex.schedule(ex.dryrun(launch(2, env={"NCCL_DEBUG": "INFO", "SET_EMPTY": ""}))) == NAME
    assert len(job_posts(cluster)) == 1
    assert deletes(cluster) == []
    (env,) = [c["env"] for c in cluster.objects[(NS, "jobs", NAME)]["spec"]["template"]["spec"]["containers"]]
    assert {"name": "SET_EMPTY"} in env  # set, and empty: what a pod then sees


def others(kind: str, how: str) -> dict[str, Any]:
    """An object of the launch's name that is not this launch's, stored as the server would."""
    body = sent(kind)
    if how == "another-schedule":  # another tuner's launch of this name, spec and env
        body["metadata"]["annotations"]["nccl-autotuner/create-id"] = "another-schedules-create-id"
    elif how == "other-content" and kind == "ConfigMap":
        body["data"]["spec.json"] = "{}\n"
    elif how == "other-content":
        body["spec"]["ports"][0]["port"] = 29501
    elif how == "being-deleted":
        body["metadata"]["deletionTimestamp"] = T
    body["metadata"].update(uid="uid-other", creationTimestamp=T)
    return body


@pytest.mark.parametrize("how", ["another-schedule", "other-content", "being-deleted"])
@pytest.mark.parametrize("kind", list(RESOURCES))
def test_an_object_of_the_name_that_is_not_ours_is_a_conflict(cluster, kind, how):
    """It appears while the create fails for now: read back, it is another's (made by another schedule,
    holding something else, on its way out). A conflict, explained, that object left alone, and only
    what this launch made rolled back. Before: "could not create ...: HTTP 503"."""
    resource, theirs = RESOURCES[kind], others(kind, how)
    cluster.faults[("POST", resource)] = [503]
    real_answer = cluster.answer

    def answer(method: str, url: str, headers: dict[str, str], body: Any) -> Any:
        if method == "GET" and url.endswith(f"/{resource}/{NAME}"):
            cluster.objects[(NS, resource, NAME)] = theirs
        return real_answer(method, url, headers, body)

    cluster.answer = answer  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match=f"^{kind} {NS}/{NAME} already exists: .*name_prefix"):
        scheduled(cluster)
    assert cluster.objects == {(NS, resource, NAME): theirs}
    assert posts(cluster, resource) == [sent(kind)]
    assert deletes(cluster) == {"ConfigMap": [], "Service": ["configmaps"]}[kind]
    assert job_posts(cluster) == []


@pytest.mark.parametrize("kind", list(RESOURCES))
def test_a_create_that_keeps_failing_fails_after_bounded_tries(cluster, clock, kind):
    """A server that answers 503 for good: 4 tries, paused 1, 2 and 4 s, then the study's error, what was
    made rolled back (what failed too, had it been made: read back, it is not there)."""
    resource = RESOURCES[kind]
    cluster.errors[("POST", resource)] = 503
    with pytest.raises(
        RuntimeError, match=rf"^could not create {kind} {NS}/{NAME} \(4 tries\): HTTP 503 .*injected"
    ):
        scheduled(cluster)
    assert len(posts(cluster, resource)) == 4
    assert clock.slept == [1.0, 2.0, 4.0]
    assert deletes(cluster) == {"ConfigMap": [], "Service": ["configmaps"]}[kind]
    assert not cluster.objects


# ------------------------------------------------------------------ 2. Retry-After


def in_seconds(seconds: int) -> str:
    """An HTTP date, `seconds` from now."""
    return format_datetime(datetime.now(UTC) + timedelta(seconds=seconds), usegmt=True)


RETRY_AFTER: dict[str, Any] = {
    "429-seconds": lambda: Busy(429, {"Retry-After": "3"}),
    "503-seconds": lambda: Busy(503, {"Retry-After": "3"}),
    "lower-case-header": lambda: Busy(429, {"retry-after": "3"}),
    "status-details": lambda: Busy(429, {}, {"retryAfterSeconds": 3}),
    "http-date": lambda: Busy(503, {"Retry-After": in_seconds(3)}),
}


@pytest.mark.parametrize("resource", ["configmaps", "jobs"])
@pytest.mark.parametrize("answer", list(RETRY_AFTER))
def test_a_create_waits_as_long_as_the_server_asks(cluster, clock, answer, resource):
    """A 429 or 503 asking to come back in 3 s (a header in seconds or as a date, or the Status's
    details): the pauses before the next tries are that long, not 1 and 2 s. Before: 1 and 2 s, and
    the server, still busy, answered the same."""
    cluster.faults[("POST", resource)] = [RETRY_AFTER[answer](), RETRY_AFTER[answer]()]
    assert scheduled(cluster)[1] == NAME
    assert len(posts(cluster, resource)) == 3
    if answer == "http-date":  # 3 s from now in whole seconds: 2 to 3 s from when it was read
        assert len(clock.slept) == 2
        assert all(2.0 <= s <= 3.0 for s in clock.slept), clock.slept
    else:
        assert clock.slept == [3.0, 3.0]
    assert deletes(cluster) == []


@pytest.mark.parametrize(
    ("retry_after", "tries", "slept", "why"),
    [
        ("86400", 1, [], "the API server asked to wait 86400 s, more than the 7 s left to try"),
        (in_seconds(10**6), 1, [], "the API server asked to wait \\d+ s, more than the 7 s left to try"),
        ("5", 2, [5.0], "the API server asked to wait 5 s, more than the 2 s left to try"),
    ],
    ids=["a-day", "http-date-far", "twice-5s"],
)
def test_a_retry_after_never_holds_the_study_past_the_create_window(
    cluster, clock, retry_after, tries, slept, why
):
    """A server that asks for more than the create may still wait (7 s of pauses in all, as without a
    Retry-After): the tries end there, saying so, with no longer pause than the window. Before: 4 tries,
    paused 1, 2, 4 s, whatever the server asked."""
    cluster.faults[("POST", "jobs")] = [Busy(429, {"Retry-After": retry_after}) for _ in range(4)]
    with pytest.raises(
        RuntimeError, match=rf"^could not create Job {NS}/{NAME} \({tries} tr(y|ies); {why}\): HTTP 429"
    ):
        scheduled(cluster)
    assert len(job_posts(cluster)) == tries
    assert clock.slept == slept
    assert sum(clock.slept) <= apicalls.CREATE_WINDOW_S == 7.0
    assert deletes(cluster) == ["configmaps", "services"]  # the Job read back: not there
    assert not cluster.objects
