"""Recording a finished launch: every candidate in our store, the sampler told, the cluster's
fingerprint updated, and an env config that crashed quarantined on that cluster."""

from __future__ import annotations

import json
from itertools import islice
from typing import Any

from autotuner.executors import Outcome
from autotuner.executors.base import LaunchState
from autotuner.executors.results import MAX_NAME, MAX_VERSIONS, candidate_problem, clip
from autotuner.store import Candidate, CandidateState, Launch, LaunchKind
from autotuner.tuning.context import StudyContext
from autotuner.tuning.lease import StudyBusy
from autotuner.tuning.plan import PlannedLaunch
from autotuner.tuning.search import Search


def ingest(
    ctx: StudyContext, launch: Launch, outcome: Outcome, plan: PlannedLaunch | None, search: Search | None
) -> list[Candidate]:
    result = outcome.result if outcome.state == LaunchState.SUCCEEDED else None
    world_size = result["world_size"] if result else None
    rows = []
    for index, cand in enumerate(launch.spec["candidates"]):
        measured = result["candidates"][index] if result else None
        rows.append(candidate_row(ctx, launch, index, cand, measured, outcome, world_size))
    if search is not None:
        for row in rows:
            if row["kind"] == LaunchKind.SEARCH:
                row["optuna_number"] = search.claim_number()
    summary = stored({k: v for k, v in (outcome.result or {}).items() if k != "candidates"}) or None
    ctx.lease.beat(force=True)  # only the lease's holder records (a runner paused past it has a successor)
    saved = ctx.store.finish_launch(launch.id, rows, state=outcome.state.value, finished_at=ctx.store.now(), summary=summary,
                                    error=clip(outcome.reason) if outcome.reason else None,
                                    left_running=outcome.left_running,
                                    log_tail=clip(outcome.log_tail) if outcome.log_tail else None)  # fmt: skip
    if saved is None:
        raise StudyBusy(f"launch {launch.seq} of study {ctx.study_id} was recorded by another runner")
    launch = ctx.store.launch(launch.id) or launch
    if result is not None:
        ctx.store.update_fingerprint(ctx.cluster_id, fingerprint(result))
        # It ran here: whatever quarantined this env config on the cluster was not the config.
        ctx.store.release_quarantine(ctx.cluster_id, launch.env)
    elif launch.kind == LaunchKind.SEARCH and outcome.state != LaunchState.CANCELLED:
        # Crashed, hung or failed to init: never launch this env config on this cluster again.
        ctx.store.quarantine(
            ctx.cluster_id, launch.env, clip(f"{outcome.state.value}: {outcome.reason}"), launch.id
        )
    if search is not None:
        asked: list[int | None] = plan.trials if plan is not None else [None] * len(saved)
        search.learn(saved, asked)
        for number, slot in (plan.echoes if plan is not None else {}).items():
            search.answer(number, saved[slot])
    ctx.progress.on_launch_end(launch, saved)
    return saved


def candidate_row(
    ctx: StudyContext, launch: Launch, index: int, cand: dict[str, Any], measured: Any, outcome: Outcome,
    world_size: int | None = None,
) -> dict[str, Any]:  # fmt: skip
    row: dict[str, Any] = {
        "study_id": ctx.study_id,
        "launch_id": launch.id,
        "index": index,
        "kind": launch.kind,
        "env": launch.env,
        "fwd_precision": cand["fwd_precision"],
        "bwd_precision": cand["bwd_precision"],
        "batch_size": cand["batch_size"],
        "sharding": cand.get("sharding") or ctx.workload.sharding,
        "num_threads": cand.get("num_threads"),
        "pipeline": cand.get("pipeline") or ctx.workload.default_pipeline,
    }
    asked_quality = bool((launch.spec or {}).get("quality"))
    problem = (
        None
        if measured is None
        else candidate_problem(measured, cand, index, world_size, quality=asked_quality)
    )
    if problem:  # what came back cannot be this candidate's measurement: recorded failed, kept out of metrics
        return {
            **row,
            "state": CandidateState.FAILED,
            "error": clip(f"result unusable: {problem}"),
            "metrics": {},
        }
    if measured is None or measured.get("status") != "ok":
        error = (measured or {}).get("error") or (
            f"launch {outcome.state.value}: {outcome.reason}" if outcome.reason or measured is None
            else "the trial reported it failed, with no error message"
        )  # fmt: skip
        return {
            **row,
            "state": CandidateState.FAILED,
            "error": clip(error),
            "metrics": stored(measured or {}),
        }
    if "quality" in measured:  # a convergence check: scores, not timings
        return {**row, "state": CandidateState.OK, "metrics": stored(measured)}
    return {**row, **_measurement(ctx, measured)}


