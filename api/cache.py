"""Served configs in memory, pre-rendered in every format: a job-start storm never touches the DB.

What a client may rely on, and how it holds:

- Never a 404 for a published config. A miss (rare: a job of an untuned workload) asks the store
  for its generation before answering, and loads what changed (`find`).
- Monotonic reads within a service. The store counts every change to what is served in a
  generation number, bumped in the change's own transaction (`Store.served_heads` reads it in the
  same statement as the served ids, so a loaded state has exactly one generation). The uvicorn
  workers of one `autotuner serve` share one 8-byte counter, `SharedGeneration`, a file they all
  map: the newest generation any of them has loaded. A worker raises it *before* it answers with
  what it loaded, and every answer first compares it with its own (one memory read): a worker
  that is behind loads before answering (unless its own load is stalled: see "Store stalled"). So once any worker has answered with generation g, no
  later answer of the service shows an older state; a pin or rollback made through the API (the
  route refreshes before it returns) is served by every worker when the call returns; a change
  made by another process (scheduler, CLI, another replica) is seen by the first worker that polls
  the store (every `refresh_s`) and so by every worker within `refresh_s`.
- Why this and not the alternatives: a store read per answer would cost the hit path a round trip
  (it is a dict lookup now); PostgreSQL LISTEN/NOTIFY does not exist on SQLite, and a notification
  lost while a worker reconnects leaves it stale with nothing to tell; the shared counter costs a
  hit one memory read, works on both backends, and the store's generation stays the truth.
- Across replicas (several services on one PostgreSQL): each replica is monotonic on its own and
  serves every change within `refresh_s`; a client switching replicas can see an older state for
  up to `refresh_s`, never a 404 for what was published (the miss path asks the store).
- The store went back (restored from an older dump, a failover to a replica that lost commits, the
  generation's row deleted by hand and made again at 0): its generation is then below what this
  service loaded. A read that starts after the shared counter says g and returns less than g can
  only mean that (the counter is only raised to generations read from the store), so the state read
  is labelled with a new epoch, above every label before it: the counter holds (epoch, generation)
  in one word, compared as a number. The worker that read it
  serves it at once and every other one at its next answer (the counter tells it), so the service
  follows the store within `refresh_s`, a pin through the API is served by every worker when the
  call returns, and the log says once per service that the generation went back from X to Y. Reads
  are monotonic again from there. A restore that took exactly as many changes as it lost before the
  next poll is at the same generation in another state: every bump draws a stamp (`at_config_generation
  .stamp`), and the worker that loaded the newest state sees it differ, and labels it likewise. One
  whose generation climbed past what was loaded reads as changes (no log line), and is served as it
  is all the same: a rendered row is reused only if its head matches whole, stamp included (below).
- Store unreachable: answers keep coming from memory (fail-open for jobs); a worker that could not
  catch up retries after `refresh_s`, so monotonicity holds while the store answers. A service
  that starts while the store is down starts anyway and loads when it answers; until then a key
  it has not loaded is answered 503 with Retry-After (`StoreUnanswered`), never a 404 the store did
  not say: a hook told 404 drops the config it kept from an earlier start. A load whose reads stop
  answering half-way (the heads read, then the rows not: a restart) is abandoned whole: what is
  served stays, its generation too, and the next poll loads again. A row is told unservable only
  when it is read alone and fails for its data (`store_away` says which failures are not). What a
  load rendered without the store's word (its re-validations, a row it could not read) is loaded
  again at the next poll, whether or not the generation moved.
- Store stalled (a failover, a partition): one thread loads and waits on it; every other answer of
  that worker waits at most CATCH_UP_WAIT_S for that load, then answers from memory (a miss: 503,
  not a 404 the store did not say). So while a worker's own load is stalled, a pin made through
  another worker is served by it when that load returns, not when the pin call does. A miss asks the
  store itself (`find`) and, with no load in flight, waits on it: for as long as the store stalls, in
  one of a few threads of the misses' own (api.routes.configs.MISS_THREADS), so stuck misses hold up
  no hit and no other route. The event loop never reads the store: the fast path answers only from a
  current cache (`current`, then `get` with catch_up False), the route catches up in the thread pool.
- Configs are immutable but for their pin and what their re-validations say (when, on what stack,
  flagged): the store's heads carry the last finished re-validation's id beside the pin, and a
  finished re-validation bumps the generation, so a version is rendered again only when either moved.
  A head also carries a stamp (when its row was made, when its last re-validation finished): a
  restored store hands the ids after its dump out again, to other rows, and the stamp tells them apart.
- The job's fingerprint (the `X-Autotuner-Fingerprint` header the hook sends) is compared with what
  the served version was validated on, and the answer says `fingerprint_match` (true, false or
  "unknown") and what differs. The comparison and its bodies are kept per (version, header), for
  headers as the hook writes them and at most MAX_VARIANTS a version: jobs of one cluster send a
  handful of distinct stacks, so it is a dict lookup after the first. A stack
  that differs is counted for the store (`FingerprintReports`, written off the request path).
- One bad row never stops serving. Rows are rendered one by one: a row that cannot be rendered (a
  name or a value an older version let into the store, a tampered row, one that does not pass the
  gate of what a job may be handed) is logged, counted (`autotuner_configs_unservable` in
  /metrics) and answered 500 with the reason on its own (cluster, workload); every other key is
  served as before.
"""

