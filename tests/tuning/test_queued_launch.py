"""A launch waiting in the scheduler's queue says so on its row, in the scheduler's words, for the
dashboard, REST and the CLI's progress line: before, a Slurm job pending on `PartitionNodeLimit`
read "running", with nothing said, until queue_timeout_s ended it."""

from __future__ import annotations

from types import SimpleNamespace

from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from autotuner.executors import Description, LaunchRequest, LaunchState
from autotuner.executors.slurm.executor import JobInfo, _describe
from autotuner.store import Store
from autotuner.tuning import Progress, StudyDriver
from autotuner.tuning.launch import wait
from tests.autotuner.test_driver import replay, study_with

WHY = "Slurm PENDING: PartitionNodeLimit"


class Queued:
    """A replay executor whose every launch waits in a queue for its first polls, then runs."""

    def __init__(self, store: Store, study_id: int, queued_polls: int = 3) -> None:
        self.inner, self.store, self.study_id, self.queued_polls = replay(), store, study_id, queued_polls
        self.polls: dict[str, int] = {}
        self.seen: list[tuple[str, str | None]] = []  # the launch's row, as each poll finds it

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def describe(self, backend_id: str, launch: LaunchRequest) -> Description:
        row = self.store.launches(self.study_id)[-1]
        self.seen.append((row.state, row.waiting_on))
        self.polls[backend_id] = self.polls.get(backend_id, 0) + 1
        if self.polls[backend_id] <= self.queued_polls:
            return Description(LaunchState.PENDING, None, WHY)
        if self.polls[backend_id] <= self.queued_polls + 2:
            return Description(LaunchState.RUNNING)
        return self.inner.describe(backend_id, launch)

    def wait(self, *args, **kwargs):  # the base class's loop, with this describe
        return type(self.inner).wait(self, *args, **kwargs)


def test_a_queued_launch_says_what_it_waits_on_then_nothing_once_it_runs(store: Store, tmp_path):
    study = study_with(store, tmp_path, trials=1, confirm_rounds=0, ladder_rounds=0)
    executor = Queued(store, study.id)
    said: list[tuple[int, str]] = []
    progress = Progress(on_launch_waiting=lambda launch, why: said.append((launch.seq, why)))
    final = StudyDriver(store, study.id, executor, poll_s=0.01, progress=progress).run()  # type: ignore[arg-type]
    assert final.state == "done", final.error
    assert ("pending", WHY) in executor.seen  # said while queued
    queued_at = executor.seen.index(("pending", WHY))
    assert ("running", None) in executor.seen[queued_at:]  # and unsaid once it ran
    launches = store.launches(study.id)
    # once per change, not once per poll: queued, then running ("")
    assert said == [(launch.seq, why) for launch in launches for why in (WHY, "")]
    assert all(launch.waiting_on is None and launch.state == "succeeded" for launch in launches)


def test_a_launch_followed_again_after_a_restart_is_not_left_queued(store: Store, tmp_path):
    """A runner restarted while its launch was queued finds it running: the row says so at the first
    poll (it kept "pending" and Slurm's old reason for the whole run)."""
    study = study_with(store, tmp_path, trials=1, confirm_rounds=0, ladder_rounds=0)
    launch = store.add_launch(
        study_id=study.id, kind="baseline", env={}, spec={"candidates": [{}]}, executor="slurm"
    )
    assert store.mark_waiting(launch.id, WHY)
    row = store.launch(launch.id)  # as the restarted runner reads it

    class Running:  # the job started while no runner followed it
        def wait(self, backend_id, request, *, started, queued, poll_s, on_poll):
            assert queued  # its run time starts now, not at its submission
            on_poll(Description(LaunchState.RUNNING))
            return "followed"

    lease = SimpleNamespace(due=lambda: False, beat=lambda force=False: None)
    ctx = SimpleNamespace(
        store=store, progress=Progress(), executor=Running(), lease=lease, poll_s=0.01, study_id=study.id
    )
    assert wait(ctx, "123", None, row, 0.0, queued=True) == "followed"  # type: ignore[arg-type]
    assert (store.launch(launch.id).state, store.launch(launch.id).waiting_on) == ("running", None)


def test_an_ended_launch_waits_on_nothing_and_is_never_reopened(store: Store, tmp_path):
    study = study_with(store, tmp_path)
    launch = store.add_launch(
        study_id=study.id, kind="baseline", env={}, spec={"candidates": [{}]}, executor="slurm"
    )
    assert store.mark_waiting(launch.id, WHY)
    store.update_launch(launch.id, state="cancelled")  # given up at queue_timeout_s
    assert store.launch(launch.id).waiting_on is None
    # a runner whose lease was taken, polling late, must not reopen what the new holder ended
    assert not store.mark_waiting(launch.id, WHY)
    assert not store.mark_waiting(launch.id, None)
    assert (store.launch(launch.id).state, store.launch(launch.id).waiting_on) == ("cancelled", None)


def test_rest_shows_a_queued_launch_and_what_it_waits_on(store: Store, tmp_path):
    study = study_with(store, tmp_path)
    launch = store.add_launch(
        study_id=study.id, kind="baseline", env={}, spec={"candidates": [{}]}, executor="slurm"
    )
    assert store.mark_waiting(launch.id, WHY)
    settings = Settings(data_dir=tmp_path, tokens="r-token:read", scheduler=False)
    with TestClient(create_app(settings, store=store), headers={"Authorization": "Bearer r-token"}) as client:
        [shown] = client.get(f"/v1/studies/{study.id}/launches").json()
    assert (shown["state"], shown["waiting_on"]) == ("pending", WHY)


def test_slurm_says_pending_and_why():
    assert _describe(JobInfo("PENDING", "PartitionNodeLimit"), None).reason == WHY
    assert _describe(JobInfo("PENDING", ""), None).reason == "Slurm PENDING"
    assert _describe(JobInfo("RUNNING", ""), None).state == LaunchState.RUNNING


def test_a_poll_that_cannot_read_a_queued_launch_changes_nothing(store: Store, tmp_path):
    study = study_with(store, tmp_path, trials=1, confirm_rounds=0, ladder_rounds=0)
    launch = store.add_launch(
        study_id=study.id, kind="baseline", env={}, spec={"candidates": [{}]}, executor="slurm"
    )
    seen: list[tuple[str, str | None]] = []

    class Flaky:  # queued, then one poll squeue does not answer, then queued still
        def wait(self, backend_id, request, *, started, queued, poll_s, on_poll):
            for desc in (Description(LaunchState.PENDING, None, WHY), Description(LaunchState.UNKNOWN, None, "squeue: timed out"),
                         Description(LaunchState.PENDING, None, WHY)):  # fmt: skip
                on_poll(desc)
                row = store.launch(launch.id)
                seen.append((row.state, row.waiting_on))
            return "followed"

    said: list[str] = []
    lease = SimpleNamespace(due=lambda: False, beat=lambda force=False: None)
    ctx = SimpleNamespace(store=store, progress=Progress(on_launch_waiting=lambda launch, why: said.append(why)),
                          executor=Flaky(), lease=lease, poll_s=0.01, study_id=study.id)  # fmt: skip
    wait(ctx, "123", None, store.launch(launch.id), 0.0)  # type: ignore[arg-type]
    assert seen == [("pending", WHY)] * 3  # the unanswered poll did not make it "running"
    assert said == [WHY]
