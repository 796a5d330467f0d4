"""What a study's search shows: its history, the best throughput of each precision x batch size, where
the step's time goes, and which knobs mattered.

Parameter importance is Optuna's (PED-ANOVA) over the study's completed trials, computed beside a
dimension of pure noise: the share that random dimension gets is the floor under which a knob is not
shown to matter (on gloo, every NCCL variable). Knobs and floor are shares of one total, so no share
exceeds 100%. PED-ANOVA weighs how the best 10% of trials differ from all of them, and Optuna asks for
at least 5 trials in that tenth: with fewer, a handful of points makes any continuous dimension look
decisive (the random one took 97% of the total with the demo's 8 trials, and still outranked a knob
worth 1.25x in 16 of 20 draws of 20 trials). So under MIN_TRIALS nothing is ranked, and the reason
says so.

The dashboard reads these through `GET /v1/studies/{id}/insights`; nothing here knows of HTTP.
"""

from __future__ import annotations

import logging
import random
import threading
from typing import Any

import optuna
from optuna.distributions import FloatDistribution
from optuna.importance import PedAnovaImportanceEvaluator
from optuna.trial import FrozenTrial, TrialState

from autotuner.executors.results import finite
from autotuner.store import Candidate, Store, Study
from autotuner.tuning.search import optuna_storage, record_name
from trials.result import BREAKDOWN_PARTS

log = logging.getLogger("autotuner.tuning")

# Trials that count as the search: confirmation rounds re-measure two points and would crowd the charts.
SEARCH_KINDS = ["baseline", "search"]
NOISE = "(random dimension)"
TOP_QUANTILE = 0.1  # PED-ANOVA's: the best tenth of the trials against all of them
MIN_TRIALS = 41  # the fewest with 5 trials in the best tenth (Optuna's advice for PED-ANOVA)
TOO_FEW = "too few trials to rank knobs ({n} completed, {need} needed)"


def study_insights(store: Store, study: Study, importances: ImportanceCache) -> dict[str, Any]:
    """Chart data: optimization history, parameter importance with its noise floor, the best throughput
    of each precision x batch size, and where the step's time goes."""
    rows = [r for r in store.candidates(study.id, kinds=SEARCH_KINDS) if _drawable(r)]
    space = study.space if isinstance(study.space, dict) else {}
    return {
        "study_id": study.id,
        "state": study.state,
        "history": history(rows),
        "importance": importances.importance(study.id),
        "matrix": precision_batch_matrix(rows, space),
        "breakdown": step_breakdown(rows),
    }


def _drawable(row: Candidate) -> bool:
    """A row whose figures can be charted (one an older version, or a hand, stored wrong is left out)."""
    rate = row.samples_per_s
    return (
        isinstance(row.fwd_precision, str)
        and isinstance(row.bwd_precision, str)
        and isinstance(row.batch_size, int)
        and (rate is None or finite(rate))
    )


def step_breakdown(rows: list[Candidate], limit: int = 10) -> list[dict[str, Any]]:
    """Where the step's time goes, for the baseline and the fastest feasible candidates."""
    timed = [
        r
        for r in rows
        if r.state == "ok" and isinstance(r.metrics, dict) and _figures(r.metrics.get("breakdown_ms"))
    ]
    baseline = [r for r in timed if r.kind == "baseline"][:1]
    fastest = sorted((r for r in timed if r.kind != "baseline"), key=lambda r: -(r.samples_per_s or 0))
    # Only the breakdown's own parts, before the row's fields: a result's extra keys ("samples_per_s",
    # "id") were drawn as the row's figures.
    return [
        {
            **{k: v for k, v in r.metrics["breakdown_ms"].items() if k in BREAKDOWN_PARTS},
            "id": r.id,
            "kind": r.kind,
            "label": f"#{r.id} {r.fwd_precision}/{r.bwd_precision} b{r.batch_size} {r.pipeline or ''}".strip(),
            "samples_per_s": r.samples_per_s,
            "step_ms": r.iter_ms,
        }
        for r in baseline + fastest[: limit - len(baseline)]
    ]


def _figures(breakdown: Any) -> bool:
    """A stored breakdown that can be drawn (rows an older version stored unchecked may hold anything)."""
    if not isinstance(breakdown, dict):
        return False
    drawn = [v for k, v in breakdown.items() if k in BREAKDOWN_PARTS]  # a result's other keys are never drawn
    return bool(drawn) and all(map(finite, drawn))


def history(rows: list[Candidate]) -> list[dict[str, Any]]:
    """Every measured search point in order, with the best feasible value so far."""
    best: float | None = None
    points = []
    for n, row in enumerate(rows, start=1):
        if row.state == "ok" and row.samples_per_s is not None:
            best = row.samples_per_s if best is None else max(best, row.samples_per_s)
        points.append(
            {
                "n": n,
                "id": row.id,
                "launch_id": row.launch_id,
                "kind": row.kind,
                "state": row.state,
                "samples_per_s": row.samples_per_s,
                "best_so_far": best,
                "precision": f"{row.fwd_precision}/{row.bwd_precision}",
                "batch_size": row.batch_size,
                "env": row.env,
            }
        )
    return points


def _listed(space: dict[str, Any], key: str) -> list[Any]:
    value = space.get(key)
    return value if isinstance(value, list) else []