from __future__ import annotations

import fcntl
import json
import logging
import mmap
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from autotuner.job.exports import mismatch_note, render
from autotuner.job.fingerprint import compare, decode, encode, stack_changed
from autotuner.store import Config, Store, pick_served, servable
from autotuner.store.db import finite_or_null
from autotuner.tuning.lease import store_unavailable

log = logging.getLogger("autotuner.api.cache")


UNKNOWN = b', "fingerprint_match": "unknown", "fingerprint_diff": {}}'
MAX_VARIANTS = 64  # distinct job stacks kept per version; more are answered, not kept
EPOCH_SHIFT = 48  # a label: epoch above, store generation below (2**48 changes outlast any store)
GENERATION_MASK = (1 << EPOCH_SHIFT) - 1
CATCH_UP_WAIT_S = 0.25  # how long an answer waits on another thread's load before it answers from memory


class StoreUnanswered(Exception):
    """The store did not answer, and what is in memory cannot answer this request on its own."""


def store_away(exc: BaseException) -> bool:
    """Whether `exc` says the store did not answer (gone, restarting, locked, out of connections),
    not that what it holds is wrong: `store_unavailable`, and any error SQLAlchemy raises about the
    connection (OperationalError, InterfaceError, a pool timeout) whatever the driver's words. A
    load takes these for "try again", never for "this row is bad"."""
    from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    away = (DisconnectionError, InterfaceError, OperationalError, PoolTimeout)
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, away):
            return True
        current = current.__cause__ or current.__context__
    return store_unavailable(exc)


def labelled(seen: int, generation: int, rewound: bool = False) -> int:
    """The label of a state the store returned at `generation`, by a read that started when the shared
    counter said `seen`: the same epoch if the store is at or past what the counter says, else (the
    store went back: see the module's docstring) the next epoch, above every label of this one. Also
    the next epoch if the store is `rewound` to another state of the same generation (its stamp)."""
    epoch, newest = seen >> EPOCH_SHIFT, seen & GENERATION_MASK
    generation = min(max(generation, 0), GENERATION_MASK)  # a counter set by hand stays in its bits
    return ((epoch + (generation < newest or (rewound and generation == newest))) << EPOCH_SHIFT) | generation


@dataclass(frozen=True)
class Match:
    """One job fingerprint against one served version: the verdict and the bodies that say it."""

    match: bool | str
    diff: dict[str, list[str]]
    body: dict[str, bytes]
    stale: bool  # the stack differs (not only the node count): counted, and may ask for a re-validation


@dataclass(frozen=True)
class Served:
    nodes: int
    created_at: datetime
    id: int
    config: dict[str, Any]
    body: dict[str, bytes]  # format -> pre-rendered response (no fingerprint: "unknown")
    key: tuple[str, str] = ("", "")  # (cluster, workload)
    error: str | None = None  # why this row cannot be served (then `body` is empty)
    unverified: bool = False  # rendered without its re-validations (the store did not say): redo next load
    variants: dict[bytes, Match] = field(default_factory=dict, compare=False, repr=False)

    def matched(self, header: bytes) -> Match:
        """The answer to a job that sent this fingerprint header (kept: the next is a lookup)."""
        found = self.variants.get(header)
        if found is None:
            job = decode(header)
            found = self._match(job)
            # Kept under the header as sent only if it is what the hook sends (its stack, canonical):
            # a client sending megabytes of distinct headers is answered, and fills nothing.
            if len(self.variants) < MAX_VARIANTS and header == encode(job).encode("latin-1", "replace"):
                self.variants[header] = found
        return found

    def _match(self, job: dict[str, str]) -> Match:
        match, diff = compare(self.config.get("validated_on") or {}, job)
        if match == "unknown":
            return Match(match, diff, self.body, False)
        tail = b', "fingerprint_match": %s, "fingerprint_diff": %s}' % (
            json.dumps(match).encode(), json.dumps(diff).encode())  # fmt: skip
        body = {"json": self.body["json"][: -len(UNKNOWN)] + tail, "env": self.body["env"],
                "slurm": self.body["slurm"]}  # fmt: skip
        if diff:
            label = self.config.get("exports", {}).get("AUTOTUNER_CONFIG", "")
            note = (
                f"# nccl-autotuner: {mismatch_note(label, self.config.get('validated_on'), diff)}\n".encode()
            )
            body["env"] += note
            body["slurm"] += note
        return Match(match, diff, body, stack_changed(diff))


