"""The config service while its store is away or stalled: it never guesses "nothing published" (a hook
told so drops the config it kept), a stalled store holds up one load and not every answer of the
worker behind it, and what jobs send in their fingerprint header fills no memory it should not."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.exc import OperationalError

from api.app import create_app
from api.cache import CATCH_UP_WAIT_S, MAX_VARIANTS, ConfigCache, SharedGeneration, StoreUnanswered
from api.settings import Settings
from autotuner.job.fingerprint import encode
from autotuner.store import Store
from tests.api.test_cache import FIELDS, workers, workload  # noqa: F401 (a fixture)


def unreachable(
    store: Store, names: tuple[str, ...], why: str = "could not connect to server"
) -> dict[str, bool]:
    """Make `names` of `store` raise as a database that cannot be reached does (`why`: the driver's
    words), while `down["on"]`."""
    down = {"on": True}
    for name in names:
        real = getattr(store, name)

        def answer(*args, _real=real, **kwargs):
            if down["on"]:
                raise OperationalError("SELECT 1", {}, Exception(why))
            return _real(*args, **kwargs)

        setattr(store, name, answer)
    return down


@contextmanager
def stalled_load(store: Store, worker: ConfigCache) -> Iterator[threading.Thread]:
    """A thread of `worker` loading from a store whose served heads do not answer until the block ends
    (its own view of the store: every other read as before); yields that thread once it waits."""
    stalled, release = threading.Event(), threading.Event()
    real = store.served_heads

    def stalling():
        stalled.set()
        assert release.wait(30)
        return real()

    worker.store = Store.__new__(Store)
    worker.store.__dict__.update(store.__dict__, served_heads=stalling)
    loader = threading.Thread(target=worker.get, args=("c", "w", 1))
    loader.start()
    try:
        assert stalled.wait(10)
        yield loader
    finally:
        release.set()
        loader.join(30)


@pytest.mark.usefixtures("workload")
def test_a_service_started_while_its_store_is_down_says_so_and_never_404s_a_published_config(store, tmp_path):
    store.publish_config(cluster="c", workload="w", nodes=1, **FIELDS)
    down = unreachable(store, ("served_heads", "config_generation"))
    settings = Settings(data_dir=tmp_path, public_read=True, scheduler=False)
    with TestClient(create_app(settings, store=store)) as client:
        answer = client.get("/v1/configs/c/w")
        assert answer.status_code == 503, answer.text  # was 404 "no config published", and the hook
        assert answer.headers["Retry-After"] == "1"  # deleted the config it kept from an earlier start
        assert "the store did not answer (OperationalError)" in answer.json()["detail"]
        assert "SELECT" not in answer.text  # the database's words stay in the log
        down["on"] = False
        answer = client.get("/v1/configs/c/w")
        assert (answer.status_code, answer.json()["version"]) == (200, 1)
        assert client.get("/v1/configs/c/other").status_code == 404  # the store's word: a real miss


@pytest.mark.usefixtures("workload")
def test_a_worker_behind_a_stalled_store_answers_from_memory_while_one_thread_waits_on_it(store, tmp_path):
    store.publish_config(cluster="c", workload="w", nodes=1, **FIELDS)
    a, b = workers(store, tmp_path)
    store.publish_config(cluster="c", workload="w", nodes=1, **FIELDS)
    a.refresh()  # the other worker loaded v2: b is behind
    assert not b.current()
    with stalled_load(store, b) as loader:
        started = time.monotonic()
        served = b.get("c", "w", 1)  # behind, but another thread's load is stuck on the store
        waited = time.monotonic() - started
        assert served is not None
        assert served.config["version"] == 1  # what it has, not a wait for the store
        assert waited < CATCH_UP_WAIT_S + 5  # bounded (was: until the store answered)
        assert loader.is_alive()  # the load still waits on the store
    assert b.current()
    assert b.get("c", "w", 1).config["version"] == 2  # and its answer is served once it came


@pytest.mark.usefixtures("workload")
def test_a_miss_behind_a_stalled_load_is_told_to_retry_at_once_not_held_nor_404(store, tmp_path):
    store.publish_config(cluster="c", workload="w", nodes=1, **FIELDS)
    a, b = workers(store, tmp_path)
    store.publish_config(cluster="c", workload="w", nodes=1, **FIELDS)
    a.refresh()
    with stalled_load(store, b) as loader:
        started = time.monotonic()
        with pytest.raises(StoreUnanswered, match="another load of this worker still waits on the store"):
            b.find("c", "unpublished", 1)  # was: held until the store answered, a thread each
        assert time.monotonic() - started < CATCH_UP_WAIT_S + 5
        assert b.get("c", "w", 1, catch_up=False).config["version"] == 1  # memory only: no wait at all
        assert loader.is_alive()


@pytest.mark.usefixtures("workload")
def test_the_event_loop_leaves_a_worker_behind_the_store_to_the_route(store, tmp_path, monkeypatch):
    """The fast path (on the event loop) answers only from a current cache; the route catches up in a
    thread. Both give the newest version."""
    SharedGeneration.create(tmp_path / "generation")
    monkeypatch.setenv("AUTOTUNER_GENERATION_FILE", str(tmp_path / "generation"))  # as `autotuner serve`
    settings = Settings(data_dir=tmp_path, public_read=True, scheduler=False, config_refresh_s=3600)
    store.publish_config(cluster="c", workload="w", nodes=1, **FIELDS)
    with TestClient(create_app(settings, store=store)) as client:
        assert client.get("/v1/configs/c/w").json()["version"] == 1
        store.publish_config(cluster="c", workload="w", nodes=1, **FIELDS)
        other = ConfigCache(store, 3600, SharedGeneration(tmp_path / "generation"))
        other.refresh()  # another worker of the service loaded v2
        cache = client.app.state.cache
        assert not cache.current()
        calls: list[str] = []
        real_get = cache.get
        cache.get = lambda *args: calls.append(threading.current_thread().name) or real_get(*args)
        assert client.get("/v1/configs/c/w").json()["version"] == 2
        assert calls  # and not on the loop's thread: the route ran it in the thread pool
        assert all(name != client.portal.call(threading.current_thread).name for name in calls)


@pytest.mark.usefixtures("workload")
def test_fingerprint_headers_keep_at_most_a_bounded_set_of_canonical_stacks(store, tmp_path):
    cluster = store.cluster("c", create=True)
    store.update_fingerprint(cluster.id, {"driver": "550.54.15", "nccl": "2.21.5"})  # validated on
    store.publish_config(cluster="c", workload="w", nodes=1, **FIELDS)
    a, _ = workers(store, tmp_path)
    served = a.get("c", "w", 1)
    assert served is not None
    huge = [b"driver=550.54.15&pad=" + b"x" * 1_000_000 + str(i).encode() for i in range(20)]
    odd = [f"nccl=2.21.5&gpu=H100&junk{i}=1".encode() for i in range(20)]  # decodes as another header
    for header in huge + odd:
        assert served.matched(header).match == "unknown" or header in odd
    assert served.variants == {}  # answered, not kept (was: 20 MB kept for one version)
    stacks = [encode({"driver": f"550.{i}", "nccl": "2.21.5"}).encode() for i in range(MAX_VARIANTS + 10)]
    for header in stacks:
        assert served.matched(header).match is False  # another driver than the one validated on
    assert len(served.variants) == MAX_VARIANTS
    assert served.matched(stacks[0]) is served.variants[stacks[0]]  # kept: the next is a lookup
