"""How a study runs: one schema, with every default and bound in one place.

`RequestSettings` is what a user may set, the same from the REST body (`POST /v1/studies`) and the
command line (`autotuner tune`, whose options are derived from these fields). `StudySettings` adds
what only the operator decides (where launches run, the executor's options, retries) and is stored
with the study, so a resumed study runs the same way.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from autotuner.paths import default_data_dir
from trials.spec import MIN_EVAL_SAMPLES_PER_RANK

EXECUTORS = ("local", "replay", "slurm", "kubernetes")
FABRIC_PATTERN = r"^[1-9][0-9]{0,5}(kbit|mbit|gbit)$"  # 12 digits of gbit: tc refused it


def default_workdir(database_url: str, data_dir: Path | None = None) -> Path:
    """Where a store's launch directories go when no --workdir is given (the service's and the CLI's):
    the data dir's `runs/` for the data dir's own store (its autotuner.db), `runs/<database>-<hash>/`
    for any other. Two stores each have a study 1: sharing one `runs/study-1/launch-0001`, each
    overwrote the other's spec and result, and one's prune removed the other's launches."""
    from sqlalchemy.engine import make_url

    from autotuner.store.db import shown_url

    data_dir = (data_dir or default_data_dir()).absolute()
    url = make_url(database_url)
    database = url.database or "memory"
    if url.get_backend_name() == "sqlite" and database != "memory" and not database.startswith("file:"):
        database = os.path.abspath(database)  # one file, whichever directory names it
        if database == str(data_dir / "autotuner.db"):
            return data_dir / "runs"
    key = shown_url(url.set(database=database).render_as_string())  # one key whatever the password
    name = re.sub(r"[^A-Za-z0-9._-]", "_", Path(database).stem)[:40] or "store"
    return data_dir / "runs" / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


MAX_EXTENSION = 1.5  # how far past the common budget a bigger batch may train in the convergence check


