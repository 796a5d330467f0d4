"""The pre-job hook against a real service: fast when it is up, fail-open when it is not."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from tests.api.service import TOKENS, free_port, replay_study_body, served_config, wait_for_state

# Tests of what the hook prints give a live service more than the default 1.5 s: a loaded CI machine
# must not turn them into tests of the deadline (that one has its own test, with a hanging server).
PATIENT = ("--timeout", "10")


def hook(server_url: str, *args: str, env: dict[str, str] | None = None, token: str = TOKENS["read"]):
    cmd = [sys.executable, "-m", "autotuner", "env", "--server", server_url, "--token", token,
           "--cluster", "cpu-box", "--workload", "small", *args]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, env={**os.environ, **(env or {})})
    return proc, time.monotonic() - started


@pytest.fixture(scope="module")
def published(module_server):
    """The module's service, with a study done and its config published (once: the tests only read it)."""
    client = module_server.client("write")
    study = client.post("/v1/studies", json=replay_study_body()).json()
    assert wait_for_state(client, study["id"], ("done", "failed"))["state"] == "done"
    assert served_config(client).status_code == 200
    return module_server


def test_hook_prints_the_served_exports_fast(published, tmp_path):
    cache = {"AUTOTUNER_CACHE_DIR": str(tmp_path / "cache")}
    timings = []
    for _ in range(5):
        proc, elapsed = hook(published.url, *PATIENT, env=cache)
        timings.append(elapsed)
        assert proc.returncode == 0
        assert proc.stderr == ""
    assert "export AUTOTUNER_CONFIG=cpu-box/small/1n/v1" in proc.stdout
    assert min(timings) < 1.0  # the bound that matters is measured by bench/; this catches a regression


def test_hook_falls_back_to_the_cache_when_the_service_dies(published, tmp_path):
    cache = {"AUTOTUNER_CACHE_DIR": str(tmp_path / "cache")}
    fresh, _ = hook(published.url, *PATIENT, env=cache)
    published.kill()  # SIGKILL: nothing answers on its port any more (kill waits for that)
    try:
        cached, elapsed = hook(published.url, env=cache)
    finally:
        published.start()  # the same service again (same store), for the module's other tests
    assert cached.returncode == 0
    assert elapsed < 2.0
    assert cached.stdout == fresh.stdout
    assert "using the cached config cpu-box/small/1n/v1" in cached.stderr


def test_hook_with_the_service_down_and_no_cache_prints_nothing_and_exits_0(tmp_path):
    proc, elapsed = hook(f"http://127.0.0.1:{free_port()}", env={"AUTOTUNER_CACHE_DIR": str(tmp_path)})
    assert (proc.returncode, proc.stdout) == (0, "")
    assert "unreachable" in proc.stderr
    assert elapsed < 2.0


def test_hook_gives_up_on_a_hanging_service_within_2_s(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)  # accepts connections (kernel backlog) and never answers
    try:
        proc, elapsed = hook(f"http://127.0.0.1:{listener.getsockname()[1]}",
                             env={"AUTOTUNER_CACHE_DIR": str(tmp_path)})  # fmt: skip
    finally:
        listener.close()
    assert proc.returncode == 0
    assert proc.stdout == ""
    assert elapsed < 2.0, elapsed
    assert "TimeoutError" in proc.stderr


class _Broken(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # http.server's name
        self.send_response(500)
        self.end_headers()
        self.wfile.write(b"boom")

    def log_message(self, *args: object) -> None:
        pass


def test_hook_survives_a_500(tmp_path):
    httpd = HTTPServer(("127.0.0.1", 0), _Broken)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()  # shutdown() waits a poll
    try:
        proc, _ = hook(f"http://127.0.0.1:{httpd.server_port}", env={"AUTOTUNER_CACHE_DIR": str(tmp_path)})
    finally:
        httpd.shutdown()
    assert proc.returncode == 0
    assert proc.stdout == ""
    assert "500" in proc.stderr


def test_exec_runs_the_command_with_the_tuned_env(published):
    cmd = [sys.executable, "-m", "autotuner", "exec", "--server", published.url, "--token", TOKENS["read"],
           "--cluster", "cpu-box", "--workload", "small", *PATIENT, "--",
           sys.executable, "-c", "import os; print(os.environ['AUTOTUNER_CONFIG'], os.environ['KEEP'])"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, env={**os.environ, "KEEP": "me"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["cpu-box/small/1n/v1", "me"]


def test_exec_with_the_service_down_still_runs_the_command(tmp_path):
    cmd = [sys.executable, "-m", "autotuner", "exec", "--server", f"http://127.0.0.1:{free_port()}",
           "--cluster", "c", "--workload", "w", "--", sys.executable, "-c", "raise SystemExit(7)"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30,
                          env={**os.environ, "AUTOTUNER_CACHE_DIR": str(tmp_path)})  # fmt: skip
    assert proc.returncode == 7  # the command's own exit code, not ours


def test_wrong_token_is_a_warning_not_a_failure(published, tmp_path):
    proc, _ = hook(published.url, *PATIENT, token="nope", env={"AUTOTUNER_CACHE_DIR": str(tmp_path)})
    assert proc.returncode == 0
    assert proc.stdout == ""
    # said as what it is, with what to set (it read "config service unreachable (HTTPError ... 401")
    assert "the config service refused the token (HTTP 401: set --token or AUTOTUNER_TOKEN" in proc.stderr
    assert "unreachable" not in proc.stderr
