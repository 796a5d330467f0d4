"""Re-validation against the other side of a race: a runner whose read of the row predates another
runner's finish, a study publishing while a failed re-validation is about to replace its version, and
a schedule over a re-validation whose date is no date. Races are injected by wrapping a store method
to run the other side's action at that moment: no sleeps."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

import autotuner.tuning.revalidate as rv
from autotuner.store import Store, ValidationState, ValidationTrigger
from autotuner.store.models import utcnow
from autotuner.tuning.lease import StudyBusy
from autotuner.tuning.revalidate import Revalidation, request, schedule_due
from tests.store.test_store_review import FIELDS
from tests.tuning.test_revalidate import NEW_STACK, landscape, published, revalidate

__all__ = ["published"]  # the fixture, used by name
WEEK_S = 7 * 86400


def publish(store, workload="w"):
    study = store.create_study(name=f"s-{workload}", cluster="c", workload_name=workload,
                               workload_spec={"name": workload, "tables": []}, space={}, settings={}, state="done")  # fmt: skip
    return store.publish_config(cluster="c", workload=workload, nodes=1, study_id=study.id, **FIELDS)


class Measured(StudyBusy):
    """Raised where a runner would start measuring: it got that far."""


def test_a_runner_whose_read_predates_another_runners_finish_leaves_its_verdict(store, monkeypatch):
    config = publish(store)
    row, _ = store.request_validation(config.id, "manual", "asked")
    store.acquire_study(config.study_id, "replica-b", 60)  # replica B runs it now
    real = store.configs_by_id

    def b_finishes(ids):  # A has read the row (queued); B ends it and lets go of the lease meanwhile
        store.configs_by_id = real
        store.finish_validation(row.id, ValidationState.FAILED, result={"why": "slower"},
                                action="replaced: published v2")  # fmt: skip
        store.release_study(config.study_id, "replica-b")
        return real(ids)

    store.configs_by_id = b_finishes

    def measure(*_args, **_kwargs):
        raise Measured("A measures again")

    monkeypatch.setattr(rv.StudyContext, "load", measure)
    done = Revalidation(store, row.id, executor=None, owner="replica-a").run()
    after = store.validation(row.id)
    assert (after.state, after.action, after.result) == (
        "failed",
        "replaced: published v2",
        {"why": "slower"},
    )
    assert done.state == ValidationState.FAILED
    assert store.pending_validations() == []


def test_a_version_published_while_a_failed_one_is_replaced_stays_served(store, published):
    recorded, v1 = published
    landscape(recorded, NEW_STACK, gain=False)
    real = store.config_history
    newer = []

    def study_publishes(*args, **kwargs):  # after _act saw v1 served, unpinned: a study publishes v2
        store.config_history = real
        newer.append(store.publish_config(cluster="cpu-box", workload="small", nodes=1, env={"NCCL_ALGO": "Tree"},
                                          fwd_precision="fp32", bwd_precision="fp32", batch_size=256,
                                          sharding=v1.sharding, pipeline=v1.pipeline, study_id=v1.study_id))  # fmt: skip
        return real(*args, **kwargs)

    store.config_history = study_publishes
    done = revalidate(store, v1)
    assert newer, "the study never published: the race was not injected"
    assert done.state == ValidationState.FAILED
    assert (done.action, done.new_config_id) == ("not replaced: v1 is no longer the served version", None)
    assert [c.version for c in store.config_history("cpu-box", "small")] == [2, 1]
    assert store.served_config("cpu-box", "small").id == newer[0].id
    assert store.validation_views([v1])[v1.id]["flagged"].startswith(f"re-validation {done.id} failed")


def test_the_schedule_asks_for_due_versions_past_a_revalidation_whose_date_is_no_date(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    c1, c2 = publish(store, "w1"), publish(store, "w2")
    old, _ = request(store, c2)
    store.finish_validation(old.id, ValidationState.HELD, result={"why": "ok"})
    with store.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE at_config_validations SET created_at = 'garbage' WHERE id = :i"), {"i": old.id}
        )
    asked = schedule_due(store, WEEK_S, now=utcnow() + timedelta(days=8))
    assert sorted(v.config_id for v in asked) == [c1.id, c2.id]
    assert {v.trigger for v in asked} == {ValidationTrigger.SCHEDULE}
    assert schedule_due(store, WEEK_S, now=utcnow() + timedelta(days=8)) == []  # queued already: once
    store.dispose()
