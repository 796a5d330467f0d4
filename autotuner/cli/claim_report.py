"""A published claim in words: the ladder of knobs, the quality line, the inert knobs.

Written once, here: `autotuner tune`, `autotuner configs show` and `make demo` print them, and the
API sends them to the dashboard as they are (`claim_text`), so every front end says the claim the same
way. The terminal's fits 80 columns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field
from rich import box
from rich.console import Console
from rich.table import Table

from autotuner.cli.terminal import shown
from autotuner.tuning.confirm import KEPT_SERVED
from autotuner.tuning.outcome import KnobQuality, LadderStep, Outcome, Quality, ScalingPoint, TimeToQuality
from autotuner.tuning.stats import CONFIDENCE

GROUPS = ("precision", "batch", "pipeline", "sharding", "threads")  # a step's value, not an env variable


def times(x: float) -> str:
    return f"{x:.2f}x"


def interval(low: float, high: float) -> str:
    return f"{low:.2f}-{high:.2f}"


def step_name(step: LadderStep) -> str:
    """A step's name: its group, or for an env step the group and the variables it set, as the env is
    climbed a variable at a time ("env NSOCKS_PERTHREAD+SOCKET_NTHREADS")."""
    if step.step != "env" or not step.changed:
        return step.step
    return "env " + "+".join(name.removeprefix("NCCL_") for name in step.changed)


def gain_text(step: LadderStep) -> str:
    """A step's gain over the one before with its 95% CI, or why it has none."""
    if step.speedup_vs_previous is None or step.ci_low is None or step.ci_high is None:
        return step.verdict or "-"
    return f"{times(step.speedup_vs_previous)} [{interval(step.ci_low, step.ci_high)}]"


def to_quality_text(ttq: TimeToQuality) -> str:
    """A batch step's time to quality beside its gain: "to quality 1.18x [0.87-1.60] · not resolved"."""
    if ttq.never or ttq.speedup is None or ttq.ci_low is None or ttq.ci_high is None:
        figure = "never"
    else:
        figure = f"{times(ttq.speedup)} [{interval(ttq.ci_low, ttq.ci_high)}]"
    return f"to quality {figure} · {ttq.verdict or '-'}"


def ladder_table(ladder: Sequence[LadderStep]) -> Table:
    """One row per step from the baseline: what changed, its gain with the 95% CI, kept or not (a
    step whose CI includes 1 shows no measurable gain, and its knob is dropped). The change and the
    verdict ("inert here: not credited", "cannot run: ...") wrap: at 80 columns one was cut."""
    # pad_edge left on: without it rich sizes the table a cell wider than it draws it, and the
    # verdict's last characters were cut off ("cannot run: int" for "int8 ...")
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True,
                  title="speedup ladder (each step against the one before, interleaved)", title_justify="left")  # fmt: skip
    for col in ("step", "change", "samples/s", "gain", "95% CI", "total", ""):
        table.add_column(col, no_wrap=col not in ("change", ""), overflow="fold", min_width=16 if col == "change" else None,
                         justify="right" if col in ("samples/s", "gain", "95% CI", "total") else "left")  # fmt: skip
    for step in ladder:
        measured = step.measured
        table.add_row(
            shown(step.step),
            shown(change_text(step.changed)),
            f"{step.samples_per_s:,.0f}" if measured else "-",
            times(step.speedup_vs_previous or 0.0) if measured else "-",
            interval(step.ci_low or 0.0, step.ci_high or 0.0) if measured else "-",
            times(step.cumulative or 1.0),
            "kept" if step.kept else shown("dropped" if measured else step.verdict, "yellow"),
        )  # fmt: skip
        ttq = step.time_to_quality
        if ttq:  # a batch step: its time to quality (throughput gain x sample efficiency) beside its gain
            never = ttq.never or ttq.efficiency is None
            table.add_row(
                "",
                "to quality: never" if never else f"to quality {1 / (ttq.efficiency or 1.0) - 1:+.0%} samples",
                "-",
                "-" if never else times(ttq.speedup or 0.0),
                "-" if never else interval(ttq.ci_low or 0.0, ttq.ci_high or 0.0) + _wider(ttq.confidence),
                "",
                "kept" if ttq.verdict == "passed" else shown("dropped", "yellow"),  # why: the quality line
            )  # fmt: skip
    return table


