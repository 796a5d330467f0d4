"""A launch its cluster cancelled (a node lost, a preempted job, srun unable to reach the controller)
measured nothing through no fault of its config: it is tried again at once, as a resumed study tries one
left behind. Before, a baseline so cancelled failed its study for good ("the baseline did not run"), and
a search launch spent the study's budget on nothing. A launch given up by the study's own rule
(queue_timeout_s) is not queued again."""

from __future__ import annotations

import pytest

from autotuner.executors import Description, LaunchRequest, LaunchState
from autotuner.executors.base import RESULT_UNWRITTEN
from autotuner.store import Store
from autotuner.tuning import Progress, StudyDriver
from tests.autotuner.test_driver import replay, study_with

NODE_FAIL = "Slurm NODE_FAIL: the node was lost (the cluster's failure, not the config's)"


class ClusterCancels:
    """A replay executor whose launches named in `cancelled` end cancelled by the cluster, and whose
    launches named in `queued` wait in its queue for ever."""

    def __init__(
        self, cancelled: set[str] = frozenset(), queued: set[str] = frozenset(), why: str = NODE_FAIL
    ) -> None:
        self.inner, self.cancelled, self.queued, self.why = replay(), cancelled, queued, why

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def describe(self, backend_id: str, launch: LaunchRequest) -> Description:
        if launch.name in self.cancelled:
            return Description(LaunchState.CANCELLED, None, self.why)
        if launch.name in self.queued:
            return Description(LaunchState.PENDING, None, "Slurm PENDING: Resources")
        return self.inner.describe(backend_id, launch)

    def wait(self, *args, **kwargs):  # the base class's loop, with this describe
        return type(self.inner).wait(self, *args, **kwargs)


def kinds(store: Store, study_id: int) -> list[tuple[str, int, str]]:
    return [(x.kind, x.attempt, x.state) for x in store.launches(study_id)]


def test_a_baseline_its_cluster_cancelled_is_tried_again_and_the_study_goes_on(store: Store, tmp_path):
    study = study_with(store, tmp_path, trials=1, confirm_rounds=0, ladder_rounds=0)
    executor = ClusterCancels(cancelled={f"s{study.id}-l1"})
    notes: list[str] = []
    final = StudyDriver(store, study.id, executor, poll_s=0.01, progress=Progress(on_note=notes.append)).run()  # type: ignore[arg-type]
    assert final.state == "done", final.error
    assert kinds(store, study.id)[:3] == [
        ("baseline", 1, "cancelled"), ("baseline", 2, "succeeded"), ("search", 1, "succeeded")
    ]  # fmt: skip
    assert store.launches(study.id)[0].error == NODE_FAIL
    assert notes == [f"launch 1 baseline was cancelled ({NODE_FAIL}): trying it again (attempt 2 of 2)"]


def test_a_baseline_cancelled_at_every_attempt_fails_its_study_after_max_attempts(store: Store, tmp_path):
    study = study_with(store, tmp_path, trials=1, confirm_rounds=0, ladder_rounds=0, max_attempts=3)
    executor = ClusterCancels(cancelled={f"s{study.id}-l{seq}" for seq in range(1, 10)})
    final = StudyDriver(store, study.id, executor, poll_s=0.01).run()  # type: ignore[arg-type]
    assert final.state == "failed"
    assert kinds(store, study.id) == [("baseline", n, "cancelled") for n in (1, 2, 3)]


def test_a_search_launch_its_cluster_cancelled_is_measured_on_the_same_budget(store: Store, tmp_path):
    study = study_with(store, tmp_path, trials=1, confirm_rounds=0, ladder_rounds=0)
    executor = ClusterCancels(cancelled={f"s{study.id}-l2"})
    final = StudyDriver(store, study.id, executor, poll_s=0.01).run()  # type: ignore[arg-type]
    assert final.state == "done", final.error
    launches = store.launches(study.id)
    search = [(x.attempt, x.state) for x in launches if x.kind == "search"]
    assert search == [(1, "cancelled"), (2, "succeeded")]  # one launch of the budget, measured
    assert final.launches_done == 1
    [cancelled, retried] = [x for x in launches if x.kind == "search"]
    assert retried.spec["candidates"] == cancelled.spec["candidates"]
    measured = store.candidates(study.id, launch_id=retried.id)
    assert [row.state for row in measured] == ["ok"] * len(retried.spec["candidates"])


