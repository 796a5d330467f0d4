"""The trial's own deadline: a launch that stops making progress leaves an error result and exit 3.

NCCL's watchdog aborts the process (SIGABRT) when a collective outlives the process group's timeout,
so nothing is written and the launcher sees a crash. This one fires first (at a share of that
timeout): every collective issued and every step beats it; after `limit_s` without a beat it calls
`on_stall` (rank 0 writes the error result) and leaves the process with exit 3.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable

# Of the process group's timeout: fire before NCCL's watchdog (or gloo's timeout) does. Rank 0
# writes the result, so it fires first; a peer that exited at the same moment would break rank 0's
# pending collective ("Connection closed by peer") and its error would hide the stall.
SHARE_OF_PG_TIMEOUT = 0.8
PEER_SHARE_OF_PG_TIMEOUT = 0.95


def deadline_s(pg_timeout_s: float, rank: int) -> float:
    """How long a rank may go without progress: rank 0 (which reports) before its peers."""
    return pg_timeout_s * (SHARE_OF_PG_TIMEOUT if rank == 0 else PEER_SHARE_OF_PG_TIMEOUT)


class Watchdog:
    def __init__(self, limit_s: float, on_stall: Callable[[str], None], exit_code: int = 3) -> None:
        self.limit_s = limit_s
        self.on_stall = on_stall
        self.exit_code = exit_code
        self.stage = "start-up"
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="trial-watchdog", daemon=True)

    def start(self) -> Watchdog:
        self._thread.start()
        return self

    def beat(self, stage: str | None = None) -> None:
        self._last = time.monotonic()
        if stage is not None:
            self.stage = stage

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        tick = min(5.0, max(0.05, self.limit_s / 10))
        while not self._stop.wait(tick):
            quiet = time.monotonic() - self._last
            if quiet < self.limit_s:
                continue
            message = (f"no progress for {quiet:.0f} s during {self.stage} (a collective did not complete; "
                       f"the trial's deadline is {self.limit_s:.0f} s)")  # fmt: skip
            try:
                self.on_stall(message)
            finally:
                print(f"trials.run: {message}", file=sys.stderr, flush=True)
                os._exit(self.exit_code)