class SharedGeneration:
    """The label (`labelled`) of the newest store state that a worker of this service has loaded: an
    8-byte counter in a file every worker maps (anonymous memory for an app on its own). An aligned
    8-byte read is one load on the machines we run on, so readers take no lock; writers (rare) take a
    file lock."""

    def __init__(self, path: Path | None = None) -> None:
        self._fd = -1
        if path is None:
            self._map = mmap.mmap(-1, 8)
        else:
            self._fd = os.open(path, os.O_RDWR)
            if os.fstat(self._fd).st_size < 8:
                raise ValueError(f"{path}: not a generation file (create it with SharedGeneration.create)")
            self._map = mmap.mmap(self._fd, 8)
        self._word = memoryview(self._map).cast("Q")
        self._lock = threading.Lock()  # flock does not exclude threads sharing one file description

    @staticmethod
    def create(path: Path) -> None:
        """A fresh counter (0) for a service starting: written once, before its workers start."""
        path.write_bytes(bytes(8))

    @property
    def value(self) -> int:
        return self._word[0]

    def raise_to(self, generation: int) -> int:
        """Raise the counter to `generation` if it is below; the value it had."""
        with self._lock:
            if self._fd >= 0:
                fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                before = int(self._word[0])
                if generation > before:
                    self._word[0] = generation
                return before
            finally:
                if self._fd >= 0:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)


