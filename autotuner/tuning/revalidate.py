"""Re-validation: a published config measured against the job's baseline again, after the study.

A config is a measurement of one cluster at one moment; drivers, NCCL and aws-ofi-nccl change under
it. A re-validation runs the study's own confirmation again (the version's setting against the
study's baseline in interleaved launches, the study's rounds and executor settings), recorded in
that study as `revalidate` launches tagged `revalidate-<id>`, and ends as an evidence entry of the
version (`at_config_validations`):

- held: still faster with 95% confidence (a version that is the baseline itself holds by definition:
  one launch says it still runs, and on what) -> the same version, validated now on this stack;
- failed: shown slower than the baseline, or its gain shown gone (the interval's top below the low
  end of the gain it was published with), or over the quantization-error limit in a round, or it no
  longer runs -> if it is the served version and nobody pinned it, a new version is published with
  the reason: the last older version whose own re-validation held on this same stack, else the
  baseline (no changes). A pinned version is flagged, never replaced: the operator decided what jobs
  get;
- unresolved: measured, but neither: the rounds cannot tell. Kept as served, nothing concluded. "Not
  shown faster" failed it before, and the schedule replaced good versions most of the time;
- error: not even the baseline could be measured: nothing concluded, nothing changed.

It looks twice at most: the study's rounds, and where they cannot tell, as many again, judged over all
of them. Each look's interval is at 97.5% (two looks at 95% would err on either side more often than
one does), so the two together conclude wrongly no more often than one look at 95%, and they conclude
much more often (at 5% launch noise and 3 rounds, by simulation: an unchanged 1.10x held 27% -> 61%
of the time, a version now 0.95x failed 30% -> 65%; tests/tuning/test_revalidate_rates.py).

What asks for one: `autotuner revalidate`, `POST /v1/configs/{cluster}/{workload}/revalidate`, the
schedule (`AUTOTUNER_REVALIDATE_EVERY`, run by the service's scheduler), and jobs whose hook reports
a stack other than the one the version was validated on (api.fingerprints).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from autotuner.executors import Executor
from autotuner.executors.results import clip
from autotuner.job.fingerprint import comparable, compare, describe, describe_diff, stack_changed
from autotuner.space import InProcPoint
from autotuner.store import (
    Candidate,
    Config,
    ConfigValidation,
    LaunchKind,
    NotFound,
    Store,
    ValidationState,
    ValidationTrigger,
    unreadable_columns,
    utcnow,
)
from autotuner.store.configs import NotServed
from autotuner.tuning.context import Progress, StudyContext
from autotuner.tuning.ingest import fingerprint as recorded_fingerprint
from autotuner.tuning.launch import BASELINE, run_launch, unmeasured
from autotuner.tuning.lease import (
    FullDisks,
    Lease,
    StoreUnavailable,
    StudyBusy,
    WorkdirFull,
    store_unavailable,
)
from autotuner.tuning.pairs import Setting, measured, over_limit
from autotuner.tuning.pairs import compare as compare_settings
from autotuner.tuning.plan import PlannedLaunch
from autotuner.tuning.recover import recover
from autotuner.tuning.settings import executor_of
from autotuner.tuning.stats import CONFIDENCE, Speedup, family_confidence

log = logging.getLogger("autotuner.tuning")
DEFAULT_ROUNDS = 3  # for a study that skipped its confirmation (confirm_rounds=0)
LOOKS = 2  # the study's rounds, then (where they cannot tell) as many again, judged over all of them
LOOK_CONFIDENCE = family_confidence(LOOKS)  # 97.5% each: the looks together err as one at 95% would
FIGURES = ("speedup", "ci_low", "ci_high", "confidence", "rounds")  # the level with its interval
RUNNING = (ValidationState.RUNNING,)  # what a runner's own finish is written over
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(w|d|h|m|s)?\s*")
_UNIT_S = {"w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1, None: 1}


class CannotRevalidate(ValueError):
    """This version cannot be re-validated (no study says how it was measured)."""


MAX_DAYS = 36500  # a hundred years: longer is a typo, and dates that far back overflow


def parse_every(text: str | None, *, unit_required: bool = False) -> float | None:
    """`7d`, `12h`, `30m` (minutes), `90s`, `2w` or plain seconds (unless `unit_required`) -> seconds;
    empty, `0` or `off` -> None (no schedule)."""
    if text is None or text.strip().lower() in ("", "0", "off", "none", "never"):
        return None
    m = _DURATION.fullmatch(text)
    if m is None or float(m.group(1)) <= 0:
        raise ValueError(f"{text!r} is not a duration: use e.g. 7d, 12h, 30m, 3600s (or off)")
    if unit_required and m.group(2) is None:
        raise ValueError(f"{text!r} needs a unit: e.g. 30d, 12h, 90m (minutes), 3600s")
    seconds = float(m.group(1)) * _UNIT_S[m.group(2)]
    if seconds > MAX_DAYS * 86400:
        raise ValueError(f"{text!r} is over {MAX_DAYS} days")
    return seconds


def show_duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}".removesuffix(".0") + f" {unit}"
    return f"{seconds:.0f} s"


# ---------------------------------------------------------------------------------- asking


def config_to_revalidate(
    store: Store, cluster: str, workload: str, nodes: int | None = None, version: int | None = None
) -> Config:
    """The served version of (cluster, workload) at `nodes` (exactly, when given), or `version`."""
    if version is not None:
        ids = [i for i, v in store.config_versions(cluster, workload, nodes).items() if v == version]
        if not ids:
            raise NotFound(f"{cluster}/{workload}{_at(nodes)} has no version {version}")
        if len(ids) > 1:
            raise NotFound(
                f"{cluster}/{workload} has a version {version} at several node counts: give --nodes"
            )
        return store.configs_by_id(ids)[0]
    served = store.served_config(cluster, workload, nodes)
    if served is None or (nodes is not None and served.nodes != nodes):
        raise NotFound(f"no config published for {cluster}/{workload}{_at(nodes)}")
    return served


def measured_on(store: Store, config: Config) -> str | None:
    """The executor `config`'s study ran on (and its re-validations would run on); None: it has no study,
    "": its study's settings cannot say (a row written by hand: no executor runs it)."""
    study = store.study(config.study_id) if config.study_id is not None else None
    return None if study is None else executor_of(study) or ""


