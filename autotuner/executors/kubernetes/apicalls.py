"""Calls to the API server that may fail on the way: an error in words, whether another try may fare
better, and the creation of a launch's ConfigMap, Service and Job, each tried again through a busy or
restarting API server.

A create whose answer is lost (a timeout, a reset, a 504 from a proxy) may have been made all the same:
the object's name is the launch's, so before another try, and when the server says the name is taken
(409), it is read back, and one that is this launch's (its create-id annotation, unique to the
`schedule`, and what it holds) counts as made: never made twice, nor another's taken for ours. A 429 or
5xx's Retry-After is honoured within the create's window. `kubernetes` is imported only when a client is
made (`clients`): dryruns need no client installed.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

from autotuner.executors.kubernetes.manifests import CONTAINER, CREATE_ID_ANNOTATION, KubernetesRequest
from autotuner.executors.kubernetes.options import KubernetesOptions

log = logging.getLogger("autotuner.executors.kubernetes.executor")  # the executor's: one logger to follow

REQUEST_TIMEOUT_S = 30  # a hung API server must not hang the study
# 429: the server's flow control refused it; 500, 502, 503, 504: the server or a proxy before it, failing
# for now. Any other status is the request's own (400, 403, 404, 409, 422): the same again fails alike.
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
# Pauses before the tries after the first, when a create failed for now: 4 tries within some 7 s (and
# each try's REQUEST_TIMEOUT_S). A server down for longer fails the study, as before, with the reason.
CREATE_PAUSES_S = (1.0, 2.0, 4.0)
# The most a create pauses in all: a server's Retry-After lengthens a pause, never past this (a huge one
# ends the tries at once, saying so), so the study is held no longer than without it.
CREATE_WINDOW_S = sum(CREATE_PAUSES_S)
# How much earlier than the launch's ConfigMap its Job may read as created (API server replicas' clocks):
# a Job older than that is another launch's, left behind.
CLOCK_SKEW_S = 2.0
_SNAKE = {"ConfigMap": "config_map", "Service": "service", "Job": "job"}  # in the client's method names


class Conflict(RuntimeError):
    """An object of the launch's name exists, and it is not this launch's."""


class GaveUp(Exception):
    """A create that failed for now on every try: `error` the last try's; `tried` says how many tries,
    and why they ended early where a Retry-After did."""

    def __init__(self, error: Exception, tries: int, why: str = "") -> None:
        self.error, self.tries = error, tries
        self.tried = f"{tries} tr{'y' if tries == 1 else 'ies'}{why}"
        super().__init__(f"{self.tried}: {api_error(error)}")


def api_error(exc: BaseException) -> str:
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


def clients(api_client: Any, options: KubernetesOptions) -> tuple[Any, Any]:
    """CoreV1Api and BatchV1Api on `api_client`, or on one made from the options (in-cluster, or a
    kubeconfig and its context)."""
    try:
        from kubernetes import client, config
    except ImportError as exc:
        raise RuntimeError(
            "the kubernetes executor needs the kubernetes Python client: pip install 'nccl-autotuner[kubernetes]'"
        ) from exc
    if api_client is None:
        if options.in_cluster:
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)
            api_client = client.ApiClient(configuration)
        else:
            api_client = config.new_client_from_config(
                config_file=options.kubeconfig, context=options.context
            )
    return client.CoreV1Api(api_client), client.BatchV1Api(api_client)


def delete(
    core: Any, batch: Any, name: str, ns: str, kinds: list[str], uids: dict[str, str] | None = None
) -> None:
    """Delete the launch's resources of these kinds ("job", "service", "configmap"), in that order; an
    error is logged and the next one deleted all the same (one already gone is no error). A kind in
    `uids` is deleted only if it is still the object of that uid (a precondition the server checks: one
    of the name made since by another is left alone, its delete answered 409)."""
    uids = uids or {}
    for kind in kinds:
        options: dict[str, Any] = {"_request_timeout": REQUEST_TIMEOUT_S}
        # A Job's pods go with it (batch/v1's default orphans them: they would run on, holding their GPUs).
        policy = "Foreground" if kind == "job" else None
        if kind in uids:
            from kubernetes.client import V1DeleteOptions, V1Preconditions  # a client is made: it is there

            # In the body beside the precondition: the API server reads a DELETE's options from its body
            # where it has one, and then no query parameter at all.
            options["body"] = V1DeleteOptions(
                preconditions=V1Preconditions(uid=uids[kind]), propagation_policy=policy
            )
        elif policy:
            options["propagation_policy"] = policy
        call = {"job": batch.delete_namespaced_job, "service": core.delete_namespaced_service,
                "configmap": core.delete_namespaced_config_map}[kind]  # fmt: skip
        try:
            call(name, ns, **options)
        except Exception as exc:
            status = getattr(exc, "status", None)
            if status == 409 and kind in uids:
                log.warning("%s %s/%s not deleted: it is no longer the one this launch made", kind, ns, name)
            elif status != 404:
                log.warning("could not delete %s %s/%s: %s", kind, ns, name, api_error(exc))


def roll_back(
    core: Any, batch: Any, req: KubernetesRequest, made: dict[str, str], failed: str | None
) -> None:
    """Undo a `schedule` that failed part-way: delete the objects it made (kind -> uid, as "ConfigMap"),
    each only while it is that object, and the one of kind `failed` whose create failed on the wire (it
    may have been made all the same) only if it is ours: read back, it carries this schedule's create
    id. Nothing is deleted by name alone: an object of the launch's name may be another tuner's."""
    uids = {kind.lower(): uid for kind, uid in made.items()}
    if failed is not None and (uid := _our_uid(batch if failed == "Job" else core, failed, req)):
        uids[failed.lower()] = uid
    delete(
        core, batch, req.name, req.namespace, [k for k in ("configmap", "service", "job") if k in uids], uids
    )


def _our_uid(api: Any, kind: str, req: KubernetesRequest) -> str | None:
    """The uid of the launch's object of this kind if it is there and this schedule's (its create id);
    else None, said in the log where it could not be read (one made then would be left)."""
    found = _read_back(api, kind, req, " to undo its create, left as it is", logging.WARNING)
    if found is None:
        return None
    token = req.body(kind)["metadata"]["annotations"][CREATE_ID_ANNOTATION]
    if (found.metadata.annotations or {}).get(CREATE_ID_ANNOTATION) != token:
        log.info("%s %s/%s left alone: it is not this launch's", kind, req.namespace, req.name)
        return None
    return str(found.metadata.uid)


def transient(exc: BaseException) -> bool:
    """An error that another try may not meet: the API server busy or failing for now (TRANSIENT_STATUSES),
    or the connection to it (refused, reset, timed out)."""
    status = getattr(exc, "status", None)
    if status is not None:
        return status in TRANSIENT_STATUSES
    try:
        from urllib3.exceptions import HTTPError  # what the client raises for a connection that failed
    except ImportError:  # pragma: no cover - urllib3 comes with the kubernetes client
        return isinstance(exc, OSError)
    return isinstance(exc, (OSError, HTTPError))


def retry_after(exc: BaseException | None) -> float | None:
    """The seconds a transient answer (TRANSIENT_STATUSES) asks to wait before another try: its Retry-After
    header, in seconds or as an HTTP date, else its Status's details.retryAfterSeconds (what the API
    server's flow control writes); None where it asks nothing, or nothing readable."""
    if getattr(exc, "status", None) not in TRANSIENT_STATUSES:
        return None
    headers = getattr(exc, "headers", None) or {}
    value = next((str(v).strip() for k, v in headers.items() if str(k).lower() == "retry-after"), "")
    if value.isdigit():
        return float(value)
    if value:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            when = None
        if when is not None:
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
            return max(0.0, (when - datetime.now(UTC)).total_seconds())
    try:
        seconds = json.loads(getattr(exc, "body", None) or "{}")["details"]["retryAfterSeconds"]
    except (ValueError, TypeError, KeyError):
        return None
    return float(seconds) if type(seconds) is int and seconds >= 0 else None  # not a bool


