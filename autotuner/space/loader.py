"""The ways in: a space from a file, a preset name or a decoded dict, raised on or listed as problems."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from autotuner.envvars import Problem
from autotuner.space.checks import SpaceError, schema_problems
from autotuner.space.model import STORED, SearchSpace
from autotuner.space.sources import read_source


def load_space(source: str | Path | Mapping[str, Any]) -> SearchSpace:
    """A space from a .yaml/.yml/.json file, a preset name or a decoded dict ({"preset": ..., overrides}).
    Raises SpaceError with every problem found."""
    data = dict(source) if isinstance(source, Mapping) else read_source(source)
    try:
        return SearchSpace.model_validate(data)
    except ValidationError as exc:
        raise SpaceError(schema_problems(exc)) from None


def stored_space(data: Mapping[str, Any]) -> SearchSpace:
    """A study's space as it was stored: rules added since it was accepted are warnings, not refusals
    (it must still resume, and its configs be re-validated)."""
    token = STORED.set(True)
    try:
        return SearchSpace.model_validate(dict(data))
    except ValidationError as exc:
        raise SpaceError(schema_problems(exc)) from None
    finally:
        STORED.reset(token)


def lint_space(source: str | Path | Mapping[str, Any]) -> list[Problem]:
    """load_space's checks, returned instead of raised; warnings included. Empty = fine."""
    try:
        return list(load_space(source).warnings)
    except SpaceError as exc:
        return list(exc.problems)
