"""Prometheus metrics: studies and trials by state (read at scrape time), config fetches, latency."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from autotuner.configs import MEDIA_TYPES
from autotuner.store import Candidate, Store, Study


class StoreCollector(Collector):
    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[GaugeMetricFamily]:
        studies = GaugeMetricFamily("autotuner_studies", "Studies by state", labels=["state"])
        trials = GaugeMetricFamily("autotuner_trials", "Measured candidates by state", labels=["state"])
        with self.store.session() as s:
            for state, n in s.execute(select(Study.state, func.count(Study.id)).group_by(Study.state)):
                studies.add_metric([state], n)
            for state, n in s.execute(
                select(Candidate.state, func.count(Candidate.id)).group_by(Candidate.state)
            ):
                trials.add_metric([state], n)
        yield studies
        yield trials


class CacheCollector(Collector):
    """What this worker's config cache cannot serve (rows an older version or a tamperer stored)."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "autotuner_configs_unservable",
            "Served configs that cannot be rendered (answered 500 on their own key; the log says why)",
            value=len(self.cache.unservable()),
        )


class Metrics:
    def __init__(self, store: Store, cache: Any = None) -> None:
        self.store = store
        self.cache = cache
        self.registry = CollectorRegistry()
        self.config_fetches = Counter(
            "autotuner_config_fetches", "Config fetches by format and result", ["format", "result"],
            registry=self.registry,
        )  # fmt: skip
        self.latency = Histogram(
            "autotuner_request_seconds", "Request latency by route", ["route"], registry=self.registry,
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
        )  # fmt: skip
        # Labelled children bound once: `labels()` takes a lock and checks its arguments on every call.
        self.hits = {fmt: self.config_fetches.labels(fmt, "hit") for fmt in MEDIA_TYPES}
        self._latency: dict[str, Any] = {}

    def observe_latency(self, route: str, seconds: float) -> None:
        child = self._latency.get(route)
        if child is None:  # routes are templates, so this dict stays as small as the API
            child = self._latency[route] = self.latency.labels(route)
        child.observe(seconds)

    def exposition(self) -> bytes:
        """Prometheus text: this process's metrics, or every worker's when they share a multiprocess dir."""
        registry = CollectorRegistry()
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            multiprocess.MultiProcessCollector(registry)
        else:
            for collector in (self.config_fetches, self.latency):
                registry.register(collector)
        registry.register(StoreCollector(self.store))
        if self.cache is not None:
            registry.register(CacheCollector(self.cache))
        return generate_latest(registry)
