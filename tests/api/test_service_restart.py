"""SIGKILL of `autotuner serve` during a study: after a restart the study finishes, nothing is lost."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.api.service import _children, make_server, replay_study_body, served_config, wait_for_state
from tests.api.test_service_log import logged
from tests.helpers import LANDSCAPE


@pytest.mark.soak
def test_sigkill_during_a_study_then_restart_finishes_it(tmp_path):
    server = make_server(tmp_path)
    server.start()
    client = server.client("write")
    study = client.post("/v1/studies", json=replay_study_body("survivor", trials=4)).json()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait until some trials are recorded and more are coming
        trials = client.get(f"/v1/studies/{study['id']}/trials", params={"limit": 1000}).json()
        if trials["count"] >= 3:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"fewer than 3 trials recorded in 60 s: {trials['count']}")
    before = {t["id"]: t["samples_per_s"] for t in trials["data"]}
    assert client.get(f"/v1/studies/{study['id']}").json()["state"] == "running"
    server.kill()  # SIGKILL: no shutdown hooks, lease not released

    # same data dir, same database; the rest of the study need not be watched: its launches are instant
    server.env["AUTOTUNER_EXECUTOR_OPTIONS"] = json.dumps(
        {"replay": {"landscape": str(LANDSCAPE), "delay_s": 0}}
    )
    server.start()
    client = server.client("write")
    final = wait_for_state(client, study["id"], ("done", "failed"), timeout_s=120)
    assert final["state"] == "done", final
    after = {t["id"]: t["samples_per_s"] for t in
             client.get(f"/v1/studies/{study['id']}/trials", params={"limit": 1000}).json()["data"]}  # fmt: skip
    assert {k: after[k] for k in before} == before  # every finished trial survived unchanged
    launches = client.get(f"/v1/studies/{study['id']}/launches").json()
    assert sum(1 for x in launches if x["kind"] == "search" and x["attempt"] == 1) == 4
    assert served_config(client).status_code == 200
    server.kill()


def test_workers_do_not_outlive_a_service_killed_while_they_start(tmp_path):
    """The supervisor binds the port, then its workers import the app: one killed in between left a
    worker serving (and holding the port) forever, its parent-death signal asked for too late."""
    server = make_server(tmp_path, AUTOTUNER_SCHEDULER="0")
    server.launch()
    deadline = time.monotonic() + 30
    while True:  # the port opens when the supervisor binds it, before any worker is ready
        try:
            socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline, server.log.read_text()
            assert server.proc.poll() is None, server.log.read_text()
            time.sleep(0.02)
    server.kill()  # SIGKILL; fails if anything still answers on the port 15 s later


def test_no_scheduler_means_none(tmp_path):
    """`autotuner serve --no-scheduler` (an API-only replica): before, the flag never reached the workers,
    and each of them started a scheduler of its own, running studies on a host chosen not to."""
    server = make_server(tmp_path)
    server.args = ["--no-scheduler", "--workers", "2"]
    server.start()
    try:
        for _ in range(4):  # each worker answers for itself
            assert httpx.get(f"{server.url}/readyz", timeout=5).json()["scheduler"] == "off"
        assert "running studies from" not in server.log.read_text()
    finally:
        server.kill()


def test_a_scheduler_that_dies_is_started_again_and_runs_studies(tmp_path):
    """A scheduler killed on its own (the OOM killer, a kill -9) is started again: before, the service
    went on answering with no scheduler, studies queued for ever, and /readyz said "ok" (it found the
    unreaped zombie). Readiness names the dead scheduler until the new one runs."""
    server = make_server(tmp_path, replay_delay_s=0)
    server.start()
    try:
        (first,) = _schedulers(server.proc.pid)
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while True:  # a new scheduler, and every worker sees it (each answers for itself)
            now = _schedulers(server.proc.pid)
            answers = [httpx.get(f"{server.url}/readyz", timeout=5) for _ in range(4)]
            if now and now != [first] and all(a.status_code == 200 for a in answers):
                break
            assert time.monotonic() < deadline, server.log.read_text()[-3000:]
            time.sleep(0.1)
        assert {a.json()["scheduler"] for a in answers} == {"ok"}
        assert f"the scheduler process {first} ended (killed by SIGKILL): starting another in 1 s" in (
            server.log.read_text()
        )
        # the supervisor writes the pid file, then says so: the workers may read the file first
        logged(server, re.escape(f"the scheduler process {now[0]} started (restart 1)"))
        for _ in range(4):  # every worker reads the restart from the pid file
            exported = httpx.get(f"{server.url}/metrics", timeout=5).text
            assert "autotuner_scheduler_restarts_total 1.0" in exported
            assert "autotuner_scheduler_up 1.0" in exported
        client = server.client("write")
        study = client.post("/v1/studies", json=replay_study_body("after-restart", trials=2)).json()
        assert wait_for_state(client, study["id"], ("done", "failed"), timeout_s=120)["state"] == "done"
    finally:
        server.kill()


def test_the_pid_file_holds_the_pid_alone(tmp_path):
    """`kill $(cat data/scheduler.pid)` signals the scheduler alone: the file held the restart count on
    a second line, so the shell ran `kill -9 PID 0` (the operator's own process group) or `kill -9 PID 1`
    (init). The count is in scheduler.restarts; the supervisor starts a scheduler so killed again."""
    server = make_server(tmp_path, replay_delay_s=0)
    server.start()
    try:
        pid_file, count = server.data_dir / "scheduler.pid", server.data_dir / "scheduler.restarts"
        (first,) = _schedulers(server.proc.pid)
        assert pid_file.read_text() == f"{first}\n"
        assert count.read_text() == "0\n"
        # as an operator would; in a session of its own, so that a `kill PID 0` could not reach pytest
        subprocess.run(["sh", "-c", f"kill $(cat {pid_file})"], check=True, start_new_session=True)
        deadline = time.monotonic() + 60
        while not (
            (now := _schedulers(server.proc.pid)) and now != [first] and pid_file.read_text() == f"{now[0]}\n"
        ):
            assert time.monotonic() < deadline, server.log.read_text()[-3000:]
            time.sleep(0.05)
        assert count.read_text() == "1\n"
        assert f"the scheduler process {first} ended" in server.log.read_text()
        # the pid file is written before the start is logged: the test may read it in between
        logged(server, re.escape(f"the scheduler process {now[0]} started (restart 1)"))
        for _ in range(4):  # every worker reads the count from its own file
            assert (
                "autotuner_scheduler_restarts_total 1.0" in httpx.get(f"{server.url}/metrics", timeout=5).text
            )
    finally:
        server.kill()


def test_readers_take_the_count_from_its_file_and_never_a_group_for_a_pid(tmp_path):
    from api.scheduler import RunningScheduler

    pid_file = tmp_path / "scheduler.pid"
    seen = RunningScheduler(pid_file)
    pid_file.write_text(f"{os.getpid()}\n")
    (tmp_path / "scheduler.restarts").write_text("3\n")
    assert seen.alive
    assert seen.restarts == 3  # before: 0, from a pid file with no second line
    for pid in ("0", "1", "-1"):  # os.kill(0, 0) answers for the reader's own group: not a scheduler
        pid_file.write_text(f"{pid}\n")
        assert not seen.alive


@pytest.mark.parametrize("workers", [1, 2])
def test_a_stop_signal_to_the_whole_group_is_no_scheduler_crash(tmp_path, workers):
    """SIGTERM to the service's process group (`kill -TERM -- -PGID`, GNU timeout, systemd's control-group
    stop) reaches the scheduler as well as the service: it was logged as a crash, `WARNING ... ended
    (exit code 0): starting another in 1 s`. A stop signal's end is an INFO line."""
    server = make_server(tmp_path, AUTOTUNER_WORKERS=str(workers))
    server.session = True  # a group of its own, signalled whole
    server.start()
    try:
        (scheduler,) = _schedulers(server.proc.pid)
        os.killpg(server.proc.pid, signal.SIGTERM)
        server.proc.wait(timeout=30)
        log = server.log.read_text()
        assert "WARNING autotuner.scheduler" not in log
        said = " ".join(log.split())  # the start line is folded at 80 columns
        # The supervisor says the end unless the service's own stop came first: the scheduler runs niced,
        # and on a loaded machine it may exit after the workers stopped and the supervisor was told to
        # stop, which then says nothing of it. Where said, it is no crash: its handler's exit 0, or the
        # signal itself where it came before the handler was set.
        if f"the scheduler process {scheduler} ended" in said:
            assert re.search(rf"INFO autotuner\.scheduler: the scheduler process {scheduler} ended \((exit code 0|"
                             r"killed by SIGTERM)\): starting another in 15 s unless the service is stopping", said)  # fmt: skip
        assert f"({workers} worker{'s' if workers > 1 else ''}, store" in said  # before: "(1 workers"
    finally:
        server.kill()


