"""Reading a file someone else may have put there: bounded and never blocking (standard library only).

A FIFO where a file was expected would hang the reader, a link to /dev/zero fill its memory, a file
of gigabytes be read whole. Every read here opens without following a link or blocking on a FIFO,
takes only a regular file, and reads at most a given number of bytes: a launch's result, a space or
workload file named on the command line.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


def open_regular(path: Path, *, follow_links: bool = False) -> int:
    """A read-only descriptor of `path`, which must be a regular file (not a FIFO or a device; not a
    link either, unless `follow_links`: an operator's /etc may link to versioned files)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path.name} is not a regular file")
    return fd


def read_bounded(path: Path, limit: int, *, follow_links: bool = False) -> bytes:
    """The whole of a regular file of at most `limit` bytes. FileNotFoundError when there is none;
    OSError naming the trouble when it is not a regular file or is larger."""
    try:
        fd = open_regular(path, follow_links=follow_links)
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
