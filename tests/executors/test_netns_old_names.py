"""Namespaces an older version named the old way (`at-s12-l34-n0`: no study directory in the name),
left by a launcher killed before the upgrade: the sweep every launch runs removes them too, a launch's
namespaces together, and only when no process is in any of them (an older version's live launch on
this host keeps its nodes). Before, they were never swept: the upgrade notes said to remove them by
hand."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotuner.executors.local.netns import sweep_command
from tests.executors.test_netns import namespaces, netns_capable  # noqa: F401 (a fixture)

# A fake `ip`: the namespaces in $NETNS_DIR/list, each one's processes in $NETNS_DIR/pids.NAME (a
# namespace named in $NETNS_DIR/unanswered fails `ip netns pids`), removals written to $NETNS_DIR/del.
FAKE_IP = """#!/bin/sh
[ "$1" = netns ] || exit 2
case "$2" in
  list) cat "$NETNS_DIR/list" ;;
  pids) grep -qx "$3" "$NETNS_DIR/unanswered" && { echo "Cannot open network namespace" >&2; exit 1; }
        cat "$NETNS_DIR/pids.$3" 2>/dev/null; exit 0 ;;
  del) echo "$3" >> "$NETNS_DIR/del" ;;
  *) exit 2 ;;
esac
"""

STALE = ["at-s3-l1-br", "at-s3-l1-n0", "at-s3-l1-n1", "at-s4-l1"]  # nodes=namespaces; a fabric's one
BUSY = ["at-s3-l2-br", "at-s3-l2-n0", "at-s3-l2-n1"]  # an older version's live launch: a rank in n1
UNANSWERED = ["at-s5-l9-br", "at-s5-l9-n0"]  # whether a process is in n0 cannot be read: kept
OTHERS = ["at-0a1b2c-s3-l1-n0", "at-sx-l1-n0", "slurm-n1", "at-s3-l20-n0-keep"]  # no old name, or no launch's


def fake_sweep(tmp_path: Path, names: list[str]) -> list[str]:
    """What the sweep of a study's launch removes, among `names`, with the fake `ip`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ip").write_text(FAKE_IP)
    (bin_dir / "ip").chmod(0o755)
    state = tmp_path / "netns"
    state.mkdir()
    (state / "list").write_text("".join(f"{n} (id: {i})\n" for i, n in enumerate(names)))
    (state / "pids.at-s3-l2-n1").write_text("4242\n")
    (state / "unanswered").write_text("at-s5-l9-n0\n")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "NETNS_DIR": str(state)}
    # as at the top of a launch script: its arguments stay its own (the sweep's `set --` is in a subshell)
    script = f'{sweep_command("at-ffffff-s7-l")}\necho "$# $1"'
    done = subprocess.run(["sh", "-c", script, "sh", "a", "b"], env=env, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "2 a\n"), done.stderr
    removed = state / "del"
    return removed.read_text().split() if removed.exists() else []


def test_old_style_namespaces_of_a_gone_launch_are_swept_and_the_rest_kept(tmp_path):
    removed = fake_sweep(tmp_path, STALE + BUSY + UNANSWERED + OTHERS)
    assert sorted(removed) == sorted(STALE)  # before: [] (never swept)


@pytest.mark.netns
def test_real_old_style_namespaces_a_killed_launcher_left_are_swept_and_a_live_ones_kept(
    netns_capable,  # noqa: F811
    tmp_path,
):
    """Real namespaces, named the old way, made by this test and removed by it whatever happens."""
    study = f"at-s9{os.getpid()}"  # a study number no one else's launch has here
    stale = [f"{study}-l1-br", f"{study}-l1-n0", f"{study}-l1-n1"]
    live = [f"{study}-l2-br", f"{study}-l2-n0"]
    made: list[str] = []
    rank = None
    try:
        for name in stale + live:
            subprocess.run(["ip", "netns", "add", name], check=True)
            made.append(name)
        # a rank of an older version's launch, still running in its node
        rank = subprocess.Popen(
            ["ip", "netns", "exec", live[1], sys.executable, "-c", "import time; time.sleep(120)"]
        )
        for _ in range(100):
            if subprocess.run(
                ["ip", "netns", "pids", live[1]], capture_output=True, text=True
            ).stdout.strip():
                break
            subprocess.run(["sleep", "0.1"], check=True)
        subprocess.run(["sh", "-c", sweep_command("at-ffffff-s7-l")], check=True, timeout=60)
        assert namespaces(f"{study}-l1-") == []  # before: all three left
        assert sorted(namespaces(f"{study}-l2-")) == sorted(live)  # in use: its bridge too
    finally:
        if rank is not None:
            rank.kill()
            rank.wait()
        for name in made:
            subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)
