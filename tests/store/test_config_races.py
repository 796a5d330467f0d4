"""Writers of one config key at once (two replicas publishing, a study finishing while a
re-validation of its key does, two operators pinning): each gets its own version, exactly one is
pinned, and nobody is told a version that is not the one served."""

from __future__ import annotations

import multiprocessing
import threading

import pytest

from autotuner.store import Store

FIELDS = dict(env={}, fwd_precision="fp32", bwd_precision="fp32", batch_size=64, sharding="table_wise",
              num_threads=None, pipeline=None, evidence={})  # fmt: skip
PUBLISHES = 8


def _publish(url: str, errors) -> None:
    store = Store(url, migrate_schema=False)
    try:
        for _ in range(PUBLISHES):
            store.publish_config(cluster="c", workload="w", nodes=1, **FIELDS)
    except Exception as exc:  # reported to the test, which names it
        errors.put(f"{type(exc).__name__}: {exc}")
    finally:
        store.dispose()


def test_publishes_at_once_each_get_their_own_version(store_url):
    store = Store(store_url)
    store.upsert_workload("w", {"name": "w", "tables": []})
    store.cluster("c", create=True)
    errors = multiprocessing.get_context("spawn").Queue()
    writers = [
        multiprocessing.get_context("spawn").Process(target=_publish, args=(store_url, errors))
        for _ in range(3)
    ]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(timeout=120)
    assert [writer.exitcode for writer in writers] == [0, 0, 0]
    assert errors.empty(), errors.get()
    assert sorted(store.config_versions("c", "w", 1).values()) == list(range(1, 3 * PUBLISHES + 1))
    store.dispose()


def test_pins_at_once_leave_one_version_pinned_and_say_which(store_url):
    store = Store(store_url)
    store.upsert_workload("w", {"name": "w", "tables": []})
    for _ in range(4):
        store.publish_config(cluster="c", workload="w", nodes=1, **FIELDS)

    def pin(version: int, start: threading.Barrier, answers: dict[int, int | None]) -> None:
        start.wait()
        served = store.pin_config("c", "w", 1, version)
        answers[version] = served.version if served is not None else None

    for _ in range(10):
        answers: dict[int, int | None] = {}
        start = threading.Barrier(2)
        pins = [threading.Thread(target=pin, args=(v, start, answers)) for v in (1, 2)]
        for thread in pins:
            thread.start()
        for thread in pins:
            thread.join(timeout=60)
        pinned = [c.version for c in store.config_history("c", "w", 1) if c.pinned]
        assert len(pinned) == 1, pinned
        served = store.served_config("c", "w", 1)
        assert served is not None
        assert served.version == pinned[0]
        # the last pin's caller was told the version now served
        assert served.version in answers.values()
        store.pin_config("c", "w", 1, None)
    store.dispose()


def test_rollbacks_at_once_each_step_back_once_or_are_refused(store_url):
    """Three rollbacks at once each pinned the version below the same served one (three had the effect
    of one), and one caller was told a version that was no longer served."""
    from autotuner.store import ServedChanged

    store = Store(store_url)
    store.upsert_workload("w", {"name": "w", "tables": []})
    for _ in range(8):
        store.publish_config(cluster="c", workload="w", nodes=1, **FIELDS)
    # decided on v8, applied after another rollback made v7 the served one: refused, nothing changed
    served, older = store.rollback_target("c", "w", 1)
    assert (served, older) == (8, 7)
    assert store.rollback_config("c", "w", 1).version == 7
    with pytest.raises(ServedChanged, match=r"the served version changed meanwhile \(v8 -> v7\)"):
        store.pin_config("c", "w", 1, older, served_now=served)
    assert store.served_config("c", "w", 1).version == 7

    def rollback(start: threading.Barrier, answers: list) -> None:
        start.wait()
        try:
            answers.append(store.rollback_config("c", "w", 1).version)
        except ServedChanged:
            answers.append("refused")

    answers: list = []
    start = threading.Barrier(3)
    threads = [threading.Thread(target=rollback, args=(start, answers)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    stepped = sorted((a for a in answers if a != "refused"), reverse=True)
    assert len(answers) == 3, answers
    assert stepped, answers
    assert stepped == list(range(6, 6 - len(stepped), -1))  # each applied one stepped back once more
    assert store.served_config("c", "w", 1).version == stepped[-1]  # and was told what is served
    store.dispose()