def next_pause(own: float | None, error: BaseException | None, left_s: float) -> tuple[float | None, str]:
    """The pause before the next try (None: no more tries) and, where a Retry-After ends the tries, why:
    `own` (None: none left) lengthened to what the server asked (`error`'s Retry-After), if that fits in
    the `left_s` that the tries may still pause."""
    if own is None:
        return None, ""
    asked = retry_after(error)
    pause = own if asked is None else max(own, asked)
    if pause <= left_s + 1e-9:
        return pause, ""
    if asked is not None and asked > own:
        return (
            None,
            f"; the API server asked to wait {math.ceil(asked)} s, more than the {round(left_s, 1):g} s left to try",
        )
    return None, ""


def create(
    api: Any,
    kind: str,
    req: KubernetesRequest,
    pauses: Sequence[float],
    window_s: float,
    made_after: datetime | None,
) -> Any:
    """Create the launch's resource of this kind ("ConfigMap", "Service": `api` a CoreV1Api; "Job": a
    BatchV1Api); returns it as the server stored it. A transient error is tried again, once after each
    of `pauses`, each lengthened to the server's Retry-After while all stay within `window_s`. After
    each failed try the object is read back: this launch's (`is_ours`; `made_after`: when its ConfigMap
    was made) counts as made, another's raises Conflict. Any other error is raised as it came; a
    transient one (or a 409 for an object gone since) after the last try, as GaveUp."""
    body = req.body(kind)
    call = getattr(api, f"create_namespaced_{_SNAKE[kind]}")
    left, waited, tries = iter(pauses), 0.0, 0
    while True:
        tries += 1
        try:
            return call(req.namespace, copy.deepcopy(body), _request_timeout=REQUEST_TIMEOUT_S)
        except Exception as exc:
            conflict = getattr(exc, "status", None) == 409
            if not conflict and not transient(exc):
                raise
            error: Exception = exc
        pause, why = next_pause(next(left, None), error, window_s - waited)
        if pause is not None and not conflict:
            time.sleep(pause)  # before the read too: the server that just failed may need it
            waited += pause
        found = _read_back(api, kind, req)
        if found is not None:
            if not is_ours(api, found, kind, body, made_after):
                raise Conflict(
                    f"{kind} {req.namespace}/{req.name} already exists and is not this launch's"
                ) from error
            log.info("%s %s/%s was made although its create answered %s", kind, req.namespace, req.name,
                     api_error(error))  # fmt: skip
            return found
        if pause is None:
            raise GaveUp(error, tries, why) from error
        if conflict:  # taken, yet not there now (deleted meanwhile, or the read failed): once more, later
            time.sleep(pause)
            waited += pause


