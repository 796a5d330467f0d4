"""Jobs that run on another stack than their config was validated on: counted off the request path,
written to the store by the config cache's refresh thread, and, the first time a stack is seen for a
version, a re-validation of that version asked for (AUTOTUNER_REVALIDATE_ON_MISMATCH, on by default).

A request only adds to a dict under a lock (the fast path must keep its figures); a write failing
(the store is down) keeps the counts for the next tick.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection
from datetime import timedelta
from typing import Any

from autotuner.job.fingerprint import decode, describe_diff
from autotuner.store import NotFound, Store, ValidationTrigger, utcnow
from autotuner.tuning.revalidate import measured_on

log = logging.getLogger("autotuner.api.fingerprints")
MAX_PENDING = 10_000  # distinct (version, stack) pairs held between two writes; more are dropped
# At most one re-validation a version asked for by jobs per this long: each new stack asked for one,
# back to back (a read token's made-up headers, or a fleet half-way through an upgrade). A stack
# reported meanwhile is recorded and flags the version stale (the alert); it waits for the schedule
# or `autotuner revalidate`.
REASK_AFTER = timedelta(hours=6)


class FingerprintReports:
    def __init__(
        self, store: Store, *, trigger: bool = True, executors: Collection[str] | None = None
    ) -> None:
        self.store = store
        self.trigger = trigger
        self.executors = executors  # a version measured on another executor: the scheduler would never run it
        self._lock = threading.Lock()
        self._pending: dict[tuple[int, bytes], list[Any]] = {}  # (config id, header) -> [jobs, diff]

    def note(self, config_id: int, header: bytes, diff: dict[str, list[str]]) -> None:
        key = (config_id, header)
        with self._lock:
            entry = self._pending.get(key)
            if entry is not None:
                entry[0] += 1
            elif len(self._pending) < MAX_PENDING:
                self._pending[key] = [1, diff]

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        if not pending:
            return
        entries = [{"config_id": config_id, "fingerprint": decode(header), "diff": diff, "jobs": jobs}
                   for (config_id, header), (jobs, diff) in pending.items()]  # fmt: skip
        try:
            new = self.store.record_reports(entries)
        except Exception:
            with self._lock:  # put them back, counted with what came meanwhile
                for key, (jobs, diff) in pending.items():
                    entry = self._pending.setdefault(key, [0, diff])
                    entry[0] += jobs
            raise
        if self.trigger:
            for report in new:
                self._ask(report)

    def _ask(self, report: Any) -> None:
        """A re-validation of the version jobs report a new stack against (one per stack: a stack
        that still differs after it is reported, not asked about again)."""
        reason = f"jobs report {describe_diff(report.diff)} since validation"
        last = self.store.last_requested(report.config_id, ValidationTrigger.FINGERPRINT)
        if last is not None and utcnow() - last < REASK_AFTER:
            log.info("config %s: %s; not re-validated: jobs asked for one at %s (one per %s at most)",
                     report.config_id, reason, last.isoformat(timespec="seconds"), REASK_AFTER)  # fmt: skip
            return
        configs = self.store.configs_by_id([report.config_id])
        executor = measured_on(self.store, configs[0]) if configs else None
        if executor is not None and self.executors is not None and executor not in self.executors:
            log.info("config %s: %s; not re-validated: measured on executor %s, which this service does not run",
                     report.config_id, reason, executor)  # fmt: skip
            return
        try:
            validation, created = self.store.request_validation(
                report.config_id, ValidationTrigger.FINGERPRINT, reason, report.fingerprint
            )
        except (NotFound, ValueError) as exc:  # no study says how it was measured: reported only
            log.info("config %s: %s; not re-validated: %s", report.config_id, reason, exc)
            return
        self.store.link_report(report.id, validation.id)
        if created:
            log.info("config %s: %s: re-validation %s queued", report.config_id, reason, validation.id)