def change_text(changed: Mapping[str, list[Any]]) -> str:
    def shown(value: Any) -> str:
        if isinstance(value, list):
            return value[0] if value[0] == value[1] else "/".join(map(str, value))
        return "unset" if value is None else str(value)

    return ", ".join(f"{shown(a)} -> {shown(b)}" if k in GROUPS
                     else f"{k.removeprefix('NCCL_')} {shown(a)} -> {shown(b)}" for k, (a, b) in changed.items())  # fmt: skip


def quality_line(quality: Quality | None) -> str:
    """The convergence check in one paragraph: the tuned config's paired log-loss delta with its 95%
    CI, then each knob's verdict (a batch change's on its time to quality)."""
    if not quality:
        return "quality: not checked"
    if quality.skipped is not None:  # and the knobs it was to judge, none of them published
        held = [f"{what}: {', '.join(knobs)}" for what, knobs in (("refused", quality.refused),
                                                                  ("not resolved", quality.unresolved)) if knobs]  # fmt: skip
        return f"quality: not checked ({quality.skipped})" + (f" -> {'; '.join(held)}" if held else "")
    if quality.ci_low is None:  # evidence published before the check had seeds and intervals
        return _single_seed_line(quality)
    q, cost = quality, quality.cost_s
    facts = [f"{q.k} paired model seeds", f"baseline {q.baseline_logloss:.4f} ± {q.seed_spread:.4f} (seed spread)",
             f"AUC {q.tuned_auc:.3f} vs {q.baseline_auc:.3f}", f"{q.samples:,} samples, {q.data}",
             *([f"quality launch {cost:.0f} s"] if cost else [])]  # fmt: skip
    verdicts = "; ".join(knob_verdict(k, v, q) for k, v in q.knobs.items())
    return (f"quality: tuned {_costs(q)} log loss at equal samples: {_verdict(q, q)} "
            f"({'; '.join(facts)}) -> {verdicts}")  # fmt: skip


def _costs(f: Quality | KnobQuality) -> str:
    return f"costs {f.delta:+.4f} [{f.ci_low:+.4f}, {f.ci_high:+.4f}{level(f.confidence)}]"


def _wider(confidence: float | None) -> str:
    """In the ladder's 95% CI column, an interval at another level says its own."""
    return f" ({confidence:.1%})" if level(confidence) else ""


def level(confidence: float | None) -> str:
    """ ", 98.3%: the best of 3 learning-rate rules" for an interval wider than 95% because the best of
    several was taken (stats.family_confidence); nothing for a plain 95% one."""
    if confidence is None or confidence <= CONFIDENCE + 1e-9:
        return ""
    rules = round((1 - CONFIDENCE) / (1 - confidence))
    return f", {confidence:.1%}: the best of {rules} learning-rate rules"


def _verdict(f: Quality | KnobQuality, quality: Quality) -> str:
    limit, k = quality.max_logloss_delta, quality.k
    if f.verdict == "not resolved":
        more = f" (k={f.k_to_resolve} would resolve it)" if f.k_to_resolve else ""
        return f"not resolved at k={k}{more}"
    if f.verdict != "refused":
        return f"passed (within {limit:g})"
    if f.ci_low is not None and limit is not None and f.ci_low > limit:
        return f"refused (more than {limit:g})"
    # Refused on a narrow interval that reaches past the limit (stats.Delta.verdict): its cost is not
    # shown to exceed it, and it cannot be shown within it either.
    return f"refused (not shown within {limit:g}, on an interval narrower than that)"


def knob_verdict(knob: str, figures: KnobQuality, quality: Quality) -> str:
    """One knob's verdict: on its time to quality for a batch change with one, else its paired delta;
    for a knob that passed alone but is not published, why (quality.untrained_mix)."""
    ttq = quality.time_to_quality if knob == "batch" else None
    if ttq and ttq.verdict:
        shown, alone = time_to_quality_text(ttq), ttq.verdict
    else:
        shown, alone = _costs(figures), _verdict(figures, quality)
    left_out = quality.refused + quality.unresolved
    if knob not in left_out or figures.verdict != "passed":
        return f"{knob}: {shown}: {alone}"
    passed = [k for k, f in quality.knobs.items() if k != knob and f.verdict == "passed"]
    if len(passed) == len(quality.knobs) - 1:  # each passed alone: the mix of all of them did not
        together = "refused" if knob in quality.refused else "not resolved"
        return f"{knob}: {shown}: passed alone, {together} together with {', '.join(passed)}"
    kept = [k for k in passed if k not in left_out]
    return f"{knob}: {shown}: passed alone, but never trained with {', '.join(kept) or 'the others'}: not resolved"