def _at(nodes: int | None) -> str:
    return "" if nodes is None else f" at {nodes} node{'' if nodes == 1 else 's'}"


def request(
    store: Store, config: Config, trigger: str = ValidationTrigger.MANUAL, reason: str | None = None,
    requested_fingerprint: dict[str, Any] | None = None,
) -> tuple[ConfigValidation, bool]:  # fmt: skip
    """Queue a re-validation of `config` (or find the one queued or running for it: then False)."""
    if config.study_id is None:
        raise CannotRevalidate(
            f"{label(config)} was not published by a study: nothing records how it was measured"
        )
    return store.request_validation(
        config.id, trigger, reason or f"requested ({trigger})", requested_fingerprint
    )


def label(config: Config) -> str:
    return f"{config.cluster.name}/{config.workload.name}/{config.nodes}n/v{config.version}"


# ---------------------------------------------------------------------------------- running


class Revalidation:
    """Runs one queued (or interrupted) re-validation to its end, under its study's lease."""

    def __init__(
        self,
        store: Store,
        validation_id: int,
        executor: Executor,
        *,
        owner: str | None = None,
        progress: Progress | None = None,
        poll_s: float = 0.5,
    ) -> None:
        self.store = store
        self.validation_id = validation_id
        self.executor = executor
        self.owner = owner
        self.progress = progress or Progress()
        self.poll_s = poll_s

    def run(self) -> ConfigValidation:
        row = self.store.validation(self.validation_id)
        if row is None:
            raise NotFound(f"validation {self.validation_id}")
        if row.state not in (ValidationState.QUEUED, ValidationState.RUNNING):
            return row
        config = self.store.configs_by_id([row.config_id])[0]
        if config.study_id is None:
            return self.store.finish_validation(row.id, ValidationState.ERROR,
                                                error="no study records how this version was measured")  # fmt: skip
        # Not cancellable through its study: a study cancelled after it published (in its scaling
        # phase) still serves that version, which must stay re-validatable.
        lease = Lease(self.store, config.study_id, self.owner, cancellable=False)
        lease.acquire()  # StudyBusy: someone else runs it (or its study) now; the queue tries later
        try:
            # Read again under the lease: a runner that held it until a moment ago may have finished it.
            row = self.store.validation(self.validation_id) or row
            if row.state not in (ValidationState.QUEUED, ValidationState.RUNNING):
                return row
            return self._run(row, config, lease)
        # StudyBusy: another process took the lease over, it finishes this one. A store away, a full disk
        # at a submit: left running, resumed later (its rounds measured so far kept), not ended in error.
        except (StudyBusy, StoreUnavailable, WorkdirFull):
            raise
        except Exception as exc:
            if store_unavailable(exc):  # left running: resumed when the store answers
                raise StoreUnavailable(f"re-validation {row.id}: the store did not answer ({type(exc).__name__}: "
                                       f"{exc})") from exc  # fmt: skip
            log.exception("re-validation %s failed", row.id)
            return self.store.finish_validation(row.id, ValidationState.ERROR, error=f"{type(exc).__name__}: {exc}",
                                                action="nothing changed", only_from=RUNNING)  # fmt: skip
        finally:
            try:
                lease.release()
            except Exception as exc:  # the store still away: the lease lapses on its own
                if not store_unavailable(exc):
                    raise

    def _run(self, row: ConfigValidation, config: Config, lease: Lease) -> ConfigValidation:
        started_at = row.started_at or self.store.now()
        if not self.store.start_validation(row.id, started_at):  # another runner finished it meanwhile
            return self.store.validation(row.id) or row
        ctx = StudyContext.load(self.store, config.study_id, self.executor, lease,  # type: ignore[arg-type]
                                progress=self.progress, poll_s=self.poll_s)  # fmt: skip
        study = self.store.study(ctx.study_id)
        assert study is not None
        ctx.inert = dict(study.inert or {})
        recover(ctx)  # a re-validation interrupted before keeps the rounds it measured
        baseline = self._baseline_row(ctx, study)
        if baseline is None:
            return self.store.finish_validation(row.id, ValidationState.ERROR, action="nothing changed", only_from=RUNNING,
                                                error=f"study {ctx.study_id} has no baseline measurement")  # fmt: skip
        base = Setting.of(baseline)
        mine = published_setting(ctx, config, base)
        tag = f"revalidate-{row.id}"
        rounds = ctx.settings.confirm_rounds if ctx.settings.confirm_rounds >= 2 else DEFAULT_ROUNDS
        self.progress.on_phase("revalidate")
        if mine == base:
            state, result = self._baseline_runs(ctx, base, tag)
        else:

            def look(asked: int) -> tuple[str, dict[str, Any]]:
                speedup, measured_mine = compare_settings(ctx, mine, base, asked, LaunchKind.REVALIDATE, tag,
                                                          confidence=LOOK_CONFIDENCE)  # fmt: skip
                return verdict(speedup, *measured(ctx, mine, base, LaunchKind.REVALIDATE, tag),
                               over=over_limit(measured_mine), claimed=claimed_low(config.evidence))  # fmt: skip

            state, result, rounds = looked(look, rounds)
        result["rounds_asked"] = 1 if mine == base else rounds
        result["wall_s"] = (self.store.now() - started_at).total_seconds()
        result["measured_on"] = self.executor.name
        recorded = self._recorded_fingerprint(ctx, tag)
        fp = comparable(recorded, config.nodes)
        result["recorded_fingerprint"] = recorded
        action, new_config_id = "nothing changed (not measured)", None
        if state == ValidationState.HELD:
            action = f"kept v{config.version}: validated on {describe(fp)}"
        elif state == ValidationState.UNRESOLVED:
            # No third look: each spends its share of the 5%, and looking until one holds would make
            # a held verdict of chance.
            action = (
                f"kept v{config.version}: nothing concluded at {result.get('rounds', rounds)} rounds (still as "
                "validated before)"
            )
        elif state == ValidationState.FAILED:
            action, new_config_id = self._act_or_flag(ctx, row, config, base, baseline, fp, result)
        log.info(
            "re-validation %s of %s: %s (%s); %s", row.id, label(config), state, result.get("why"), action
        )
        return self.store.finish_validation(row.id, state, result=result, fingerprint=fp, action=action,
                                            new_config_id=new_config_id, only_from=RUNNING)  # fmt: skip

    def _baseline_row(self, ctx: StudyContext, study: Any) -> Candidate | None:
        if study.baseline_candidate_id:
            row = self.store.candidate(study.baseline_candidate_id)
            if row is not None:
                return row
        return ctx.baseline()

    def _baseline_runs(self, ctx: StudyContext, base: Setting, tag: str) -> tuple[str, dict[str, Any]]:
        """A version that is the job's own settings cannot lose against them: one launch says it
        still runs, and on which stack."""
        rows, _ = measured(ctx, base, base, LaunchKind.REVALIDATE, tag)
        if not rows:
            run_launch(ctx, PlannedLaunch.of(base.env, [base.point], LaunchKind.REVALIDATE, tag=tag), None)
            rows, _ = measured(ctx, base, base, LaunchKind.REVALIDATE, tag)
        if not rows:
            return ValidationState.ERROR, {"why": unmeasured(ctx.store, ctx.study_id, LaunchKind.REVALIDATE,
                                                             BASELINE)}  # fmt: skip
        return ValidationState.HELD, {
            "speedup": 1.0,
            "baseline_samples_per_s": rows[-1].samples_per_s,
            "why": "the job's own settings (no changes): nothing to lose against the baseline; it still runs",
        }

    def _recorded_fingerprint(self, ctx: StudyContext, tag: str) -> dict[str, Any]:
        """What the last launch of this re-validation that ran reported of its stack."""
        for launch in reversed(self.store.launches(ctx.study_id)):
            if launch.kind == LaunchKind.REVALIDATE and (launch.spec.get("extra") or {}).get("tag") == tag:
                if launch.summary:
                    return recorded_fingerprint(launch.summary)
        return {}

    def _act_or_flag(
        self, ctx: StudyContext, row: ConfigValidation, config: Config, base: Setting, baseline: Candidate,
        fp: dict[str, str], result: dict[str, Any],
    ) -> tuple[str, int | None]:  # fmt: skip
        """`_act`; when it cannot replace the version, why: the re-validation still ends failed, so the
        version is flagged where it is served (an `error` would leave it served as if it held)."""
        try:
            return self._act(ctx, row, config, base, baseline, fp, result)
        except Exception as exc:
            if store_unavailable(exc):  # left running: concluded again when the store answers
                raise
            log.exception("re-validation %s of %s: could not replace it", row.id, label(config))
            return clip(f"flagged, not replaced: {type(exc).__name__}: {exc}"), None

    def _act(
        self, ctx: StudyContext, row: ConfigValidation, config: Config, base: Setting, baseline: Candidate,
        fp: dict[str, str], result: dict[str, Any],
    ) -> tuple[str, int | None]:  # fmt: skip
        """What a failed re-validation does to what jobs get."""
        served = self.store.served_config(config.cluster.name, config.workload.name, config.nodes)
        if served is None or served.id != config.id or served.nodes != config.nodes:
            return f"v{config.version} is not the served version: recorded only", None
        if served.pinned:  # as it is now: pinned or unpinned while this ran
            return (f"v{config.version} is pinned by an operator: flagged, not replaced (unpin it, or pin "
                    "another version, to change what jobs get)"), None  # fmt: skip
        why = f"re-validation {row.id} of v{config.version} failed on {describe(fp)}: {result['why']}"
        # The failure, whichever study the new version's evidence comes from.
        common: dict[str, Any] = {"replaces_version": config.version, "revalidation": {
            "id": row.id, "of_version": config.version, "study_id": ctx.study_id, "measured_on": self.executor.name,
            **{k: result[k] for k in FIGURES if k in result}}}  # fmt: skip
        holding = holding_version(self.store, config, fp)
        if holding is not None:
            evidence, setting, what = republished(*holding, common, why)
        else:
            evidence = {**common, "study_id": ctx.study_id, "measured_on": self.executor.name, "speedup": 1.0,
                        "candidate_id": baseline.id, "no_changes": True,
                        "decision": f"{why}: published the baseline (no changes)"}  # fmt: skip
            if ctx.inert:
                evidence["inert"] = ctx.inert
            point = base.point
            setting = {"env": {k: v for k, v in base.env.items() if k not in ctx.inert},
                       "fwd_precision": point.fwd_precision, "bwd_precision": point.bwd_precision,
                       "batch_size": point.batch_size, "sharding": point.sharding, "num_threads": point.num_threads,
                       "pipeline": point.pipeline}  # fmt: skip
            what = "the baseline (no changes)"
        try:  # published only if `config` is still served, unpinned, when the publish takes its turn
            new = self.store.publish_config(cluster=config.cluster.name, workload=config.workload.name,
                                            nodes=config.nodes, evidence=evidence, study_id=evidence["study_id"],
                                            replaces=config.id, **setting)  # fmt: skip
        except NotServed as exc:  # published over, or pinned, since the check above: left as it is, flagged
            return f"not replaced: {exc}", None
        return f"replaced: published v{new.version}, {what}", new.id


