"""The web dashboard: server-rendered HTML shells, static assets, and the chart data the JSON API lacks.

The pages carry no data (always served, no token): their script reads everything from /v1 with the
bearer token the user pastes, so the dashboard needs no session or cookie of its own. plotly.js comes
from the installed `plotly` package: clusters are often offline, so no CDN.
"""

from __future__ import annotations

import logging
import random
import threading
from pathlib import Path
from typing import Annotated, Any

import optuna
from fastapi import APIRouter, FastAPI, HTTPException, Request
from fastapi.params import Path as PathParam
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from api.auth import ReadAccess
from api.deps import StoreDep
from api.schemas import ERRORS
from autotuner import __version__
from autotuner.store import Candidate, Store
from autotuner.tuning import optuna_storage, record_name

log = logging.getLogger("autotuner.dashboard")
HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"
templates = Jinja2Templates(directory=HERE / "templates")
StudyId = Annotated[int, PathParam(ge=1, le=2**31)]
# Trials that count as the search: confirmation rounds re-measure two points and would crowd the charts.
SEARCH_KINDS = ["baseline", "search"]


def plotly_js() -> Path:
    import plotly

    return Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"


# ---------------------------------------------------------------------------------- pages

pages = APIRouter(include_in_schema=False)


def _page(request: Request, template: str, **context: Any) -> HTMLResponse:
    return templates.TemplateResponse(
        request, template, {"version": __version__, "page": template.removesuffix(".html"), **context}
    )


@pages.get("/", response_class=HTMLResponse)
def studies_page(request: Request) -> HTMLResponse:
    return _page(request, "studies.html")


@pages.get("/studies/{study_id}", response_class=HTMLResponse)
def study_page(request: Request, study_id: StudyId) -> HTMLResponse:
    return _page(request, "study.html", study_id=study_id)


@pages.get("/configs", response_class=HTMLResponse)
def configs_page(request: Request) -> HTMLResponse:
    return _page(request, "configs.html")


@pages.get("/static/plotly.min.js")
def plotly_asset() -> FileResponse:
    # Listed before the /static mount, so this route wins; the file is versioned with the package.
    return FileResponse(
        plotly_js(),
        media_type="text/javascript; charset=utf-8",
        headers={"Cache-Control": "public, max-age=86400"},
    )


# ---------------------------------------------------------------------------------- chart data

insights = APIRouter(prefix="/v1/studies", tags=["studies"], responses=ERRORS)


@insights.get("/{study_id}/insights")
def study_insights(study_id: StudyId, request: Request, store: StoreDep, _: ReadAccess) -> dict[str, Any]:
    """Chart data for the dashboard: optimization history, parameter importance (Optuna), the
    best throughput of each precision x batch size, and where the step's time goes."""
    study = store.study(study_id)
    if study is None:
        raise HTTPException(404, f"study {study_id} not found")
    rows = store.candidates(study_id, kinds=SEARCH_KINDS)
    return {
        "study_id": study_id,
        "state": study.state,
        "history": history(rows),
        "importance": _importance_cached(request.app, store, study_id),
        "matrix": precision_batch_matrix(rows, study.space),
        "breakdown": step_breakdown(rows),
    }


def step_breakdown(rows: list[Candidate], limit: int = 10) -> list[dict[str, Any]]:
    """Where the step's time goes, for the baseline and the fastest feasible candidates."""
    timed = [r for r in rows if r.state == "ok" and (r.metrics or {}).get("breakdown_ms")]
    baseline = [r for r in timed if r.kind == "baseline"][:1]
    fastest = sorted((r for r in timed if r.kind != "baseline"), key=lambda r: -(r.samples_per_s or 0))
    return [
        {
            "id": r.id,
            "kind": r.kind,
            "label": f"#{r.id} {r.fwd_precision}/{r.bwd_precision} b{r.batch_size} {r.pipeline or ''}".strip(),
            "samples_per_s": r.samples_per_s,
            "step_ms": r.iter_ms,
            **r.metrics["breakdown_ms"],
        }
        for r in baseline + fastest[: limit - len(baseline)]
    ]


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


