"""What a study publishes, and what it holds against a cluster, when launches did not go as planned
(found by the engine and CLI reviews):
- a launch the tuner stopped following is not the env config's failure: a search launch cut off by a
  service restart was recorded failed on resume, and its env config quarantined on the cluster for good
  (every later study there skipped it, and published the baseline over a confirmed config);
- a study that compared nothing with the baseline (an outage) publishes nothing;
- a study with publishing off never says "published"."""

from __future__ import annotations

import dataclasses
import json

from autotuner.executors import Landscape, ReplayExecutor
from autotuner.store import LaunchKind, env_hash
from autotuner.tuning import StudyDriver, StudySettings, create_study
from autotuner.tuning.context import StudyContext
from autotuner.tuning.lease import Lease
from autotuner.tuning.pairs import Setting, compare
from autotuner.tuning.recover import INTERRUPTED
from tests.helpers import LANDSCAPE

RECORDED = json.loads(LANDSCAPE.read_text())
SPACE = {"env": {"NCCL_NSOCKS_PERTHREAD": [4]}, "force_inert": ["NCCL_NSOCKS_PERTHREAD"],
         "precisions": [["fp32", "fp32"], ["fp16", "fp16"]], "batch_sizes": [64, 256], "allow_batch_change": True}  # fmt: skip
ENV = {"NCCL_NSOCKS_PERTHREAD": "4"}


class Killed(BaseException):
    """The service stops (a restart) while it submits a launch."""


class DiesAtSecondSubmit(ReplayExecutor):
    submitted = 0

    def schedule(self, dryrun):
        self.submitted += 1
        if self.submitted == 2:  # launch 2 is the first search launch
            raise Killed
        return super().schedule(dryrun)


def study(store, tmp_path):
    settings = StudySettings(executor="replay", trials=3, candidates_per_launch=3, confirm_rounds=3, seed=7,
                             workdir=str(tmp_path / "runs"), executor_options={"landscape": str(LANDSCAPE)})  # fmt: skip
    return create_study(
        store, cluster="cpu-box", workload=RECORDED["workload"], space=SPACE, settings=settings
    )


def replay(executor=ReplayExecutor):
    return executor(Landscape.load(LANDSCAPE), seed=7)


def test_a_search_launch_cut_off_by_a_restart_is_cancelled_and_quarantines_nothing(store, tmp_path):
    first = study(store, tmp_path)
    try:
        StudyDriver(store, first.id, replay(DiesAtSecondSubmit), poll_s=0.01).run()
    except Killed:
        pass
    store.release_study(first.id, store.study(first.id).owner)
    assert StudyDriver(store, first.id, replay(), poll_s=0.01).run().state == "done"
    cut = next(launch for launch in store.launches(first.id) if launch.seq == 2)
    assert (cut.state, cut.error) == ("cancelled", INTERRUPTED)
    assert store.quarantined(store.cluster("cpu-box").id) == {}
    # ... so the next study on the cluster searches that env config again
    second = study(store, tmp_path)
    assert StudyDriver(store, second.id, replay(), poll_s=0.01).run().state == "done"
    assert [launch.env for launch in store.launches(second.id) if launch.kind == "search"]


def test_an_env_config_that_ran_on_the_cluster_is_released_from_quarantine(store, tmp_path):
    cluster = store.cluster("cpu-box", create=True)
    store.quarantine(cluster.id, ENV, "failed: killed by the OOM killer of a neighbour", None)
    store.quarantine(cluster.id, {"NCCL_NSOCKS_PERTHREAD": "2"}, "failed: NCCL init", None)
    first = study(store, tmp_path)
    # The search skips a quarantined config; a paired comparison (confirmation, ladder) may run it.
    lease = Lease(store, first.id)
    lease.acquire()
    ctx = StudyContext.load(store, first.id, replay(), lease)
    speedup, _ = compare(ctx, Setting(ENV, ctx.baseline_point), Setting({}, ctx.baseline_point), 2,
                         LaunchKind.CONFIRM, "confirm")  # fmt: skip
    assert speedup is not None
    assert set(store.quarantined(cluster.id)) == {env_hash({"NCCL_NSOCKS_PERTHREAD": "2"})}


class SearchLaunchesFail(ReplayExecutor):
    """An outage: every launch after the baseline ends failed, having measured nothing."""

    def dryrun(self, launch):
        if not launch.name.endswith("-l1"):  # a point the recording lacks: every candidate fails
            launch = dataclasses.replace(launch, env={"NCCL_NOT_RECORDED": "1"})
        return super().dryrun(launch)


def test_a_study_that_compared_nothing_leaves_the_served_config_as_it_was(store, tmp_path):
    first = study(store, tmp_path)
    assert StudyDriver(store, first.id, replay(), poll_s=0.01).run().state == "done"
    served = store.served_config("cpu-box", "small")
    second = study(store, tmp_path)
    final = StudyDriver(store, second.id, replay(SearchLaunchesFail), poll_s=0.01).run()
    assert final.state == "done"
    assert final.outcome["decision"].startswith("nothing but the baseline was measured")
    assert final.outcome.get("published_version") is None
    assert store.configs_of_study(second.id) == []
    assert store.served_config("cpu-box", "small").version == served.version


def test_a_study_that_publishes_nothing_never_says_published(store, tmp_path):
    # publish off (`tune --no-publish`): the decision read "...: published" with no config served
    settings = StudySettings(executor="replay", trials=3, candidates_per_launch=3, confirm_rounds=3, seed=7,
                             workdir=str(tmp_path / "runs"), executor_options={"landscape": str(LANDSCAPE)},
                             publish=False)  # fmt: skip
    created = create_study(
        store, cluster="cpu-box", workload=RECORDED["workload"], space=SPACE, settings=settings
    )
    final = StudyDriver(store, created.id, replay(), poll_s=0.01).run()
    assert final.state == "done"
    assert store.served_config("cpu-box", "small") is None
    assert final.outcome["decision"] == (
        "tuned config is faster with 95% confidence: the tuned config would be published; not published (publish off)"
    )
