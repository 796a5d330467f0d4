"""Property-based run of the whole API from its own /openapi.json (schemathesis), on a real server:
no 5xx, every response matches its documented status code, content type and schema."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.api.conftest import TOKENS, make_server


@pytest.fixture
def fuzz_server(tmp_path):
    # No scheduler (fuzzed studies must not run) and only the replay executor enabled.
    srv = make_server(tmp_path, AUTOTUNER_SCHEDULER="0", AUTOTUNER_EXECUTORS="replay")
    srv.start()
    yield srv
    srv.kill()


@pytest.mark.slow
def test_schemathesis_finds_no_server_errors_or_schema_violations(fuzz_server, tmp_path):
    checks = "not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance"
    cmd = [sys.executable, "-m", "schemathesis.cli", "run", f"{fuzz_server.url}/openapi.json",
           "-H", f"Authorization: Bearer {TOKENS['admin']}", "--checks", checks,
           "--phases", "examples,fuzzing", "--max-examples", "40", "--seed", "20261202", "-w", "2",
           "--report", "junit", "--report-dir", str(tmp_path / "report")]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "passed" in proc.stdout
