"""`make bench`: measure the product against its baselines and write bench/RESULTS.md (+ results.json).

    python -m bench.run [--only trial,noise,fidelity,training-fidelity,search,planning,planning-wide,tuned,quality,serving,store,results,revalidate,scaling,scaling-emulated] [--keep]

Every figure is a ratio against a baseline measured in the same run (this machine is shared and
noisy); absolute numbers are context. With --only, the other sections keep their last results.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from rich.console import Console

from bench.scratch import scratch

ROOT = Path(__file__).resolve().parent.parent
RESULTS_JSON = ROOT / "bench" / "results.json"
RESULTS_MD = ROOT / "bench" / "RESULTS.md"
# `make gpu-check` where a GPU was lent (committed by hand): its section stays in RESULTS.md
GPU_REPORT = ROOT / "bench" / "out" / "gpu-check.json"


def gpu_report() -> dict | None:
    try:
        report = json.loads(GPU_REPORT.read_text())
    except (OSError, ValueError):
        return None
    return report if "runs" in report else None  # a single `make gpu-check` report is not a committed one


README = ROOT / "README.md"
console = Console(stderr=True)


def _trial() -> dict[str, Any]:
    from bench import trials

    return trials.efficiency()


def _noise() -> dict[str, Any]:
    from bench import trials

    return trials.noise()


def _fidelity() -> dict[str, Any]:
    from bench import trials

    out = {"unshaped": trials.fidelity(None)}
    if os.geteuid() == 0:
        out["1gbit"] = trials.fidelity("1gbit")
    return out


def _training_fidelity() -> dict[str, Any]:
    from bench import training

    out = {"unshaped": training.fidelity(None)}
    if os.geteuid() == 0:
        out["1gbit"] = training.fidelity("1gbit")
    return out


def _search() -> dict[str, Any]:
    from bench import search

    return search.run()


def _planning() -> dict[str, Any]:
    from bench import planning

    return planning.run()


def _planning_wide() -> dict[str, Any]:
    from bench import planning

    return planning.wide(launches=3)  # the engine before this bound takes ~18 min of it


def _tuned() -> dict[str, Any]:
    from bench import tuned

    fabrics = (None, "2gbit", "1gbit") if os.geteuid() == 0 else (None,)
    return tuned.run(fabrics)


def _quality() -> dict[str, Any]:
    from bench import quality

    return quality.run()


def _serving() -> dict[str, Any]:
    from bench import serving

    return {"10": serving.run(10, 64, 9, 20), "10000": serving.run(10, 64, 9999, 10)}


def _store() -> dict[str, Any]:
    from bench import store_scale

    return store_scale.run()


def _revalidate() -> dict[str, Any]:
    from bench import revalidate

    return revalidate.run()


def _scaling_emulated() -> dict[str, Any]:
    from bench import scaling

    return scaling.run()


def _scaling() -> dict[str, Any]:
    from bench import trials

    return trials.cost_scaling()


def _results() -> dict[str, Any]:
    from bench import result_parse

    return result_parse.run()


SECTIONS = {"trial": _trial, "noise": _noise, "fidelity": _fidelity, "training-fidelity": _training_fidelity,
            "search": _search, "planning": _planning, "planning-wide": _planning_wide, "tuned": _tuned, "quality": _quality, "serving": _serving,
            "store": _store, "results": _results, "revalidate": _revalidate, "scaling": _scaling, "scaling-emulated": _scaling_emulated}  # fmt: skip


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))  # fmt: skip
    except (OSError, StopIteration):
        pass
    versions = {}
    for dist in ("torch", "torchrec", "fbgemm-gpu-cpu", "optuna", "fastapi", "SQLAlchemy"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "versions": versions, "load_at_start": os.getloadavg()}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.run", description=__doc__.splitlines()[0])
    p.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections")
    p.add_argument("--keep", action="store_true", help="keep the stores and runs the sections made")
    args = p.parse_args(argv)
    wanted = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in wanted if s not in SECTIONS]
    if unknown:
        p.error(f"unknown section(s) {unknown}; choose from {', '.join(SECTIONS)}")
    results = json.loads(RESULTS_JSON.read_text()) if RESULTS_JSON.exists() else {"sections": {}}
    started = time.monotonic()
    with scratch(args.keep):
        for name in wanted:
            t0 = time.monotonic()
            console.print(f"[bold]{name}[/bold] ...")
            results["sections"][name] = {**SECTIONS[name](), "seconds": time.monotonic() - t0,
                                         "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}  # fmt: skip
            console.print(f"  {name}: {time.monotonic() - t0:.0f} s")
            RESULTS_JSON.write_text(
                json.dumps(results, indent=2) + "\n"
            )  # what is done, if a later one fails
    results["machine"] = machine()
    results.pop("total_seconds", None)  # the report sums the sections' own times instead
    RESULTS_JSON.write_text(json.dumps(results, indent=2) + "\n")
    from bench.report import render, splice_headline

    RESULTS_MD.write_text(render(results, gpu_report()))
    README.write_text(splice_headline(README.read_text(), results))
    console.print(f"wrote {RESULTS_MD.relative_to(ROOT)}, {RESULTS_JSON.relative_to(ROOT)} and the README "
                  f"headline in {(time.monotonic() - started) / 60:.1f} min")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
