"""Served configs in memory, pre-rendered in every format: a job-start storm never touches the DB.

A background thread polls a cheap stamp of the configs table and reloads when it changes, so a
publish or pin by any replica (or the scheduler thread) is served within `refresh_s`; local writes
also call `refresh()` directly.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import case, func, select

from autotuner.configs import config_to_dict, render
from autotuner.store import Config, Store, pick_served


@dataclass(frozen=True)
class Served:
    nodes: int
    created_at: datetime
    id: int
    config: dict[str, Any]
    body: dict[str, bytes]  # format -> pre-rendered response


class ConfigCache:
    def __init__(self, store: Store, refresh_s: float = 1.0) -> None:
        self.store = store
        self.refresh_s = refresh_s
        self._served: dict[tuple[str, str], list[Served]] = {}
        self._rendered: dict[tuple[int, bool], Served] = {}
        self._stamp: tuple[Any, ...] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _current_stamp(self) -> tuple[Any, ...]:
        with self.store.session() as s:
            row = s.execute(
                select(
                    func.count(Config.id),
                    func.max(Config.id),
                    func.sum(case((Config.pinned, Config.id), else_=0)),
                )
            ).one()
        return tuple(row)

    def refresh(self, force: bool = False) -> None:
        """Reload what changed. Configs are immutable but for their pin, so a (id, pinned) already
        rendered is reused: a publish among 10,000 configs renders one, not 10,000."""
        stamp = self._current_stamp()
        if not force and stamp == self._stamp:
            return
        heads = self.store.served_heads()
        known = self._rendered
        fresh = {s.id: s for s in (self._render(row) for row in
                                   self.store.configs_by_id([i for i, p in heads if (i, p) not in known]))}  # fmt: skip
        rendered = {(i, p): known.get((i, p)) or fresh[i] for i, p in heads}
        served: dict[tuple[str, str], list[Served]] = {}
        for entry in rendered.values():
            served.setdefault((entry.config["cluster"], entry.config["workload"]), []).append(entry)
        with self._lock:
            self._served, self._rendered, self._stamp = served, rendered, stamp

    @staticmethod
    def _render(row: Config) -> Served:
        config = config_to_dict(row)
        body = {"json": json.dumps(config).encode(), "env": render(config, "sh").encode(),
                "slurm": render(config, "slurm").encode()}  # fmt: skip
        return Served(row.nodes, row.created_at, row.id, config, body)

    def get(self, cluster: str, workload: str, nodes: int | None) -> Served | None:
        return pick_served(self._served.get((cluster, workload), []), nodes)  # type: ignore[arg-type, return-value]

    def all(self) -> list[dict[str, Any]]:
        return [s.config for entries in self._served.values() for s in entries]

    def start(self) -> None:
        self.refresh(force=True)
        self._thread = threading.Thread(target=self._loop, name="config-cache", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(self.refresh_s):
            try:
                self.refresh()
            except Exception:  # the DB blinked: keep serving what we have, try again next tick
                continue
