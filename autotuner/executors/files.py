"""The files of a launch directory: read bounded and never blocking, written never through a link.

The launch directory is written by the trial, on a node, often on a shared filesystem: what lies there is
input like any other. A FIFO named result.json would hang the study's poll loop, a link to /dev/zero fill
the tuner's memory, a 2 GB log be stored five times. Every read here opens without following a link or
blocking on a FIFO, takes only a regular file, and reads at most a given number of bytes.

Its names are predictable (launch-0005/spec.json) and anyone who runs jobs there can create them before
the tuner does: a link planted at spec.json would have the tuner overwrite, with its own rights, the
file the link names. The tuner's writes go to a directory that is no link, into files it creates anew.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from autotuner.files import open_regular, read_bounded

EXIT_CODE_BYTES = 64  # "137\n" and then some
LOG_TAIL_BYTES = 16 << 10  # what a launch's stored log tail may hold


def launch_dir(path: Path) -> Path:
    """`path`, made if need be: a directory, not a link to one (OSError naming it otherwise)."""
    path.mkdir(parents=True, exist_ok=True)
    mode = os.lstat(path).st_mode
    if not stat.S_ISDIR(mode):
        what = "a symbolic link" if stat.S_ISLNK(mode) else "not a directory"
        raise OSError(f"the launch directory {path} is {what}: refusing to write through it")
    return path


def remove(path: Path) -> None:
    """No file at `path` any more: a link is removed, never what it names; a directory is refused."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        raise OSError(f"{path} is a directory, where the tuner writes or reads a file") from None


def write_new(path: Path, data: str | bytes, mode: int = 0o644) -> None:
    """`data` in a file the tuner creates at `path` (whatever was there removed first, never followed)."""
    remove(path)
    write_new_only(path, data, mode)


def write_new_only(path: Path, data: str | bytes, mode: int = 0o644) -> None:
    """`data` in a file the tuner creates at `path`; FileExistsError if anything is there (kept as it is)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    with os.fdopen(fd, "wb") as file:
        file.write(data.encode() if isinstance(data, str) else data)


def open_log(path: Path) -> int:
    """A descriptor appending to the launch's log, a regular file (a link planted there is refused)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file: refusing to write the launch's log there")
    return fd


def read_small_text(path: Path, limit: int = EXIT_CODE_BYTES) -> str | None:
    """A short file's stripped text (an exit code, a process tag); None if absent or unreadable."""
    try:
        return read_bounded(path, limit).decode(errors="replace").strip()
    except OSError:
        return None


def log_tail(path: Path, lines: int, max_bytes: int = LOG_TAIL_BYTES) -> str:
    """The last `lines` lines of a log, from at most its last `max_bytes` bytes ("" if it cannot be read)."""
    try:
        fd = open_regular(path)
    except OSError:
        return ""
    try:
        size = os.fstat(fd).st_size
        os.lseek(fd, max(0, size - max_bytes), os.SEEK_SET)
        data = os.read(fd, max_bytes)
    except OSError:
        return ""
    finally:
        os.close(fd)
    text = data.decode(errors="replace")
    if size > max_bytes:  # the first line read is most likely cut: say so rather than show half of it
        text = "[...] " + text.split("\n", 1)[-1]
    return "\n".join(text.splitlines()[-lines:])