def test_readiness_says_stopped_while_no_scheduler_runs(tmp_path):
    """The workers' view of the scheduler: its pid file, and a process that is neither gone nor a zombie."""
    from api.scheduler import RunningScheduler

    pid_file = tmp_path / "scheduler.pid"
    seen = RunningScheduler(pid_file)
    assert not seen.alive  # no file yet
    assert seen.restarts == 0
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        pid_file.write_text(f"{child.pid}\n")  # as versions before the restart count wrote it
        assert seen.alive
        assert seen.restarts == 0
        pid_file.write_text(f"{child.pid}\n2\n")
        assert seen.alive
        assert seen.restarts == 2
        child.kill()
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert not seen.alive  # dead, not yet reaped: a zombie is not a scheduler
    finally:
        child.kill()
        child.wait()
    assert not seen.alive  # reaped: no such process


def _schedulers(service: int) -> list[int]:
    """The live api.scheduler processes under the service (zombies have an empty command line)."""
    return [pid for pid in _children(service) if b"api.scheduler" in _cmdline(pid)]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_an_end_is_said_in_words_whatever_killed_it():
    from api.scheduler import _how

    assert [_how(0), _how(3), _how(-9), _how(-40)] == [
        "exit code 0", "exit code 3", "killed by SIGKILL", "killed by signal 40"]  # fmt: skip


