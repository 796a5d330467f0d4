"""A published claim in the terminal: the ladder of knobs, the quality line, the inert knobs.

Shared by `autotuner tune`, `autotuner configs show` and `make demo`, so all three say it the same
way. Fits 80 columns.
"""

from __future__ import annotations

from typing import Any

from rich import box
from rich.table import Table


def ladder_table(ladder: list[dict[str, Any]]) -> Table:
    """One row per step from the baseline: what changed, its gain with the 95% CI, kept or not (a
    step whose CI includes 1 shows no measurable gain, and its knob is dropped)."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True,
                  title="speedup ladder (each step against the one before, interleaved)", title_justify="left")  # fmt: skip
    for col in ("step", "change", "samples/s", "gain", "95% CI", "total", ""):
        table.add_column(col, no_wrap=col != "change", overflow="fold", min_width=22 if col == "change" else None,
                         justify="right" if col in ("samples/s", "gain", "95% CI", "total") else "left")  # fmt: skip
    for step in ladder:
        measured = "ci_low" in step
        table.add_row(
            step["step"],
            change_text(step["changed"]),
            f"{step['samples_per_s']:,.0f}" if measured else "-",
            f"{step['speedup_vs_previous']:.2f}x" if measured else "-",
            f"{step['ci_low']:.2f}-{step['ci_high']:.2f}" if measured else "-",
            f"{step['cumulative']:.2f}x",
            "kept"
            if step["kept"]
            else "[yellow]dropped[/yellow]"
            if measured
            else f"[yellow]{step['verdict']}[/yellow]",
        )
        ttq = step.get("time_to_quality")
        if ttq:  # a batch step: its time to quality (throughput gain x sample efficiency) beside its gain
            never = ttq.get("never")
            table.add_row(
                "",
                "to quality: never" if never else f"to quality {1 / ttq['efficiency'] - 1:+.0%} samples",
                "-",
                "-" if never else f"{ttq['speedup']:.2f}x",
                "-" if never else f"{ttq['ci_low']:.2f}-{ttq['ci_high']:.2f}",
                "",
                "kept" if ttq.get("verdict") == "passed" else "[yellow]dropped[/yellow]",  # why: the quality line
            )  # fmt: skip
    return table


def change_text(changed: dict[str, list[Any]]) -> str:
    def shown(value: Any) -> str:
        if isinstance(value, list):
            return value[0] if value[0] == value[1] else "/".join(map(str, value))
        return "unset" if value is None else str(value)

    return ", ".join(f"{shown(a)} -> {shown(b)}" if k in ("precision", "batch", "pipeline", "sharding", "threads")
                     else f"{k.removeprefix('NCCL_')} {shown(a)} -> {shown(b)}" for k, (a, b) in changed.items())  # fmt: skip


def quality_line(quality: dict[str, Any] | None) -> str:
    """The convergence check in one paragraph: the tuned config's paired log-loss delta with its 95%
    CI, then each knob's verdict (a batch change's on its time to quality)."""
    if not quality:
        return "quality: not checked"
    if "skipped" in quality:
        return f"quality: not checked ({quality['skipped']})"
    if "ci_low" not in quality:  # evidence published before the check had seeds and intervals
        return _single_seed_line(quality)
    limit = quality["max_logloss_delta"]
    cost = quality.get("cost_s")
    facts = [f"{quality['k']} paired model seeds", f"baseline {quality['baseline_logloss']:.4f} ± "
             f"{quality['seed_spread']:.4f} (seed spread)", f"AUC {quality['tuned_auc']:.3f} vs {quality['baseline_auc']:.3f}",
             f"{quality['samples']:,} samples, {quality['data']}", *([f"quality launch {cost:.0f} s"] if cost else [])]  # fmt: skip
    verdicts = "; ".join(knob_verdict(k, v, quality) for k, v in quality["knobs"].items())
    return (f"quality: tuned {_costs(quality)} log loss at equal samples: {_verdict(quality, limit, quality['k'])} "
            f"({'; '.join(facts)}) -> {verdicts}")  # fmt: skip


def _costs(f: dict[str, Any]) -> str:
    return f"costs {f['delta']:+.4f} [{f['ci_low']:+.4f}, {f['ci_high']:+.4f}]"


def _verdict(f: dict[str, Any], limit: float, k: int) -> str:
    verdict = f["verdict"]
    if verdict == "not resolved":
        more = f" (k={f['k_to_resolve']} would resolve it)" if f.get("k_to_resolve") else ""
        return f"not resolved at k={k}{more}"
    return f"refused (more than {limit:g})" if verdict == "refused" else f"passed (within {limit:g})"


def knob_verdict(knob: str, figures: dict[str, Any], quality: dict[str, Any]) -> str:
    """One knob's verdict: on its time to quality for a batch change with one, else its paired delta."""
    ttq = quality.get("time_to_quality") if knob == "batch" else None
    if ttq and "verdict" in ttq:
        return f"{knob}: {time_to_quality_text(ttq)}: {ttq['verdict']}"
    return f"{knob}: {_costs(figures)}: {_verdict(figures, quality['max_logloss_delta'], quality['k'])}"


