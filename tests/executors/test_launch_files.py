"""What a launch leaves in its directory is read bounded and without blocking (autotuner.executors.files):
a FIFO, a link to /dev/zero or a huge file where result.json, exit_code, tag or trial.log should be
fails the read at once, with a reason, instead of hanging the study or filling the tuner's memory."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from autotuner.executors import LaunchRequest, ReplayExecutor
from autotuner.executors.files import log_tail, read_bounded, read_small_text
from autotuner.executors.results import ResultError
from autotuner.executors.script import read_exit_code

DEADLINE_S = 20  # a read that blocks would never return; a loaded CI machine still answers in this


def within_deadline(fn):
    """fn()'s value or exception, or a failure if it has not returned by the deadline (a blocked read)."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(DEADLINE_S)
    assert not thread.is_alive(), "the read blocked"
    if "error" in box:
        raise box["error"]
    return box["value"]


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def dev_zero_link(path: Path) -> Path:
    path.symlink_to("/dev/zero")
    return path


@pytest.mark.parametrize(
    ("make", "why"),
    [(fifo, "is not a regular file"), (dev_zero_link, "is a symbolic link")],
    ids=["fifo", "link-to-dev-zero"],
)
def test_read_bounded_refuses_what_is_not_a_regular_file_at_once(tmp_path, make, why):
    path = make(tmp_path / "result.json")
    with pytest.raises(OSError, match=why):
        within_deadline(lambda: read_bounded(path, 1 << 20))


def test_read_bounded_reads_up_to_its_limit_and_refuses_one_byte_more(tmp_path):
    path = tmp_path / "result.json"
    path.write_bytes(b"x" * 1000)
    assert read_bounded(path, 1000) == b"x" * 1000
    with pytest.raises(OSError, match="larger than 999 bytes"):
        read_bounded(path, 999)


def test_a_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_bounded(tmp_path / "result.json", 10)


@pytest.mark.parametrize("make", [fifo, dev_zero_link], ids=["fifo", "link-to-dev-zero"])
def test_exit_code_and_tag_that_are_not_files_read_as_absent(tmp_path, make):
    make(tmp_path / "exit_code")
    make(tmp_path / "tag")
    assert within_deadline(lambda: read_exit_code(tmp_path)) is None
    assert within_deadline(lambda: read_small_text(tmp_path / "tag")) is None


def test_an_exit_code_file_of_junk_reads_as_absent(tmp_path):
    (tmp_path / "exit_code").write_text("1" * 10_000)  # over the 64 bytes an exit code needs
    assert read_exit_code(tmp_path) is None
    (tmp_path / "exit_code").write_text("\u0663\n")  # a digit to str.isdigit, no exit code
    assert read_exit_code(tmp_path) is None
    (tmp_path / "exit_code").write_text("137\n")
    assert read_exit_code(tmp_path) == 137


def test_a_log_tail_is_the_last_lines_of_its_last_bytes(tmp_path):
    log = tmp_path / "trial.log"
    with log.open("w") as out:
        out.write("x" * (8 << 20) + "\n")  # one 8 MiB line, then the lines that matter
        out.writelines(f"line {i}\n" for i in range(100))
    tail = log_tail(log, 5, max_bytes=4096)
    assert tail.splitlines() == [f"line {i}" for i in range(95, 100)]
    wide = log_tail(log, 1000, max_bytes=4096)
    assert len(wide) <= 4096 + len("[...] ")
    assert wide.startswith("[...] ")


@pytest.mark.parametrize("make", [fifo, dev_zero_link], ids=["fifo", "link-to-dev-zero"])
def test_a_log_that_is_not_a_file_has_no_tail(tmp_path, make):
    log = make(tmp_path / "trial.log")
    assert within_deadline(lambda: log_tail(log, 60)) == ""


@pytest.mark.parametrize("make", [fifo, dev_zero_link], ids=["fifo", "link-to-dev-zero"])
def test_an_executor_fails_a_launch_whose_result_is_not_a_file(tmp_path, make, monkeypatch):
    """Executor.fetch_result (every file-based backend) says why; the study records it as the reason."""
    request = LaunchRequest(name="s1-l2", spec={"candidates": [{}]}, env={}, workdir=tmp_path)
    make(request.result_path)
    executor = ReplayExecutor.__new__(ReplayExecutor)  # fetch_result reads the launch directory only
    with pytest.raises(ResultError, match="result.json is"):
        within_deadline(lambda: executor.fetch_result("replay:s1-l2", request))


def test_the_result_cap_is_the_limit_in_force(tmp_path, monkeypatch):
    request = LaunchRequest(name="s1-l2", spec={"candidates": [{}]}, env={}, workdir=tmp_path)
    request.result_path.write_text('{"schema_version": 1, "pad": "' + "a" * 4096 + '"}')
    monkeypatch.setenv("AUTOTUNER_MAX_RESULT_BYTES", "1024")
    executor = ReplayExecutor.__new__(ReplayExecutor)
    with pytest.raises(ResultError, match="larger than 1,024 bytes"):
        executor.fetch_result("replay:s1-l2", request)
