"""The fixture that starts a real `autotuner serve` (tests/api/service.py) once per module, for tests
that need one running; a test that needs its own (a restart, another configuration) makes it with
make_server."""

from __future__ import annotations

import signal

import pytest

# TOKENS: for tests/api/test_openapi_fuzz.py, until it imports from tests.api.service (being rewritten)
from tests.api.service import TOKENS, make_server  # noqa: F401


@pytest.fixture(scope="module")
def module_server(tmp_path_factory):
    """One service for a whole module: for tests that need a service running, not one of their own
    (each keeps to its own studies and configs). Replay launches take no time here."""
    srv = make_server(tmp_path_factory.mktemp("service"), replay_delay_s=0)
    srv.start()
    yield srv
    srv.kill(signal.SIGTERM)
