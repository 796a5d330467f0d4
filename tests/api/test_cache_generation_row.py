"""The generation's row deleted by a hand under a running service: every worker keeps serving what the
store serves, and the next change (a publish, a DELETE of a config by hand) is served by every worker,
though it made the row again at the very number the workers had loaded. Before, the heads were read
joined to that row: every key was dropped from memory (404) and no bump was counted. Two workers
sharing one generation file, as tests/api/test_cache.py sets them up."""

from __future__ import annotations

import pytest

from api.cache import ConfigCache
from tests.api.test_cache import FIELDS, workers, workload  # noqa: F401 (a fixture)
from tests.helpers import by_hand

GONE = "DELETE FROM at_config_generation"


def versions(*caches: ConfigCache) -> list[int | None]:
    return [None if (s := c.find("c", "w", 1)) is None else s.config["version"] for c in caches]


@pytest.mark.usefixtures("workload")
def test_every_worker_serves_on_and_sees_the_next_change(store, tmp_path, caplog):
    a, b = workers(store, tmp_path)
    store.publish_config(cluster="c", workload="w", nodes=1, **FIELDS)  # generation 1
    a.refresh()
    assert versions(a, b) == [1, 1]
    by_hand(store, GONE)
    store.publish_config(cluster="c", workload="w", nodes=1, **FIELDS)  # the row made again: generation 1
    a.refresh()  # a's poll: the same number, another stamp
    assert versions(a, b) == [2, 2]  # b never polled: the shared counter told it
    said = [r.getMessage() for r in caplog.records if "in another state" in r.getMessage()]
    assert len(said) == 1, said
    assert "row deleted by hand" in said[0]  # the log names this cause too

    by_hand(store, GONE)  # no change to what is served
    for worker in (a, b):
        worker.refresh()
    assert versions(a, b) == [2, 2]  # was: None, None (404)
    assert store.config_generation_stamp()[1] is not None  # a reader made it again

    by_hand(store, GONE, "DELETE FROM at_configs WHERE version = 2")  # the trigger makes it, then counts
    b.refresh()
    assert versions(a, b) == [1, 1]
