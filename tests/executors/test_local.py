"""The local executor: its request (golden), and real launches that hang, crash, or outlive the tuner."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from autotuner.executors import Fabric, LaunchRequest, LaunchState, LocalExecutor
from autotuner.executors.local.executor import tagged
from autotuner.executors.local.memory import RANK_BASE_BYTES, available_bytes, launch_bytes
from tests.helpers import TINY_SPEC as SPEC
from trials.spec import parse_spec

GOLDEN = """\
#!/bin/sh
# nccl-autotuner launch s1-l7 (local executor)
cd /srv/autotuner/study-1/launch-0007
export NCCL_NSOCKS_PERTHREAD=4
export NCCL_SOCKET_IFNAME='eth0,eth1;rm -rf /'
/opt/py/bin/python -m torch.distributed.run --standalone --nnodes=1 --nproc-per-node=2 -m trials.run --spec /srv/autotuner/study-1/launch-0007/spec.json --out /srv/autotuner/study-1/launch-0007/result.json --quiet
rc=$?
echo $rc > /srv/autotuner/study-1/launch-0007/exit_code.tmp && mv /srv/autotuner/study-1/launch-0007/exit_code.tmp /srv/autotuner/study-1/launch-0007/exit_code
exit $rc
"""

GOLDEN_FABRIC = """\
#!/bin/sh
# nccl-autotuner launch s1-l7 (local executor)
cd /srv/autotuner/study-1/launch-0007
# emulated fabric: loopback limited to 2gbit (tbf) in a network namespace
for ns in $(ip netns list | cut -d' ' -f1 | grep '^at-ba8d7c-s1-l'); do ip netns del "$ns"; done
(old=$(ip netns list 2>/dev/null | cut -d' ' -f1 | grep -E '^at-s[0-9]+(-l?[0-9]*)?(-br|-n[0-9]+)?$'); for g in $(printf '%s\\n' $old | sed -E 's/-(br|n[0-9]+)$//' | sort -u); do set --; for ns in $old; do [ "$(printf %s "$ns" | sed -E 's/-(br|n[0-9]+)$//')" = "$g" ] && set -- "$@" "$ns"; done; busy=; for ns in "$@"; do p=$(ip netns pids "$ns" 2>/dev/null) || busy=1; [ -n "$p" ] && busy=1; done; [ -n "$busy" ] || for ns in "$@"; do ip netns del "$ns"; done; done; true)
ip netns add at-ba8d7c-s1-l7 || exit 97
trap 'ip netns del at-ba8d7c-s1-l7' EXIT
ip netns exec at-ba8d7c-s1-l7 ip link set lo up || exit 97
ip netns exec at-ba8d7c-s1-l7 tc qdisc add dev lo root tbf rate 2gbit burst 128kb latency 50ms || exit 97
ip netns exec at-ba8d7c-s1-l7 /opt/py/bin/python -m torch.distributed.run --standalone --nnodes=1 --nproc-per-node=2 -m trials.run --spec /srv/autotuner/study-1/launch-0007/spec.json --out /srv/autotuner/study-1/launch-0007/result.json --quiet
rc=$?
echo $rc > /srv/autotuner/study-1/launch-0007/exit_code.tmp && mv /srv/autotuner/study-1/launch-0007/exit_code.tmp /srv/autotuner/study-1/launch-0007/exit_code
exit $rc
"""


def request(tmp: Path | None = None, **kw) -> LaunchRequest:
    defaults = dict(name="s1-l7", spec=SPEC, env={}, workdir=tmp or Path("/srv/autotuner/study-1/launch-0007"),
                    python="/opt/py/bin/python", timeout_s=120)  # fmt: skip
    defaults.update(kw)
    return LaunchRequest(**defaults)


def test_dryrun_script_is_golden_and_quotes_values():
    env = {"NCCL_SOCKET_IFNAME": "eth0,eth1;rm -rf /", "NCCL_NSOCKS_PERTHREAD": "4"}
    assert LocalExecutor().dryrun(request(env=env)).rendered == GOLDEN


def test_dryrun_with_emulated_fabric_is_golden():
    assert LocalExecutor(fabric=Fabric("2gbit")).dryrun(request()).rendered == GOLDEN_FABRIC


@pytest.mark.parametrize("rate", ["2 gbit", "2gbit; reboot", "fast", "0gbit"])
def test_fabric_rate_is_validated(rate):
    with pytest.raises(ValueError, match="fabric rate"):
        Fabric(rate)


def test_more_than_one_node_is_refused():
    with pytest.raises(ValueError, match="one node"):
        LocalExecutor().dryrun(request(nnodes=2))


def test_ranks_this_host_cannot_hold_are_refused_before_they_start(monkeypatch):
    """Local ranks run beside the tuner: more than the memory available would bring the OOM killer,
    which may pick the service itself."""
    monkeypatch.setattr("autotuner.executors.local.executor.available_bytes", lambda: 4 << 30)
    LocalExecutor().dryrun(request(nproc_per_node=2))  # 2 of 512 MiB fit in 4 GiB
    with pytest.raises(ValueError, match="ranks on this host") as refused:
        LocalExecutor(nodes="hostids").dryrun(request(nnodes=4, nproc_per_node=16))
    assert str(refused.value).startswith("64 ranks on this host would hold about 32.0 GiB")
    assert "and 4.0 GiB is available: run fewer ranks per node or nodes here (--nproc, --nnodes)" in str(
        refused.value
    )


def test_what_a_launch_holds_counts_its_inputs_and_rows(tmp_path):
    spec = {**SPEC, "candidates": [{**SPEC["candidates"][0], "batch_size": 8192}]}
    trial = parse_spec(spec)
    rows = sum(t.num_embeddings * t.embedding_dim * 4 for t in trial.workload.tables)
    assert launch_bytes(spec, 3) == 3 * (RANK_BASE_BYTES + trial.input_bytes(8192)) + rows
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:   20000000 kB\n")
    assert available_bytes(meminfo) == 20_000_000 * 1024
    assert available_bytes(tmp_path / "none") is None  # no /proc: no check, as before
    assert available_bytes() > 0  # this host's own


@pytest.mark.slow
def test_hung_trial_is_killed_and_marked_within_timeout(tmp_path):
    launch = request(tmp_path, spec={**SPEC, "extra": {"inject": "hang"}}, python=_python(), timeout_s=12)
    started = time.monotonic()
    outcome = LocalExecutor().run(launch)
    elapsed = time.monotonic() - started
    assert outcome.state == LaunchState.TIMEOUT
    assert "12 s timeout" in outcome.reason
    assert f"process tree {outcome.backend_id}" in outcome.reason
    assert elapsed < launch.timeout_s + 10
    tag = (tmp_path / "tag").read_text()
    assert tagged(tag) == set()  # every rank is gone, not just torchrun


@pytest.mark.slow
def test_crashed_rank_fails_the_launch_with_reason_and_log_tail(tmp_path):
    outcome = LocalExecutor().run(
        request(tmp_path, spec={**SPEC, "extra": {"inject": "crash"}}, python=_python())
    )
    assert outcome.state == LaunchState.FAILED
    assert outcome.reason  # e.g. "exit code 1" / "no result written"
    assert "injecting fault 'crash'" in outcome.log_tail


@pytest.mark.slow
def test_a_new_executor_reattaches_to_a_running_launch(tmp_path):
    """The tuner dies, the launch (own session) lives on; after a restart it is followed to its end."""
    first = LocalExecutor()
    launch = request(tmp_path, python=_python(), env={"NCCL_BUFFSIZE": "1048576"})
    backend_id, _ = first.submit(launch)
    del first  # the process that started it is gone (as far as the launch is concerned)
    # A restart comes long after the launch's exec; the moment after it, /proc shows its command line
    # empty (what a new executor goes by), which a loaded machine can stretch out.
    deadline = time.monotonic() + 60
    while not Path(f"/proc/{backend_id}/cmdline").read_bytes():
        assert time.monotonic() < deadline, "the launch's command line never showed in /proc"
        time.sleep(0.01)
    again = LocalExecutor()
    assert again.describe(backend_id, launch).state == LaunchState.RUNNING
    outcome = again.wait(backend_id, launch, started=time.monotonic())
    assert outcome.state == LaunchState.SUCCEEDED, outcome.log_tail
    assert outcome.result["env"]["NCCL_BUFFSIZE"] == "1048576"
    assert outcome.result["candidates"][0]["status"] == "ok"


def test_cancel_of_a_pid_that_is_no_longer_the_launch_kills_nothing(tmp_path):
    """A launch recorded before a restart (a cancelled study's leftover, swept by the scheduler): its
    pid may name another process of the same user by now; that process and its children live on."""
    import subprocess

    bystander = subprocess.Popen(["sleep", "300"])
    try:
        launch = request(tmp_path)
        (tmp_path / "launch.sh").write_text("exit 0\n")  # the launch that had that pid, long gone
        LocalExecutor().cancel(str(bystander.pid), launch)
        assert bystander.poll() is None  # was: SIGTERM (returncode -15)
    finally:
        bystander.kill()
        bystander.wait()


def _python() -> str:
    import sys

    return sys.executable


def test_our_own_launch_is_running_while_proc_cannot_tell_yet(tmp_path, monkeypatch):
    # Right after a vfork+exec the child's /proc/PID/cmdline can read empty for a moment: the launch
    # that started it must not take that for "gone" (a 2-node study's scaling launch was failed 7 ms
    # after it started, while it went on to finish).
    import autotuner.executors.local.executor as local

    executor = LocalExecutor()
    launch = request(tmp_path, spec={**SPEC, "extra": {"inject": "hang"}}, python=_python())
    backend_id, _ = executor.submit(launch)
    try:
        monkeypatch.setattr(local, "_alive", lambda pid, script: False)  # what /proc said in that moment
        assert executor.describe(backend_id, launch).state == LaunchState.RUNNING
    finally:
        monkeypatch.undo()
        executor.cancel(backend_id, launch)


def test_a_study_of_more_ranks_than_this_host_holds_is_refused_when_created(tmp_path, monkeypatch):
    from autotuner.store import Store
    from autotuner.tuning import StudyError
    from tests.autotuner.test_driver import study_with

    monkeypatch.setattr("autotuner.executors.local.executor.available_bytes", lambda: 8 << 30)
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    with pytest.raises(StudyError, match=r"executor local: 64 ranks on this host would hold about 32\.0 GiB"):
        study_with(store, tmp_path, executor="local", executor_options={}, nproc_per_node=64)
    assert store.studies() == []  # nothing queued that could not run
    assert (
        study_with(store, tmp_path, executor="local", executor_options={}, nproc_per_node=2).state == "queued"
    )
    store.dispose()


def test_a_launch_inherits_none_of_the_services_secrets(tmp_path, monkeypatch):
    """Every launch ran with the tuner's whole environment: the service's tokens (the admin one too)
    and its store's URL with the password sat in every rank's environment."""
    monkeypatch.setenv("AUTOTUNER_TOKENS", "s3cret:admin")
    monkeypatch.setenv("AUTOTUNER_DATABASE_URL", "postgresql+psycopg://u:s3cretPW@db/autotuner")
    monkeypatch.setenv("NCCL_DEBUG", "INFO")  # nor the tuner's own comm variables (as before)
    monkeypatch.setenv("AUTOTUNER_TRIAL_PG_TIMEOUT_S", "77")  # what a trial reads still goes
    rank = tmp_path / "python"
    rank.write_text('#!/bin/sh\nenv > "$PWD/rank-env.txt"\n')  # stands in for torchrun: says what it got
    rank.chmod(0o755)
    launch = request(tmp_path / "launch-0001", python=str(rank), env={"NCCL_BUFFSIZE": "1048576"})
    outcome = LocalExecutor().run(launch)
    assert outcome.state == LaunchState.FAILED  # no result: it only looked
    seen = dict(
        line.split("=", 1)
        for line in (launch.workdir / "rank-env.txt").read_text().splitlines()
        if "=" in line
    )
    assert "s3cret" not in (launch.workdir / "rank-env.txt").read_text()
    assert "NCCL_DEBUG" not in seen
    assert seen["NCCL_BUFFSIZE"] == "1048576"
    assert seen["AUTOTUNER_TRIAL_PG_TIMEOUT_S"] == "77"


def test_a_variable_name_that_is_not_one_is_never_written_into_the_script(tmp_path):
    # a resumed launch's env comes back from its stored row: a name there is hostile until checked
    with pytest.raises(ValueError, match="not a variable name"):
        LocalExecutor().dryrun(request(env={"NCCL_X=1; touch /tmp/pwned; : ": "v"}))


def test_a_launch_whose_pid_the_store_never_got_is_stopped_when_abandoned(tmp_path):
    """The tuner killed between starting a launch and storing its pid: resumed, the study cancels that
    row and retries it. Abandoning it stopped nothing (the base class's no-op), and the retry ran beside
    it on the same CPUs or GPUs, unfollowed."""
    first = LocalExecutor()
    launch = request(tmp_path, spec={**SPEC, "extra": {"inject": "hang"}}, python=_python())
    backend_id, _ = first.submit(launch)
    try:
        tag = (tmp_path / "tag").read_text()
        assert tagged(tag)
        LocalExecutor().abandon(launch)  # a new runner: the pid is nowhere but in the first one
        assert tagged(tag) == set()
    finally:
        first.cancel(backend_id, launch)