def precision_batch_matrix(rows: list[Candidate], space: dict[str, Any]) -> dict[str, Any]:
    """Best feasible samples/s per (precision, batch size): rows follow the space's order."""
    declared = [f"{f}/{b}" for f, b in space.get("precisions") or []]
    precisions = list(dict.fromkeys(declared + [f"{r.fwd_precision}/{r.bwd_precision}" for r in rows]))
    batches = sorted({*(b for b in space.get("batch_sizes") or [] if isinstance(b, int)),
                      *(r.batch_size for r in rows)})  # fmt: skip
    best: dict[tuple[str, int], float] = {}
    measured: dict[tuple[str, int], int] = {}
    for row in rows:
        key = (f"{row.fwd_precision}/{row.bwd_precision}", row.batch_size)
        measured[key] = measured.get(key, 0) + 1
        if row.state == "ok" and row.samples_per_s is not None:
            best[key] = max(best.get(key, 0.0), row.samples_per_s)
    return {
        "precisions": precisions,
        "batch_sizes": batches,
        "samples_per_s": [[best.get((p, b)) for b in batches] for p in precisions],
        "trials": [[measured.get((p, b), 0) for b in batches] for p in precisions],
    }


class _OptunaCache:
    """One Optuna storage per app (building one per request costs a schema check), and the last
    importance per study: recomputed only when the study has new finished trials."""

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


def _importance_cached(app: FastAPI, store: Store, study_id: int) -> dict[str, Any]:
    cache: _OptunaCache | None = getattr(app.state, "dashboard_optuna", None)
    if cache is None or cache.url != store.url:
        cache = app.state.dashboard_optuna = _OptunaCache(store.url)
    try:
        return importance(cache, study_id)
    except Exception as exc:  # a chart must never turn into a 500
        log.warning("study %s: parameter importance failed", study_id, exc_info=True)
        return {"params": [], "reason": f"could not compute: {type(exc).__name__}: {exc}"}


def importance(cache: _OptunaCache, study_id: int) -> dict[str, Any]:
    """`optuna.importance.get_param_importances` on the study's Optuna trials, when they can say
    anything: at least two completed trials whose values differ."""
    try:
        ostudy = optuna.load_study(study_name=record_name(study_id), storage=cache.storage())
    except KeyError:
        return {"params": [], "reason": "no search trials yet"}
    trials = ostudy.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    key = (len(trials), max((t.number for t in trials), default=-1))
    cached = cache.results.get(study_id)
    if cached is not None and cached[0] == key:
        return cached[1]
    values = {t.value for t in trials}
    varied = [name for name in {n for t in trials for n in t.params}
              if len({repr(t.params.get(name)) for t in trials}) > 1]  # fmt: skip
    if len(trials) < 2:
        result: dict[str, Any] = {"params": [], "reason": f"needs 2 completed trials ({len(trials)} so far)"}
    elif len(values) < 2:
        result = {"params": [], "reason": "every completed trial has the same value"}
    elif not varied:
        result = {"params": [], "reason": "no parameter has varied yet"}
    else:
        scores, floor = importances_with_noise_floor(trials, sorted(varied))
        result = {
            "params": [
                {"name": name, "importance": float(score), "below_noise": score <= floor}
                for name, score in scores.items()
            ],
            "noise_floor": floor,
            "reason": None,
            "trials": len(trials),
        }
    cache.results[study_id] = (key, result)
    return result


# ---------------------------------------------------------------------------------- mount


def mount(app: FastAPI) -> None:
    app.include_router(insights)
    app.include_router(pages)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")


NOISE = "(random dimension)"


def importances_with_noise_floor(trials: list[Any], params: list[str]) -> tuple[dict[str, float], float]:
    """Importances of `params`, and the importance a dimension of pure noise gets among them: a
    knob that scores no higher than noise is not shown to matter (on gloo, every NCCL variable)."""
    rng = random.Random(0)  # the same floor for the same trials
    study = optuna.create_study(direction="maximize")
    noise = FloatDistribution(0.0, 1.0)
    for t in trials:
        study.add_trial(optuna.trial.create_trial(
            params={**t.params, NOISE: rng.random()}, distributions={**t.distributions, NOISE: noise}, value=t.value))  # fmt: skip
    scores = optuna.importance.get_param_importances(study, params=[*params, NOISE])
    floor = float(scores.pop(NOISE))
    rest = sum(scores.values()) or 1.0  # shares of the real knobs, the floor on the same scale
    return {name: float(score) / rest for name, score in scores.items()}, floor / rest
