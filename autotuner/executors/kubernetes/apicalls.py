"""Calls to the API server that may fail on the way: an error in words, whether another try may fare
better, and the creation of a launch's Job, tried again through a busy or restarting API server.

A create whose answer is lost (a timeout, a reset, a 504 from a proxy) may have been made all the same:
the Job's name is the launch's, so before another try, and when the server says the name is taken (409),
the Job is read back, and one that is this launch's counts as made. `kubernetes` is imported only when
a client is made (`clients`): dryruns need no client installed.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from autotuner.executors.kubernetes.manifests import CONTAINER, KubernetesRequest
from autotuner.executors.kubernetes.options import KubernetesOptions

log = logging.getLogger("autotuner.executors.kubernetes.executor")  # the executor's: one logger to follow

REQUEST_TIMEOUT_S = 30  # a hung API server must not hang the study
# 429: the server's flow control refused it; 500, 502, 503, 504: the server or a proxy before it, failing
# for now. Any other status is the request's own (400, 403, 404, 409, 422): the same again fails alike.
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
# Pauses before the tries after the first, when a create failed for now: 4 tries within some 7 s (and
# each try's REQUEST_TIMEOUT_S). A server down for longer fails the study, as before, with the reason.
CREATE_PAUSES_S = (1.0, 2.0, 4.0)
# How much earlier than the launch's ConfigMap its Job may read as created (API server replicas' clocks):
# a Job older than that is another launch's, left behind.
CLOCK_SKEW_S = 2.0


class JobConflict(RuntimeError):
    """A Job of the launch's name exists, and it is not this launch's."""


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


def delete(core: Any, batch: Any, name: str, ns: str, kinds: list[str]) -> None:
    """Delete the launch's resources of these kinds ("job", "service", "configmap"), in that order; an
    error is logged and the next one deleted all the same (one already gone is no error)."""
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
                log.warning("could not delete %s %s/%s: %s", kind, ns, name, api_error(exc))


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


def create_job(
    batch: Any, req: KubernetesRequest, pauses: Sequence[float], made_after: datetime | None
) -> Any:
    """Create the launch's Job; returns it as the server stored it (a V1Job). A transient error is tried
    again, once after each of `pauses`. After each failed try the Job is read back: this launch's
    (`is_ours`; `made_after`: when its ConfigMap was made) counts as made, another's raises JobConflict.
    Any other error, or a transient one after the last try, is raised as it came."""
    left = iter(pauses)
    while True:
        try:
            return batch.create_namespaced_job(
                req.namespace, copy.deepcopy(req.job), _request_timeout=REQUEST_TIMEOUT_S
            )
        except Exception as exc:
            conflict = getattr(exc, "status", None) == 409
            if not conflict and not transient(exc):
                raise
            error: Exception = exc
        pause = next(left, None)
        if pause is not None and not conflict:
            time.sleep(pause)  # before the read too: the server that just failed may need it
        found = _read_back(batch, req)
        if found is not None:
            if not is_ours(batch, found, req, made_after):
                raise JobConflict(
                    f"Job {req.namespace}/{req.name} already exists and is not this launch's"
                ) from error
            log.info(
                "Job %s/%s was made although its create answered %s",
                req.namespace,
                req.name,
                api_error(error),
            )
            return found
        if pause is None:
            raise error
        if conflict:  # taken, yet not there now (deleted meanwhile, or the read failed): once more, later
            time.sleep(pause)


def _read_back(batch: Any, req: KubernetesRequest) -> Any:
    """The Job of the launch's name as stored; None where there is none, or it could not be read."""
    try:
        return batch.read_namespaced_job(req.name, req.namespace, _request_timeout=REQUEST_TIMEOUT_S)
    except Exception as exc:
        if getattr(exc, "status", None) != 404:
            log.debug("could not read Job %s/%s back: %s", req.namespace, req.name, api_error(exc))
        return None


def is_ours(batch: Any, found: Any, req: KubernetesRequest, made_after: datetime | None) -> bool:
    """Whether the Job `found` is the one `req` creates: not being deleted, not made before the launch's
    ConfigMap (less CLOCK_SKEW_S), and with the launch's labels, annotations and trial container (image,
    command, args and env; the server only adds to what was sent, e.g. a fieldRef's apiVersion)."""
    stored = batch.api_client.sanitize_for_serialization(found)
    meta = stored.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return False
    created = found.metadata.creation_timestamp
    if isinstance(created, datetime) and made_after is not None:
        if created < made_after - timedelta(seconds=CLOCK_SKEW_S):
            return False
    want = req.job["metadata"]
    if not _subset({k: want[k] for k in ("labels", "annotations")}, meta):
        return False
    (mine,) = req.job["spec"]["template"]["spec"]["containers"]
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
