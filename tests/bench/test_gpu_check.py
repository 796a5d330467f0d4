"""The prepared GPU check runs its whole path here on CPU: one real launch, the report, the checks."""

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_gpu_check_on_cpu_reports_what_needs_cuda(tmp_path):
    out = tmp_path / "gpu-check.json"
    proc = subprocess.run([sys.executable, "-m", "bench.gpu_check", "--device", "cpu", "--iterations", "2",
                           "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-2000:]  # semi_sync needs CUDA streams: a check fails
    report = json.loads(out.read_text())
    by_name = {c["check"]: c for c in report["checks"]}
    assert by_name["ran on cpu"]["ok"]
    for precision in ("fp32", "fp16", "bf16", "fp8", "int8"):
        assert by_name[f"candidate {precision} sparse_dist"]["ok"]
        semi = by_name[f"candidate {precision} semi_sync"]
        assert not semi["ok"] and "need CUDA" in semi["saw"]
    assert len(report["candidates"]) == 10 and report["ok"] is False
    assert "FAIL candidate fp32 semi_sync" in proc.stdout
