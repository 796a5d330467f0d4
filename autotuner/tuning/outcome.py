"""A study's outcome: what it decided, and the evidence the published claim rests on.

The phases build it in order (driver.py): `confirm.decide` (the finalist against the baseline) ->
`claim.honest_claim` (the ladder, the convergence check and, when either left something out, the
re-confirmation) -> `confirm.baseline_published` (when the job's own settings are what is published)
-> `publish` -> `scaling`. It is stored as JSON in the study's row (`Outcome.dump`), returned by
`GET /v1/studies/{id}` with this schema, and read back through `Outcome.load`, which also reads what
older versions stored (a convergence check of one seed, before paired seeds: `Quality.seed_noise`).

Fields are optional where a shape in the wild lacks them: a study that was not confirmed has no
interval, a check that was skipped only says why, a scaling point measured before efficiencies were
recorded has none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from autotuner.tuning.stats import PASSED, REFUSED, Speedup


class _Record(BaseModel):
    # A key this version does not know (written by a newer one) is ignored, never an error.
    model_config = ConfigDict(extra="ignore")


class Interval(_Record):
    ci_low: float | None = Field(default=None, description="the 95% confidence interval's lower end")
    ci_high: float | None = Field(default=None, description="its upper end")


class Confirmation(Interval):
    """One setting against another in interleaved rounds: the throughput ratio with its paired 95% CI."""

    speedup: float | None = Field(
        default=None, description="geometric mean of tuned / baseline over the rounds"
    )
    confidence: float | None = None
    rounds: int | None = Field(default=None, description="interleaved rounds, one pair each")
    tuned_samples_per_s: float | None = None
    baseline_samples_per_s: float | None = None
    significant: bool | None = Field(default=None, description="faster with 95% confidence (ci_low > 1)")

    @classmethod
    def of(cls, speedup: Speedup) -> Confirmation:
        return cls.model_validate(speedup.as_dict())

    def figures(self) -> dict[str, Any]:
        """The confirmation's own fields that are set (as they are copied into a config's evidence)."""
        return {k: v for k in FIGURES if (v := getattr(self, k)) is not None}


FIGURES = tuple(Confirmation.model_fields)


class Finalist(Confirmation):
    """The search's finalist as confirmed against the baseline, kept apart when something else is published."""

    candidate: int | None = None


class Gain(Interval):
    ratio: float


class TimeToQuality(Interval):
    """A bigger batch judged by time to quality: the samples it needs to reach each seed's baseline log
    loss (sample efficiency), times the ladder's throughput gain for the batch step."""

    baseline_samples: int | None = None
    samples: list[float | None] | None = Field(
        default=None, description="per seed; null: never within the budget"
    )
    trained_samples: int | None = Field(default=None, description="how far past the common budget it trained")
    throughput_gain: Gain | None = None
    never: bool | None = Field(default=None, description="some seed never reached the baseline's log loss")
    speedup_at_most: float | None = None
    efficiency: float | None = Field(
        default=None, description="baseline samples / its own (> 1: fewer samples)"
    )
    efficiency_ci: list[float] | None = None
    speedup: float | None = Field(default=None, description="time-to-quality speedup: gain x efficiency")
    confidence: float | None = Field(
        default=None, description="of the interval: 0.95, or more for the best of several learning-rate rules"
    )
    verdict: str | None = Field(default=None, description="passed | refused | not resolved")
    variant: str | None = None
    lr_scaling: str | None = Field(
        default=None, description="the learning-rate rule taken: none | sqrt | linear"
    )


class LadderStep(Interval):
    """One knob group changed, measured against the step before it in interleaved rounds."""

    step: str = Field(description="precision | batch | pipeline | env | sharding | threads")
    changed: dict[str, list[Any]] = Field(
        default_factory=dict, description="what changed: name -> [before, after]"
    )
    kept: bool
    verdict: str | None = Field(
        default=None, description="kept | no measurable gain | cannot run: ... | not measured ..."
    )
    candidate: int | None = Field(default=None, description="a row that measured the step")
    samples_per_s: float | None = None
    previous_samples_per_s: float | None = None
    speedup_vs_previous: float | None = Field(default=None, description="the gain over the step before")
    rounds: int | None = None
    cumulative: float | None = Field(default=None, description="the kept steps' gains so far")
    time_to_quality: TimeToQuality | None = Field(
        default=None, description="a batch step's, beside its throughput gain"
    )

    @property
    def measured(self) -> bool:
        return self.ci_low is not None


class PairedDelta(Interval):
    """A log-loss delta against the baseline under the same model seeds, with its CI and verdict."""

    delta: float | None = Field(default=None, description="variant - baseline log loss, mean over the seeds")
    confidence: float | None = Field(
        default=None, description="of the interval: 0.95, or more for the best of several learning-rate rules"
    )
    sd: float | None = Field(default=None, description="of the paired differences")
    verdict: str | None = Field(default=None, description="passed | refused | not resolved")
    k_to_resolve: int | None = Field(default=None, description="seeds that would resolve it at this spread")


