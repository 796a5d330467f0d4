"""deploy/examples/train_dlrm.py, the job author's example, runs for real: torchrun, 2 CPU ranks on gloo,
a sharded DLRM trained a few steps, once on its own settings and once under a tuned config (with a
value it must ignore, and say so, without failing the job)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.helpers import REPO, run_ranks

EXAMPLE = REPO / "deploy" / "examples" / "train_dlrm.py"
DEADLINE_S = 90  # one run takes a few seconds on 2 CPU cores


def train(**autotuner: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           str(EXAMPLE), "--steps", "6"]  # fmt: skip
    out, err = run_ranks(cmd, DEADLINE_S, "train_dlrm.py", **autotuner)
    return subprocess.CompletedProcess(cmd, 0, out, err)


def config_line(out: str) -> str:
    """What rank 0 prints (only it writes to stdout; every rank's stderr goes to stderr)."""
    lines = [line for line in out.splitlines() if line.startswith("config ")]
    assert len(lines) == 1, out[-4000:]
    return lines[0]


@pytest.mark.slow
def test_the_example_trains_on_its_own_settings_and_under_a_tuned_config():
    own = train()
    assert config_line(own.stdout) == (
        "config (none): comms fp32/fp32, batch 512 per rank, lr 0.01, tables table_wise, "
        "pipeline TrainPipelineSparseDist"
    )
    assert re.search(r"^step 5 loss 0\.\d+$", own.stdout, re.M), own.stdout[-4000:]
    assert "nccl-autotuner:" not in own.stderr

    tuned = train(AUTOTUNER_FWD_PRECISION="int8", AUTOTUNER_BWD_PRECISION="fp16", AUTOTUNER_BATCH_SIZE="256",
                  AUTOTUNER_LR_SCALE="1.41", AUTOTUNER_PIPELINE="turbo", AUTOTUNER_SHARDING="column_wise",
                  AUTOTUNER_CONFIG="demo-cpu/demo-dlrm/1n/v2")  # fmt: skip
    assert config_line(tuned.stdout) == (
        "config demo-cpu/demo-dlrm/1n/v2: comms int8/fp16, batch 256 per rank, lr 0.0141, tables column_wise, "
        "pipeline TrainPipelineSparseDist"
    )
    assert "nccl-autotuner: ignored AUTOTUNER_PIPELINE='turbo'" in tuned.stderr
    assert re.search(r"^step 5 loss 0\.\d+$", tuned.stdout, re.M), tuned.stdout[-4000:]
