"""Shared fixtures. Integration tests use the real thing and skip only outside CI.

`AUTOTUNER_REQUIRE` (comma-separated: slurm, postgres, browser, netns, or `all`) turns the skip of
a missing dependency into a failure; CI sets it so nothing it is meant to check is skipped.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def required(kind: str) -> bool:
    wanted = {w.strip() for w in os.environ.get("AUTOTUNER_REQUIRE", "").split(",") if w.strip()}
    return "all" in wanted or kind in wanted


def skip_or_fail(kind: str, reason: str) -> None:
    """Skip with a reason locally; fail in CI where `kind` is required."""
    if required(kind):
        pytest.fail(f"{kind} is required here (AUTOTUNER_REQUIRE) but unavailable: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def python() -> str:
    return sys.executable


@pytest.fixture(scope="session")
def torchrun() -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run"]
