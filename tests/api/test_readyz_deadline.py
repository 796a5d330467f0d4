"""/readyz answers within AUTOTUNER_READY_TIMEOUT_S whatever the database does: a PostgreSQL backend
frozen (SIGSTOP: as a hung backend or a paused VM, its kernel still ACKing) made the probe wait for good,
libpq's deadlines untripped. And a frozen store holds one probe thread, not one per probe."""

from __future__ import annotations

import gc
import logging
import os
import signal
import threading
import time
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from api.app import create_app
from api.routes import system
from api.settings import Settings
from autotuner.store import Store
from tests.helpers import fresh_postgres_database, skip_or_fail

SLACK_S = 10.0  # the test client's round trip on a loaded runner, past the deadline (3 s failed once)


def within(deadline_s: float, call: Any, *args: Any) -> tuple[Any, float]:
    """`call(*args)` and the seconds it took; the test fails if it has not answered in `deadline_s`
    (the code before this waited for good: its thread is left to end when the backend resumes)."""
    answer: list[Any] = []
    done = threading.Event()

    def run() -> None:
        try:
            answer.append(call(*args))
        finally:
            done.set()

    started = time.monotonic()
    threading.Thread(target=run, daemon=True).start()
    if not done.wait(deadline_s):
        pytest.fail(f"{call.__name__}{args} did not answer within {deadline_s} s")
    assert answer, "the call raised (see the thread's traceback above)"
    return answer[0], time.monotonic() - started


def probe_threads() -> int:
    return sum(t.name == "readyz-database" and t.is_alive() for t in threading.enumerate())


def test_a_check_that_does_not_answer_is_a_503_in_time_and_runs_once(tmp_path):
    release, entered = threading.Event(), threading.Event()
    calls: list[int] = []

    def stuck(_store: Store) -> None:
        calls.append(1)
        entered.set()
        assert release.wait(60), "the test never released the check"

    settings = Settings(data_dir=tmp_path, scheduler=False, ready_timeout_s=0.5)
    assert settings.ready_timeout_s == 0.5
    with TestClient(create_app(settings)) as client:
        client.app.state.database_probe = system.DatabaseProbe(settings.ready_timeout_s, check=stuck)
        try:
            for method in ("get", "head", "get"):
                answer, took = within(0.5 + SLACK_S, getattr(client, method), "/readyz")
                assert answer.status_code == 503
                assert 0.5 <= took < 0.5 + SLACK_S
                if method == "get":
                    assert answer.json() == {"ready": False, "database": "error: no answer within 0.5 s",
                                             "scheduler": "off"}  # fmt: skip
            assert entered.is_set()
            assert len(calls) == 1  # later probes waited on the one in flight
            assert probe_threads() == 1
        finally:
            release.set()
        # the stuck check ends: the next probe runs a fresh one. Its thread is waited for: a probe sent
        # the moment it was released, before that thread ran again (a loaded machine), joined the one in
        # flight, rightly, and ran no second check.
        deadline = time.monotonic() + 60
        while probe_threads():
            assert time.monotonic() < deadline, "the released check did not end"
            time.sleep(0.01)
        answer, _ = within(0.5 + SLACK_S, client.get, "/readyz")
        assert (answer.status_code, answer.json()["database"]) == (200, "ok")
        assert len(calls) == 2


def test_a_check_that_fails_says_why_and_the_next_one_runs_again(tmp_path):
    calls: list[int] = []

    def fails(_store: Store) -> None:
        calls.append(1)
        raise sa.exc.OperationalError("SELECT 1", {}, ConnectionRefusedError())

    with TestClient(create_app(Settings(data_dir=tmp_path, scheduler=False))) as client:
        assert client.get("/readyz").json()["database"] == "ok"  # the real check, on SQLite
        client.app.state.database_probe = system.DatabaseProbe(3, check=fails)
        for _ in range(2):
            answer = client.get("/readyz")
            assert (answer.status_code, answer.json()["database"]) == (503, "error: OperationalError")
        assert len(calls) == 2  # a probe that ended is not an answer to the next