class ConfigCache:
    def __init__(self, store: Store, refresh_s: float = 1.0, shared: SharedGeneration | None = None,
                 reports: Any = None) -> None:  # fmt: skip
        self.store = store
        self.reports = reports  # api.fingerprints.FingerprintReports: written by the refresh thread
        self.refresh_s = refresh_s
        self.shared = shared or SharedGeneration()
        self.generation = -1  # the label (`labelled`) of what we serve; -1: nothing loaded
        self._loaded: tuple[int, str | None] = (-1, None)  # that label and its generation's stamp, together
        self._served: dict[tuple[str, str], list[Served]] = {}
        self._rendered: dict[tuple[int, bool, int, str], Served] = {}
        self._load_lock = threading.Lock()  # one load at a time: a slow one never overwrites a newer
        self._retry_at = 0.0  # after a failed catch-up: serve what we have until then
        self._dirty = False  # what we serve lacks some of the store's word: load again at the next poll
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def get(self, cluster: str, workload: str, nodes: int | None, *, catch_up: bool = True) -> Served | None:
        """The hot path: a memory read, a compare, a dict lookup (a load only after a change: see
        `current`; never with `catch_up` False, what the event loop asks after `current`: another worker
        may raise the shared counter between the two)."""
        if catch_up and self.shared.value > self.generation:
            self._catch_up()
        return pick_served(self._served.get((cluster, workload), []), nodes)  # type: ignore[arg-type, return-value]

    def current(self) -> bool:
        """Whether `get` answers from memory alone now (no store read): what an event loop checks
        before it calls `get` itself rather than from a thread. A store that stalls must not stall
        every request of a worker behind it."""
        return self.shared.value <= self.generation or time.monotonic() < self._retry_at

    def find(self, cluster: str, workload: str, nodes: int | None) -> Served | None:
        """`get`, and on a miss the store's word: a config another process published a moment ago is
        served now, not after the next poll. A miss the store could not confirm (it did not answer)
        raises StoreUnanswered: "nothing published" would be a guess, and a job told so drops the
        config it kept from an earlier start."""
        served = self.get(cluster, workload, nodes)
        if served is None:
            try:
                loaded = self.refresh(wait_s=CATCH_UP_WAIT_S)
            except Exception as exc:  # the store is down: what we hold is the best answer there is
                log.warning("config cache: the store did not answer a miss", exc_info=True)
                served = self.get(cluster, workload, nodes)
                if served is None:  # the exception's words name hosts and SQL: logged above, not answered
                    raise StoreUnanswered(type(exc).__name__) from exc
                return served
            served = self.get(cluster, workload, nodes)
            if served is None and not loaded:  # another load holds the store's answer: not a miss yet
                raise StoreUnanswered("another load of this worker still waits on the store")
        return served

    def published(self) -> list[tuple[str, str]]:
        """The (cluster, workload) keys held now, from memory: what a 404 names as the closest."""
        return list(self._served)

    def all(self) -> list[dict[str, Any]]:
        return [s.config for s in self.entries()]

    def entries(self) -> list[Served]:
        """Every served config that can be served."""
        if self.shared.value > self.generation:
            self._catch_up()
        return [s for entries in self._served.values() for s in entries if s.error is None]

    def unservable(self) -> list[Served]:
        """The served rows that could not be rendered (each answered 500 on its own key)."""
        return [s for entries in self._served.values() for s in entries if s.error is not None]

    def refresh(self, wait_s: float = -1) -> bool:
        """Load the store's state if it is newer than what we serve, or if the store went back (one
        primary-key read if neither). False if another load held the lock past `wait_s` (-1: as long
        as it takes), so that what the store says is not loaded yet."""
        seen = self.shared.value  # before the store is read: see `labelled`
        target = max(self._label(seen, *self.store.config_generation_stamp()), self.shared.value)
        return (target <= self.generation and not self._dirty) or self._load(target, wait_s)

    def _catch_up(self) -> None:
        if time.monotonic() < self._retry_at:
            return
        try:
            # Another thread loading (perhaps stalled on the store): wait a moment, then answer from
            # memory; the store's word is served as soon as that load returns.
            self._load(self.shared.value, wait_s=CATCH_UP_WAIT_S)
        except Exception:  # fail-open: keep answering from memory, try again after refresh_s
            self._retry_at = time.monotonic() + self.refresh_s
            log.warning("config cache: could not catch up with the store", exc_info=True)

    def _load(self, target: int, wait_s: float = -1) -> bool:
        """Load what is served now, if older than `target`. Configs are immutable but for their pin,
        so a (id, pinned) already rendered is reused: a publish among 10,000 renders one. If another
        load holds the lock past `wait_s` (-1: as long as it takes), return False without loading."""
        if not self._load_lock.acquire(timeout=wait_s):
            return False
        try:
            if self.generation < target or self._dirty:  # else another thread loaded it meanwhile
                self._reload()
            return True
        finally:
            self._load_lock.release()

    def _reload(self) -> None:
        """Read the store's served heads and render what changed (under the load lock). A read that
        fails because the store is away raises before anything is changed: what is served stays."""
        seen = self.shared.value  # at least the load's target, so the label read is too
        generation, stamp, heads = self.store.served_heads()
        label = self._label(seen, generation, stamp)
        pins = {head[0]: head[1] for head in heads}
        # A head is reused whole or not at all: its stamp tells a row from another that a restored
        # store handed the same id to (its sequence hands the ids after the dump's out again).
        known = {
            head: entry
            for head, entry in self._rendered.items()
            if entry.error is None and not entry.unverified
        }  # retry the rest
        wanted = [head[0] for head in heads if head not in known]
        rows = self._rows(wanted)
        views = self._views(rows)
        fresh = {row.id: self._render(row, pins[row.id], views) for row in rows}
        fresh.update(self._unreadable(set(wanted) - set(fresh)))
        rendered = {head: entry for head in heads if (entry := known.get(head) or fresh.get(head[0]))}
        served: dict[tuple[str, str], list[Served]] = {}
        for entry in rendered.values():
            served.setdefault(entry.key, []).append(entry)
        before = self.shared.raise_to(label)  # before anyone answers with it
        self._rendered, self._served = rendered, served
        self._loaded = (label, stamp)
        # Rendered without its re-validations, or a head left out (its row and its label unread): redo.
        self._dirty = len(rendered) < len(heads) or any(entry.unverified for entry in rendered.values())
        self.generation = label  # last: readers compare it first
        if label >> EPOCH_SHIFT > before >> EPOCH_SHIFT:  # the first worker to see it says it
            went = f"went back from {seen & GENERATION_MASK} to {generation}"
            if generation == seen & GENERATION_MASK:
                went = f"is at {generation} again, in another state (its stamp)"
            log.warning(
                "config cache: the store's generation %s (restored from an older dump, a failover to a replica "
                "that lost commits, or its row deleted by hand and made again at 0): serving the store as it "
                "is now", went,
            )  # fmt: skip

    def _label(self, seen: int, generation: int, stamp: str | None) -> int:
        """`labelled`, told whether the store is at the generation this worker loaded last, newest of
        all, with another stamp: a restore that took as many changes as it lost (else this worker
        has no stamp of the newest state to compare, and the worker that loaded it tells)."""
        loaded, loaded_stamp = self._loaded
        rewound = loaded == seen and generation == seen & GENERATION_MASK and stamp != loaded_stamp
        return labelled(seen, generation, rewound)

    def _rows(self, ids: list[int]) -> list[Config]:
        """The rows of `ids`; if they cannot be read together (a row the ORM cannot load), one by
        one, leaving out the ones that cannot be read at all for their data. A read that fails because
        the store is away raises: the load is abandoned, not a row left out (its key would be a 404)."""
        if not ids:
            return []
        try:
            return self.store.configs_by_id(ids)
        except Exception as exc:
            if store_away(exc):
                raise
            if len(ids) <= 1:
                log.error("config cache: config %s cannot be read (%s: %s)", ids, type(exc).__name__, exc)
                return []
            return [row for i in ids for row in self._rows([i])]

    def _views(self, rows: list[Config]) -> dict[int, dict[str, Any]] | None:
        """What each row's re-validations say; None when the store cannot say (the rows are then
        served as published, and rendered again at the next load): serving never waits on it."""
        try:
            return self.store.validation_views(rows) if rows else {}
        except Exception:
            log.warning("config cache: re-validations could not be read", exc_info=True)
            return None

    def _unreadable(self, ids: set[int]) -> dict[int, Served]:
        """Served entries that say why, for rows whose data could not be read. If their labels cannot
        be read either (no data column in them: the store is away, or worse), this raises: the load is
        abandoned and what is served stays, rather than their keys answered 404."""
        if not ids:
            return {}
        try:
            labels = self.store.config_labels(sorted(ids))
        except Exception:
            log.error("config cache: configs %s cannot be read, nor named: load abandoned", sorted(ids))
            raise
        return {
            i: Served(nodes, created_at, i, {}, {}, (cluster, workload),
                      f"config {i} (v{version}, {nodes} node(s)) cannot be served: its stored data cannot be read")
            for i, cluster, workload, nodes, version, created_at in labels
        }  # fmt: skip

    @classmethod
    def why_unservable(cls, row: Config) -> str | None:
        """Why `row` could not be served (None: it can): asked before a pin or rollback makes it served."""
        return cls._render(row, True).error

    @staticmethod
    def _render(row: Config, pinned: bool, views: dict[int, dict[str, Any]] | None = None) -> Served:
        """A row pre-rendered in every format, or, when it cannot be, a Served that says why."""
        # `pinned` as of the generation read: the row itself was read a moment later
        try:
            key = (row.cluster.name, row.workload.name)
            config = {**servable(row, (views or {}).get(row.id)), "pinned": pinned}
            body = {"json": json.dumps(finite_or_null(config)).encode()[:-1] + UNKNOWN, "env": render(config, "sh").encode(),
                    "slurm": render(config, "slurm").encode()}  # fmt: skip
        except Exception as exc:
            error = f"config {row.id} (v{row.version}, {row.nodes} node(s)) cannot be served: {exc}"
            log.error("config cache: %s", error)
            key = _key_of(row)
            return Served(row.nodes, row.created_at, row.id, {}, {}, key, error)
        return Served(row.nodes, row.created_at, row.id, config, body, key, unverified=views is None)

    def start(self) -> None:
        try:
            self._load(self.shared.value)
        except Exception:  # the store is down: start anyway, the loop loads when it answers
            log.warning("config cache: nothing loaded at start (the store did not answer)", exc_info=True)
        self._thread = threading.Thread(target=self._loop, name="config-cache", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._flush_reports()

    def _loop(self) -> None:
        while not self._stop.wait(self.refresh_s):
            try:
                self.refresh()
            except Exception:  # the DB blinked: keep serving what we have, try again next tick
                pass
            self._flush_reports()

    def _flush_reports(self) -> None:
        if self.reports is not None:
            try:
                self.reports.flush()
            except Exception:  # counted again at the next tick: the reports stay pending
                log.warning("config cache: fingerprint reports not written", exc_info=True)


def _key_of(row: Config) -> tuple[str, str]:
    try:
        return (str(row.cluster.name), str(row.workload.name))
    except Exception:  # not even its names: kept under a key no request can name
        return ("", f"config {row.id}")
