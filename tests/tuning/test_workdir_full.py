"""A full disk under the study's workdir (ENOSPC, or a quota: EDQUOT) while a launch is submitted says
nothing of the env config under test: the launch is recorded cancelled, saying so, it spends no search
trial and quarantines nothing, and the study stays running. Resumed once there is space, it goes on
and finishes. Before, the launch failed and its study with it, for good (`autotuner tune --study` could
not resume a failed study)."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import autotuner.executors.base as executor_base
from autotuner.cli.commands import app
from autotuner.executors import LaunchRequest, LocalExecutor
from autotuner.store import Store
from autotuner.tuning import StudyDriver
from autotuner.tuning.lease import FullDisks, WorkdirFull
from autotuner.tuning.queue import StudyQueue
from tests.autotuner.test_driver import replay, study_with


class Disk:
    """The workdir's disk, full (`code`: ENOSPC or EDQUOT) for the launches from `from_seq` on while `full`:
    the first file a launch's submit writes there (its spec.json) is refused, as a full disk refuses it."""

    def __init__(self, monkeypatch, from_seq: int, code: int = errno.ENOSPC) -> None:
        self.full, self.from_seq, self.code = True, from_seq, code
        real = executor_base.write_new

        def write_new(path: Path, data, mode: int = 0o644) -> None:
            if self.holds(path.parent):
                raise OSError(self.code, os.strerror(self.code), str(path))
            real(path, data, mode)

        monkeypatch.setattr(executor_base, "write_new", write_new)

    def holds(self, workdir: Path) -> bool:
        return self.full and int(workdir.name.removeprefix("launch-")) >= self.from_seq


class LocalOnFullDisk:
    """The replay executor, but a launch the full disk holds is submitted by a real local executor (its
    script rendered, its directory made, its spec written), the way `--executor local` submits one."""

    def __init__(self, disk: Disk) -> None:
        self.inner, self.local, self.disk = replay(), LocalExecutor(gpus=0), disk

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def submit(self, launch: LaunchRequest):
        if self.disk.holds(launch.workdir):
            return self.local.submit(launch)
        return self.inner.submit(launch)


@pytest.mark.parametrize(
    ("code", "words"), [(errno.ENOSPC, "no space left on device"), (errno.EDQUOT, "disk quota exceeded")]
)
def test_a_search_launch_a_full_disk_kept_from_being_submitted_spends_nothing_and_the_study_resumes(
    store: Store, tmp_path, monkeypatch, code, words
):
    study = study_with(store, tmp_path, trials=2)
    workdir = Path(study.settings["workdir"]) / f"study-{study.id}"
    disk = Disk(monkeypatch, from_seq=2, code=code)  # the baseline ran; the first search launch finds it full
    with pytest.raises(RuntimeError, match=f"launch 2 not submitted: {words} under "):
        StudyDriver(store, study.id, LocalOnFullDisk(disk), poll_s=0.01).run()  # type: ignore[arg-type]
    row = store.study(study.id)
    assert (row.state, row.error) == ("running", None)  # resumable: was failed, for good
    baseline, search = store.launches(study.id)
    assert baseline.state == "succeeded"
    assert search.state == "cancelled"  # was failed: no env config is to blame
    assert search.error.startswith(f"not submitted: {words} under {workdir} (OSError: [Errno {code}]")
    assert store.candidates(study.id, kinds=["search"]) == []
    assert store.quarantined(row.cluster_id) == {}

    disk.full = False  # space freed: `autotuner tune --study` again
    final = StudyDriver(store, study.id, replay(), poll_s=0.01).run()
    assert final.state == "done", final.error
    searched = [launch for launch in store.launches(study.id) if launch.kind == "search"]
    assert [launch.state for launch in searched] == ["cancelled", "succeeded", "succeeded"]  # both trials run
    assert final.launches_done == 2
    assert store.quarantined(row.cluster_id) == {}


class Later:
    """The queue's clock, moved on by hand: its pause between two tries of a study passes at once."""

    def __init__(self) -> None:
        self.offset = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.offset