def test_a_frozen_postgresql_backend_is_a_503_in_time(tmp_path):
    """The real thing: every backend of the service's own database stopped (SIGSTOP), never the server
    (other tests share it). The database is fresh, so its backends are the service's alone; with the
    cache's poll and the scheduler off, nothing else checks a connection out meanwhile, so /readyz gets
    a frozen one from the pool."""
    base = os.environ.get("AUTOTUNER_TEST_POSTGRES_URL")
    if not base:
        skip_or_fail("postgres", "no PostgreSQL server (set AUTOTUNER_TEST_POSTGRES_URL; CI starts one)")
    url = fresh_postgres_database(base)
    store = Store(url)
    settings = Settings(data_dir=tmp_path, database_url=url, scheduler=False, config_refresh_s=3600,
                        ready_timeout_s=1)  # fmt: skip
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with TestClient(create_app(settings, store=store)) as client:
            assert client.get("/readyz").status_code == 200  # a pooled connection, idle now
            with admin.connect() as conn:
                pids = conn.execute(
                    sa.text("SELECT pid FROM pg_stat_activity WHERE datname = :db AND pid <> pg_backend_pid()"),
                    {"db": sa.engine.make_url(url).database},
                ).scalars().all()  # fmt: skip
            assert pids
            database = sa.engine.make_url(url).database
            for pid in pids:  # a server in a container: its pids are not this host's (SIGSTOP another's)
                if f" {database} " not in process_title(pid):
                    skip_or_fail("postgres", f"backend {pid} of {database} is no process of this host")
            stopped: list[int] = []
            try:
                for pid in pids:
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
                answer, took = within(1 + SLACK_S, client.get, "/readyz")
                assert answer.status_code == 503
                assert took >= 1
                assert answer.json()["database"] == "error: no answer within 1 s"
                answer, _ = within(1 + SLACK_S, client.head, "/readyz")
                assert answer.status_code == 503
                assert probe_threads() == 1  # the second probe waited on the first, stuck one
            finally:
                for pid in stopped:
                    os.kill(pid, signal.SIGCONT)
            # resumed: the stuck probe ends, and a later one answers ok
            deadline = time.monotonic() + 30
            while (answer := within(1 + SLACK_S, client.get, "/readyz")[0]).status_code != 200:
                assert time.monotonic() < deadline, answer.json()
    finally:
        admin.dispose()
        store.dispose()


def test_a_check_that_fails_after_its_probe_gave_up_on_it_logs_no_error(tmp_path, caplog):
    """A probe that answered "no answer within N s" left its waiter unread: when the check then failed (a
    frozen backend killed, the server restarted), asyncio logged "Future exception was never retrieved"
    with a traceback at ERROR, as if readyz had crashed."""
    release = threading.Event()

    def fails_late(_store: Store) -> None:
        assert release.wait(60), "the test never released the check"
        raise sa.exc.OperationalError("SELECT 1", {}, ConnectionResetError())

    caplog.set_level(logging.ERROR, logger="asyncio")
    with TestClient(create_app(Settings(data_dir=tmp_path, scheduler=False))) as client:
        probe = client.app.state.database_probe = system.DatabaseProbe(0.2, check=fails_late)
        assert client.get("/readyz").json()["database"] == "error: no answer within 0.2 s"
        release.set()
        deadline = time.monotonic() + 10
        while probe_threads():
            assert time.monotonic() < deadline, "the check did not end"
            time.sleep(0.01)
        probe.check = lambda _store: None  # a fresh check: the failed one's waiter let go
        assert client.get("/readyz").json()["database"] == "ok"
        gc.collect()
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []


def process_title(pid: int) -> str:
    """What `ps` shows of a process of this host ("postgres: USER DATABASE HOST(PORT) idle"); "" if none."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
