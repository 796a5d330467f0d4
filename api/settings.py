"""Service settings: from AUTOTUNER_* environment variables, or a file named by AUTOTUNER_SETTINGS_FILE."""

from __future__ import annotations

import json
import os
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from autotuner.limits import limits
from autotuner.paths import default_data_dir

SCOPES = ("read", "write", "admin")


def _seconds(duration: str, *, unit_required: bool = False) -> float | None:
    """`7d`, `12h`, ... in seconds; None for empty or `off` (the engine's parse, imported when asked)."""
    from autotuner.tuning.revalidate import parse_every

    return parse_every(duration, unit_required=unit_required)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="AUTOTUNER_",
        env_file=os.environ.get("AUTOTUNER_SETTINGS_FILE"),
        extra="ignore",
    )

    data_dir: Path = Field(default_factory=default_data_dir)
    database_url: str | None = None  # default: SQLite in data_dir
    # "secret:scope" pairs, comma-separated; scopes: read < write < admin.
    tokens: str = ""
    public_read: bool = False  # 1: reads and the dashboard need no token
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = Field(2, ge=1, le=64)  # API processes; config fetches scale with them
    scheduler: bool = True  # run queued studies in this process
    executors: str = "local,replay"  # which executors studies may ask for
    executor_options: str = "{}"  # JSON: {"slurm": {"partition": "gpu"}, "replay": {"landscape": "..."}}
    max_body_bytes: int = Field(default_factory=lambda: limits().max_body_bytes, ge=1)  # 413 above it
    # "module:function" names a REST request may give as the space's quality_data (comma-separated): the
    # scheduler imports and calls it, so only the operator says which. The CLI may name any.
    quality_data: str = ""
    config_refresh_s: float = 1.0  # how soon a publish by another replica is served
    # Re-validate every served config this often (`7d`, `12h`; empty: no schedule), and whenever jobs
    # report a stack (driver, NCCL, aws-ofi-nccl, GPU) other than the one it was validated on.
    revalidate_every: str = ""
    revalidate_on_mismatch: bool = True
    # Remove the launch directories of ended studies' launches this long after they ended (`30d`;
    # empty: never, or `autotuner prune` from cron): what they measured stays in the store.
    prune_runs_after: str = ""

    @field_validator("data_dir")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        """Kept absolute (AUTOTUNER_DATA_DIR=data): its paths go to the scheduler, workers and the store."""
        return value.absolute()

    @field_validator("tokens")
    @classmethod
    def _tokens(cls, value: str) -> str:
        for pair in filter(None, (p.strip() for p in value.split(","))):
            secret, _, scope = pair.rpartition(":")
            if not secret or scope not in SCOPES:
                raise ValueError(
                    f"AUTOTUNER_TOKENS entry {pair[:4]}...: use secret:scope, scope one of {SCOPES}"
                )
        return value

    @field_validator("revalidate_every", "prune_runs_after")
    @classmethod
    def _duration(cls, value: str, info: ValidationInfo) -> str:
        # a bare 30 would be 30 seconds, where `autotuner prune --older-than 30` means days
        try:
            _seconds(value, unit_required=info.field_name == "prune_runs_after")
        except ValueError as exc:
            raise ValueError(f"AUTOTUNER_{str(info.field_name).upper()}: {exc}") from exc
        return value.strip()

    @property
    def revalidate_every_s(self) -> float | None:
        return _seconds(self.revalidate_every)

    @property
    def prune_runs_after_s(self) -> float | None:
        return _seconds(self.prune_runs_after)

    @field_validator("executor_options")
    @classmethod
    def _options(cls, value: str) -> str:
        try:
            data = json.loads(value)
        except ValueError as exc:
            raise ValueError(f"AUTOTUNER_EXECUTOR_OPTIONS is not JSON: {exc}") from exc
        if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
            raise ValueError('AUTOTUNER_EXECUTOR_OPTIONS must look like {"slurm": {...}}')
        return value

    @property
    def url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'autotuner.db'}"

    # Parsed once: the settings do not change while the service runs.
    @cached_property
    def token_scopes(self) -> dict[str, str]:
        pairs = (p.strip() for p in self.tokens.split(","))
        return {secret: scope for secret, _, scope in (p.rpartition(":") for p in pairs if p)}

    @cached_property
    def allowed_quality_data(self) -> list[str]:
        return [q.strip() for q in self.quality_data.split(",") if q.strip()]

    @cached_property
    def allowed_executors(self) -> list[str]:
        return [e.strip() for e in self.executors.split(",") if e.strip()]

    @cached_property
    def parsed_executor_options(self) -> dict[str, dict[str, Any]]:
        return json.loads(self.executor_options)

    def options_for(self, executor: str) -> dict[str, Any]:
        return dict(self.parsed_executor_options.get(executor, {}))