def _read_back(api: Any, kind: str, req: KubernetesRequest, why: str = "", level: int = logging.DEBUG) -> Any:
    """The object of this kind and the launch's name as stored; None where there is none, or it could not
    be read (logged at `level`, `why` after "back")."""
    try:
        read = getattr(api, f"read_namespaced_{_SNAKE[kind]}")
        return read(req.name, req.namespace, _request_timeout=REQUEST_TIMEOUT_S)
    except Exception as exc:
        if getattr(exc, "status", None) != 404:
            log.log(level, "could not read %s %s/%s back%s: %s", kind, req.namespace, req.name, why,
                    api_error(exc))  # fmt: skip
        return None


def is_ours(api: Any, found: Any, kind: str, body: dict[str, Any], made_after: datetime | None) -> bool:
    """Whether the object `found` is the one `body` creates: not being deleted, not made before the
    launch's ConfigMap (less CLOCK_SKEW_S), with the launch's labels and annotations (its create id among
    them), and what it holds: a ConfigMap's data, a Service's spec, a Job's trial container (image,
    command, args and env). The server only adds to what was sent (a fieldRef's apiVersion, a Service's
    clusterIPs and targetPort)."""
    stored = api.api_client.sanitize_for_serialization(found)
    meta = stored.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return False
    created = found.metadata.creation_timestamp
    if isinstance(created, datetime) and made_after is not None:
        if created < made_after - timedelta(seconds=CLOCK_SKEW_S):
            return False
    if not _subset({k: body["metadata"][k] for k in ("labels", "annotations")}, meta):
        return False
    if kind == "ConfigMap":
        return _subset(body["data"], stored.get("data"))
    if kind == "Service":
        return _subset(body["spec"], stored.get("spec"))
    (mine,) = body["spec"]["template"]["spec"]["containers"]
    pod = ((stored.get("spec") or {}).get("template") or {}).get("spec") or {}
    theirs = [c for c in pod.get("containers") or [] if c.get("name") == CONTAINER]
    return len(theirs) == 1 and _subset({k: mine[k] for k in ("image", "command", "args", "env")}, theirs[0])


def _subset(mine: Any, theirs: Any) -> bool:
    """`mine` as sent is in `theirs` as stored: the same keys with the same values (dicts may have more
    keys), lists as long, item by item."""
    if isinstance(mine, dict):
        return isinstance(theirs, dict) and all(
            k in theirs and _subset(v, theirs[k]) for k, v in mine.items()
        )
    if isinstance(mine, list):
        return isinstance(theirs, list) and len(mine) == len(theirs) and all(map(_subset, mine, theirs))
    return bool(mine == theirs)
