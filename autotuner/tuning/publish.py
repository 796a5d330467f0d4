"""Publishing: the chosen candidate as a versioned config for (cluster, workload, nodes), with the
evidence a user banks on: confirmed speedup and interval, the ladder of knobs, the quality cost,
the quantization error, what ran where. Variables that cannot act where it was measured are not
exported: a config never carries a knob that was not shown to help."""

from __future__ import annotations

import logging
from typing import Any

from autotuner.store import Candidate, Config
from autotuner.tuning.context import StudyContext
from autotuner.tuning.outcome import Outcome
from autotuner.tuning.quality import lr_factor

log = logging.getLogger("autotuner.tuning")


def publish(ctx: StudyContext, chosen: Candidate, outcome: Outcome) -> Config:
    claim = outcome.dump()
    evidence: dict[str, Any] = {
        **outcome.figures(),
        "study_id": ctx.study_id,
        "candidate_id": chosen.id,
        "decision": outcome.decision,
        "quant_error": {"fwd": chosen.quant_error_fwd, "bwd": chosen.quant_error_bwd},
        "effective_precision": [chosen.effective_fwd_precision, chosen.effective_bwd_precision],
        "measured_on": ctx.executor.name,
        **{k: claim[k] for k in ("ladder", "quality", "finalist") if k in claim},
    }
    if outcome.inert:
        evidence["inert"] = outcome.inert  # searched or fixed, but unable to act here: never exported
    emulated = [f"fabric at {ctx.settings.fabric}"] if ctx.settings.fabric else []
    if ctx.settings.executor_options.get("nodes") in ("ranks", "hostids", "namespaces"):
        emulated.append(
            f"{ctx.settings.nnodes} node(s) as {ctx.settings.executor_options['nodes']} on one machine"
        )
    if emulated:
        evidence["emulation"] = f"emulated {', '.join(emulated)}: not a real cluster measurement"
    config = ctx.store.publish_config(
        cluster=ctx.cluster_name, workload=ctx.workload_name, nodes=ctx.settings.nnodes,
        env={k: v for k, v in chosen.env.items() if k not in (outcome.inert or {})},
        fwd_precision=chosen.fwd_precision, bwd_precision=chosen.bwd_precision, batch_size=chosen.batch_size,
        sharding=chosen.sharding, num_threads=chosen.num_threads, pipeline=chosen.pipeline,
        lr_scale=lr_scale(outcome, chosen.batch_size, ctx.baseline_point.batch_size),
        evidence=evidence, study_id=ctx.study_id,
    )  # fmt: skip
    speedup = f"{outcome.speedup:.2f}x" if outcome.speedup else "no speedup claimed"
    log.info("study %s: published %s/%s v%s at %s node(s): %s", ctx.study_id, ctx.cluster_name, ctx.workload_name,
             config.version, ctx.settings.nnodes, speedup)  # fmt: skip
    return config


def lr_scale(outcome: Outcome, batch: int, baseline_batch: int) -> float | None:
    """The factor on the job's learning rate that goes with a published batch change: the rule its time
    to quality was shown under (None: the job's own rate, or no batch change)."""
    ttq = outcome.quality.time_to_quality if outcome.quality is not None else None
    return lr_factor(ttq.lr_scaling, batch, baseline_batch) if ttq is not None else None
