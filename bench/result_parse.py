"""What reading a trial's result costs the tuner in memory: each case parsed in a fresh process, its
peak resident memory growth against the file's size. The baseline is `json.loads` alone in the same run;
the product's `parse_result` adds its checks and cleaning (done in place: a copy held the result twice),
and refuses a file of more objects and lists than a trial writes before parsing it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

CASES = {
    # a real shape: each candidate's all-to-all call log, one per rank, with its splits (ranks squared)
    "a trial's result, 192 ranks, 15 candidates": "real",
    "64 MiB of numbers (1.5,1.5,...)": "numbers",
    "64 MiB of empty objects ({},{},...)": "objects",
}
SIZE = 64 << 20
MEASURE = r"""
import json, resource, sys
from autotuner.executors.results import ResultError, parse_result
data = open(sys.argv[1], "rb").read()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
outcome = "parsed"
if sys.argv[2] == "json.loads":
    json.loads(data)
else:
    try:
        parse_result(data)
    except ResultError as exc:
        outcome = "refused: " + str(exc).split(" (")[0][:70]
print(json.dumps({"growth_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before, "outcome": outcome}))
"""


def _real() -> bytes:
    ranks = 192
    calls = [{"dtype": "float32", "in_numel": 4096, "out_numel": 4096, "in_splits": [16] * ranks,
              "out_splits": [16] * ranks} for _ in range(5)]  # fmt: skip
    result = json.loads(
        (Path(__file__).parent.parent / "tests" / "data" / "trial-result-dlrm.json").read_text()
    )
    one = result["candidates"][0]
    result["world_size"] = ranks
    result["candidates"] = [{**one, "index": i, "a2a_calls_by_rank": [calls] * ranks} for i in range(15)]
    return json.dumps(result).encode()


def _filler(piece: bytes) -> bytes:
    body = piece * (SIZE // len(piece))
    return b'{"schema_version": 1, "status": "ok", "x": [' + body[:-1] + b"]}"


def _data(kind: str) -> bytes:
    return _real() if kind == "real" else _filler(b"1.5," if kind == "numbers" else b"{},")


def _measure(path: Path, how: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", MEASURE, str(path), how], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).parent.parent)  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def run() -> dict[str, Any]:
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="bench-results-"))  # inside the bench's scratch folder
    try:
        for label, kind in CASES.items():
            path = tmp / f"{kind}.json"
            path.write_bytes(_data(kind))
            size = path.stat().st_size
            loads, product = _measure(path, "json.loads"), _measure(path, "parse_result")
            rows.append({"case": label, "bytes": size, "json_loads_x": loads["growth_kib"] * 1024 / size,
                         "parse_result_x": product["growth_kib"] * 1024 / size, "outcome": product["outcome"],
                         "ratio_vs_json_loads": product["growth_kib"] / max(1, loads["growth_kib"])})  # fmt: skip
            path.unlink()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"rows": rows}