def time_to_quality_text(ttq: TimeToQuality) -> str:
    """ "1.33x samples/s x 0.95 sample efficiency = 1.26x time to quality [0.90-1.77]" (lr rule named
    when it is not the job's learning rate)."""
    lr = f", lr {ttq.lr_scaling}" if ttq.lr_scaling not in (None, "none") else ""
    if ttq.never or ttq.efficiency is None:
        return f"never reached the baseline's log loss within {ttq.trained_samples:,} samples{lr}"
    gain = ttq.throughput_gain.ratio if ttq.throughput_gain else None
    head = f"{gain:.2f}x samples/s, " if gain else ""
    return (f"{head}{1 / ttq.efficiency:.2f}x the samples to the baseline's log loss: {ttq.speedup:.2f}x "
            f"time to quality [{ttq.ci_low:.2f}-{ttq.ci_high:.2f}{level(ttq.confidence)}]{lr}")  # fmt: skip


def _single_seed_line(q: Quality) -> str:
    limit = q.max_logloss_delta
    verdict = (
        f"refused: {', '.join(q.refused)} (costs more than {limit:g})"
        if q.refused
        else f"within {limit:g}: kept"
    )
    return (f"quality: log loss {q.tuned_logloss:.4f} vs {q.baseline_logloss:.4f} "
            f"(delta {q.delta:+.4f}, another model seed moves it {q.seed_noise:.4f}; "
            f"AUC {q.tuned_auc:.3f} vs {q.baseline_auc:.3f}; {q.samples:,} samples, {q.data}) -> {verdict}")  # fmt: skip


def inert_lines(inert: Mapping[str, str] | None, forced: Sequence[str] = ()) -> list[str]:
    """Each knob that cannot act here, grouped by why; those a space forces in are searched anyway."""
    by_reason: dict[str, list[str]] = {}
    for name, why in (inert or {}).items():
        by_reason.setdefault(why, []).append(name + (" (searched: force_inert)" if name in forced else ""))
    return [
        f"inert here, never exported ({why}): {', '.join(sorted(names))}" for why, names in by_reason.items()
    ]


# ------------------------------------------------------------------------------ the studies listing
# In the dashboard's words (api/static/app.js: renderStudies, speedupCell, finalistText).

BASELINE_KEPT = "baseline kept"
ERROR_SHOWN = 60  # characters of a failed study's error the listing shows, as the dashboard's


def kept_baseline(outcome: Outcome) -> bool:
    """The study published the baseline itself: its 1.00x is the published config's, not best / baseline."""
    return outcome.chosen_candidate is not None and outcome.chosen_candidate == outcome.baseline_candidate


def kept_served(state: str, settings: Any, outcome: Outcome) -> bool:
    """The study ended publishing nothing though asked to (a phase could not be measured): the config
    served before, if any, stays. Its outcome names the baseline as chosen, which is not served
    (api/static/app.js: keptServed)."""
    publish = settings.get("publish", True) if isinstance(settings, dict) else True
    return (state == "done" and publish is not False and outcome.published_version is None
            and (outcome.decision or "").endswith(KEPT_SERVED))  # fmt: skip


def finalist_text(outcome: Outcome) -> str | None:
    """ "1.16x [0.30-4.42] (95% CI)": the finalist's own confirmation, when the baseline was kept over it."""
    f = outcome.finalist
    if f is None or f.speedup is None:
        return None
    if f.ci_low is None or f.ci_high is None:
        return times(f.speedup)
    return f"{times(f.speedup)} [{interval(f.ci_low, f.ci_high)}] (95% CI)"


def short(text: str, n: int = ERROR_SHOWN) -> str:
    """A stored error cut to `n` characters, as the dashboard's listing cuts it."""
    return text if len(text) <= n else text[: n - 1] + "…"