def republished(
    older: Config, check: ConfigValidation, common: dict[str, Any], why: str
) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(evidence, setting, what) of an older version published again. Its study's, not the failed
    version's: its candidate, ladder and decision are that study's rows, and later re-validations
    measure it against that study's baseline and workload; the failure is under `revalidation`."""
    held = check.result or {}
    evidence = {**(older.evidence or {}), **common, **{k: v for k, v in held.items() if k in FIGURES},
                "study_id": older.study_id, "republished_version": older.version,
                "decision": f"{why}: published v{older.version}'s setting again (re-validation {check.id} "
                            f"found it holds on this stack)"}  # fmt: skip
    if held.get("measured_on"):  # what measured the figures above
        evidence["measured_on"] = held["measured_on"]
    setting = {"env": dict(older.env), "fwd_precision": older.fwd_precision, "bwd_precision": older.bwd_precision,
               "batch_size": older.batch_size, "sharding": older.sharding, "num_threads": older.num_threads,
               "pipeline": older.pipeline, "lr_scale": older.lr_scale}  # fmt: skip
    return evidence, setting, f"v{older.version}'s setting, which still holds"


def published_setting(ctx: StudyContext, config: Config, base: Setting) -> Setting:
    """What jobs get from `config`, as a launch runs it. Variables that cannot act where the study
    measures were never exported; they are run at the baseline's values, so the two settings share
    one process environment whenever the exported ones allow it."""
    env = {**{k: v for k, v in base.env.items() if k in ctx.inert}, **config.env}
    point = InProcPoint(config.fwd_precision, config.bwd_precision, config.batch_size, config.sharding,
                        config.num_threads, config.pipeline or ctx.workload.default_pipeline)  # fmt: skip
    return Setting(env, point)


