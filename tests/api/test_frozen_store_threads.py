"""A store that stops answering (a frozen PostgreSQL: a hung server, a paused VM, a partition whose far
kernel still ACKs) holds the thread of every request that reads it: no libpq deadline trips. A config
miss held one of the pool that every sync route ran in, /healthz included: a storm of misses (the jobs of
a workload not tuned yet) filled it, the liveness probe stopped answering, and the pod was restarted for
its database's sake. Misses now wait in a few threads of their own, and /healthz in none.

The store is real: PostgreSQL behind a TCP relay that the test freezes (it holds every byte, and accepts
connections it never serves), as a frozen server looks from the service."""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

import anyio
import sqlalchemy as sa
from fastapi.testclient import TestClient

from api.app import create_app
from api.routes.configs import MISS_THREADS
from api.settings import Settings
from autotuner.store import Store
from tests.api.test_readyz_deadline import SLACK_S, within
from tests.helpers import fresh_postgres_database, skip_or_fail


class FreezingRelay:
    """127.0.0.1:`port` relayed to `upstream`; `frozen` holds every byte received (and every connection
    accepted) until thawed. `held`: the chunks and connections waiting now."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thawed = threading.Event()
        self.thawed.set()
        self.held = 0
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def freeze(self) -> None:
        self.thawed.clear()

    def thaw(self) -> None:
        self.thawed.set()

    def close(self) -> None:
        self.thaw()
        for s in self._sockets:
            s.close()

    def _hold(self) -> None:
        if self.thawed.is_set():
            return
        with self._lock:
            self.held += 1
        self.thawed.wait()
        with self._lock:
            self.held -= 1

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        self._hold()
        server = socket.create_connection(self.upstream)
        self._sockets += [client, server]
        threading.Thread(target=self._pump, args=(client, server), daemon=True).start()
        threading.Thread(target=self._pump, args=(server, client), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                self._hold()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def test_misses_on_a_frozen_store_leave_the_liveness_probe_and_every_other_route_answering(tmp_path):
    base = os.environ.get("AUTOTUNER_TEST_POSTGRES_URL")
    if not base:
        skip_or_fail("postgres", "no PostgreSQL server (set AUTOTUNER_TEST_POSTGRES_URL; CI starts one)")
    url = sa.engine.make_url(fresh_postgres_database(base))
    if not url.host or url.host.startswith("/"):
        skip_or_fail("postgres", f"the test server {url.host!r} is not on TCP: nothing to relay")
    relay = FreezingRelay((url.host, url.port or 5432))
    # A connect through the frozen relay waits its whole connect_timeout: a minute, past the test's deadlines
    relayed = url.set(host="127.0.0.1", port=relay.port, query={"connect_timeout": "60"})
    store = Store(relayed.render_as_string(hide_password=False))
    settings = Settings(data_dir=tmp_path, database_url=relayed.render_as_string(hide_password=False),
                        public_read=True, scheduler=False, config_refresh_s=3600)  # fmt: skip
    answers: list[int] = []

    def miss(client: TestClient, i: int) -> None:
        answers.append(client.get(f"/v1/configs/c/untuned-{i}").status_code)

    def lint(client: TestClient) -> Any:
        return client.post("/v1/lint", json={"env": {"NCCL_DEBUG": "INFO"}})

    try:
        with TestClient(create_app(settings, store=store)) as client:
            assert client.get("/v1/configs/c/w").status_code == 404  # the store's word, through the relay
            # The request pool, as small as the misses' own: a storm of misses could fill the real one (40)
            pool = client.portal.call(anyio.to_thread.current_default_thread_limiter)
            pool.total_tokens = MISS_THREADS
            misses = [
                threading.Thread(target=miss, args=(client, i), daemon=True) for i in range(MISS_THREADS + 2)
            ]
            relay.freeze()
            try:
                for thread in misses:
                    thread.start()
                deadline = time.monotonic() + 60
                while relay.held < MISS_THREADS:  # every thread the misses may have waits on the store
                    assert time.monotonic() < deadline, f"{relay.held} held of {MISS_THREADS}"
                    time.sleep(0.05)
                answer, _ = within(SLACK_S, client.get, "/healthz")
                assert answer.status_code == 200  # was: no answer until the store came back
                answer, _ = within(SLACK_S, lint, client)
                assert (answer.status_code, answer.json()["ok"]) == (200, True)  # a sync route, in the pool
                assert not answers  # and the misses still wait on the store
            finally:  # the misses end before the client does: its exit with requests in flight hangs
                relay.thaw()
                for thread in misses:
                    thread.join(60)
            assert sorted(answers) == [404] * (MISS_THREADS + 2)  # once it answers: its word, each of them
    finally:
        relay.close()
        store.dispose()


def test_a_hit_on_a_worker_behind_a_frozen_store_waits_on_no_miss(tmp_path):
    """A worker behind the shared generation (another one loaded a publish, then the store froze) answers
    even its hits through the route, which catches up first: at most CATCH_UP_WAIT_S on the load in flight,
    then from memory. That catch-up waited for one of the misses' own threads: MISS_THREADS misses stuck
    on the store left every hit of the worker unanswered until the store came back."""
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    store.upsert_workload("w", {"name": "w", "tables": []})
    store.publish_config(cluster="c", workload="w", nodes=1, env={}, fwd_precision="fp16", bwd_precision="fp16",
                         batch_size=512, sharding="table_wise")  # fmt: skip
    settings = Settings(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 'at.db'}", public_read=True,
                        scheduler=False, config_refresh_s=3600)  # fmt: skip
    thawed = threading.Event()
    answers: list[int] = []
    try:
        with TestClient(create_app(settings, store=store)) as client:
            cache = client.app.state.cache  # type: ignore[attr-defined]
            assert client.get("/v1/configs/c/w").status_code == 200
            held: list[int] = []

            def frozen(read: Any) -> Any:
                def wait(*args: Any, **kwargs: Any) -> Any:
                    held.append(1)
                    thawed.wait(60)
                    return read(*args, **kwargs)

                return wait

            for name in ("served_heads", "config_generation_stamp"):  # the store freezes
                setattr(store, name, frozen(getattr(store, name)))
            cache.shared.raise_to(cache.generation + 1)  # another worker loaded a newer state
            stuck = [threading.Thread(target=lambda i=i: answers.append(client.get(f"/v1/configs/c/u{i}").status_code),
                                      daemon=True) for i in range(MISS_THREADS + 1)]  # fmt: skip
            try:
                for thread in stuck:
                    thread.start()
                deadline = time.monotonic() + 30
                while len(held) < MISS_THREADS:  # every thread of the misses' own waits on the store
                    assert time.monotonic() < deadline, f"{len(held)} held of {MISS_THREADS}"
                    time.sleep(0.05)
                answer, _ = within(SLACK_S, client.get, "/v1/configs/c/w")
                assert answer.status_code == 200  # was: no answer until the store came back
                assert not answers  # the misses still wait on the store
            finally:
                thawed.set()
                for thread in stuck:
                    thread.join(60)
    finally:
        store.dispose()
