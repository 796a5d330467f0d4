"""What the convergence check's cap counts (trials.spec.quality_bytes) is what building its samples
holds at its most: a rank past the cap is refused up front (exit 2), and one within it is not killed
by the kernel mid-build for holding three times what was counted (the teacher's lookups, gathered for
every sample at once, and the ids' uniforms)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import trials.convergence as convergence
from trials.convergence import ID_SKEW, LOGIT_STD, SPARSE_SHARE, TEACHER_SEED, Samples, teacher_samples
from trials.spec import TEACHER_CHUNK_LOOKUPS, TEACHER_DIM, WorkloadSpec, parse_workload

ROOT = Path(__file__).resolve().parents[2]

# The peak is VmHWM, this process's own: getrusage's ru_maxrss carries the parent's across exec on Linux
# (a pytest that grew to 2 GiB read as no growth at all).
PROBE = """
import json, re, sys
from trials.spec import parse_workload, quality_bytes
from trials.convergence import teacher_samples
def hwm():
    with open("/proc/self/status") as status:
        return int(re.search(r"VmHWM:\\s+(\\d+) kB", status.read()).group(1)) * 1024
pf, n = int(sys.argv[1]), int(sys.argv[2])
w = parse_workload({"name": "w", "tables": [{"name": "t0", "num_embeddings": 1000, "embedding_dim": 16,
                    "pooling_factor": pf}], "dense": {"in_features": 3, "arch": [16], "over_arch": [1]}})
teacher_samples(w, 1000, seed=0)  # torch's own first-use allocations, not the samples'
base = hwm()
samples = teacher_samples(w, n, seed=0)
peak = hwm()
print(json.dumps({"grew": peak - base, "counted": quality_bytes(w, n, 0, 1)}))
"""


def peak_of(pooling: int, n: int) -> dict[str, int]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(pooling), str(n)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_building_the_samples_holds_no_more_than_the_cap_counts():
    """16 lookups a sample, 1.5M samples: about 210 MiB counted; built in one go it peaked near 600."""
    got = peak_of(16, 1_500_000)
    assert got["grew"] > got["counted"] // 2, got  # the probe sees the samples at all
    assert got["grew"] <= got["counted"], got


def test_one_lookup_a_sample_holds_no_more_than_the_cap_counts():
    """One lookup a sample: the per-sample vectors (pooled rows, logit parts, label) dominate."""
    got = peak_of(1, 6_000_000)
    assert got["grew"] > got["counted"] // 2, got
    assert got["grew"] <= got["counted"], got


def test_built_in_chunks_the_samples_are_those_built_in_one_go():
    """A guard, not the fix's proof (it holds on the one-go code too): stored quality results are
    compared across launches, so chunking must not move a single draw. The reference is the one-go
    build, inline; 100,003 samples of 9 lookups are several chunks, the last a partial one."""
    workload = parse_workload(
        {
            "name": "w",
            "dense": {"in_features": 13, "arch": [16], "over_arch": [1]},
            "tables": [
                {"name": "a", "num_embeddings": 5000, "embedding_dim": 16, "pooling_factor": 8},
                {"name": "b", "num_embeddings": 300, "embedding_dim": 16, "pooling_factor": 1},
            ],
        }  # fmt: skip
    )
    assert 100_003 * 9 > 3 * TEACHER_CHUNK_LOOKUPS
    got, want = teacher_samples(workload, 100_003, seed=42), one_go(workload, 100_003, seed=42)
    for a, b in zip([*got.ids, got.dense, got.labels], [*want.ids, want.dense, want.labels], strict=True):
        assert a.dtype == b.dtype
        assert torch.equal(a, b)


@pytest.mark.parametrize(("pooling", "n"), [((1,), 1), ((3,), 2), ((5, 1), 11), ((9,), 4), ((2, 20), 13)])
def test_in_chunks_smaller_than_a_sample_the_samples_are_those_built_in_one_go(monkeypatch, pooling, n):
    """Chunks of 7 lookups: partial chunks, and samples wider than a chunk (one sample a chunk)."""
    monkeypatch.setattr(convergence, "TEACHER_CHUNK", 7)
    tables = [{"name": f"t{i}", "num_embeddings": 50 + i, "embedding_dim": 16, "pooling_factor": pf}
              for i, pf in enumerate(pooling)]  # fmt: skip
    workload = parse_workload(
        {"name": "w", "tables": tables, "dense": {"in_features": 3, "arch": [16], "over_arch": [1]}}
    )
    got, want = teacher_samples(workload, n, seed=9), one_go(workload, n, seed=9)
    for a, b in zip([*got.ids, got.dense, got.labels], [*want.ids, want.dense, want.labels], strict=True):
        assert torch.equal(a, b)


def one_go(workload: WorkloadSpec, n: int, seed: int) -> Samples:
    """teacher_samples as it was before it was chunked."""
    assert workload.dense is not None
    teacher = torch.Generator().manual_seed(TEACHER_SEED)
    tables = [torch.randn(t.num_embeddings, TEACHER_DIM, generator=teacher) for t in workload.tables]
    w_sparse = torch.randn(len(tables), TEACHER_DIM, generator=teacher)
    w_dense = torch.randn(workload.dense.in_features, generator=teacher)
    gen = torch.Generator().manual_seed(seed)
    ids = [
        (t.num_embeddings * torch.rand(n, t.pooling_factor, generator=gen) ** ID_SKEW).long()
        for t in workload.tables
    ]
    dense = torch.randn(n, workload.dense.in_features, generator=gen)
    pooled = torch.stack([table[i].mean(dim=1) for table, i in zip(tables, ids, strict=True)], dim=1)
    sparse, dense_part = (pooled * w_sparse).sum(dim=(1, 2)), dense @ w_dense
    logit = SPARSE_SHARE * unit(sparse) + (1 - SPARSE_SHARE) * unit(dense_part)
    logit = LOGIT_STD * unit(logit)
    return Samples(ids, dense, torch.bernoulli(torch.sigmoid(logit), generator=gen))


def unit(x: torch.Tensor) -> torch.Tensor:
    std = x.std() if x.numel() > 1 else None
    return x / std if std is not None and bool(std > 0) else x
