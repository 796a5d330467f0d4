"""`make gpu-check`: where there is no GPU it measures nothing and says so (exit 2); `--device cpu` runs
its whole path here (real launches, two emulated nodes, a study), the NCCL-only checks failing as they should."""

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import REPO


def gpu_check(
    *args: str, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.gpu_check", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})  # fmt: skip


def test_without_a_gpu_it_exits_2_saying_why_and_writes_no_figure(tmp_path):
    out = tmp_path / "gpu-check.json"
    proc = gpu_check("--out", str(out), timeout=120)
    assert proc.returncode == 2
    assert "no GPU here" in proc.stderr
    assert "Nothing was measured" in proc.stderr
    assert not out.exists()


def test_make_gpu_check_exits_2_on_this_machine():
    proc = subprocess.run(["make", "-s", "gpu-check"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "no GPU here" in proc.stderr


@pytest.mark.slow
def test_world_size_1_on_cpu_reports_what_needs_cuda(tmp_path):
    out = tmp_path / "gpu-check.json"
    # a device's copy of the tree has no .git: the run names the commit it was given
    proc = gpu_check("--device", "cpu", "--phases", "a", "--iterations", "2", "--out", str(out),
                     env={"AUTOTUNER_COMMIT": "0123abcd"})  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-2000:]  # semi_sync needs CUDA streams: a check fails
    report = json.loads(out.read_text())
    assert report["commit"] == "0123abcd"
    by_name = {c["check"]: c for c in report["checks"]}
    assert by_name["ran on cpu"]["ok"]
    for precision in ("fp32", "fp16", "bf16", "fp8", "int8"):
        assert by_name[f"candidate {precision} sparse_dist"]["ok"]
        semi = by_name[f"candidate {precision} semi_sync"]
        assert not semi["ok"]
        assert "needs CUDA streams" in semi["saw"]
    assert len(report["phases"]["a"]["candidates"]) == 10
    assert report["ok"] is False
    assert "needs CUDA" in by_name["CPU fp8 codec writes FBGEMM's CUDA row-wise FP8 bytes"]["saw"]
    assert "FAIL" in proc.stdout
    assert "candidate fp32 semi_sync" in proc.stdout


@pytest.mark.slow
def test_two_emulated_nodes_and_a_study_run_their_whole_path_on_cpu(tmp_path):
    out = tmp_path / "gpu-check.json"
    proc = gpu_check("--device", "cpu", "--phases", "b,c", "--sweep", "default", "--iterations", "3",
                     "--study-trials", "1", "--confirm-rounds", "2", "--work", str(tmp_path / "w"), "--out", str(out))  # fmt: skip
    report = json.loads(out.read_text())
    b, c = report["phases"]["b"], report["phases"]["c"]
    assert [r["setting"] for r in b["sweep"]] == ["default"], proc.stdout
    assert b["sweep"][0]["algbw_gbps_by_bytes"], proc.stdout
    trial = b["trials"]["default"]
    assert trial["nnodes"] == 2
    assert trial["env_per_rank"]["NCCL_HOSTID"] == ["trial-2node-default-node0", "trial-2node-default-node1"]
    assert all(r["status"] == "ok" and r["a2a_alone_ms"] > 0 for r in trial["candidates"])
    # the all-to-all-bound job's trial (at 512 here: plumbing) is the one whose wire times are checked
    bound = b["trials"]["a2a-bound"]
    assert bound["job"] == "demo-sparse-b16384, batch 512"
    assert bound["wire_checked"]
    assert all(r["status"] == "ok" and r["a2a_alone_ms"] > 0 for r in bound["candidates"])
    wire = [x["check"] for x in report["checks"] if "of the calls alone" in x["check"]]
    assert len(wire) == len(bound["candidates"])
    assert all(w.startswith("trial a2a-bound ") for w in wire)
    assert trial["candidates"][0]["wire_vs_alone"] > 0  # the demo job's: reported, not checked
    assert c["state"] == "done"
    assert c["published"]["evidence"]["emulation"].startswith("emulated 2 node(s) as hostids")
    by_name = {x["check"]: x for x in report["checks"]}
    assert not by_name["2 nodes: NCCL saw nNodes 2"]["ok"]  # gloo: NCCL never ran, and nothing says it did
    assert "gloo" in str(
        by_name["study: socket knobs searched, not inert (NCCL over sockets between 2 nodes)"]["saw"]
    )
    assert "2-node trial, default" in proc.stdout
    assert report["ok"] is False


def test_the_report_says_whether_the_nodes_went_through_cuda_mps(tmp_path, monkeypatch):
    from bench.gpu_check import cuda_mps

    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY", raising=False)
    assert cuda_mps() is False
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path))
    assert cuda_mps() is False  # a pipe directory without a server in it: not MPS
    (tmp_path / "control").touch()
    assert cuda_mps() is True


def test_a_run_names_the_commit_of_its_checkout(monkeypatch):
    from bench.gpu_check import code_commit

    monkeypatch.delenv("AUTOTUNER_COMMIT", raising=False)
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    )
    assert code_commit() == head.stdout.strip()


def test_a_cpu_run_leaves_the_committed_gpu_report_alone(tmp_path, monkeypatch):
    # bench/out/gpu-check.json is a GPU's run, committed by hand: `--device cpu` (the plumbing check the
    # README suggests) wrote over it, and the next `make bench` left the GPU section out of RESULTS.md
    from bench import gpu_check as module

    monkeypatch.setattr(module, "ROOT", tmp_path)
    module.main(["--device", "cpu", "--phases", "", "--work", str(tmp_path / "work")])
    assert not (tmp_path / "bench" / "out" / "gpu-check.json").exists()
    assert json.loads((tmp_path / "bench" / "out" / "gpu-check-cpu.json").read_text())["device"] == "cpu"
