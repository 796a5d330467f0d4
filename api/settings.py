"""Service settings: from AUTOTUNER_* environment variables, or a file named by AUTOTUNER_SETTINGS_FILE."""

from __future__ import annotations

import difflib
import json
import logging
import math
import os
from functools import cached_property
from pathlib import Path
from typing import Any

from dotenv import dotenv_values
from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from autotuner.executors.registry import EXECUTORS, fields_from_settings, validate_options
from autotuner.limits import DEFAULTS as CAPS
from autotuner.limits import limits
from autotuner.paths import default_data_dir

log = logging.getLogger("autotuner.api")

SCOPES = ("read", "write", "admin")
MAX_READY_TIMEOUT_S = 60.0  # a readiness answer later than a minute tells a prober nothing


def _seconds(duration: str, *, unit_required: bool = False) -> float | None:
    """`7d`, `12h`, ... in seconds; None for empty or `off` (the engine's parse, imported when asked)."""
    from autotuner.tuning.revalidate import parse_every

    return parse_every(duration, unit_required=unit_required)


class Settings(BaseSettings):
    # hide_input_in_errors: a validation error would print the whole AUTOTUNER_TOKENS or a database URL
    # with its password (a traceback of `uvicorn --factory api.app:app_from_env` reaches the journal).
    model_config = SettingsConfigDict(env_prefix="AUTOTUNER_", extra="ignore", hide_input_in_errors=True)

    def __init__(self, **values: Any) -> None:
        # Read at each construction (not once at import), and checked: a misspelt path or key must not
        # start a service on its defaults (a fresh empty store, no tokens) without a word.
        path = os.environ.get("AUTOTUNER_SETTINGS_FILE") or None
        if path is not None:
            check_settings_file(Path(path))
        super().__init__(_env_file=path, **values)

    data_dir: Path = Field(default_factory=default_data_dir)
    database_url: str | None = None  # default: SQLite in data_dir
    # "secret:scope" pairs, comma-separated; scopes: read < write < admin.
    tokens: str = ""
    public_read: bool = False  # 1: reads and the dashboard need no token
    metrics_token: bool = False  # 1: /metrics needs a read token too (names of clusters and workloads)
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    workers: int = Field(2, ge=1, le=64)  # API processes; config fetches scale with them
    scheduler: bool = True  # run queued studies in this process
    executors: str = "local,replay"  # which executors studies may ask for
    executor_options: str = "{}"  # JSON: {"slurm": {"partition": "gpu"}, "replay": {"landscape": "..."}}
    max_body_bytes: int = Field(default_factory=lambda: limits().max_body_bytes, ge=1)  # 413 above it
    # "module:function" names a REST request may give as the space's quality_data (comma-separated): the
    # scheduler imports and calls it, so only the operator says which. The CLI may name any.
    quality_data: str = ""
    # How soon a publish by another replica is served (finite and positive: NaN or 0 polled the store
    # thousands of times a second, inf stopped the refresh).
    config_refresh_s: float = Field(1.0, gt=0, le=3600, allow_inf_nan=False)
    # How long /readyz waits on the database's `SELECT 1` before it answers 503: a frozen server (SIGSTOP,
    # a paused VM) whose kernel still ACKs trips none of libpq's deadlines, and the probe hung for good.
    # Below the readinessProbe's timeoutSeconds (5 s, deploy/k8s): the kubelet reads the reason, not a timeout.
    ready_timeout_s: float = 3.0
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
        # An entry is named by its place, never by its text: that is a secret (or a part of one).
        for place, pair in enumerate((p.strip() for p in value.split(",")), start=1):
            secret, colon, scope = pair.rpartition(":")
            if pair and (not secret or scope not in SCOPES):
                # its scope shown only if it reads as one (a typo: 'reed'); else it may be the token's end
                shown = (
                    repr(scope)
                    if colon and difflib.get_close_matches(scope.lower(), SCOPES, 1, 0.6)
                    else "not shown"
                )
                raise ValueError(f"AUTOTUNER_TOKENS entry {place} (scope {shown}): use secret:scope, "
                                 f"scope one of {SCOPES}")  # fmt: skip
        return value

    @field_validator("ready_timeout_s", mode="before")
    @classmethod
    def _ready_timeout(cls, value: Any) -> float:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            seconds = math.nan
        if not 0 < seconds <= MAX_READY_TIMEOUT_S:  # NaN too
            raise ValueError(f"AUTOTUNER_READY_TIMEOUT_S={value!r}: seconds above 0 and at most "
                             f"{MAX_READY_TIMEOUT_S:g} (below the readiness probe's own timeout)")  # fmt: skip
        return seconds

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
        except RecursionError:
            raise ValueError("AUTOTUNER_EXECUTOR_OPTIONS is nested too deeply") from None
        except ValueError as exc:
            raise ValueError(f"AUTOTUNER_EXECUTOR_OPTIONS is not JSON: {exc}") from exc
        if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
            raise ValueError('AUTOTUNER_EXECUTOR_OPTIONS must look like {"slurm": {...}}')
        for executor, options in data.items():  # checked at start: a typo would fail every POST with a 422
            try:
                validate_options(executor, options)
            except ValueError as exc:
                raise ValueError(f"AUTOTUNER_EXECUTOR_OPTIONS: {exc}") from None
            given = [key for key in fields_from_settings(executor) if key in options]
            if given:
                raise ValueError(f"AUTOTUNER_EXECUTOR_OPTIONS: {executor} option {given[0]} is each study's own "
                                 "setting (a request gives it), not the service's")  # fmt: skip
        return value

    @field_validator("executors")
    @classmethod
    def _executors(cls, value: str) -> str:
        for name in filter(None, (e.strip() for e in value.split(","))):
            if name not in EXECUTORS:
                near = difflib.get_close_matches(name, list(EXECUTORS), n=1)
                hint = f" (did you mean {near[0]!r}?)" if near else ""
                raise ValueError(
                    f"AUTOTUNER_EXECUTORS: unknown executor {name!r}{hint}; known: {', '.join(EXECUTORS)}"
                )
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


