"""How the TaskProlog reads /etc/autotuner/hook.env (AUTOTUNER_HOOK_ENV). A file saved with CRLF line
endings was misread silently (every value ended in a CR: `AUTOTUNER_HOOK=/path/autotuner\\r` was "no
autotuner executable", `AUTOTUNER_HOOK_VERBOSE=1\\r` not 1), `export KEY=value` lines (a file a shell
also sources) were skipped, and a line it could not read was never said. Run as Slurm runs it: sh, the
job's environment."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.helpers import REPO

PROLOG = REPO / "deploy" / "slurm" / "task_prolog.sh"

# Prints what it was given as the export lines the prolog passes on, and a warning (stderr).
HOOK = """#!/bin/sh
echo "export SEEN_ARGS=$*"
echo "export SEEN_TOKEN=$AUTOTUNER_TOKEN"
echo "autotuner: a warning from the hook" >&2
"""


def run_prolog(
    tmp_path: Path, lines: list[str], newline: str = "\n", **job: str
) -> subprocess.CompletedProcess:
    hook = tmp_path / "autotuner"
    hook.write_text(HOOK)
    hook.chmod(0o755)
    conf = tmp_path / "hook.env"
    conf.write_bytes(newline.join(line.replace("HOOK_PATH", str(hook)) for line in lines).encode() + b"\n")
    env = {"PATH": os.environ["PATH"], "AUTOTUNER_HOOK_ENV": str(conf), "AUTOTUNER_WORKLOAD": "w", **job}
    return subprocess.run(["sh", str(PROLOG)], capture_output=True, text=True, env=env, timeout=60)


SITE = [
    "# site defaults",
    "AUTOTUNER_SERVER=http://autotuner.internal:8000",
    "AUTOTUNER_TOKEN='read-token'",
    "AUTOTUNER_CLUSTER=c",
    "AUTOTUNER_HOOK=HOOK_PATH",
    "AUTOTUNER_HOOK_VERBOSE=1",
]


def test_a_file_with_crlf_line_endings_is_read_as_written(tmp_path):
    proc = run_prolog(tmp_path, SITE, newline="\r\n")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "export SEEN_TOKEN=read-token" in lines  # no CR, and the quotes still removed
    assert any(line.endswith("--server http://autotuner.internal:8000 --cluster c --workload w --timeout 1.5")
               for line in lines), proc.stdout  # fmt: skip
    assert "print autotuner: a warning from the hook" in lines  # VERBOSE=1 read as 1
    assert "\r" not in proc.stdout


def test_export_lines_are_read(tmp_path):
    proc = run_prolog(tmp_path, [f"export {line}" if "=" in line else line for line in SITE])
    assert proc.returncode == 0, proc.stderr
    assert "export SEEN_TOKEN=read-token" in proc.stdout.splitlines()
    assert "print autotuner: a warning from the hook" in proc.stdout.splitlines()


def test_a_line_it_cannot_read_is_said_by_its_number_and_the_rest_is_read(tmp_path):
    broken = ["AUTOTUNER_CLUSTER = c", "read-token-pasted-alone", *SITE[:3], *SITE[4:], "AUTOTUNER_OTHER=1"]
    proc = run_prolog(tmp_path, broken, AUTOTUNER_CLUSTER="c")
    assert proc.returncode == 0, proc.stderr
    said = f"print autotuner task prolog: {tmp_path / 'hook.env'} line(s) 1 2 not KEY=value"
    assert [line for line in proc.stdout.splitlines() if line.startswith(said)], proc.stdout
    assert "read-token-pasted-alone" not in proc.stdout  # a line may be a secret: never shown
    assert "export SEEN_TOKEN=read-token" in proc.stdout.splitlines()


def test_a_file_that_leaves_the_prolog_unconfigured_still_says_why(tmp_path):
    # The server's line is the one it could not read: the prolog is unconfigured, and says so.
    proc = run_prolog(tmp_path, ["AUTOTUNER_SERVER: http://autotuner.internal:8000", *SITE[2:]])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"print autotuner task prolog: {tmp_path / 'hook.env'} line(s) 1 not KEY=value (no spaces around =): ignored"
    ]


def test_a_known_name_without_a_value_is_no_setting(tmp_path):
    """`AUTOTUNER_TOKEN` alone on a line set the token to the string "AUTOTUNER_TOKEN" (and
    `AUTOTUNER_DISABLE` alone did not disable), in silence."""
    proc = run_prolog(tmp_path, [*SITE[:2], "AUTOTUNER_TOKEN", *SITE[3:]], AUTOTUNER_TOKEN="from-the-job")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "export SEEN_TOKEN=from-the-job" in lines
    assert [line for line in lines if line.startswith(f"print autotuner task prolog: {tmp_path / 'hook.env'} "
                                                      "line(s) 3 not KEY=value")], lines  # fmt: skip


def test_an_autotuner_name_it_does_not_read_is_said_by_its_name(tmp_path):
    """`AUTOTUNER_SEVRER=...` (a typo) left the prolog unconfigured and every job untuned, in silence. The
    name is said, never its value (a line may hold a token); another site's keys stay unremarked."""
    typo = ["AUTOTUNER_SEVRER=http://autotuner.internal:8000", "AUTOTUNER_TOKEN_FILE=/secret", "SITE_PROXY=x",
            *SITE[2:]]  # fmt: skip
    proc = run_prolog(tmp_path, typo)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"print autotuner task prolog: {tmp_path / 'hook.env'} sets AUTOTUNER_SEVRER AUTOTUNER_TOKEN_FILE, "
        "which it does not read (a typo?): ignored"
    ]
    assert "/secret" not in proc.stdout


def test_a_value_glued_to_an_autotuner_name_is_said_by_its_line_number_only(tmp_path):
    """`AUTOTUNER_TOKEN` with its `=` left out and a token holding one (base64 padding) reads as an
    unknown AUTOTUNER_ name: its "name" is the token, which went to syslog and the job's output."""
    glued = [*SITE[:2], "AUTOTUNER_TOKENq7Hk2xV9pL4mN8rT1wZ3yA==", *SITE[3:]]
    proc = run_prolog(tmp_path, glued)
    assert proc.returncode == 0, proc.stderr
    assert "q7Hk2xV9pL4mN8rT1wZ3yA" not in proc.stdout + proc.stderr
    assert f"print autotuner task prolog: {tmp_path / 'hook.env'} line(s) 3 not KEY=value" in proc.stdout
