"""Reading the files a launch leaves in its directory: bounded and never blocking.

The launch directory is written by the trial, on a node, often on a shared filesystem: what lies there is
input like any other. A FIFO named result.json would hang the study's poll loop, a link to /dev/zero fill
the tuner's memory, a 2 GB log be stored five times. Every read here opens without following a link or
blocking on a FIFO, takes only a regular file, and reads at most a given number of bytes.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

EXIT_CODE_BYTES = 64  # "137\n" and then some
LOG_TAIL_BYTES = 16 << 10  # what a launch's stored log tail may hold


def _open_regular(path: Path) -> int:
    """A read-only descriptor of `path`, which must be a regular file (not a link, FIFO or device)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path.name} is not a regular file")
    return fd


def read_bounded(path: Path, limit: int) -> bytes:
    """The whole of a regular file of at most `limit` bytes. FileNotFoundError when there is none;
    OSError naming the trouble when it is not a regular file or is larger."""
    try:
        fd = _open_regular(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # what O_NOFOLLOW answers for a link, in plainer words
            raise OSError(f"{path.name} is a symbolic link") from None
        raise
    try:
        chunks, size = [], 0
        while size <= limit and (chunk := os.read(fd, min(1 << 20, limit + 1 - size))):
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise OSError(f"{path.name} is larger than {limit:,} bytes")
    return b"".join(chunks)


def read_small_text(path: Path, limit: int = EXIT_CODE_BYTES) -> str | None:
    """A short file's stripped text (an exit code, a process tag); None if absent or unreadable."""
    try:
        return read_bounded(path, limit).decode(errors="replace").strip()
    except OSError:
        return None


def log_tail(path: Path, lines: int, max_bytes: int = LOG_TAIL_BYTES) -> str:
    """The last `lines` lines of a log, from at most its last `max_bytes` bytes ("" if it cannot be read)."""
    try:
        fd = _open_regular(path)
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