def looked(look: Callable[[int], tuple[str, dict[str, Any]]], rounds: int) -> tuple[str, dict[str, Any], int]:
    """The verdict of up to LOOKS looks, and the rounds it was reached at: `look(n)` judges the first n
    rounds (measuring what is missing), and only an unresolved look is followed by another of `rounds`
    more. A resumed re-validation looks at the same first rounds again, so it reaches the same verdict."""
    for asked in range(rounds, rounds * LOOKS + 1, rounds):
        state, result = look(asked)
        if state != ValidationState.UNRESOLVED:
            break
    return state, result, asked


def verdict(
    speedup: Speedup | None,
    mine: list[Candidate],
    base: list[Candidate],
    *,
    over: str | None = None,
    claimed: float | None = None,
) -> tuple[str, dict[str, Any]]:
    """held / failed / unresolved / error, and why, from the interleaved rounds (`over`: the error of a
    round of the published config measured over the quantization-error limit; `claimed`: the low end
    of the gain it was published with)."""
    if speedup is None:
        if len(base) >= 2 and len(mine) < 2:
            return ValidationState.FAILED, {"why": "the published config no longer runs (the baseline does): see the launch log"}  # fmt: skip
        return ValidationState.ERROR, {"why": "not enough rounds could be measured: see the launch logs"}
    figures = speedup.as_dict()
    level = "" if speedup.confidence == CONFIDENCE else f" (a {speedup.confidence * 100:g}% interval)"
    shown = f"{speedup.ratio:.2f}x [{speedup.ci_low:.2f}-{speedup.ci_high:.2f}]{level} over {speedup.rounds} rounds"
    if over is not None:  # whatever it gains: no config to hand a job
        return ValidationState.FAILED, {
            **figures,
            "why": f"over the quantization-error limit now: {over} ({shown})",
        }
    if speedup.significant:
        return ValidationState.HELD, {**figures, "why": f"still faster with 95% confidence: {shown}"}
    if speedup.ci_high < 1.0:
        return ValidationState.FAILED, {**figures, "why": f"now slower than the baseline: {shown}"}
    if claimed is not None and speedup.ci_high < claimed:
        return ValidationState.FAILED, {
            **figures,
            "why": f"its gain is gone: {shown}, below the {claimed:.2f}x it was published with at the least",
        }
    against = f", nor shown below the {claimed:.2f}x it was published with at the least" if claimed else ""
    return ValidationState.UNRESOLVED, {
        **figures,
        "why": f"not shown faster with 95% confidence{against}: {shown}; the rounds cannot tell",
    }