def test_a_launch_given_up_at_its_queue_timeout_is_not_queued_again(store: Store, tmp_path):
    study = study_with(store, tmp_path, trials=1, confirm_rounds=0, ladder_rounds=0, max_attempts=3)
    executor = ClusterCancels(queued={f"s{study.id}-l1"})
    executor.inner.queue_timeout_s = 0.05
    final = StudyDriver(store, study.id, executor, poll_s=0.01).run()  # type: ignore[arg-type]
    assert final.state == "failed"
    assert kinds(store, study.id) == [("baseline", 1, "cancelled")]
    assert store.launches(study.id)[0].error.startswith("still queued after 0 s (queue_timeout_s)")


def test_a_launch_whose_result_a_full_disk_kept_unwritten_is_not_run_again_at_once(store: Store, tmp_path):
    study = study_with(store, tmp_path, trials=1, confirm_rounds=0, ladder_rounds=0)
    executor = ClusterCancels(
        cancelled={f"s{study.id}-l1"}, why=f"{RESULT_UNWRITTEN}: No space left on device"
    )
    final = StudyDriver(store, study.id, executor, poll_s=0.01).run()  # type: ignore[arg-type]
    assert final.state == "failed"
    assert kinds(store, study.id) == [("baseline", 1, "cancelled")]


def test_comparisons_launch_their_missing_rounds_themselves_not_as_retries(store: Store, tmp_path):
    study = study_with(store, tmp_path, trials=1, confirm_rounds=2, ladder_rounds=0, max_attempts=3)
    executor = ClusterCancels(cancelled={f"s{study.id}-l3"})
    final = StudyDriver(store, study.id, executor, poll_s=0.01).run()  # type: ignore[arg-type]
    assert final.state == "done", final.error
    launches = kinds(store, study.id)
    assert launches[2] == ("confirm", 1, "cancelled")
    assert [attempt for kind, attempt, _ in launches if kind == "confirm"] == [1] * (len(launches) - 2)


class Crash(BaseException):
    """The runner killed (SIGKILL) as it submitted a launch."""


class CrashesThenCancels(ClusterCancels):
    """Crashes at the submit of a 2-node launch (`crash`), or has its first 2-node launch cancelled."""

    def __init__(self, crash: bool) -> None:
        super().__init__()
        self.crash, self.spent = crash, False

    def schedule(self, dryrun):
        if self.crash and dryrun.launch.nnodes == 2:
            raise Crash()
        return self.inner.schedule(dryrun)

    def submit(self, launch):
        return type(self.inner).submit(self, launch)

    def describe(self, backend_id: str, launch: LaunchRequest) -> Description:
        if launch.nnodes == 2 and not self.spent:
            self.spent = True
            return Description(LaunchState.CANCELLED, None, NODE_FAIL)
        return self.inner.describe(backend_id, launch)


def test_a_launch_retried_on_resume_then_cancelled_runs_again_as_it_was_stored(store: Store, tmp_path):
    """Retried on resume (attempt 2), then cancelled by its cluster: attempt 3 was built from the plan
    resume made, which knows only env and points, and a 2-node scaling launch ran on 1 node."""
    study = study_with(store, tmp_path, trials=1, confirm_rounds=0, ladder_rounds=0, max_attempts=3,
                       scaling_nodes=[1, 2])  # fmt: skip
    with pytest.raises(Crash):
        StudyDriver(store, study.id, CrashesThenCancels(crash=True), poll_s=0.01).run()  # type: ignore[arg-type]
    final = StudyDriver(store, study.id, CrashesThenCancels(crash=False), poll_s=0.01).run()  # type: ignore[arg-type]
    assert final.state == "done", final.error
    two_node = [
        (x.attempt, x.state) for x in store.launches(study.id) if x.kind == "scaling" and x.nnodes == 2
    ]
    assert two_node[:3] == [(1, "cancelled"), (2, "cancelled"), (3, "succeeded")]
    assert [x.nnodes for x in store.launches(study.id) if x.kind == "scaling" and x.attempt > 1] == [2, 2]
