"""Kubernetes executor: one trial launch = a ConfigMap (the spec), a headless Service and an Indexed Job.

`dryrun` builds the three resources as plain dicts (`kubernetes/manifests.py`, golden-tested, validated
against the client's models) without importing the `kubernetes` package; only the methods that talk
to the API server import it. Its options are `options.KubernetesOptions`. Pod `i` of the Job runs
node rank `i` of torchrun:

    python -m torch.distributed.run --nnodes=N --nproc-per-node=G --node-rank=$(JOB_COMPLETION_INDEX)
        --rdzv-backend=static --master-addr=<job>-0.<service> --master-port=29500
        -m trials.run --spec /spec/spec.json --out /tmp/result.json --quiet --print-result

Rendezvous is torchrun's static one (master address/port), not c10d. The node rank is already fixed
by the completion index and a trial never restarts (backoffLimit 0), so c10d's elastic membership buys
nothing; and c10d decides once, as the agent starts, whether it hosts the store, by resolving the
endpoint and comparing it with its own hostname and addresses. In a fresh pod `<job>-0.<service>`
often does not resolve yet (the headless Service's DNS record trails the pod by seconds; older torch
compares names only, which never match), so no agent hosts the store and every pod waits for nothing.
With static rendezvous node rank 0 always hosts it, and the others retry (DNS included) until it
answers. The Job's activeDeadlineSeconds bounds the wait.

Pods share no disk with the tuner: rank 0 prints the result as one `AUTOTUNER_RESULT {json}` line,
read back from the log of the index-0 pod. That log is the pod's to write, gigabytes of it if it likes:
it is read as a stream, holding only the line being read and the last result line seen, each at most
AUTOTUNER_MAX_RESULT_BYTES past its marker.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any, TypeVar

from autotuner.executors import results
from autotuner.executors.base import AppDryrun, Description, Executor, LaunchRequest, LaunchState, Outcome
from autotuner.executors.files import LOG_TAIL_BYTES
from autotuner.executors.kubernetes.apicalls import (
    CREATE_PAUSES_S,
    CREATE_WINDOW_S,
    REQUEST_TIMEOUT_S,
    Conflict,
    GaveUp,
    api_error,
    clients,
    create,
    delete,
    next_pause,
    roll_back,
)
from autotuner.executors.kubernetes.manifests import (
    CONTAINER,
    INDEX_KEY,
    LAUNCH_LABEL,
    MAX_NAME,
    POD_FAILURE_POLICY_REASON,
    KubernetesRequest,
    create_id,
    manifests,
    render,
    resource_name,
    stamped,
)
from autotuner.executors.kubernetes.options import KubernetesOptions
from autotuner.executors.kubernetes.pods import disruption, index0, index0_exit, unscheduled, waiting_on
from autotuner.executors.results import ResultError
from autotuner.limits import limits, over
from trials.result import RESULT_MARKER

__all__ = [
    "INDEX_KEY",
    "LAUNCH_LABEL",
    "MAX_NAME",
    "REQUIRED_PERMISSIONS",
    "KubernetesExecutor",
    "KubernetesRequest",
    "ResultUnreadable",
    "job_description",
    "last_result_text",
    "parse_result",
    "resource_name",
]

log = logging.getLogger(__name__)

# The whole read of a pod's log: REQUEST_TIMEOUT_S bounds each read, and a server that answers a few
# bytes a read would otherwise hold the study for good (a 64 MiB log streams in about a second).
LOG_READ_S = 300
LOG_CHUNK_BYTES = 64 << 10  # what is read of a pod log at a time
# A result read that fails on the way (the API server restarting, a reset) is tried again after each
# pause, while the tries began within RESULT_READ_WINDOW_S of the first: the Job is done, its pod's log
# stays, and "could not read it" must not pass for "it wrote nothing" (a failed launch, its env quarantined).
RESULT_READ_PAUSES_S = (0.5, 1.0, 2.0)
RESULT_READ_WINDOW_S = 5.0

T = TypeVar("T")

# Every (API group, resource, verb) the executor uses; deploy/k8s's Role grants these (tested).
# (get on configmaps, services and jobs: a create whose answer was lost is read back, and so is the one
# that failed when a schedule is undone, deleted only if it carries the schedule's create id; every delete
# of an undo is by uid, a precondition, and a precondition needs no verb beyond delete.)
REQUIRED_PERMISSIONS = frozenset({
    ("", "configmaps", "create"), ("", "configmaps", "get"), ("", "configmaps", "patch"),
    ("", "configmaps", "delete"),
    ("", "services", "create"), ("", "services", "get"), ("", "services", "patch"), ("", "services", "delete"),
    ("batch", "jobs", "create"), ("batch", "jobs", "get"), ("batch", "jobs", "delete"),
    ("", "pods", "list"), ("", "pods/log", "get"),
})  # fmt: skip

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


class KubernetesExecutor(Executor):
    """Runs each launch as an Indexed Job of `nnodes` pods, `nproc_per_node` ranks each.

    Options: `options.KubernetesOptions` (from the operator's JSON, AUTOTUNER_EXECUTOR_OPTIONS
    {"kubernetes": {...}}), readable as attributes (`ex.namespace`). `api_client` (a configured
    kubernetes.client.ApiClient) is for embedding and tests.
    """

    name = "kubernetes"
    # Pauses before the tries after the first: of a create that failed for now (at most create_window_s
    # in all, Retry-After included), of a result read.
    create_pauses_s: tuple[float, ...] = CREATE_PAUSES_S
    create_window_s: float = CREATE_WINDOW_S
    result_read_pauses_s: tuple[float, ...] = RESULT_READ_PAUSES_S
    result_read_window_s: float = RESULT_READ_WINDOW_S

    def __init__(
        self, parsed: KubernetesOptions | None = None, /, *, api_client: Any = None, **options: Any
    ) -> None:
        self.options = parsed if parsed is not None else KubernetesOptions.parse(options)
        self.queue_timeout_s = self.options.queue_timeout_s
        self._api_client = api_client
        self._core: Any = None
        self._batch: Any = None
        # Job name -> why its pods waited for nodes at its last poll, while it has not been seen with
        # every pod on a node: a Job whose deadline passes in the queue never ran (`_never_ran`).
        self._waiting: dict[str, str] = {}
        # Job name -> how the cluster took a pod of it away, as a poll saw it (the pod may be gone when
        # the Job has failed); and -> why its result could not be read (`_result` tells `_collect`).
        self._disrupted: dict[str, str] = {}
        self._unreadable: dict[str, str] = {}

    def __getattr__(self, name: str) -> Any:  # only for names not found otherwise: the options
        options = self.__dict__.get("options")
        if options is not None and name in KubernetesOptions.model_fields:
            return getattr(options, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def dryrun(self, launch: LaunchRequest) -> AppDryrun[KubernetesRequest]:
        request = manifests(launch, self.options)
        return AppDryrun(request, render(request.resources), launch)

    # ------------------------------------------------------------------ talking to the API server

    def _apis(self) -> tuple[Any, Any]:
        if self._core is None:
            self._core, self._batch = clients(self._api_client, self.options)
        return self._core, self._batch

    def schedule(self, dryrun: AppDryrun[KubernetesRequest]) -> str:
        """Create ConfigMap, Service and Job (bodies as in the dryrun, with this schedule's create id),
        then make the Job their owner so that its ttlSecondsAfterFinished garbage-collects them too."""
        req = stamped(dryrun.request, create_id())
        core, batch = self._apis()
        ns, made = req.namespace, dict[str, str]()  # kind -> uid, of what this schedule made
        made_after: datetime | None = None  # when the ConfigMap was made: no Job of ours is older
        try:
            # Each tried again while the API server fails for now (apicalls.create): one 503 ends no study.
            for kind, api in (("ConfigMap", core), ("Service", core), ("Job", batch)):
                obj = create(api, kind, req, self.create_pauses_s, self.create_window_s, made_after)
                made[kind] = obj.metadata.uid
                if kind == "ConfigMap":
                    made_after = obj.metadata.creation_timestamp
        except BaseException as exc:  # Ctrl-C too: a Job made while nobody records it runs unfollowed
            kind = ("ConfigMap", "Service", "Job")[len(made)]
            cause = exc.error if isinstance(exc, GaveUp) else exc
            conflict = isinstance(exc, Conflict) or getattr(cause, "status", None) == 409
            # Undo what we made, each by its uid. A create that failed on the wire may have happened all the
            # same (read back: ours if it has our create id); one that conflicted is someone else's.
            roll_back(core, batch, req, made, None if conflict else kind)
            if not isinstance(exc, Exception):
                raise
            if conflict:
                raise RuntimeError(
                    f"{kind} {ns}/{req.name} already exists: a launch of this name ran before (another tuner "
                    "on this namespace? give it its own executor_options.name_prefix)"
                ) from exc
            what = f"{kind} {ns}/{req.name}" + (f" ({exc.tried})" if isinstance(exc, GaveUp) else "")
            raise RuntimeError(f"could not create {what}: {api_error(cause)}") from cause
        owner = [{
            "apiVersion": "batch/v1", "kind": "Job", "name": req.name, "uid": made["Job"],  # the Job: made last
            "blockOwnerDeletion": False,  # True would need update on jobs/finalizers
        }]  # fmt: skip
        patch = [{"op": "add", "path": "/metadata/ownerReferences", "value": owner}]
        for kind, adopt in (("ConfigMap", core.patch_namespaced_config_map),
                            ("Service", core.patch_namespaced_service)):  # fmt: skip
            try:
                adopt(req.name, ns, patch, _request_timeout=REQUEST_TIMEOUT_S)
            except Exception as exc:  # the launch runs all the same; only the clean-up is left to do
                log.warning("could not make Job %s/%s own its %s: %s", ns, req.name, kind, api_error(exc))
        return req.name

    def describe(self, backend_id: str, launch: LaunchRequest) -> Description:
        try:
            _, batch = self._apis()
            job = batch.read_namespaced_job(
                backend_id, self.options.namespace, _request_timeout=REQUEST_TIMEOUT_S
            )
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                return Description(
                    LaunchState.FAILED, None,
                    f"Job {self.options.namespace}/{backend_id} is gone (deleted, or removed by ttlSecondsAfterFinished)",
                )  # fmt: skip
            # A poll that fails (API server restarting, network) is not the trial's failure.
            return Description(
                LaunchState.UNKNOWN, None, f"could not read Job {backend_id}: {api_error(exc)}"
            )
        desc = job_description(job.status)
        if desc.state in (LaunchState.RUNNING, LaunchState.PENDING):
            # An active Job whose pods wait for nodes (no free GPUs) is queued, not running: its time
            # there is not run time (Executor.wait).
            queued = self._queued(backend_id, launch.nnodes)
            if queued:
                return Description(LaunchState.PENDING, None, queued)
        if desc.state == LaunchState.TIMEOUT:  # activeDeadlineSeconds passed: in the queue, or running
            queued = self._never_ran(backend_id, launch.nnodes)
            if queued:  # nothing was measured: not the env config's failure (no quarantine)
                desc = Description(LaunchState.CANCELLED, None, f"never ran: still queued when its Job "
                                   f"reached activeDeadlineSeconds ({desc.reason}): {queued}", given_up=True)  # fmt: skip
        if desc.state in (LaunchState.FAILED, LaunchState.TIMEOUT):
            desc = self._ended(backend_id, desc, failed_by_policy(job.status))
        if desc.state.is_terminal():
            self._waiting.pop(backend_id, None)
            self._disrupted.pop(backend_id, None)
        return desc

    def how_cancelled(self, backend_id: str) -> str:
        return f"deleted Job {self.options.namespace}/{backend_id}"

    def cancel(self, backend_id: str, launch: LaunchRequest) -> str | None:
        """Delete the Job (Foreground: its pods go first), Service and ConfigMap. Errors are logged, not
        raised (None): the Job's activeDeadlineSeconds stops it anyway; a study must not die of a clean-up."""
        self._waiting.pop(backend_id, None)
        self._disrupted.pop(backend_id, None)
        self._delete(backend_id, self.options.namespace, ["job", "service", "configmap"])
        return None

    def logs(self, backend_id: str, launch: LaunchRequest, tail_lines: int = 60) -> str:
        # The API server tails the lines, but one of them may be as long as the pod likes.
        try:
            return (
                self._index0_log(backend_id, tail_lines, lambda chunks: _log_tail(chunks, tail_lines)) or ""
            )
        except ResultError as exc:  # too slow to read: a tail is evidence, never a reason to stop
            log.warning("could not read the log of Job %s/%s: %s", self.options.namespace, backend_id, exc)
            return ""
        except ResultUnreadable:  # said by _index0_log
            return ""

    def fetch_result(self, backend_id: str, launch: LaunchRequest) -> dict[str, Any] | None:
        """Executor.fetch_result, from the index-0 pod's log: None where it has no result line (or there
        is no such pod); ResultUnreadable where the log could not be read, tries repeated (`_read_result`)."""
        cap = limits().max_result_bytes  # read first: a bad setting must not pass for an unreadable log
        text = self._read_result(backend_id, cap)
        return None if text is None else results.parse_result(text, launch.spec, self.world_size(launch))

    def _result(self, backend_id: str, launch: LaunchRequest) -> tuple[dict[str, Any] | None, str]:
        """Executor._result; a result log that stayed unreadable reads as no result here, and `_collect`
        is told why."""
        try:
            return super()._result(backend_id, launch)
        except ResultUnreadable as exc:
            if backend_id in self._unreadable:  # asked by _collect (not by a timeout: that stands)
                self._unreadable[backend_id] = str(exc)
            return None, ""

    def _collect(self, backend_id: str, launch: LaunchRequest, desc: Description) -> Outcome:
        """Executor._collect, but a Job that ended while its result could not be read is CANCELLED, not
        FAILED: the API server or the network failed, and nothing says the env config did (the study
        quarantines the env of a failed launch)."""
        self._unreadable[backend_id] = ""
        try:
            outcome = super()._collect(backend_id, launch, desc)
        finally:
            unreadable = self._unreadable.pop(backend_id, "")
        if not unreadable or outcome.state != LaunchState.FAILED:
            return outcome
        why = f"its result could not be read ({unreadable}): the API server's or the network's failure, not the config's"
        reason = "; ".join(filter(None, (desc.reason, why)))
        return Outcome(LaunchState.CANCELLED, backend_id, None, reason, outcome.log_tail)

    # ------------------------------------------------------------------ helpers

    def _delete(self, name: str, ns: str, kinds: list[str]) -> None:
        delete(*self._apis(), name, ns, kinds)

    def _pods(self, job_name: str) -> list[Any]:
        """The Job's pods (V1Pod), by the launch label its template gives them."""
        core, selector = self._apis()[0], f"{LAUNCH_LABEL}={job_name}"
        pods = core.list_namespaced_pod(
            self.options.namespace, label_selector=selector, _request_timeout=REQUEST_TIMEOUT_S
        )
        return list(pods.items)

    def _pods_quietly(self, job_name: str) -> list[Any] | None:
        """The Job's pods; None where they could not be listed (logged)."""
        try:
            return self._pods(job_name)
        except Exception as exc:
            log.debug("could not list the pods of Job %s: %s", job_name, api_error(exc))
            return None

    def _queued(self, job_name: str, nnodes: int) -> str:
        """Why the Job's first pod not yet on a node waits, in Kubernetes' words ("" when all `nnodes`
        pods are on one, or the pods cannot be listed: then the Job's own state stands)."""
        pods = self._pods_quietly(job_name)
        if pods is None:  # a poll that fails is not the trial's failure, nor a queue
            return ""
        disrupted = disruption(pods)  # kept: the pod may be gone when the Job is seen failed
        if disrupted:
            self._disrupted[job_name] = disrupted
        queued = self._waiting_on(job_name, pods, nnodes)
        if queued:
            self._waiting[job_name] = queued
        elif pods:  # every pod on a node: it ran (a pod is never made again: backoffLimit 0)
            self._waiting.pop(job_name, None)
        return queued

    def _never_ran(self, job_name: str, nnodes: int) -> str:
        """Why a Job past its deadline never ran ("": it ran, or nothing says it did not). A pod of it
        that still waits for a node says so for certain (a pod is never made again, so its pods were
        never all on nodes); else this executor's last poll of it, if that saw it queued (the Job
        controller deletes the pods of a failed Job, those on no node at once)."""
        pods = self._pods_quietly(job_name) or []
        # Only a pod waiting is proof: "n of m pods made" is not, here (the rest may have run and gone).
        waiting = [p for p in pods if unscheduled(p)]
        if waiting:
            return self._waiting_on(job_name, waiting, nnodes)
        last = self._waiting.get(job_name)
        return f"{last} (at the last poll)" if last else ""

    def _waiting_on(self, job_name: str, pods: list[Any], nnodes: int) -> str:
        return waiting_on(pods, nnodes, f"kubectl -n {self.options.namespace} describe job {job_name}")

    def _ended(self, job_name: str, desc: Description, by_policy: bool = False) -> Description:
        """A failed or timed-out Job's description, with how its index-0 pod exited. A failed Job a pod of
        which the cluster took away (`pods.disruption`, or `by_policy`: its podFailurePolicy) is CANCELLED,
        as Slurm's NODE_FAIL and PREEMPTED are: the cluster's failure, not the env config's."""
        pods = self._pods_quietly(job_name) or []
        exit_code, detail = index0_exit(pods)
        reason = "; ".join(filter(None, (desc.reason, detail)))
        disrupted = disruption(pods)
        if not disrupted and job_name in self._disrupted:  # the pod gone since: the Job controller's doing
            disrupted = f"{self._disrupted[job_name]} (at an earlier poll)"
        if not disrupted and by_policy:  # gone before any poll saw it: the Job's condition says it (reason)
            disrupted = "a pod was disrupted, as the Job's podFailurePolicy says"
        if desc.state == LaunchState.FAILED and disrupted:
            why = f"{disrupted}: the cluster's failure, not the config's"
            return Description(LaunchState.CANCELLED, exit_code, f"{why}; {reason}" if reason else why)
        return Description(desc.state, exit_code, reason)

    def _read_result(self, job_name: str, cap: int) -> bytes | None:
        """The text of the index-0 pod's last result line (None: it has none). A read that fails on the
        way is tried again after each of `result_read_pauses_s` (or the server's Retry-After), while within
        `result_read_window_s` of the first try's start; ResultUnreadable when no try read it."""
        started, pauses, tries = time.monotonic(), iter(self.result_read_pauses_s), 0
        while True:
            tries += 1
            try:
                return self._index0_log(job_name, None, lambda chunks: last_result_text(chunks, cap))
            except ResultUnreadable as exc:
                spent = time.monotonic() - started
                pause, why = next_pause(next(pauses, None), exc.__cause__, self.result_read_window_s - spent)
                if pause is None:
                    raise ResultUnreadable(f"{tries} tries in {spent:.1f} s{why}; the last: {exc}") from exc
                time.sleep(pause)

    def _index0_log(
        self, job_name: str, tail_lines: int | None, consume: Callable[[Iterator[bytes]], T]
    ) -> T | None:
        """What `consume` makes of the index-0 pod's log, streamed to it in chunks (never whole); None
        when there is no such pod. ResultUnreadable when the pods could not be listed or the log read
        (the API server or the connection failed: nothing is known of what it holds); a ResultError of
        `consume` propagates."""
        what = f"the pods of Job {self.options.namespace}/{job_name}"
        try:
            pod = index0(self._pods(job_name))
            if pod is None:
                return None
            what = f"the log of pod {pod.metadata.name}"
            core, _ = self._apis()
            kwargs: dict[str, Any] = {"container": CONTAINER, "_request_timeout": REQUEST_TIMEOUT_S}
            if tail_lines is not None:
                kwargs["tail_lines"] = tail_lines
            response = core.read_namespaced_pod_log(
                pod.metadata.name, self.options.namespace, _preload_content=False, **kwargs
            )  # the urllib3 response, its body not read yet
            try:
                return consume(_within(response.stream(LOG_CHUNK_BYTES), pod.metadata.name))
            finally:  # closed first: a connection left half read must not go back to the pool
                response.close()
                response.release_conn()
        except ResultError:
            raise
        except Exception as exc:
            log.warning(
                "could not read the log of Job %s/%s: %s", self.options.namespace, job_name, api_error(exc)
            )
            raise ResultUnreadable(f"could not read {what}: {api_error(exc)}") from exc


class ResultUnreadable(Exception):
    """The index-0 pod's log could not be read (the API server or the connection failed): what it holds,
    a result or none, is not known."""


def _within(chunks: Iterable[bytes], pod: str) -> Iterator[bytes]:
    """The log's chunks while the read has taken at most LOG_READ_S; ResultError after that."""
    deadline, read = time.monotonic() + LOG_READ_S, 0
    for chunk in chunks:
        if time.monotonic() > deadline:
            raise ResultError(f"the log of pod {pod} took more than {LOG_READ_S} s to read ({read:,} bytes "
                              "read): the API server answers too slowly for its result to be trusted")  # fmt: skip
        read += len(chunk)
        yield chunk


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


def failed_by_policy(status: Any) -> bool:
    """Whether the Job (V1JobStatus) failed, or is failing, by its podFailurePolicy: its one rule is a pod
    the cluster took away (DisruptionTarget; manifests._job_spec), and this condition outlives the pod."""
    return any(
        c.type in ("Failed", "FailureTarget") and c.status == "True" and c.reason == POD_FAILURE_POLICY_REASON
        for c in (status and status.conditions) or []
    )


def parse_result(log_text: str | bytes, spec: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The last `AUTOTUNER_RESULT {json}` line of a log, text or bytes (None: there is none), checked as
    any result is (ResultError if it cannot be used)."""
    data = log_text.encode("utf-8", "surrogatepass") if isinstance(log_text, str) else log_text
    chunks = (data[at : at + LOG_CHUNK_BYTES] for at in range(0, len(data), LOG_CHUNK_BYTES))
    text = last_result_text(chunks, limits().max_result_bytes)
    return None if text is None else results.parse_result(text, spec)


def last_result_text(chunks: Iterable[bytes], cap: int) -> bytes | None:
    """The text after the marker of a log's last line holding one (None: no line does), read from the
    log's `chunks` while holding only the line being read and the last marker line, at most `cap` bytes
    past the marker each. ResultError when the last marker line has more than that after its marker."""
    lines = _MarkerLines(cap)
    for chunk in chunks:
        lines.feed(chunk)
    return lines.finish()


_MARKER = (RESULT_MARKER + " ").encode()
_MARKER_HEAD = len(_MARKER) - 1  # the most of a marker that one chunk can end with
# Where str.splitlines breaks lines, in UTF-8 (the marker may follow a "\r" of a progress bar).
_LINE_BREAK = re.compile(rb"\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e]|\xc2\x85|\xe2\x80[\xa8\xa9]")


class _MarkerLines:
    """The log's lines as they arrive, each kept from its first marker on: the line's first marker is the
    one that counts, and the last line with one wins. Bytes that are not UTF-8 are only looked at where
    they follow a marker (results.parse_result refuses them there)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.held = b""  # the end of the last chunk, where a line break of several bytes may begin
        # The last bytes read while the line has no marker, where one may begin (a marker never spans a
        # line break, so they may as well reach back into the lines before).
        self.head = b""
        self.text: bytearray | None = None  # what follows the line's marker (None: none yet), up to cap
        self.size = 0  # how many bytes follow the line's marker, kept or not
        self.last: tuple[bytearray, int] | None = None  # the last marker line ended: its text and size

    def feed(self, chunk: bytes) -> None:
        data = self.held + chunk
        keep = 2 if data.endswith(b"\xe2\x80") else 1 if data[-1:] in (b"\xc2", b"\xe2") else 0
        data, self.held = data[: len(data) - keep], data[len(data) - keep :]
        if self.text is None:
            window = self.head + data
            if _MARKER not in window:  # no marker line ends or begins here: its lines need no look
                self.head = window[-_MARKER_HEAD:]
                return
        *ended, rest = _LINE_BREAK.split(data)
        for line in ended:
            self._extend(line)
            self._end_line()
        self._extend(rest)

    def finish(self) -> bytes | None:
        self._extend(self.held)
        self._end_line()
        if self.last is None:
            return None
        text, size = self.last
        if size > self.cap:
            what = f"the result on the last {RESULT_MARKER} line of the log"
            raise ResultError(over(what, size, self.cap, "AUTOTUNER_MAX_RESULT_BYTES", " bytes"))
        return bytes(text)

    def _extend(self, piece: bytes) -> None:
        if self.text is None:
            window = self.head + piece
            at = window.find(_MARKER)
            if at < 0:
                self.head = window[-_MARKER_HEAD:]
                return
            self.text, self.size = bytearray(), 0
            piece = window[at + len(_MARKER) :]
        self.size += len(piece)
        if self.size <= self.cap:
            self.text += piece
        elif self.text:
            self.text = bytearray()  # over the cap: only its size is told

    def _end_line(self) -> None:
        if self.text is not None:
            self.last = (self.text, self.size)
        self.text, self.head = None, b""


def _log_tail(chunks: Iterable[bytes], lines: int, max_bytes: int = LOG_TAIL_BYTES) -> str:
    """The last `lines` lines of a streamed log, from at most its last `max_bytes` bytes (as files.log_tail
    reads a log on disk)."""
    kept, clipped = bytearray(), False
    for chunk in chunks:
        kept += chunk
        if len(kept) > 2 * max_bytes:  # cut now and then, not at every chunk
            del kept[:-max_bytes]
            clipped = True
    if len(kept) > max_bytes:
        del kept[:-max_bytes]
        clipped = True
    text = kept.decode(errors="replace")
    if clipped:  # the first line kept is most likely cut: say so rather than show half of it
        text = "[...] " + text.split("\n", 1)[-1]
    return "\n".join(text.splitlines()[-lines:])
