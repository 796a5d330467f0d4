"""A plain-text table of a trial result (no dependencies: the trial runs with torch only)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Cell = Callable[[dict[str, Any]], str]


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _stat(key: str, stat: str, spec: str) -> Cell:
    return lambda c: _fmt((c.get(key) or {}).get(stat), spec)


def _ok(cell: Cell) -> Cell:
    """A measurement: '-' for a candidate that failed."""
    return lambda c: cell(c) if c["status"] == "ok" else "-"


# (header, cell, right-aligned): one column each.
COLUMNS: list[tuple[str, Cell, bool]] = [
    ("#", lambda c: str(c["index"]), True),
    ("precision fwd/bwd", lambda c: f"{c['fwd_precision']}/{c['bwd_precision']}", False),
    (
        "ran as",
        _ok(lambda c: f"{c.get('effective_fwd_precision')}/{c.get('effective_bwd_precision')}"),
        False,
    ),
    ("batch", lambda c: str(c["batch_size"]), True),
    ("sharding", lambda c: c["sharding"] + (f" t{c['num_threads']}" if c.get("num_threads") else ""), False),
    ("pipeline", lambda c: c.get("pipeline") or "-", False),
    ("samples/s", lambda c: _fmt(c.get("samples_per_s"), ",.0f"), True),
    ("iter ms", _stat("iter_ms", "median", ".2f"), True),
    ("cv", _stat("iter_ms", "cv", ".1%"), True),
    ("compute", _stat("breakdown_ms", "compute", ".2f"), True),
    ("exposed", _stat("breakdown_ms", "exposed_comm", ".2f"), True),
    ("a2a ms", _stat("a2a_ms", "median", ".2f"), True),
    ("a2a MB/it", _ok(lambda c: _fmt(c["a2a_bytes_per_iter"] / 1e6, ".2f")), True),
    ("busbw GB/s", lambda c: _fmt(c.get("busbw_gbps"), ".3f"), True),
    ("q-err fwd", _stat("quant_error", "fwd_rel_l2", ".2e"), True),
    ("q-err bwd", _stat("quant_error", "bwd_rel_l2", ".2e"), True),
    ("status", lambda c: "ok" if c["status"] == "ok" else f"FAILED: {c['error']}"[:60], False),
]


def _quality(key: str, spec: str) -> Cell:
    return _ok(lambda c: _fmt(c["quality"].get(key), spec))


# A convergence check (a `quality` launch) trains and scores: its own columns.
QUALITY_COLUMNS: list[tuple[str, Cell, bool]] = [
    *COLUMNS[:2],
    ("batch", lambda c: str(c["batch_size"]), True),
    ("seed", _quality("model_seed", "d"), True),
    ("lr x", _quality("lr_scale", "g"), True),
    ("samples", _quality("train_samples", ",d"), True),
    ("log loss", _quality("logloss", ".4f"), True),
    ("AUC", _quality("auc", ".3f"), True),
    ("trained", _quality("budget_samples", ",d"), True),
    ("train s", _quality("train_s", ".1f"), True),
    COLUMNS[-1],
]


def format_table(result: dict[str, Any]) -> str:
    quality = any("quality" in c for c in result["candidates"])
    columns = QUALITY_COLUMNS if quality else COLUMNS
    rows = [[cell(c) for _, cell, _ in columns] for c in result["candidates"]]
    widths = [max(len(head), *(len(r[i]) for r in rows)) for i, (head, _, _) in enumerate(columns)]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if right else c.ljust(w)
            for c, w, (_, _, right) in zip(cells, widths, columns, strict=True)
        ).rstrip()

    title = (
        f"{result['workload']['name']}: {result['world_size']} ranks, {result['backend']} on "
        f"{result['device']}, setup {result['setup_s']:.1f} s, wall {result['wall_s']:.1f} s"
    )
    out = [title, line([head for head, _, _ in columns]), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return "\n".join(out)
