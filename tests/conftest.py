"""Shared fixtures (their helpers: tests/helpers.py). Integration tests use the real thing and skip only
outside CI.

`AUTOTUNER_REQUIRE` (comma-separated: slurm, postgres, browser, netns, or `all`) turns the skip of
a missing dependency into a failure; CI sets it so nothing it is meant to check is skipped.
"""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import settings

from tests.helpers import fresh_postgres_database, skip_or_fail

# No per-example deadline: on a loaded CI machine one slow example (200 ms by default) failed a property
# that holds; the properties' own assertions are the test.
settings.register_profile("loaded-machines", deadline=None)
settings.load_profile("loaded-machines")


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


@pytest.fixture
def store(store_url):
    from autotuner.store import Store

    s = Store(store_url)
    yield s
    s.dispose()
