"""Who runs a study: a lease in the store that its holder renews, and loses when it stops.

A runner renews every HEARTBEAT_EVERY_S; one that stops (killed, partitioned) loses the study to
another process once LEASE_S passes without a renewal, or at once when it is known dead (a holder
on this host whose process is gone). The lease's time is the database's clock (the store writes and
compares it in SQL): replicas whose clocks disagree still agree on who holds a study. This process's
clocks only pace the renewals (monotonic).
"""

from __future__ import annotations

import errno
import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

from autotuner.limits import SettingError
from autotuner.store import Store, StudyState
from autotuner.text import printable, shortened

log = logging.getLogger("autotuner.tuning")


def lease_seconds() -> float:
    """AUTOTUNER_LEASE_S (default 60), or a SettingError naming it: seconds from 1 to a day (NaN, 0 or
    a negative lease made every runner's lease lapse at once; `abc` stopped every command at import)."""
    text = os.environ.get("AUTOTUNER_LEASE_S", "").strip()
    if not text:
        return 60.0
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 1 <= value <= 86_400:
        raise SettingError(f"AUTOTUNER_LEASE_S={text[:40]!r}: seconds from 1 to 86400 (default 60)")
    return value


LEASE_S = lease_seconds()
HEARTBEAT_EVERY_S = min(5.0, LEASE_S / 4)


class StudyBusy(RuntimeError):
    """Another live process holds this study's lease."""


class StudyCancelled(RuntimeError):
    pass


class StoreUnavailable(RuntimeError):
    """The store did not answer (locked past its busy timeout, a server gone, a full disk): the study
    is left as it is, running, for its runner to resume when the store answers again; never failed for
    it. Its launches go on on the cluster and are followed again then."""


class WorkdirFull(RuntimeError):
    """A launch could not be submitted: the disk under the study's workdir is full (ENOSPC, or a quota:
    EDQUOT). Nothing says its env config is to blame: the launch is recorded cancelled, no trial spent,
    nothing quarantined, and the study stays running, resumed once there is space again (failed, it
    ended for good and an operator who freed space could not resume it)."""


# In words of our own, not strerror's: a launch's row says them, read by hosts whose C library words
# them otherwise (EDQUOT is "Disc quota exceeded" on macOS).
FULL_DISK = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded"}


def disk_full(exc: BaseException) -> str | None:
    """What is full (FULL_DISK's words), if `exc` or what it wraps says a disk or quota is; else None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in FULL_DISK:
            return FULL_DISK[current.errno]
        # the context too (an error raised while the full disk was handled), not one raised `from None`
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return None


class FullDisks:
    """What a full disk kept from submitting a launch (a study, a re-validation): each tried again after
    a pause, the others run meanwhile; said once, when it starts. Each try records a cancelled launch:
    one a tick filled its list while nobody freed space, so the pause doubles from FIRST_S up to MAX_S
    (a weekend full adds some 200 rows, and space freed is seen within MAX_S)."""

    FIRST_S, MAX_S = 60.0, 900.0

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._pauses: dict[Hashable, tuple[float, float]] = {}  # key: (until, the pause that led there)

    def waiting(self, key: Hashable) -> bool:
        return self._clock() < self._pauses.get(key, (-math.inf, 0.0))[0]

    def full(self, key: Hashable, exc: WorkdirFull, what: str) -> None:
        if key in self._pauses:
            pause = min(self._pauses[key][1] * 2, self.MAX_S)
        else:
            pause = self.FIRST_S
            log.warning("%s; %s stays running, tried again in %.0f s, then less often (every %.0f min at "
                        "most) until there is space", exc, what, pause, self.MAX_S / 60)  # fmt: skip
        self._pauses[key] = (self._clock() + pause, pause)

    def cleared(self, key: Hashable) -> None:
        """It ran on: a full disk later is said again, and paused from FIRST_S."""
        self._pauses.pop(key, None)


# What says the store is out of reach for now, not that a request of ours is wrong (SQLite raises
# OperationalError for a missing column too: that must still fail the study). SQLite by its message;
# PostgreSQL by SQLSTATE class: 08 connection, 53 insufficient resources (disk full, too many
# connections), 57P0x shutting down or starting, 40001/40P01 serialization failure and deadlock.
SQLITE_AWAY = ("database is locked", "database table is locked", "database is busy", "disk is full",
               "disk i/o error", "unable to open database file")  # fmt: skip
SQLSTATE_AWAY = ("08", "53", "57P01", "57P02", "57P03", "40001", "40P01")


def store_unavailable(exc: BaseException) -> bool:
    """Whether `exc`, or what it wraps (Optuna's StorageInternalError wraps SQLAlchemy's), says the
    store is out of reach for now (a pool that had no connection to give within its timeout too)."""
    from sqlalchemy.exc import DBAPIError
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, PoolTimeout):
            return True
        if isinstance(current, DBAPIError):
            if current.connection_invalidated:
                return True
            state = str(getattr(current.orig, "sqlstate", None) or "")
            if state and state.startswith(SQLSTATE_AWAY):
                return True
            if any(phrase in str(current.orig).lower() for phrase in SQLITE_AWAY):
                return True
            if _unreached(current):
                return True
        current = current.__cause__ or current.__context__
    return False


# A PostgreSQL driver's own words for a server it could not reach for now: refused, reset, restarting,
# out of connection slots. Not "does not exist" nor "authentication failed": a wrong URL or password is
# no outage, and waiting for it would retry forever.
PG_AWAY = ("connection refused", "the database system is starting up", "the database system is shutting down",
           "the database system is in recovery mode", "server closed the connection", "connection reset",
           "could not receive data from server", "could not send data to server", "timeout expired",
           "no route to host", "network is unreachable", "could not translate host name", "too many clients",
           "remaining connection slots are reserved", "ssl syscall error", "consuming input failed")  # fmt: skip


def _unreached(error: Any) -> bool:
    """A PostgreSQL driver's own failure to reach the server for now (PG_AWAY): such errors carry no
    SQLSTATE (no server answered, or it answered while connecting), and a restart of PostgreSQL while a
    study ran failed the study for good."""
    from sqlalchemy.exc import InterfaceError, OperationalError

    orig = error.orig
    driver = type(orig).__module__.split(".")[0]
    code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if (
        not isinstance(error, OperationalError | InterfaceError)
        or driver not in ("psycopg", "psycopg2")
        or code
    ):
        return False
    said = str(orig).lower()
    return any(words in said for words in PG_AWAY)


def owner_id() -> str:
    """host:pid:nonce:pid-namespace. The namespace tells a process on this host's pid table from one
    in a container sharing the host name, whose pid means nothing here."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}:{_pid_namespace()}"