def _measurement(ctx: StudyContext, measured: dict[str, Any]) -> dict[str, Any]:
    quant = measured.get("quant_error") or {}
    worst = max(v for v in (quant.get("fwd_rel_l2"), quant.get("bwd_rel_l2"), 0.0) if v is not None)
    feasible = worst <= ctx.space.max_quant_error
    return {
        "state": CandidateState.OK if feasible else CandidateState.INFEASIBLE,
        "error": None
        if feasible
        else f"quantization error {worst:.3g} > tolerance {ctx.space.max_quant_error}",
        "effective_fwd_precision": measured.get("effective_fwd_precision"),
        "effective_bwd_precision": measured.get("effective_bwd_precision"),
        "samples_per_s": measured["samples_per_s"],
        "iter_ms": measured["iter_ms"]["median"],
        "iter_cv": measured["iter_ms"]["cv"],
        "a2a_ms": measured["a2a_ms"]["median"],
        "a2a_bytes": measured["a2a_bytes_per_iter"],
        "busbw_gbps": measured["busbw_gbps"],
        "quant_error_fwd": quant.get("fwd_rel_l2"),
        "quant_error_bwd": quant.get("bwd_rel_l2"),
        "metrics": stored({k: v for k, v in measured.items() if k != "a2a_calls_by_rank"}),
    }


MAX_STORED_ENTRY = 64 << 10  # bytes of JSON one entry of a result may take in the store
MAX_STORED_RECORD = 256 << 10  # and all of them: 950 entries just under the first were 62 MB a launch
MAX_NAMED = 20


def stored(record: dict[str, Any]) -> dict[str, Any]:
    """`record` as stored: an entry larger than MAX_STORED_ENTRY (what a trial writes is ~1 KB each; a
    node may write megabytes under a name the tuner never reads) is left out, and named with its size;
    so are the largest entries beyond MAX_STORED_RECORD in all (the first MAX_NAMED of them named)."""
    sizes = {k: len(k) + len(json.dumps(v, default=str)) for k, v in record.items()}
    dropped = {k: n for k, n in sizes.items() if n > MAX_STORED_ENTRY}
    kept = sorted((n, k) for k, n in sizes.items() if k not in dropped)
    total = sum(n for n, _ in kept)
    while total > MAX_STORED_RECORD:
        n, k = kept.pop()
        dropped[k], total = n, total - n
    if not dropped:
        return record
    named = dict(sorted(dropped.items(), key=lambda item: -item[1])[:MAX_NAMED])
    return {
        **{k: v for k, v in record.items() if k not in dropped},
        "not_stored": {"bytes_over_limit": {clip(k, MAX_NAME): n for k, n in named.items()},
                       **({"more": len(dropped) - len(named)} if len(dropped) > len(named) else {})},
    }  # fmt: skip


def fingerprint(result: dict[str, Any]) -> dict[str, Any]:
    """What identifies a cluster's comm stack: a config tuned on one may not hold on another
    (autotuner.job.fingerprint.comparable reads it as a job's hook reports its own). Its names are
    clipped to MAX_NAME characters and its versions to MAX_VERSIONS: parse_result refuses more, but a
    launch's summary stored before it did (read back by re-validation) holds up to 64 KiB of each, and
    the fingerprint is copied into every config published on the cluster."""
    effective = _mapping(result.get("nccl_effective"))
    env = _mapping(result.get("env"))
    versions = result.get("versions")
    return {
        "device": _name(result.get("device")),
        "device_name": _name(result.get("device_name")),
        "backend": _name(result.get("backend")),
        "nnodes": result.get("nnodes"),
        "world_size": result.get("world_size"),
        "versions": {
            str(k)[:MAX_NAME]: _name(v) for k, v in islice(versions.items(), MAX_VERSIONS)
        } if isinstance(versions, dict) else _name(versions),
        "driver": _name(result.get("driver_version")),
        "network": _name(effective.get("network")),
        "ofi_plugin": _name(effective.get("ofi_plugin_version")),
        "efa": effective.get("ofi_provider") == "efa" or env.get("FI_PROVIDER") == "efa",
    }  # fmt: skip


def _name(value: Any) -> Any:
    """A name of the fingerprint as stored: None stays None, anything else its first MAX_NAME characters
    (cut, not clipped with a note: the hook keeps as many of a job's, and the two are compared)."""
    return None if value is None else str(value)[:MAX_NAME]


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
