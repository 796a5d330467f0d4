"""One temporary folder for what a benchmark makes (SQLite stores, trial runs): removed at the end."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console


@contextmanager
def scratch(keep: bool = False) -> Iterator[Path]:
    """Every tempfile.mkdtemp inside lands in one folder: removed at the end, or kept and named (to
    open a study's store on the dashboard, say)."""
    folder = Path(tempfile.mkdtemp(prefix="bench-run-"))
    tempfile.tempdir = str(folder)
    try:
        yield folder
    finally:
        tempfile.tempdir = None
        if keep:
            Console(stderr=True).print(f"kept the stores and runs made in {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