class KnobQuality(PairedDelta):
    """One knob's verdict: its paired delta alone (a batch change's verdict is on its time to quality)."""


class VariantFigures(PairedDelta):
    """A model trained in the quality launch, against the baseline under the same seeds."""

    logloss: list[float] = Field(description="per seed")
    auc: list[float]
    k: int
    equal_samples_verdict: str
    lr_scaling: str | None = None
    lr_scale: float | None = None
    time_to_quality: TimeToQuality | None = None


class Quality(PairedDelta):
    """The convergence check: the tuned config's paired log-loss delta over k model seeds, its 95% CI and
    verdict (at equal samples), and each training knob's; or why it was skipped."""

    skipped: str | None = Field(default=None, description="why the check did not run")
    failed: bool | None = Field(
        default=None,
        description="the quality launch, or a model of it, failed (not by diverging): what it was to judge "
        "was not measured, so the study published nothing",
    )
    k: int | None = Field(default=None, description="paired model seeds")
    seeds: list[int | None] | None = None
    baseline_logloss: float | None = None
    tuned_logloss: float | None = None
    baseline_per_seed: list[float] | None = None
    tuned_per_seed: list[float] | None = None
    seed_spread: float | None = Field(default=None, description="the baseline's own, from seed to seed")
    seed_noise: float | None = Field(default=None, description="a check of one seed (before paired seeds)")
    baseline_auc: float | None = None
    tuned_auc: float | None = None
    samples: int | None = None
    eval_samples: int | None = None
    max_logloss_delta: float | None = Field(default=None, description="the space's threshold")
    variants: dict[str, VariantFigures] = Field(default_factory=dict)
    knobs: dict[str, KnobQuality] = Field(default_factory=dict)
    refused: list[str] = Field(default_factory=list)
    unresolved: list[str] = Field(default_factory=list)
    data: str | None = None
    cost_s: float | None = Field(default=None, description="the quality launch's wall time")
    time_to_quality: TimeToQuality | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_seed_knobs(cls, data: Any) -> Any:
        """A check of one seed stored each knob as its delta alone: said as that delta's verdict."""
        knobs = data.get("knobs") if isinstance(data, dict) else None
        if isinstance(knobs, dict) and any(isinstance(v, int | float) for v in knobs.values()):
            refused = data.get("refused") or []
            knobs = {k: v if isinstance(v, dict) else {"delta": v, "verdict": REFUSED if k in refused else PASSED}
                     for k, v in knobs.items()}  # fmt: skip
            data = {**data, "knobs": knobs}
        return data


class ScalingPoint(_Record):
    """Throughput at a node count, its factor over the fewest nodes and its efficiency (factor / ideal)."""

    nodes: int
    baseline_samples_per_s: float | None = None
    baseline_scaling: float | None = Field(default=None, description="throughput here / at the fewest nodes")
    baseline_efficiency: float | None = Field(default=None, description="scaling / (nodes / the fewest)")
    tuned_samples_per_s: float | None = None
    tuned_scaling: float | None = None
    tuned_efficiency: float | None = None


class Outcome(Confirmation):
    """What a study decided. Its confirmation figures (flat, as stored since the first version) are the
    published config's own: 1.0x when the baseline is published, the finalist's then under `finalist`."""

    best_candidate: int | None = Field(default=None, description="the search's finalist")
    baseline_candidate: int | None = None
    chosen_candidate: int | None = Field(default=None, description="a row that measured what was published")
    decision: str | None = Field(default=None, description="what was published and why")
    ladder: list[LadderStep] | None = Field(default=None, description="baseline to finalist, knob by knob")
    quality: Quality | None = Field(default=None, description="the convergence check")
    finalist: Finalist | None = Field(
        default=None, description="the finalist's confirmation, when something else is published"
    )
    reconfirmed: Confirmation | None = Field(
        default=None, description="what was left after the ladder and the check, again"
    )
    inert: dict[str, str] | None = Field(
        default=None, description="knobs that cannot act where measured: why"
    )
    published_version: int | None = None
    scaling: list[ScalingPoint] | None = Field(
        default=None, description="published vs baseline at each node count"
    )

    @classmethod
    def load(cls, raw: Mapping[str, Any] | None) -> Outcome | None:
        """An outcome as stored by this version or an older one (None: the study has not concluded)."""
        return None if raw is None else cls.model_validate(dict(raw))

    def dump(self) -> dict[str, Any]:
        """As stored: JSON, without the fields that are not set."""
        return self.model_dump(mode="json", exclude_none=True)