def test_a_second_service_on_the_same_data_dir_is_refused_and_the_first_keeps_serving(tmp_path):
    """A second `autotuner serve` on one data dir (a mistaken second start, two replicas on one host)
    rewrote the first's scheduler pid file and emptied its metrics: the first answered 503 for good."""
    first = make_server(tmp_path, replay_delay_s=0)
    first.args = ["--workers", "2"]
    first.start()
    try:
        second = make_server(tmp_path, replay_delay_s=0)  # same tmp_path: the same data dir, another port
        assert second.data_dir == first.data_dir
        second.launch()
        assert second.proc.wait(timeout=60) == 2
        said = second.log.read_text()
        assert (
            f"another `autotuner serve` (pid {first.proc.pid}) runs with the data dir {first.data_dir}"
            in said
        )
        for _ in range(4):  # each of the first's workers: still ready, its scheduler still seen
            assert httpx.get(f"{first.url}/readyz", timeout=5).json()["scheduler"] == "ok"
            assert "autotuner_scheduler_up 1.0" in httpx.get(f"{first.url}/metrics", timeout=5).text
    finally:
        first.kill()
    first.start()  # the lock goes with the process: a restart after a kill -9 takes it again
    first.kill()


def _sigint_ignored(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status").read_text()
    ignored = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:")), 16)
    return bool(ignored & (1 << (signal.SIGINT - 1)))


def test_the_scheduler_survives_what_its_restart_runs_into(tmp_path, monkeypatch, caplog):
    """A failed start (no memory or pids after an OOM kill) or a pid file that cannot be written ended
    the supervisor's thread: no scheduler ever again. And the scheduler ignores the terminal's Ctrl-C
    (it killed it mid-shutdown, and the supervisor started another)."""
    from api import scheduler as module

    pid_file = tmp_path / "scheduler.pid"
    pid_file.mkdir()  # unwritable as a file: stands in for a full disk
    real_popen = subprocess.Popen
    refused = []

    def popen_failing_once(*args, **kwargs):
        if not refused:
            refused.append(True)
            raise OSError(12, "Cannot allocate memory")
        return real_popen(*args, **kwargs)

    runner = module.SchedulerProcess(dict(os.environ, AUTOTUNER_DATA_DIR=str(tmp_path)), pid_file)
    with caplog.at_level("INFO", logger="autotuner.scheduler"):
        runner.start()
        try:
            first = runner.pid
            assert _sigint_ignored(first)
            monkeypatch.setattr(module.subprocess, "Popen", popen_failing_once)
            os.kill(first, signal.SIGKILL)
            deadline = time.monotonic() + 30
            while not (runner.alive and runner.pid != first):
                assert time.monotonic() < deadline, caplog.text
                time.sleep(0.05)
            assert runner.restarts == 1
            assert _sigint_ignored(runner.pid)
        finally:
            runner.stop()
    assert (
        "could not start the scheduler process ([Errno 12] Cannot allocate memory): trying again in 2 s"
        in caplog.text
    )
    assert f"could not write the scheduler's pid to {pid_file}" in caplog.text