def claimed_low(evidence: Any) -> float | None:
    """The least gain a version was published with: the low end of its evidence's 95% interval, else
    (one published by hand) its figure, if either can be read. A re-validation fails it when its own
    interval's top falls below it."""
    figures = evidence if isinstance(evidence, dict) else {}
    # its figure only where it has no interval at all: an interval's low end that cannot be read (NaN,
    # stored as null) is not replaced by the higher point figure, which would fail good versions sooner
    low = figures.get("ci_low") if "ci_low" in figures else figures.get("speedup")
    if not isinstance(low, bool) and isinstance(low, int | float) and math.isfinite(low) and low > 0:
        return float(low)
    return None


def holding_version(
    store: Store, config: Config, fp: dict[str, str]
) -> tuple[Config, ConfigValidation] | None:
    """The newest older version whose last concluded re-validation held, on the stack just measured,
    with a setting other than `config`'s: the last version that still holds, if re-checked."""
    older = [r for r in _older_versions(store, config) if _setting(r) != _setting(config)]
    finished = store.finished_validations(r.id for r in older)
    for row in older:  # newest first
        concluded = [v for v in finished[row.id] if v.state in (ValidationState.HELD, ValidationState.FAILED)]
        if not concluded or concluded[-1].state != ValidationState.HELD:
            continue
        check = concluded[-1]
        if bad := unusable(check, "fingerprint", "result"):  # on which stack it held is not known
            log.warning("%s: v%d is not published again: its re-validation %s has unreadable %s",
                        label(config), row.version, check.id, bad)  # fmt: skip
            continue
        match, _ = compare(check.fingerprint or {}, fp)
        if match is not False:
            return row, check
    return None


