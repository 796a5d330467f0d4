"""Dependency aliases so route signatures read like prose."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from api.cache import ConfigCache
from api.metrics import Metrics
from api.settings import Settings
from autotuner.store import Store


def _store(request: Request) -> Store:
    return request.app.state.store


def _cache(request: Request) -> ConfigCache:
    return request.app.state.cache


def _settings(request: Request) -> Settings:
    return request.app.state.settings


def _metrics(request: Request) -> Metrics:
    return request.app.state.metrics


StoreDep = Annotated[Store, Depends(_store)]
CacheDep = Annotated[ConfigCache, Depends(_cache)]
SettingsDep = Annotated[Settings, Depends(_settings)]
MetricsDep = Annotated[Metrics, Depends(_metrics)]