def time_to_quality_text(ttq: dict[str, Any]) -> str:
    """ "1.33x samples/s x 0.95 sample efficiency = 1.26x time to quality [0.90-1.77]" (lr rule named
    when it is not the job's learning rate)."""
    lr = f", lr {ttq['lr_scaling']}" if ttq.get("lr_scaling") not in (None, "none") else ""
    if ttq.get("never"):
        return f"never reached the baseline's log loss within {ttq['trained_samples']:,} samples{lr}"
    gain = (ttq.get("throughput_gain") or {}).get("ratio")
    head = f"{gain:.2f}x samples/s, " if gain else ""
    return (f"{head}{1 / ttq['efficiency']:.2f}x the samples to the baseline's log loss: {ttq['speedup']:.2f}x "
            f"time to quality [{ttq['ci_low']:.2f}-{ttq['ci_high']:.2f}]{lr}")  # fmt: skip


def _single_seed_line(quality: dict[str, Any]) -> str:
    verdict = (f"refused: {', '.join(quality['refused'])} (costs more than {quality['max_logloss_delta']:g})"
               if quality["refused"] else f"within {quality['max_logloss_delta']:g}: kept")  # fmt: skip
    return (f"quality: log loss {quality['tuned_logloss']:.4f} vs {quality['baseline_logloss']:.4f} "
            f"(delta {quality['delta']:+.4f}, another model seed moves it {quality['seed_noise']:.4f}; "
            f"AUC {quality['tuned_auc']:.3f} vs {quality['baseline_auc']:.3f}; {quality['samples']:,} samples, "
            f"{quality['data']}) -> {verdict}")  # fmt: skip


def inert_lines(inert: dict[str, str] | None, forced: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Each knob that cannot act here, grouped by why; those a space forces in are searched anyway."""
    by_reason: dict[str, list[str]] = {}
    for name, why in (inert or {}).items():
        by_reason.setdefault(why, []).append(name + (" (searched: force_inert)" if name in forced else ""))
    return [
        f"inert here, never exported ({why}): {', '.join(sorted(names))}" for why, names in by_reason.items()
    ]


def scaling_table(curve: list[dict[str, Any]]) -> Table:
    """Throughput, scaling factor and efficiency at each node count, baseline and tuned."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True,
                  title="scaling (throughput at N nodes / at the fewest; efficiency: / the ideal)", title_justify="left")  # fmt: skip
    for col in ("nodes", "baseline samples/s", "factor", "eff.", "tuned samples/s", "factor", "eff."):
        table.add_column(col, justify="right", no_wrap=True)

    def cells(point: dict[str, Any], role: str) -> list[str]:
        value, factor, eff = (point.get(f"{role}_{k}") for k in ("samples_per_s", "scaling", "efficiency"))
        return [
            f"{value:,.0f}" if value else "-",
            f"{factor:.2f}x" if factor else "-",
            f"{eff:.0%}" if eff else "-",
        ]

    for point in curve:
        table.add_row(str(point["nodes"]), *cells(point, "baseline"), *cells(point, "tuned"))
    return table
