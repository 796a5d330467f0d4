"""A plain-text table of a trial result (no dependencies: the trial runs with torch only)."""

from __future__ import annotations

from typing import Any


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_table(result: dict[str, Any]) -> str:
    head = [
        "#",
        "precision fwd/bwd",
        "ran as",
        "batch",
        "sharding",
        "pipeline",
        "samples/s",
        "iter ms",
        "cv",
        "compute",
        "exposed",
        "a2a ms",
        "a2a MB/it",
        "busbw GB/s",
        "q-err fwd",
        "q-err bwd",
        "status",
    ]
    rows = []
    for c in result["candidates"]:
        ok = c["status"] == "ok"
        ran = f"{c.get('effective_fwd_precision')}/{c.get('effective_bwd_precision')}" if ok else "-"
        qe = c.get("quant_error") or {}
        rows.append(
            [
                str(c["index"]),
                f"{c['fwd_precision']}/{c['bwd_precision']}",
                ran,
                str(c["batch_size"]),
                c["sharding"] + (f" t{c['num_threads']}" if c.get("num_threads") else ""),
                c.get("pipeline") or "-",
                _fmt(c.get("samples_per_s"), ",.0f"),
                _fmt((c.get("iter_ms") or {}).get("median"), ".2f"),
                _fmt((c.get("iter_ms") or {}).get("cv"), ".1%"),
                _fmt((c.get("breakdown_ms") or {}).get("compute"), ".2f"),
                _fmt((c.get("breakdown_ms") or {}).get("exposed_comm"), ".2f"),
                _fmt((c.get("a2a_ms") or {}).get("median"), ".2f"),
                _fmt(c["a2a_bytes_per_iter"] / 1e6 if ok else None, ".2f"),
                _fmt(c.get("busbw_gbps"), ".3f"),
                _fmt(qe.get("fwd_rel_l2"), ".2e"),
                _fmt(qe.get("bwd_rel_l2"), ".2e"),
                "ok" if ok else f"FAILED: {c['error']}"[:60],
            ]
        )
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    numeric = {0, 3, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in numeric else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    title = (
        f"{result['workload']['name']}: {result['world_size']} ranks, {result['backend']} on "
        f"{result['device']}, setup {result['setup_s']:.1f} s, wall {result['wall_s']:.1f} s"
    )
    out = [title, line(head), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return "\n".join(out)
