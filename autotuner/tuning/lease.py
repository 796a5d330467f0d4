"""Who runs a study: a lease in the store that its holder renews, and loses when it stops.

A runner renews every HEARTBEAT_EVERY_S; one that stops (killed, partitioned) loses the study to
another process once LEASE_S passes without a renewal, or at once when it is known dead (a holder
on this host whose process is gone).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid

from autotuner.store import Store, StudyState

log = logging.getLogger("autotuner.tuning")

LEASE_S = float(os.environ.get("AUTOTUNER_LEASE_S", "60"))
HEARTBEAT_EVERY_S = min(5.0, LEASE_S / 4)


class StudyBusy(RuntimeError):
    """Another live process holds this study's lease."""


class StudyCancelled(RuntimeError):
    pass


def owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def owner_is_dead(owner: str | None) -> bool:
    """A lease holder on this host whose process is gone (SIGKILLed): no need to wait out its lease."""
    if not owner:
        return False
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class Lease:
    def __init__(self, store: Store, study_id: int, owner: str | None = None) -> None:
        self.store = store
        self.study_id = study_id
        self.owner = owner or owner_id()
        self.last_beat = 0.0

    def acquire(self) -> None:
        if self.store.acquire_study(self.study_id, self.owner, LEASE_S):
            return
        holder = self.store.study(self.study_id).owner  # type: ignore[union-attr]
        if owner_is_dead(holder) and self.store.take_over_study(self.study_id, holder, self.owner, LEASE_S):  # type: ignore[arg-type]
            log.info("study %s: took over from %s, which is no longer running", self.study_id, holder)
            return
        raise StudyBusy(f"study {self.study_id} is being run by {holder}")

    def due(self) -> bool:
        return time.monotonic() - self.last_beat >= HEARTBEAT_EVERY_S

    def beat(self, force: bool = False) -> None:
        """Renew the lease (at most every HEARTBEAT_EVERY_S unless forced); raise if it was lost or
        the study was cancelled meanwhile."""
        if not force and not self.due():
            return
        self.last_beat = time.monotonic()
        if not self.store.acquire_study(self.study_id, self.owner, LEASE_S):
            raise StudyBusy(f"lost the lease on study {self.study_id} to another process")
        study = self.store.study(self.study_id)
        if study is not None and study.state == StudyState.CANCELLED:
            raise StudyCancelled(f"study {self.study_id} was cancelled")

    def release(self) -> None:
        self.store.release_study(self.study_id, self.owner)