def confirmed_line(outcome: Outcome) -> str | None:
    """The published config's own confirmation, when it has an interval."""
    if outcome.speedup is None or outcome.ci_low is None or outcome.ci_high is None:
        return None
    return (f"confirmed speedup {times(outcome.speedup)} (95% CI {interval(outcome.ci_low, outcome.ci_high)}, "
            f"{outcome.rounds} interleaved rounds)")  # fmt: skip


# ------------------------------------------------------------------------------ to a front end


class StepText(BaseModel):
    """A ladder step in words."""

    step: str
    name: str = Field(description='the group, or an env step\'s variables: "batch", "env BUFFSIZE"')
    change: str = Field(description='what changed, e.g. "512 -> 1024", "NSOCKS_PERTHREAD unset -> 4"')
    label: list[str] = Field(
        description="its gain with the 95% CI (and dropped), then a batch step's time to quality"
    )
    line: str = Field(description='one line: "batch 1.24x [1.14-1.34]" (and "(dropped)")')


class ClaimText(BaseModel):
    """The claim's sentences as the terminal prints them, for a page to show as they are."""

    ladder: list[StepText] = Field(default_factory=list)
    quality: str | None = Field(
        default=None, description="the convergence check's line (null: no ladder and no check)"
    )
    inert: list[str] = Field(default_factory=list, description="the knobs that cannot act here, by reason")


def claim_text(
    ladder: Sequence[LadderStep],
    quality: Quality | None,
    inert: Mapping[str, str] | None,
    forced: Sequence[str] = (),
) -> ClaimText:
    """The ladder's, the quality's and the inert knobs' words; the quality line only where there is a
    ladder or a check to speak of."""
    steps = [
        StepText(step=s.step, name=step_name(s), change=change_text(s.changed),
                 line=f"{step_name(s)} {gain_text(s)}" + ("" if s.kept else " (dropped)"),
                 label=[gain_text(s) + ("" if s.kept else " · dropped"),
                        *([to_quality_text(s.time_to_quality)] if s.time_to_quality else [])])
        for s in ladder
    ]  # fmt: skip
    said = quality_line(quality) if ladder or quality else None
    return ClaimText(ladder=steps, quality=said, inert=inert_lines(inert, forced))


def print_claim(console: Console, ladder: Sequence[LadderStep], text: ClaimText) -> None:
    """The ladder, the quality line and the knobs that could not act: what the claim rests on."""
    if ladder:
        console.print(ladder_table(ladder))
    for line in ([text.quality] if text.quality else []) + text.inert:
        console.print(shown(line), highlight=False)


def scaling_table(curve: Sequence[ScalingPoint]) -> Table:
    """Throughput, scaling factor and efficiency at each node count, baseline and tuned."""
    # pad_edge left on: without it rich sizes the table a cell wider than it draws it, and the
    # verdict's last characters were cut off ("cannot run: int" for "int8 ...")
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True,
                  title="scaling (throughput at N nodes / at the fewest; efficiency: / the ideal)", title_justify="left")  # fmt: skip
    for col in ("nodes", "baseline samples/s", "factor", "eff.", "tuned samples/s", "factor", "eff."):
        table.add_column(col, justify="right", no_wrap=True)

    def cells(point: ScalingPoint, role: str) -> list[str]:
        value, factor, eff = (
            getattr(point, f"{role}_{k}") for k in ("samples_per_s", "scaling", "efficiency")
        )
        return [
            f"{value:,.0f}" if value else "-",
            times(factor) if factor else "-",
            f"{eff:.0%}" if eff else "-",
        ]

    for point in curve:
        table.add_row(str(point.nodes), *cells(point, "baseline"), *cells(point, "tuned"))
    return table


def evidence_claim(evidence: Mapping[str, Any] | None) -> tuple[list[LadderStep], ClaimText]:
    """A published config's claim, from its evidence (the ladder, quality and inert knobs it was
    published with, in the outcome's types)."""
    ev = evidence or {}
    ladder = [LadderStep.model_validate(step) for step in ev.get("ladder") or []]
    quality = Quality.model_validate(ev["quality"]) if ev.get("quality") else None
    return ladder, claim_text(ladder, quality, ev.get("inert"))
