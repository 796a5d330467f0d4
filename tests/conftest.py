"""Shared fixtures. Integration tests use the real thing and skip only outside CI.

`AUTOTUNER_REQUIRE` (comma-separated: slurm, postgres, browser, netns, or `all`) turns the skip of
a missing dependency into a failure; CI sets it so nothing it is meant to check is skipped.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# The smallest trial spec that runs for real on 2 CPU ranks in a few seconds.
TINY_SPEC = {
    "workload": {"name": "w", "tables": [{"name": f"t{i}", "num_embeddings": 500, "embedding_dim": 32,
                                          "pooling_factor": 2} for i in range(2)]},
    "candidates": [{"fwd_precision": "fp16", "bwd_precision": "fp16", "batch_size": 32}],
    "warmup": 1,
    "iterations": 3,
}  # fmt: skip


def launches_when(store, study_name: str, ready, proc, timeout_s: float, what: str) -> list:
    """Poll a study's launches until `ready(launches)` (the tuner `proc` must stay alive meanwhile);
    fail naming `what` never happened within the deadline."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        study = store.study(study_name)
        launches = store.launches(study.id) if study else []
        if ready(launches):
            return launches
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.2)
    pytest.fail(f"{what} within {timeout_s:.0f} s")


def required(kind: str) -> bool:
    wanted = {w.strip() for w in os.environ.get("AUTOTUNER_REQUIRE", "").split(",") if w.strip()}
    return "all" in wanted or kind in wanted


def skip_or_fail(kind: str, reason: str) -> None:
    """Skip with a reason locally; fail in CI where `kind` is required."""
    if required(kind):
        pytest.fail(f"{kind} is required here (AUTOTUNER_REQUIRE) but unavailable: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def python() -> str:
    return sys.executable


@pytest.fixture(scope="session")
def torchrun() -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run"]


# ---------------------------------------------------------------------------------- stores

STORE_BACKENDS = ["sqlite", "postgres"]


@pytest.fixture(params=STORE_BACKENDS)
def store_url(request, tmp_path):
    """One contract, two backends: SQLite always, PostgreSQL when a server is given."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'autotuner.db'}"
        return
    base = os.environ.get("AUTOTUNER_TEST_POSTGRES_URL")
    if not base:
        skip_or_fail("postgres", "no PostgreSQL server (set AUTOTUNER_TEST_POSTGRES_URL; CI starts one)")
    yield fresh_postgres_database(base)


def fresh_postgres_database(base_url: str) -> str:
    """A new empty database on the test server, so tests never see each other's rows."""
    import uuid

    import sqlalchemy as sa

    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(base_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return sa.engine.make_url(base_url).set(database=name).render_as_string(hide_password=False)


@pytest.fixture
def store(store_url):
    from autotuner.store import Store

    s = Store(store_url)
    yield s
    s.dispose()