def _older_versions(store: Store, config: Config) -> list[Config]:
    """The versions before `config`, newest first, less those whose stored columns cannot be read
    (named in a log line): one row written by hand must not keep a failed version served."""
    rows = []
    for row in store.config_history(config.cluster.name, config.workload.name, config.nodes):
        if row.version >= config.version:
            continue
        if bad := unusable(row, "env", "evidence"):
            log.warning("%s: v%d is not published again: its stored %s cannot be read",
                        label(config), row.version, bad)  # fmt: skip
            continue
        rows.append(row)
    return rows


def unusable(row: Any, *mappings: str) -> str:
    """What of a loaded row cannot be read ("" when all can): the columns the store could not read, and
    of `mappings`, JSON that is no object."""
    bad = unreadable_columns(row)
    return bad or ", ".join(f"{column} (not an object)" for column in mappings
                            if getattr(row, column) is not None and not isinstance(getattr(row, column), dict))  # fmt: skip


def _setting(row: Config) -> tuple[Any, ...]:
    return (sorted(row.env.items()), row.fwd_precision, row.bwd_precision, row.batch_size, row.sharding,
            row.num_threads, row.pipeline)  # fmt: skip


# ---------------------------------------------------------------------------------- the queue


def run_pending(
    store: Store, make_executor: Any, *, owner: str | None = None, progress: Progress | None = None,
    poll_s: float = 0.5, full_disks: FullDisks | None = None, runs: Callable[[Any], bool] = lambda study: True,
) -> bool:  # fmt: skip
    """Run the first queued (or abandoned) re-validation whose study's lease can be had, but one a full
    disk stopped a moment ago (`full_disks`) or whose study's executor is not run here (`runs`)."""
    from autotuner.tuning.settings import StudySettings

    full_disks = full_disks or FullDisks()
    for row in store.pending_validations():
        if full_disks.waiting(("re-validation", row.id)):
            continue
        study = store.study(row.study_id) if row.study_id is not None else None
        if study is None:
            store.finish_validation(
                row.id, ValidationState.ERROR, error="its study is gone", action="nothing changed"
            )
            return True
        if not runs(study):
            continue
        try:
            executor = make_executor(StudySettings.model_validate(study.settings))
            Revalidation(store, row.id, executor, owner=owner, progress=progress, poll_s=poll_s).run()
        except StudyBusy:
            continue
        except StoreUnavailable as exc:  # left running: resumed at a later tick, after a pause
            log.warning("%s", exc)
            return False
        except WorkdirFull as exc:  # left running: tried again after a pause, the others meanwhile
            full_disks.full(("re-validation", row.id), exc, f"re-validation {row.id}")
            continue
        except Exception as exc:  # its study's rows cannot run it: this one ends with why, the others run
            if store_unavailable(exc):  # as it was taken up (its rows read, its lease taken): left pending
                log.warning("re-validation %s: the store did not answer (%s: %s); tried again at a later tick",
                            row.id, type(exc).__name__, exc)  # fmt: skip
                return False
            log.exception("re-validation %s could not run", row.id)
            try:
                end_unrunnable(store, row.id, exc)
            except Exception:
                log.exception("re-validation %s: could not record that it cannot run", row.id)
                continue
        full_disks.cleared(("re-validation", row.id))
        return True
    return False


