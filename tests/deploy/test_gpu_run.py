"""deploy/gpu: the lent GPU machine's run (run-on-lent-gpu.sh) and its payload. The run must work the
first time and leave room for a rerun in the 15 minutes: a hard limit on the Python run, nothing of it
left running afterwards, every module phases a-c import checked before the minutes are spent, and the
payload counted as the device tool counts it (the tree it copies and .gpu together)."""

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from autotuner.executors.local.executor import carrying
from tests.helpers import REPO, kill_carrying

GPU = REPO / "deploy" / "gpu"
MARK = "GPU_RUN_TEST_MARK"
# A stand-in for `python -m bench.gpu_check`: leaves a process in a session of its own (as torchrun's
# workers are), then runs past any limit.
STUB = """
import subprocess, time
if __name__ == "__main__":
    subprocess.Popen(["sleep", "300"], start_new_session=True)
    print("stub: started", flush=True)
    time.sleep(300)
"""


def fake_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "deploy").mkdir(parents=True)
    shutil.copytree(GPU, root / "deploy" / "gpu")
    (root / "bench").mkdir()
    (root / "bench" / "__init__.py").write_text("")
    (root / "bench" / "gpu_check.py").write_text(STUB)
    (root / ".gpu" / "whl").mkdir(parents=True)
    (root / ".gpu" / "unpack.py").write_text("print('unpacked')\n")
    return root


def test_outside_the_project_root_it_says_so_first(tmp_path):
    proc = subprocess.run(["bash", str(GPU / "run-on-lent-gpu.sh")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "OUT": str(tmp_path / "out")})  # fmt: skip
    assert proc.returncode == 2
    assert "run this from the project root" in proc.stderr


def test_the_run_is_cut_at_its_hard_limit_and_nothing_of_it_is_left_running(tmp_path):
    root, out, mark = fake_root(tmp_path), tmp_path / "out", uuid.uuid4().hex
    # BUDGET + 45 s is the Python run's hard limit: 2 s here
    env = {
        **os.environ,
        "OUT": str(out),
        "BUDGET": "-43",
        "MPS": "0",
        "WORK": str(tmp_path / "work"),
        MARK: mark,
    }
    try:
        started = time.monotonic()
        proc = subprocess.run(["bash", "deploy/gpu/run-on-lent-gpu.sh"], cwd=root, capture_output=True,
                              text=True, timeout=150, env=env)  # fmt: skip
        assert proc.returncode == 124, proc.stderr[-2000:]  # timeout's: the run was cut
        assert time.monotonic() - started < 120
        assert not carrying(MARK, mark), "a process of the run outlived it"
        assert "sleep 300" in (out / "reaped.txt").read_text()
        assert (out / "logs.tar.gz").exists()
        assert (out / "preflight.txt").read_text().startswith("missing: ")
        assert "stub: started" in (out / "gpu-check.txt").read_text()
    finally:
        kill_carrying(MARK, mark)


def test_the_time_limits_leave_room_for_a_rerun():
    script = (GPU / "run-on-lent-gpu.sh").read_text()
    assert 'timeout 60 python3 "$G/unpack.py"' in script
    assert "timeout 60 python3 deploy/gpu/preflight.py" in script
    assert "BUDGET=${BUDGET:-330}" in script
    assert "timeout -k 10 $((BUDGET + 45)) python3 -m bench.gpu_check" in script
    # worst case, every limit reached: one command (600 s at most) holds it, two fit in 15 minutes
    assert 60 + 60 + 330 + 45 + 10 <= 600 - 60


@pytest.mark.slow  # imports torch, torchrec, fbgemm in processes of their own (~10 s on 2 cores)
def test_the_preflight_names_every_missing_module_phases_a_to_c_import(tmp_path):
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    for name in ("scipy", "typer"):  # stand-ins that fail as a missing package does
        (blocked / f"{name}.py").write_text(
            f'raise ModuleNotFoundError("No module named {name!r}", name={name!r})\n'
        )
    out = tmp_path / "preflight.txt"
    proc = subprocess.run([sys.executable, str(GPU / "preflight.py"), str(out)], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": f"{blocked}:{REPO}"})  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-2000:]
    lines = out.read_text().splitlines()
    assert lines[0] == "missing: scipy typer"
    assert "autotuner.cli.commands: missing typer" in lines  # the CLI phase c runs
    assert (
        "scipy: missing scipy" in lines
    )  # imported inside a function (stats.t_quantile): found by reading the code
    assert "trials.run: ok" in lines


def test_the_preflight_checks_what_the_code_imports_inside_functions_too():
    sys.path.insert(0, str(GPU))
    try:
        import preflight  # deploy/gpu/preflight.py, a script
    finally:
        sys.path.remove(str(GPU))
    groups = preflight.targets()
    assert "scipy.special" in groups["scipy"]
    assert {"rich.console", "rich.table"} <= set(groups["rich"])  # the final table's
    assert "torchrec" in groups
    assert "fbgemm_gpu" in groups
    assert "kubernetes" not in groups  # the Kubernetes executor never runs in phases a-c


def git_repo(path: Path, tracked_mib: int, gpu_mib: int) -> Path:
    path.mkdir()
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    subprocess.run(["truncate", "-s", f"{tracked_mib}M", str(path / "big.bin")], check=True)
    subprocess.run(["git", "-C", str(path), "add", "big.bin"], check=True)
    (path / ".gpu").mkdir()
    subprocess.run(["truncate", "-s", f"{gpu_mib}M", str(path / ".gpu" / "payload.tar.xz")], check=True)
    (path / ".git" / "info" / "exclude").write_text("/.gpu/\n")
    return path


def test_the_payload_is_counted_with_the_tree_the_device_tool_copies(tmp_path):
    size = GPU / "payload-size.sh"
    over = git_repo(tmp_path / "over", tracked_mib=5, gpu_mib=60)  # .gpu alone is under 64 MiB
    proc = subprocess.run(["bash", str(size)], cwd=over, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stdout
    assert "65 MiB of 64" in proc.stdout
    under = git_repo(tmp_path / "under", tracked_mib=5, gpu_mib=55)
    proc = subprocess.run(["bash", str(size)], cwd=under, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "bash deploy/gpu/payload-size.sh" in (GPU / "build-payload.sh").read_text()


@pytest.mark.parametrize(
    "package", ["typer", "rich", "pygments", "shellingham", "pyyaml", "tqdm", "packaging"]
)
def test_the_payload_carries_the_pure_packages_phase_c_and_the_table_import(package):
    script = (GPU / "build-payload.sh").read_text()
    engine = script.split('ENGINE="', 1)[1].split('"', 1)[0].split()
    assert package in engine
