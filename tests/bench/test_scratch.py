"""`make bench` leaves no stores behind: the sections' temporary folders live in one it removes."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from bench.scratch import scratch


def test_what_the_sections_make_is_removed_at_the_end():
    with scratch(keep=False) as folder:
        store = Path(tempfile.mkdtemp(prefix="bench-x-")) / "x.db"  # as a section makes its store
        store.write_text("rows")
        assert store.parent.parent == folder
    assert not folder.exists()
    assert tempfile.gettempdir() != str(folder)  # later temporary files go where they did before


def test_keep_keeps_it_and_names_it(capsys):
    with scratch(keep=True) as folder:
        Path(tempfile.mkdtemp(prefix="bench-x-"), "x.db").write_text("rows")
    try:
        assert [p.name for p in folder.glob("*/x.db")] == ["x.db"]
        assert str(folder) in capsys.readouterr().err.replace("\n", "")
    finally:
        shutil.rmtree(folder)