def end_unrunnable(store: Store, validation_id: int, exc: Exception) -> str:
    """End a re-validation its study's stored rows cannot run (settings that no longer validate, an
    executor that cannot be made), saying why; the words, for the caller to show."""
    why = f"it cannot run: {type(exc).__name__}: {exc}"
    store.finish_validation(validation_id, ValidationState.ERROR, action="nothing changed", error=clip(why))
    return why


def schedule_due(
    store: Store, every_s: float, now: datetime | None = None, text: str = "",
    runs: Callable[[Any], bool] | None = None,
) -> list[ConfigValidation]:  # fmt: skip
    """Ask for a re-validation of every served version last validated (or last tried) `every_s` ago,
    but of those whose study's executor is not run here (`runs`: it would wait in the queue for good)."""
    now = now or utcnow()
    served = [c for c in store.served_configs() if c.study_id is not None]
    if runs is not None:  # each study read once, where it matters
        studies = {i: store.study(i) for i in {c.study_id for c in served if c.study_id is not None}}
        served = [c for c in served if (study := studies.get(c.study_id or 0)) is not None and runs(study)]
    views = store.validation_views(served)
    tried: dict[int, datetime] = {}
    for v in store.validations(config_ids=[c.id for c in served], limit=100_000):
        if isinstance(v.created_at, datetime):  # a stored date that is no date reads as None: not known
            tried[v.config_id] = max(tried.get(v.config_id, v.created_at), v.created_at)
    asked = []
    for config in served:
        try:
            row = _due(
                store, config, views[config.id].get("validated_at"), tried.get(config.id), every_s, now, text
            )
        except Exception:  # one version that cannot be asked for: the others are
            log.exception("the schedule could not ask for a re-validation of config %s", config.id)
            continue
        if row is not None:
            asked.append(row)
    return asked