def test_the_queue_tries_a_study_whose_disk_is_full_again_after_a_pause_and_says_so_once(
    store: Store, tmp_path, monkeypatch, caplog
):
    study = study_with(store, tmp_path, trials=2)
    disk = Disk(monkeypatch, from_seq=2)
    clock = Later()
    queue = StudyQueue(store, lambda settings: LocalOnFullDisk(disk), poll_s=0.01)
    queue.full_disks = FullDisks(clock=clock.monotonic)
    caplog.set_level(logging.WARNING, logger="autotuner.queue")

    assert queue.run_once() is False  # nothing done: the loop waits its tick
    assert store.study(study.id).state == "running"  # was failed, for good
    assert [launch.state for launch in store.launches(study.id)] == ["succeeded", "cancelled"]
    assert queue.run_once() is False  # within its pause: not tried again (each try records a launch)
    assert len(store.launches(study.id)) == 2

    clock.offset += 3600  # the pause passed, the disk still full: tried again, not said again
    assert queue.run_once() is False
    assert [launch.state for launch in store.launches(study.id)] == ["succeeded", "cancelled", "cancelled"]
    said = [r.getMessage() for r in caplog.records if "no space left on device" in r.getMessage()]
    assert len(said) == 1, said
    assert f"study {study.id}: launch 2 not submitted: no space left on device under " in said[0]
    assert "the study stays running" in said[0]

    disk.full = False
    clock.offset += 3600
    assert queue.run_once() is True
    final = store.study(study.id)
    assert final.state == "done", final.error
    assert final.launches_done == 2
    assert store.quarantined(final.cluster_id) == {}


@pytest.fixture
def small_disk(tmp_path):
    """A real 1 MiB tmpfs (as root, where mounts are allowed; else skipped: the tests above cover the
    same path with the write refused by hand)."""
    where = tmp_path / "disk"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode(errors='replace').strip()}")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


def fill(where: Path) -> Path:
    """Write a file into `where` until its disk refuses more; the file."""
    filler = where / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        with pytest.raises(OSError, match="No space left on device"):  # noqa: PT012 (the loop ends there)
            while True:
                os.write(fd, b"\0" * 4096)
    finally:
        os.close(fd)
    return filler


def test_tune_on_a_full_disk_says_so_in_a_line_and_resumes_once_there_is_space(store: Store, small_disk):
    study = study_with(store, small_disk, name="full", trials=2, workdir=str(small_disk / "runs"))
    filler = fill(small_disk)
    runner = CliRunner()

    result = runner.invoke(app, ["tune", "--study", "full", "--db", store.url])
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # said, not a traceback
    [said] = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert f"launch 1 not submitted: no space left on device under {small_disk / 'runs'}" in said
    assert "free space there, then resume it with autotuner tune --study full" in said
    assert store.study(study.id).state == "running"
    [baseline] = store.launches(study.id)
    assert baseline.state == "cancelled"

    filler.unlink()
    result = runner.invoke(app, ["tune", "--study", "full", "--db", store.url])
    assert result.exit_code == 0, result.output
    assert store.study(study.id).state == "done"


def test_the_pause_after_a_full_disk_doubles_up_to_its_cap_and_starts_over_once_it_ran(caplog):
    """Each try on a disk still full records a cancelled launch: a fixed minute added 2,880 rows over a
    weekend. The pause doubles, capped, so space freed is still seen within the cap."""
    now = [0.0]
    disks = FullDisks(clock=lambda: now[0])
    caplog.set_level(logging.WARNING, logger="autotuner")
    pauses = []
    for _ in range(7):
        disks.full("s", WorkdirFull("launch 2 not submitted"), "the study")
        start = now[0]
        while disks.waiting("s"):
            now[0] += 1
        pauses.append(now[0] - start)
    assert pauses == [60, 120, 240, 480, 900, 900, 900]
    assert len([r for r in caplog.records if "not submitted" in r.getMessage()]) == 1
    assert not disks.waiting("other")  # one study's full disk pauses no other
    disks.cleared("s")
    disks.full("s", WorkdirFull("launch 9 not submitted"), "the study")
    assert disks.waiting("s")
    now[0] += FullDisks.FIRST_S
    assert not disks.waiting("s")  # paused from the first step again
    assert len([r for r in caplog.records if "not submitted" in r.getMessage()]) == 2  # said again


def test_a_full_disk_an_error_was_raised_from_none_over_is_not_what_stopped_the_launch():
    """`raise ... from None` says the error it was raised over is beside the point (Python's traceback
    leaves it out); read anyway, an error of the submit's own raised `from None` while a full disk was
    handled read as that full disk: the launch recorded cancelled, "not submitted: no space left on
    device", and the study paused rather than failed with the submit's own error."""
    from autotuner.tuning.lease import disk_full

    def raised(suppress: bool) -> BaseException:
        try:
            try:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            except OSError as full:
                if suppress:
                    raise ValueError("the submit's own error") from None
                raise ValueError("the submit's own error") from full
        except ValueError as exc:
            return exc
        raise AssertionError("unreachable")

    assert disk_full(raised(suppress=False)) == "no space left on device"
    assert disk_full(raised(suppress=True)) is None
