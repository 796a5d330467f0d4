"""The premise of the sbatch_args gate, on the real sbatch (issue 21): #SBATCH lines with abbreviated
options act as the full options (getopt_long), so the gate must refuse `--outp=` as it refuses
`--output=` (tests/executors/test_sbatch_gate.py checks the gate itself)."""

from __future__ import annotations

import subprocess

import pytest

from autotuner.executors.slurm.options import SlurmOptions


def test_sbatch_reads_abbreviations_as_the_options_the_gate_refuses(slurm_cluster, tmp_path):
    out = tmp_path / "abbreviated.out"
    script = tmp_path / "job.sh"
    script.write_text(
        f"#!/bin/sh\n#SBATCH --outp={out}\n#SBATCH --chd={tmp_path}\n#SBATCH --job-n=abbreviated\npwd\n"
    )
    proc = subprocess.run(["sbatch", "--wait", "--nodes=1", str(script)], capture_output=True, text=True,
                          timeout=120, cwd="/")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert out.read_text().strip() == str(tmp_path)  # --outp was --output, --chd was --chdir
    # (--tim is --time or --time-min: sbatch refuses it as ambiguous, the gate as either)
    for arg in (f"--outp={out}", f"--chd={tmp_path}", "--job-n=abbreviated", "--tim=1"):
        with pytest.raises(ValueError, match="sbatch reads it as"):
            SlurmOptions.parse({"sbatch_args": [arg]})