def _due(
    store: Store, config: Config, validated_at: datetime | None, tried: datetime | None, every_s: float,
    now: datetime, text: str,
) -> ConfigValidation | None:  # fmt: skip
    """A re-validation of `config` asked for by the schedule, if due (None: not due, or one was queued
    already). When it was validated, or last tried, is not known (no readable date): due."""
    known = [at for at in (validated_at, tried) if isinstance(at, datetime)]
    if known and now - max(known) < timedelta(seconds=every_s):
        return None
    ago = (
        f"{show_duration((now - validated_at).total_seconds())} ago"
        if isinstance(validated_at, datetime)
        else "at a date not known"
    )
    reason = f"last validated {ago} (AUTOTUNER_REVALIDATE_EVERY={text or show_duration(every_s)})"
    row, created = request(store, config, ValidationTrigger.SCHEDULE, reason)
    return row if created else None


# ---------------------------------------------------------------------------------- staleness


def staleness(
    config: dict[str, Any], reports: list[Any], every_s: float | None, now: datetime | None = None
) -> dict[str, Any]:
    """Whether a served version is stale, and why: jobs report another stack than it was validated on
    since then (`fingerprint`), its last re-validation failed and it was kept (`failed`), or it is
    older than the schedule (`overdue`)."""
    now = now or utcnow()
    validated_at = datetime.fromisoformat(config["validated_at"])
    age_s = max(0.0, (now - validated_at).total_seconds())
    reasons: dict[str, str] = {}
    validated_on = config.get("validated_on") or {}
    seen = []
    for report in reports:
        # a report written by hand with no readable date or stack says nothing of what jobs run on
        if not isinstance(report.last_seen, datetime) or not isinstance(report.fingerprint, dict):
            continue
        if report.last_seen <= validated_at:
            continue
        match, diff = compare(validated_on, report.fingerprint)
        if match is False and stack_changed(diff):
            stack = {k: v for k, v in diff.items() if k != "nodes"}
            seen.append(
                f"{describe_diff(stack)} since validation ({report.jobs} job{'' if report.jobs == 1 else 's'})"
            )
    if seen:
        reasons["fingerprint"] = "; ".join(dict.fromkeys(seen))
    if config.get("flagged"):
        reasons["failed"] = config["flagged"]
    if every_s is not None and age_s > every_s:
        reasons["overdue"] = f"validated {show_duration(age_s)} ago, every {show_duration(every_s)} asked"
    return {"age_s": age_s, "stale": bool(reasons), "reasons": reasons}


__all__ = ["CannotRevalidate", "Revalidation", "config_to_revalidate", "parse_every", "request", "run_pending",
           "schedule_due", "staleness"]  # fmt: skip
