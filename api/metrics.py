"""Prometheus metrics: studies and trials by state (read at scrape time), config fetches, latency, each
served config's age since validation and stale flags, re-validations, the study scheduler (up, restarts)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, multiprocess
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from autotuner.job.exports import MEDIA_TYPES
from autotuner.store import Candidate, ConfigValidation, Store, Study, ValidationState, utcnow
from autotuner.tuning.revalidate import staleness


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
        left = GaugeMetricFamily("autotuner_launches_left_running",
                                 "Ended launches whose cancel was not confirmed: they may still hold nodes (the "
                                 "scheduler cancels them again until they are seen ended)")  # fmt: skip
        left.add_metric([], self.store.count_left_running())
        yield left


class ValidationCollector(Collector):
    """Per served config: seconds since it was last validated and whether it is stale, by reason
    (jobs on another stack since: `fingerprint`; a failed re-validation kept by a pin: `failed`;
    older than AUTOTUNER_REVALIDATE_EVERY: `overdue`); re-validations by state."""

    REASONS = ("fingerprint", "failed", "overdue")

    def __init__(self, store: Store, cache: Any, every_s: float | None) -> None:
        self.store = store
        self.cache = cache
        self.every_s = every_s

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["cluster", "workload", "nodes", "version"]
        age = GaugeMetricFamily("autotuner_config_validation_age_seconds",
                                "Seconds since the served config was last shown to hold (re-validated, else published)",
                                labels=labels)  # fmt: skip
        stale = GaugeMetricFamily("autotuner_config_stale",
                                  "1: the served config is stale for this reason (fingerprint, failed, overdue)",
                                  labels=[*labels, "reason"])  # fmt: skip
        served = sorted(self.cache.entries(), key=lambda e: (e.key, e.nodes))
        reports = self.store.fingerprint_reports(e.id for e in served)
        now = utcnow()
        for entry in served:
            config = entry.config
            values = [config["cluster"], config["workload"], str(config["nodes"]), str(config["version"])]
            found = staleness(config, reports[entry.id], self.every_s, now)
            age.add_metric(values, found["age_s"])
            for reason in self.REASONS:
                stale.add_metric([*values, reason], 1.0 if reason in found["reasons"] else 0.0)
        yield age
        yield stale
        states = GaugeMetricFamily("autotuner_revalidations", "Re-validations of published configs by state",
                                   labels=["state"])  # fmt: skip
        with self.store.session() as s:
            rows = s.execute(select(ConfigValidation.state, func.count(ConfigValidation.id))
                             .group_by(ConfigValidation.state)).all()  # fmt: skip
        counted: dict[str, int] = {state: count for state, count in rows}
        for state in ValidationState:
            states.add_metric([state.value], counted.get(state.value, 0))
        yield states


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


class SchedulerCollector(Collector):
    """The study scheduler beside the service: running or not, and how often its supervisor started it
    again (one killed for memory each study shows as a climbing count while readiness says ok)."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        yield GaugeMetricFamily("autotuner_scheduler_up", "1: the study scheduler process runs",
                                value=1.0 if self.scheduler.alive else 0.0)  # fmt: skip
        yield CounterMetricFamily("autotuner_scheduler_restarts",
                                  "Times the study scheduler process died and was started again",
                                  value=self.scheduler.restarts)  # fmt: skip


class Metrics:
    def __init__(self, store: Store, cache: Any = None, revalidate_every_s: float | None = None) -> None:
        self.store = store
        self.scheduler: Any = None  # set by the app once it has one: no scheduler, no scheduler metrics
        self.cache = cache
        self.revalidate_every_s = revalidate_every_s
        self.registry = CollectorRegistry()
        self.config_fetches = Counter(
            "autotuner_config_fetches", "Config fetches by format and result", ["format", "result"],
            registry=self.registry,
        )  # fmt: skip
        self.latency = Histogram(
            "autotuner_request_seconds", "Request latency by route", ["route"], registry=self.registry,
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
        )  # fmt: skip
        self.fingerprint_mismatches = Counter(
            "autotuner_fingerprint_mismatches",
            "Config fetches from jobs whose stack (driver, NCCL, aws-ofi-nccl, GPU) differs from the one the "
            "served version was validated on",
            registry=self.registry,
        )
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
            for collector in (self.config_fetches, self.latency, self.fingerprint_mismatches):
                registry.register(collector)
        registry.register(StoreCollector(self.store))
        if self.cache is not None:
            registry.register(CacheCollector(self.cache))
            registry.register(ValidationCollector(self.store, self.cache, self.revalidate_every_s))
        if self.scheduler is not None:
            registry.register(SchedulerCollector(self.scheduler))
        return generate_latest(registry)
