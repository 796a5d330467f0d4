"""Removing the launch directories no one needs any more: their logs, scripts and raw results.

What a launch measured is in the store (its candidates, its summary, the tail of its log); its
directory is read only while it runs and when a restarted tuner collects it. So a launch that ended,
of a study that ended, can go. Only a directory the store recorded for that launch is removed, and
only if it still looks like one (`launch-NNNN`, a real directory, not a link): a hand-edited row never
leads this anywhere else, and each store's launches have a folder of their own (default_workdir).
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from autotuner.executors import LaunchState
from autotuner.store import TERMINAL, Store, utcnow

ENDED_LAUNCHES = tuple(state for state in LaunchState if state.is_terminal())


@dataclass
class Pruned:
    """One study's launch directories removed (or, on a dry run, that would be), and those that could
    not be, each with why (a file the service's user may not delete, say): never counted as removed."""

    study_id: int
    launches: int = 0
    bytes: int = 0
    failed: list[str] = field(default_factory=list)


def launch_dir(workdir: str, seq: int) -> Path | None:
    """The recorded directory, if it is still that launch's: absolute, named for it, a directory."""
    path = Path(workdir)
    if not path.is_absolute() or path.name != f"launch-{seq:04d}":
        return None
    if path.is_symlink() or not path.is_dir():
        return None
    return path


def size_of(path: Path) -> int:
    """Bytes of the files under `path`, links not followed."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def prune(store: Store, older_than: timedelta, *, dry_run: bool = False) -> list[Pruned]:
    """Remove the directories of launches that ended more than `older_than` ago, of studies that
    ended; per study, what was (or would be) removed. Each study's folder goes too once empty."""
    rows = store.ended_launch_dirs(
        utcnow() - older_than, launch_states=ENDED_LAUNCHES, study_states=tuple(TERMINAL)
    )
    pruned: dict[int, Pruned] = {}
    for study_id, seq, workdir in rows:
        path = launch_dir(workdir, seq)
        if path is None:
            continue
        entry = pruned.setdefault(study_id, Pruned(study_id))
        size = size_of(path)
        if not dry_run:
            why = remove(path)
            if why is not None:
                entry.failed.append(f"{path}: {why}")
                continue
        entry.bytes += size
        entry.launches += 1
    return list(pruned.values())


def remove(path: Path) -> str | None:
    """Remove the launch directory (and its study's folder, once empty); None, or why it is still there."""
    errors: list[str] = []
    if sys.version_info >= (3, 12):  # onerror is deprecated there
        shutil.rmtree(path, onexc=lambda _, name, exc: errors.append(f"{name}: {exc}"))
    else:
        shutil.rmtree(path, onerror=lambda _, name, exc: errors.append(f"{name}: {exc[1]}"))
    if path.exists():
        return errors[0] if errors else "still there"
    try:
        path.parent.rmdir()  # the study's folder, once its last launch is gone
    except OSError:
        pass
    return None
