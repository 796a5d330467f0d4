"""The pre-job hook where a job's own setup is odd (found by an adversarial tester): stderr closed or
its reader gone, odd node counts, a token read from a CRLF file, a cache directory another user made,
a cached config moved to another key, `exec` with an empty command or --help. Whatever happens the
job starts: exit 0 (CMD's own code with exec), nothing but export text on stdout, no token shown."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from autotuner.job.exports import check_exports
from autotuner.job.qcomms import tuned
from tests.autotuner.test_hook_hostile import GOOD, cached_files, hook, serve, served_then_down  # noqa: F401
from trials.spec import MAX_BATCH

# Values the gate drops; in the old hook their warning, written to stdout with stderr closed, was
# evaluated by the job's shell.
ARMED = {"AUTOTUNER_BATCH_SIZE": "$(touch {marker})", "AUTOTUNER_NUM_THREADS": "`touch {marker}`"}


def run_shell(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, env=env)


def hook_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNER_")}
    return {**env, "AUTOTUNER_CACHE_DIR": str(tmp_path / "cache")}


def test_with_stderr_closed_nothing_but_export_text_reaches_the_eval(tmp_path, serve):  # noqa: F811
    marker = tmp_path / "PWNED"
    armed = {k: v.format(marker=marker) for k, v in ARMED.items()}
    server = serve({"exports": {**GOOD, **armed}})
    hook_cmd = f"{sys.executable} -m autotuner env --server {server.url} --cluster c --workload w 2>&-"
    proc = run_shell(f'set -e; eval "$({hook_cmd})"; echo "fwd=$AUTOTUNER_FWD_PRECISION"', hook_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "fwd=fp16" in proc.stdout
    assert not marker.exists()


def test_with_stdout_or_stderr_gone_the_hook_exits_0_and_exec_runs_the_command(tmp_path, serve):  # noqa: F811
    server = serve({"exports": {**GOOD, "LD_PRELOAD": "/tmp/x.so"}})  # a warning to write
    env = hook_env(tmp_path)
    closed = run_shell(
        f"{sys.executable} -m autotuner env --server {server.url} --cluster c --workload w >&-", env
    )
    assert closed.returncode == 0, closed.stderr
    # stderr's reader gone: the first warning meets a broken pipe
    piped = run_shell(f"{sys.executable} -m autotuner exec --server {server.url} --cluster c --workload w -- "
                      "echo CMD-RAN 2> >(exit 0); echo rc=$?", env)  # fmt: skip
    assert "CMD-RAN" in piped.stdout
    assert "rc=0" in piped.stdout


@pytest.mark.parametrize("nodes", ["\u00b2", "9" * 5000, " 2 x", "-3"])
def test_an_odd_node_count_is_passed_over_and_the_command_runs(tmp_path, nodes):
    env = {**hook_env(tmp_path), "AUTOTUNER_NODES": nodes, "SLURM_JOB_NUM_NODES": nodes}
    for command in (["env", "--cluster", "c", "--workload", "w"], ["exec", "--cluster", "c", "--workload", "w",
                                                                     "--", "echo", "CMD-RAN"]):  # fmt: skip
        proc = subprocess.run([sys.executable, "-m", "autotuner", *command], capture_output=True, text=True,
                              timeout=60, env=env)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr
    assert "CMD-RAN" in proc.stdout


def test_a_token_is_never_shown_even_when_no_header_can_carry_it(tmp_path, serve):  # noqa: F811
    server = serve({"exports": GOOD})
    proc = hook(tmp_path, server.url, "--token", "s3cr3t-read-token\r\nX-Other: 1")
    assert proc.returncode == 0
    assert "s3cr3t" not in proc.stderr + proc.stdout
    ok = hook(tmp_path, server.url, "--token", "s3cr3t-read-token\r")  # a CRLF file's: stripped, sent
    assert "export AUTOTUNER_FWD_PRECISION=fp16" in ok.stdout


def test_a_cache_directory_another_user_may_write_is_not_used(tmp_path, serve):  # noqa: F811
    url, cache = served_then_down(tmp_path, serve)
    cache.parent.chmod(0o777)  # as another user's `mkdir -m 0777 hook-<uid>` in a shared directory
    proc = hook(tmp_path, url)
    assert (proc.returncode, proc.stdout) == (0, ""), proc.stderr
    assert "is not a directory of this user's that only it may write" in proc.stderr


def test_a_cached_config_moved_to_another_workloads_key_is_not_served(tmp_path, serve):  # noqa: F811
    url, cache = served_then_down(tmp_path, serve)
    # the file the hook would read for workload "other" (autotuner.job.hook._cache_paths' first key)
    key = hashlib.sha256(f"{url}|c|other|None".encode()).hexdigest()[:32]
    cache.rename(cache.with_name(f"{key}.json"))
    other = subprocess.run([sys.executable, "-m", "autotuner", "env", "--server", url, "--cluster", "c",
                            "--workload", "other", "--timeout", "10"], capture_output=True, text=True, timeout=60,
                           env=hook_env(tmp_path))  # fmt: skip
    assert (other.returncode, other.stdout) == (0, ""), other.stderr
    assert "is another's (the config of c/w, not of c/other; ignored)" in other.stderr


@pytest.mark.parametrize(("command", "code"), [([""], 127), (["/"], 126), (["/no/such/program"], 127)])
def test_exec_answers_a_command_it_cannot_run_as_a_shell_does(tmp_path, command, code):
    proc = subprocess.run([sys.executable, "-m", "autotuner", "exec", "--cluster", "c", "--workload", "w", "--",
                           *command], capture_output=True, text=True, timeout=60, env=hook_env(tmp_path))  # fmt: skip
    assert proc.returncode == code, proc.stderr
    assert "autotuner exec: cannot run" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_exec_with_help_before_the_command_still_runs_it(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "autotuner", "exec", "--help", "--", "echo", "CMD-RAN"],
                          capture_output=True, text=True, timeout=60, env=hook_env(tmp_path))  # fmt: skip
    assert proc.returncode == 0
    assert "CMD-RAN" in proc.stdout


def test_a_batch_no_trial_could_run_or_a_vanishing_learning_rate_is_never_exported_or_adopted(capsys):
    kept, dropped = check_exports({"AUTOTUNER_BATCH_SIZE": str(MAX_BATCH + 1), "AUTOTUNER_LR_SCALE": "1e-99",
                                   "AUTOTUNER_NUM_THREADS": "99999"})  # fmt: skip
    assert kept == {}
    assert set(dropped) == {"AUTOTUNER_BATCH_SIZE", "AUTOTUNER_LR_SCALE", "AUTOTUNER_NUM_THREADS"}
    assert check_exports({"AUTOTUNER_BATCH_SIZE": str(MAX_BATCH)})[0] == {
        "AUTOTUNER_BATCH_SIZE": str(MAX_BATCH)
    }
    t = tuned({"AUTOTUNER_BATCH_SIZE": "9" * 100_000, "AUTOTUNER_LR_SCALE": "2"})
    assert (t.batch_size, t.lr_scale) == (None, 1.0)  # taken together or not at all
    said = capsys.readouterr().err
    assert "(100,000 characters)" in said
    assert len(said) < 1000  # the value is not repeated whole


def test_the_job_sides_batch_bound_is_the_trials():
    from autotuner.job import exports

    assert exports.MAX_BATCH == MAX_BATCH


def test_a_stack_that_cannot_be_read_in_time_does_not_hold_the_job(monkeypatch, capsys):
    """A stat on a dead NFS mount in LD_LIBRARY_PATH hangs: detection gets DETECT_S, then the job goes on."""
    import threading
    import time

    from autotuner.job import hook

    release = threading.Event()

    def hanging(**_kwargs):
        release.wait(30)
        return {}, 0.0

    monkeypatch.setattr(hook, "timed_detect", hanging)
    started = time.monotonic()
    found, spent = hook._bounded_detect(2)
    release.set()
    assert found == {}
    assert time.monotonic() - started < hook.DETECT_S + 1.0
    assert spent >= hook.DETECT_S
    assert "the node's stack could not be read" in capsys.readouterr().err


def test_a_fetch_that_timed_out_says_its_bound_as_a_person_would():
    from autotuner.job import hook

    release = threading.Event()
    with pytest.raises(TimeoutError, match=r"^no answer within 0\.05 s$"):  # the time left: 0.04935 s
        hook._within(0.04935, release.wait)
    release.set()


def test_a_fetch_that_timed_out_names_the_jobs_whole_wait_not_what_detection_left(
    tmp_path, monkeypatch, capsys
):
    # The fetch gets what reading the node's stack left of --timeout; on a loaded node that is 1.37 s
    # of 1.5 s, and the job, which waited the whole 1.5 s, was told "no answer within 1.37 s".
    import time

    from autotuner.job import hook

    def slow(**_kwargs):
        time.sleep(0.2)
        return {}, 0.2

    monkeypatch.setattr(hook, "timed_detect", slow)
    monkeypatch.setenv("AUTOTUNER_CACHE_DIR", str(tmp_path / "cache"))
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepted by the kernel, never answered
    try:
        assert hook.main(["env", "--server", f"http://127.0.0.1:{silent.getsockname()[1]}",
                          "--cluster", "c", "--workload", "w", "--timeout", "0.6"]) == 0  # fmt: skip
    finally:
        silent.close()
    err = capsys.readouterr().err
    assert "no answer within 0.6 s" in err, err


# -inf and -1e-3 were read by argparse as options: "expected one argument", and no config (found by fuzzing)
@pytest.mark.parametrize("timeout", ["1e9", "inf", "nan", "-1", "0", "-inf", "-1e-3"])
def test_a_timeout_out_of_bounds_waits_the_default_and_the_command_runs(tmp_path, timeout):
    # Against a service that accepts and never answers: --timeout 1e9 held the job for good, inf was an
    # OverflowError, and nan, -1 or 0 gave up at once without a word.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # connections wait in the backlog: accepted by the kernel, never answered
    try:
        port = silent.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "autotuner", "exec", "--server", f"http://127.0.0.1:{port}",
                               "--cluster", "c", "--workload", "w", "--timeout", timeout, "--", "echo", "CMD-RAN"],
                              capture_output=True, text=True, timeout=60, env=hook_env(tmp_path))  # fmt: skip
    finally:
        silent.close()
    assert proc.returncode == 0, proc.stderr
    assert "CMD-RAN" in proc.stdout
    assert f"--timeout {float(timeout):g} is not a wait" in proc.stderr
    assert "no answer within 1.5 s" in proc.stderr
    assert "Traceback" not in proc.stderr