# AUTOTUNER_* names a settings file may hold besides the settings above: the caps and the lease, which
# the processes read from their environment (the file is often systemd's EnvironmentFile as well).
ALSO_IN_FILES = (*CAPS, "AUTOTUNER_LEASE_S")


def check_settings_file(path: Path) -> None:
    """ValueError naming the trouble with the settings file at `path`: not a readable regular file, or
    an AUTOTUNER_* name that is no setting (with the nearest one: AUTOTUNER_TOKEN for AUTOTUNER_TOKENS
    would leave every write open to none)."""
    if not path.is_file():
        what = "no such file" if not path.exists() else "not a regular file"
        raise ValueError(f"AUTOTUNER_SETTINGS_FILE={path}: {what}")
    try:
        names = [name for name in dotenv_values(path) if name]
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"AUTOTUNER_SETTINGS_FILE={path}: cannot be read ({exc})") from None
    known = [f"AUTOTUNER_{field.upper()}" for field in Settings.model_fields] + list(ALSO_IN_FILES)
    for name in names:
        if name.upper().startswith("AUTOTUNER_") and name.upper() not in known:
            near = difflib.get_close_matches(name.upper(), known, n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise ValueError(f"AUTOTUNER_SETTINGS_FILE={path}: {name} is not a setting of the service{hint}")
    # The caps and the lease are read from each process's environment: in this file alone (not also
    # systemd's EnvironmentFile, or exported) they are not in force, and the operator is told so.
    unread = [name for name in names if name.upper() in ALSO_IN_FILES and name not in os.environ]
    if unread:
        log.warning("AUTOTUNER_SETTINGS_FILE=%s: %s not in force: read from the process's environment, not from "
                    "this file (set them where the service starts, e.g. systemd's EnvironmentFile)",
                    path, ", ".join(unread))  # fmt: skip


def log_to_stderr() -> None:
    """The service's processes (supervisor, workers, scheduler) log at INFO in one format to stderr
    (the journal): a study queued or ended, a config pinned, the scheduler's turns."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
