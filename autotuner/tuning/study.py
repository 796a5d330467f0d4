"""What a tuning study is made of, and how one is created from a workload and a space."""

from __future__ import annotations

import re
from typing import Any

from autotuner.executors import validate_options
from autotuner.space import SearchSpace, load_space
from autotuner.store import Store, Study
from autotuner.tuning.settings import StudySettings
from trials.spec import WorkloadSpec, parse_workload

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
NAME_RULE = "1-128 characters: letters, digits, '.', '_' or '-', starting with a letter or digit"


def check_name(kind: str, value: str) -> str:
    """Cluster / workload / study names end up in URLs, file paths and job names: keep them plain."""
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise ValueError(f"{kind} name {value!r} is invalid: {NAME_RULE}")
    return value


def baseline_batch(workload: WorkloadSpec, space: SearchSpace) -> int:
    """The batch the job runs today: the workload's, else the smallest the space considers."""
    return workload.batch_size or min(space.batch_sizes)


def create_study(
    store: Store,
    *,
    cluster: str,
    workload: dict[str, Any],
    space: SearchSpace | dict[str, Any] | str,
    settings: StudySettings,
    name: str | None = None,
) -> Study:
    """Validate everything a study needs, then persist it as queued.

    Raises SpecError (workload), SpaceError (space) or ValueError (names, executor options), each
    naming the problem.
    """
    check_name("cluster", cluster)
    workload_spec = parse_workload(workload)  # SpecError (a ValueError) names the field
    check_name("workload", workload_spec.name)
    space_obj = space if isinstance(space, SearchSpace) else load_space(space)
    try:  # bad executor options fail here, before a study row exists
        validate_options(settings.executor, settings.executor_arguments())
    except (ValueError, TypeError) as exc:
        raise ValueError(f"executor {settings.executor}: {exc}") from exc
    if name is None:
        name = f"{cluster}.{workload_spec.name}.{store.count_studies() + 1}"
    check_name("study", name)
    if store.study(name) is not None:
        raise ValueError(f"study {name!r} already exists")
    return store.create_study(
        name=name,
        cluster=cluster,
        workload_name=workload_spec.name,
        workload_spec=workload,
        space=space_obj.model_dump(mode="json"),
        settings=settings.model_dump(mode="json"),
    )
