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
    return table


def change_text(changed: dict[str, list[Any]]) -> str:
    def shown(value: Any) -> str:
        if isinstance(value, list):
            return value[0] if value[0] == value[1] else "/".join(map(str, value))
        return "unset" if value is None else str(value)

    return ", ".join(f"{shown(a)} -> {shown(b)}" if k in ("precision", "batch", "pipeline", "sharding", "threads")
                     else f"{k.removeprefix('NCCL_')} {shown(a)} -> {shown(b)}" for k, (a, b) in changed.items())  # fmt: skip


def quality_line(quality: dict[str, Any] | None) -> str:
    if not quality:
        return "quality: not checked"
    if "skipped" in quality:
        return f"quality: not checked ({quality['skipped']})"
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