def precision_batch_matrix(rows: list[Candidate], space: dict[str, Any]) -> dict[str, Any]:
    """Best feasible samples/s per (precision, batch size), and how many trials each cell had, failed
    and infeasible among them: rows follow the space's order."""
    pairs = _listed(space, "precisions")
    declared = [f"{p[0]}/{p[1]}" for p in pairs if isinstance(p, list) and len(p) == 2]
    precisions = list(dict.fromkeys(declared + [f"{r.fwd_precision}/{r.bwd_precision}" for r in rows]))
    sizes = _listed(space, "batch_sizes")
    batches = sorted({*(b for b in sizes if isinstance(b, int)),
                      *(r.batch_size for r in rows)})  # fmt: skip
    best: dict[tuple[str, int], float] = {}
    counted: dict[str, dict[tuple[str, int], int]] = {"trials": {}, "failed": {}, "infeasible": {}}
    for row in rows:
        key = (f"{row.fwd_precision}/{row.bwd_precision}", row.batch_size)
        for count in ("trials", row.state):  # every trial, and failed or infeasible ones apart
            if count in counted:
                counted[count][key] = counted[count].get(key, 0) + 1
        if row.state == "ok" and row.samples_per_s is not None:
            best[key] = max(best.get(key, 0.0), row.samples_per_s)
    # Failed (did not run to the end) and infeasible (over the quantization-error limit) apart: a cell
    # whose trials all crashed was labelled infeasible.
    grid = {name: [[n.get((p, b), 0) for b in batches] for p in precisions] for name, n in counted.items()}
    return {
        "precisions": precisions,
        "batch_sizes": batches,
        "samples_per_s": [[best.get((p, b)) for b in batches] for p in precisions],
        **grid,
    }


class ImportanceCache:
    """One Optuna storage (building one per request costs a schema check), and the last importance per
    study: recomputed only when the study has new finished trials."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._storage: optuna.storages.BaseStorage | None = None
        self._lock = threading.Lock()
        self.results: dict[int, tuple[tuple[int, int], dict[str, Any]]] = {}

    def storage(self) -> optuna.storages.BaseStorage:
        with self._lock:
            if self._storage is None:
                self._storage = optuna_storage(self.url)
            return self._storage

    def importance(self, study_id: int) -> dict[str, Any]:
        """The study's parameter importance, or why there is none; never raises (a chart must never
        fail the page)."""
        try:
            return self._importance(study_id)
        except Exception as exc:
            log.warning("study %s: parameter importance failed", study_id, exc_info=True)
            return {"params": [], "reason": f"could not compute: {type(exc).__name__}: {exc}"}

    def _importance(self, study_id: int) -> dict[str, Any]:
        try:
            ostudy = optuna.load_study(study_name=record_name(study_id), storage=self.storage())
        except KeyError:
            return {"params": [], "reason": "no search trials yet"}
        trials = ostudy.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        key = (len(trials), max((t.number for t in trials), default=-1))
        cached = self.results.get(study_id)
        if cached is not None and cached[0] == key:
            return cached[1]
        result = importance(trials)
        self.results[study_id] = (key, result)
        return result


def importance(trials: list[FrozenTrial]) -> dict[str, Any]:
    """Each varied knob's share of the importance, the random dimension's share (the noise floor) on the
    same scale, and which knobs score no higher; or why nothing is ranked."""
    # Each knob's values are read once (reading every trial per trial and knob was quadratic).
    names = {n for t in trials for n in t.params}
    varied = sorted(n for n in names if len({repr(t.params.get(n)) for t in trials}) > 1)
    if len(trials) < 2:
        return {"params": [], "reason": f"needs 2 completed trials ({len(trials)} so far)"}
    if len({t.value for t in trials}) < 2:
        return {"params": [], "reason": "every completed trial has the same value"}
    if not varied:
        return {"params": [], "reason": "no parameter has varied yet"}
    if len(trials) < MIN_TRIALS:
        return {"params": [], "reason": TOO_FEW.format(n=len(trials), need=MIN_TRIALS), "trials": len(trials)}
    shares, floor = importances_with_noise_floor(trials, varied)
    params = [
        {"name": name, "importance": share, "below_noise": share <= floor} for name, share in shares.items()
    ]
    return {"params": params, "noise_floor": floor, "reason": None, "trials": len(trials)}


def importances_with_noise_floor(
    trials: list[FrozenTrial], params: list[str]
) -> tuple[dict[str, float], float]:
    """The shares of `params` and of a dimension of pure noise among them, of one total (they sum to 1):
    a knob that scores no higher than noise is not shown to matter."""
    rng = random.Random(0)  # the same floor for the same trials
    study = optuna.create_study(direction="maximize")
    noise = FloatDistribution(0.0, 1.0)
    for t in trials:
        study.add_trial(optuna.trial.create_trial(
            params={**t.params, NOISE: rng.random()}, distributions={**t.distributions, NOISE: noise}, value=t.value))  # fmt: skip
    evaluator = PedAnovaImportanceEvaluator(target_quantile=TOP_QUANTILE)
    scores = optuna.importance.get_param_importances(study, evaluator=evaluator, params=[*params, NOISE])
    floor = float(scores.pop(NOISE))
    return {name: float(score) for name, score in scores.items()}, floor