def _pid_namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return ""


def owner_is_dead(owner: str | None) -> bool:
    """A lease holder on this host whose process is gone (SIGKILLed): no need to wait out its lease."""
    if not owner:
        return False
    parts = owner.split(":")
    host, pid = parts[0], parts[1] if len(parts) > 1 else ""
    namespace = parts[3] if len(parts) > 3 else None  # an owner written before it was recorded: None
    if host != socket.gethostname() or not pid.isdigit() or namespace not in (None, _pid_namespace()):
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def described(owner: object) -> str:
    """A lease holder as an operator can find it, when it runs on this host: a service's scheduler, or
    the autotuner command and study it runs ("host:pid:nonce:ns" alone said nothing). Never its whole
    command line: a --db URL there may hold a password."""
    host, pid, *rest = (owner if isinstance(owner, str) else "").split(":") + [""]
    here = host == socket.gethostname() and pid.isdigit() and rest[1:2] in ([""], [_pid_namespace()])
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0") if here else []
    except OSError:
        argv = []
    if not any(argv):
        return str(owner)
    return f"{owner} (pid {pid} on this host: {_program(argv)})"


def _program(argv: list[str]) -> str:
    """`autotuner tune --study NAME`, the scheduler of an `autotuner serve`, or the program's name."""
    if "api.scheduler" in argv:
        return "the scheduler of an `autotuner serve`"
    at = next((i for i, arg in enumerate(argv) if arg == "autotuner" or arg.endswith("/autotuner")), None)
    if at is None:
        return printable(Path(argv[0]).name)
    command = argv[at + 1 : at + 2]
    study = [f"--study {argv[i + 1]}" for i, arg in enumerate(argv[:-1]) if arg == "--study"][:1]
    return printable(shortened(" ".join(["autotuner", *command, *study]), 120))


class Lease:
    def __init__(
        self, store: Store, study_id: int, owner: str | None = None, *, cancellable: bool = True
    ) -> None:
        self.store = store
        self.study_id = study_id
        self.owner = owner or owner_id()
        self.cancellable = cancellable  # False: the study's cancel does not stop the holder (a re-validation)
        self.last_beat = 0.0

    def acquire(self) -> None:
        if self.store.acquire_study(self.study_id, self.owner, LEASE_S):
            return
        holder = self.store.study(self.study_id).owner  # type: ignore[union-attr]
        if owner_is_dead(holder) and self.store.take_over_study(self.study_id, holder, self.owner, LEASE_S):  # type: ignore[arg-type]
            log.info("study %s: took over from %s, which is no longer running", self.study_id, holder)
            return
        raise StudyBusy(f"study {self.study_id} is being run by {described(holder)}")

    def due(self) -> bool:
        return time.monotonic() - self.last_beat >= HEARTBEAT_EVERY_S

    def beat(self, force: bool = False) -> None:
        """Renew the lease (at most every HEARTBEAT_EVERY_S unless forced); raise if it was lost or
        the study was cancelled meanwhile."""
        if not force and not self.due():
            return
        self.last_beat = time.monotonic()
        if not self.store.renew_study(self.study_id, self.owner, LEASE_S):
            raise StudyBusy(f"lost the lease on study {self.study_id} to another process")
        if not self.cancellable:
            return
        study = self.store.study(self.study_id)
        if study is not None and study.state == StudyState.CANCELLED:
            raise StudyCancelled(f"study {self.study_id} was cancelled")

    def release(self) -> None:
        self.store.release_study(self.study_id, self.owner)
