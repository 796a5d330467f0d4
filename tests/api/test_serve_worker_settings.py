"""`autotuner serve`'s options reach its workers: a uvicorn worker is a process of its own that builds
its settings from the environment (and the settings file), so what the command's options set must be
there before uvicorn starts it. Before, `--port 8123` (and --host, --workers) reached uvicorn but
not the workers' own settings, which still said AUTOTUNER_PORT's (or the file's, or the default)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.helpers import REPO

# What a uvicorn worker of `autotuner serve` does first: the app factory, its settings from the
# environment it inherited (a child of the supervisor, as the workers are).
WORKER = (
    "import json; from api.app import app_from_env; s = app_from_env().state.settings; "
    "print(json.dumps({'host': s.host, 'port': s.port, 'workers': s.workers, 'url': s.url, "
    "'scheduler': s.scheduler}))"
)


@pytest.fixture
def environ():
    """`serve` exports to its own environment (for its workers): put it back after."""
    saved = dict(os.environ)
    yield os.environ
    os.environ.clear()
    os.environ.update(saved)


def serve(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run `autotuner serve ARGV` up to uvicorn: what uvicorn was asked to run, and the settings a
    worker it starts then has."""
    import uvicorn

    from api.cli import main

    seen: dict[str, Any] = {}

    def run(app: str, **kwargs: Any) -> None:
        assert app == "api.app:app_from_env"
        seen["uvicorn"] = kwargs
        worker = subprocess.run([sys.executable, "-c", WORKER], cwd=REPO, capture_output=True, text=True,
                                timeout=120)  # fmt: skip
        assert worker.returncode == 0, worker.stderr
        seen["worker"] = json.loads(worker.stdout.splitlines()[-1])

    monkeypatch.setattr(uvicorn, "run", run)
    assert main(argv) == 0
    return seen["uvicorn"], seen["worker"]


@pytest.mark.parametrize("where", ["environment", "settings file", "defaults"])
def test_a_worker_has_the_settings_the_command_line_gave(tmp_path, environ, monkeypatch, where):
    for name in [n for n in environ if n.startswith("AUTOTUNER_")]:
        del environ[name]
    environ["AUTOTUNER_DATA_DIR"] = str(tmp_path / "data")
    given = "AUTOTUNER_HOST=0.0.0.0\nAUTOTUNER_PORT=9000\nAUTOTUNER_WORKERS=5\nAUTOTUNER_SCHEDULER=1\n"
    if where == "environment":
        environ.update(dict(line.split("=", 1) for line in given.splitlines()))
    elif where == "settings file":
        (tmp_path / "autotuner.env").write_text(given)
        environ["AUTOTUNER_SETTINGS_FILE"] = str(tmp_path / "autotuner.env")
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    asked, worker = serve(["--host", "127.0.0.2", "--port", "8123", "--workers", "3", "--no-scheduler", "--db", db],
                          monkeypatch)  # fmt: skip
    assert (asked["host"], asked["port"], asked["workers"]) == ("127.0.0.2", 8123, 3)
    # before: the worker said 0.0.0.0:9000, 5 workers (from the environment or the file), or 127.0.0.1:8000, 2
    assert worker == {"host": "127.0.0.2", "port": 8123, "workers": 3, "url": db, "scheduler": False}
