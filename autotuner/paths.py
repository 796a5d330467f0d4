"""Where the engine keeps its data by default (stdlib only: the pre-job hook reads it too)."""

from __future__ import annotations

import os
from pathlib import Path


def default_data_dir() -> Path:
    """Absolute: paths under it are stored with studies and launches, and read from other directories."""
    return Path(
        os.environ.get("AUTOTUNER_DATA_DIR", Path.home() / ".local" / "share" / "nccl-autotuner")
    ).absolute()


def default_database_url() -> str:
    return os.environ.get("AUTOTUNER_DATABASE_URL") or f"sqlite:///{default_data_dir() / 'autotuner.db'}"