def eval_samples(budget: int, ranks: int) -> int:
    """Held-out samples of a check whose models train on `budget` over `ranks`: enough for a log loss
    to the third decimal, an eighth of the budget for a large one, and at least what the trial asks of
    each rank (8,192 split over 256 ranks is 32 a rank: the trial refuses it)."""
    return max(8192, budget // 8, MIN_EVAL_SAMPLES_PER_RANK * ranks)


def most_samples(budget: int, ranks: int) -> tuple[int, int]:
    """The most training samples a quality launch of `budget` over `ranks` gives one model (a bigger
    batch trains past the budget, see extension), and its held-out samples: what its ranks build."""
    return int(budget * MAX_EXTENSION), eval_samples(budget, ranks)


def _cli(name: str) -> dict[str, Any]:
    """The command-line option of a field whose name there differs (`--nproc`, not `--nproc-per-node`)."""
    return {"json_schema_extra": {"cli": name}}


def json_number(value: Any) -> Any:
    """A count given as "3" or true: refused, not guessed into 3 or 1. A whole number given as 3.0 is
    still 3 (JSON has one number type, and some clients write every number with a point)."""
    if isinstance(value, bool | str):
        raise ValueError("a JSON number, not text or a boolean")
    return value


class RequestSettings(BaseModel):
    """What a study request may set (REST body, `autotuner tune` options)."""

    model_config = ConfigDict(extra="forbid")

    executor: Literal["local", "replay", "slurm", "kubernetes"] = Field(
        "local", description="where launches run: local | replay | slurm | kubernetes"
    )
    nproc_per_node: int = Field(2, ge=1, le=64, description="ranks per node", **_cli("nproc"))
    nnodes: int = Field(1, ge=1, le=4096, description="nodes per launch")
    # At least one: a study that searched nothing published the baseline over a better served version.
    trials: int | None = Field(
        6, ge=1, le=10_000, description="search launches (each measures several candidates)"
    )
    time_budget_s: float | None = Field(
        None, gt=0, le=7 * 86400, allow_inf_nan=False, description="seconds; no new search launch after",
        **_cli("time-budget"),
    )  # fmt: skip
    candidates_per_launch: int | None = Field(
        None, ge=1, le=1000, description="cap k of candidates per launch (default: every in-process point)"
    )
    warmup: int = Field(3, ge=0, le=10_000, description="warmup iterations per candidate")
    iterations: int = Field(30, ge=1, le=100_000, description="measured iterations per candidate")
    sampler: Literal["tpe", "random"] = Field("tpe", description="tpe | random")
    seed: int = Field(0, ge=0, le=2**31, description="seed of the sampler and of the replay executor")
    confirm_rounds: int = Field(
        3, ge=0, le=20, description="interleaved best/baseline rounds (0 skips, else >= 2)"
    )
    ladder_rounds: int = Field(
        5, ge=0, le=20, description="interleaved rounds per ladder step (0 skips the ladder, else >= 2)"
    )
    quality_samples: int = Field(
        1 << 17,
        ge=0,
        le=1 << 26,
        description="samples each model trains on in the convergence check (0 skips it)",
    )
    launch_timeout_s: float = Field(
        900, ge=1, le=86400, allow_inf_nan=False, description="seconds before a launch is killed",
        **_cli("launch-timeout"),
    )  # fmt: skip
    fabric: str | None = Field(
        None,
        max_length=16,
        json_schema_extra={"pattern": FABRIC_PATTERN},  # checked by _fabric_rate, in words
        description="local only: emulate a fabric of this rate, e.g. 2gbit",
    )
    publish: bool = Field(True, description="publish the confirmed config")
    scaling_nodes: list[int] = Field(
        default_factory=list,
        max_length=16,
        description="after publishing, measure tuned and baseline at these node counts, e.g. 1,2,4",
    )

    @field_validator(
        "nproc_per_node", "nnodes", "trials", "time_budget_s", "candidates_per_launch", "warmup", "iterations",
        "seed", "confirm_rounds", "ladder_rounds", "quality_samples", "launch_timeout_s", "publish", mode="before",
    )  # fmt: skip
    @classmethod
    def _of_its_json_type(cls, value: Any, info: ValidationInfo) -> Any:
        """A switch given as "no" or 1: refused, not guessed into False or True; a count: json_number."""
        if info.field_name != "publish":
            return json_number(value)
        if not isinstance(value, bool):
            raise ValueError("a JSON boolean (true or false)")
        return value

    @field_validator("scaling_nodes", mode="before")
    @classmethod
    def _node_numbers(cls, nodes: Any) -> Any:
        if isinstance(nodes, list | tuple | set | frozenset) and any(
            isinstance(n, str | bool) for n in nodes
        ):
            raise ValueError("a list of JSON numbers, e.g. [1, 2, 4]")
        return nodes

    @field_validator("scaling_nodes")
    @classmethod
    def _distinct_nodes(cls, nodes: list[int]) -> list[int]:
        if any(n < 1 or n > 4096 for n in nodes) or len(set(nodes)) != len(nodes):
            raise ValueError("distinct node counts between 1 and 4096, e.g. [1, 2, 4]")
        return nodes

    @field_validator("fabric")
    @classmethod
    def _fabric_rate(cls, fabric: str | None) -> str | None:
        # pydantic's own pattern error showed the regex
        if fabric is not None and re.fullmatch(FABRIC_PATTERN, fabric) is None:
            raise ValueError("a rate such as 2gbit, 500mbit or 100kbit")
        return fabric

    @field_validator("confirm_rounds", "ladder_rounds")
    @classmethod
    def _rounds(cls, rounds: int) -> int:
        if rounds == 1:
            raise ValueError("0 (skip) or at least 2: one round gives no confidence interval")
        return rounds

    @model_validator(mode="after")
    def _consistent(self) -> RequestSettings:
        if self.trials is None and self.time_budget_s is None:
            raise ValueError("give a budget: trials, time_budget_s, or both")
        if self.fabric is not None and self.executor != "local":
            raise ValueError("fabric emulation is only available with the local executor")
        return self

    @model_validator(mode="after")
    def _shown_before_served(self) -> RequestSettings:
        """A study that publishes compares its change with the baseline first: with neither the
        confirmation nor the ladder, the search's best would be served on one noisy measurement."""
        if self.publish and self.confirm_rounds == 0 and self.ladder_rounds == 0:
            raise ValueError(
                "confirm_rounds and ladder_rounds both 0 would serve a change never compared with the "
                "baseline: give either at least 2 rounds, or publish false to search without serving"
            )
        return self


class StudySettings(RequestSettings):
    """A study's settings as stored: the request's, and the operator's."""

    # As stored: studies requested before these bounds (and the engine's own, a baseline-only study for a
    # re-validation's test) still load; a request is held to RequestSettings'.
    trials: int | None = Field(6, ge=0, le=10_000)
    launch_timeout_s: float = Field(900, gt=0, le=86400, allow_inf_nan=False)
    max_attempts: int = Field(
        2,
        ge=1,
        le=5,
        description="tries of a launch interrupted by a tuner crash or cancelled by its cluster (preempted, a node lost)",
    )
    workdir: str | None = Field(None, description="where launch directories go (shared with the nodes)")
    executor_options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("workdir")
    @classmethod
    def _absolute(cls, workdir: str | None) -> str | None:
        """Kept absolute: a launch's script runs from inside it, and a study may resume elsewhere."""
        return os.path.abspath(workdir) if workdir else workdir

    def study_dir(self, study_id: int) -> Path:
        """Where the study's launch directories go."""
        return Path(self.workdir or default_data_dir() / "runs") / f"study-{study_id}"

    @model_validator(mode="after")
    def _shown_before_served(self) -> StudySettings:
        """Not held to a request's rule: studies stored before it (and the engine's own) still load; the
        engine publishes theirs labelled "not confirmed"."""
        return self

    @model_validator(mode="after")
    def _replay_has_a_landscape(self) -> StudySettings:
        if self.executor == "replay" and "landscape" not in self.executor_options:
            raise ValueError(
                "the replay executor needs executor_options.landscape (a recorded landscape file)"
            )
        return self


def executor_of(study: Any) -> str | None:
    """The executor a stored study's launches (and its configs' re-validations) run on, as its settings
    load (none named: the default); None where they cannot say (a row written by hand)."""
    if not isinstance(study.settings, dict):
        return None
    executor = study.settings.get("executor", StudySettings.model_fields["executor"].default)
    return executor if isinstance(executor, str) else None
