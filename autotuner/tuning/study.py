"""What a tuning study is made of, and how one is created from a workload and a space."""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import secrets
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from autotuner.envvars import Problem
from autotuner.executors import LaunchRequest, executor_for, settings_options
from autotuner.executors.files import read_small_text, remove, write_new_only
from autotuner.executors.registry import fields_from_settings
from autotuner.executors.results import clip
from autotuner.limits import limits, over
from autotuner.names import NAME_MAX_LEN, BadName, is_name
from autotuner.space import SearchSpace, SpaceError, load_space
from autotuner.store import Candidate, CandidateState, LaunchKind, NameTaken, Store, Study
from autotuner.tuning.inert import inert_variables, where_before_launching
from autotuner.tuning.settings import RequestSettings, StudySettings, most_samples
from trials.spec import WorkloadSpec, parse_spec, parse_workload, quality_problem

log = logging.getLogger("autotuner.tuning")


class StudyError(ValueError):
    """A study that cannot be created as asked; the message names what is wrong, `where` the part
    of the request it is in ("settings", or "" for the request as a whole)."""

    def __init__(self, message: str, where: str = "") -> None:
        super().__init__(message)
        self.where = where


class StudyExists(StudyError):
    pass


# Where each name is in a REST request body (`POST /v1/studies`).
_NAME_FIELDS = {"cluster": "cluster", "workload": "workload.name", "study": "name"}


def check_name(kind: str, value: str) -> str:
    """Cluster / workload / study names end up in URLs, file paths and job names: keep them plain
    (autotuner.names: the one rule REST, the CLI and the store check)."""
    if not is_name(value):
        raise StudyError(str(BadName(kind, value)), where=_NAME_FIELDS.get(kind, ""))
    return value


def study_settings(
    request: RequestSettings, *, workdir: str | None, executor_options: dict[str, Any]
) -> StudySettings:
    """A request's settings with the operator's (where launches run, the executor's options)."""
    try:
        return StudySettings(**request.model_dump(), workdir=workdir, executor_options=executor_options)
    except ValidationError as exc:
        message = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
        fields = {".".join(map(str, e["loc"])) for e in exc.errors() if e["loc"]}
        raise StudyError(
            message, where="settings" + (f".{fields.pop()}" if len(fields) == 1 else "")
        ) from exc


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
    own_workdir: bool = False,
) -> Study:
    """Validate everything a study needs, then persist it as queued. `own_workdir`: the workdir was
    given by hand (`--workdir`), so it may be another store's (claim_workdir).

    Raises SpecError (workload), SpaceError (space) or StudyError (names, executor options, a name
    taken), each naming the problem.
    """
    check_name("cluster", cluster)
    tables = workload.get("tables") if isinstance(workload, dict) else None
    if isinstance(tables, list) and len(tables) > (limit := limits().max_tables):
        raise StudyError(
            over("the number of tables", len(tables), limit, "AUTOTUNER_MAX_TABLES"), "workload.tables"
        )
    workload_spec = parse_workload(workload)  # SpecError (a ValueError) names the field
    check_name("workload", workload_spec.name)
    space_obj = space if isinstance(space, SearchSpace) else load_space(space)
    if "batch_sizes" not in space_obj.model_fields_set and workload_spec.batch_size:
        # a space that names no batch searches the job's own, not the space's generic default
        space_obj = space_obj.model_copy(update={"batch_sizes": [workload_spec.batch_size]})
    job_batch = baseline_batch(workload_spec, space_obj)
    check_batch_change(space_obj, job_batch)
    # the largest batch it would launch, as the trial will check it (the inputs one rank makes)
    parse_spec({"workload": workload, "candidates": [{"fwd_precision": "fp32", "bwd_precision": "fp32",
                                                      "batch_size": max([job_batch, *space_obj.batch_sizes])}]})  # fmt: skip
    check_executor(settings, workload, space_obj)
    check_workdir(settings.study_dir(1).parent)
    check_quality_samples(settings, workload_spec, max([job_batch, *space_obj.batch_sizes]))
    claim_workdir(store, settings.study_dir(1).parent, by_hand=own_workdir)
    row: dict[str, Any] = {"cluster": cluster, "workload_name": workload_spec.name, "workload_spec": workload,
           "space": space_obj.model_dump(mode="json"), "settings": settings.model_dump(mode="json"),
           "inert": inert_variables([*space_obj.env, *space_obj.fixed_env], where_before_launching(settings))}  # fmt: skip
    if name is not None:
        check_name("study", name)
        try:
            return store.create_study(name=name, **row)
        except NameTaken as exc:  # the store's unique name decides, also between concurrent requests
            raise StudyExists(str(exc)) from None
    # Unnamed: the next free `cluster.workload.N`. Counting alone handed two concurrent requests the
    # same N (one failed), and a name someone had given by hand blocked every unnamed study after it.
    first = store.count_studies() + 1
    for n in range(first, first + UNNAMED_TRIES):
        try:
            return store.create_study(
                name=check_name("study", unnamed(cluster, workload_spec.name, n)), **row
            )
        except NameTaken:
            continue
    raise StudyExists(
        f"no free name {cluster}.{workload_spec.name}.N for N in {first}-{n}: give the study a name"
    )


UNNAMED_TRIES = 1000


def unnamed(cluster: str, workload: str, n: int) -> str:
    """`cluster.workload.N`, cut to a name's length where the two names are long (each may be 128
    characters): a short hash of the whole keeps cut names apart. Before, a valid 128-character cluster
    was refused for a study name the user never gave."""
    name = f"{cluster}.{workload}.{n}"
    if len(name) <= NAME_MAX_LEN:
        return name
    digest = hashlib.sha256(f"{cluster}.{workload}".encode()).hexdigest()[:8]
    tail = f"-{digest}.{n}"
    return f"{cluster}.{workload}"[: NAME_MAX_LEN - len(tail)].rstrip("._-") + tail


def check_executor(
    settings: StudySettings, workload: dict[str, Any], space: SearchSpace | None = None
) -> None:
    """What none of a study's launches could run is refused before its row exists: bad or misplaced
    options, a landscape that cannot be read, a launch directory, node or GPU count the executor
    cannot take, a variable of the space the executor sets itself (emulated nodes). Each node count
    the study will launch at is asked; nothing is sent."""
    where = f"executor {settings.executor}"
    most, cap = max([settings.nnodes, *settings.scaling_nodes]), limits().max_nodes
    if most > cap:  # the operator's bound on what one request may ask of the cluster
        field = "settings.nnodes" if settings.nnodes == most else "settings.scaling_nodes"
        raise StudyError(f"{where}: {over('a launch', most, cap, 'AUTOTUNER_MAX_NODES', ' nodes')}", field)
    given = [key for key in fields_from_settings(settings.executor) if key in settings.executor_options]
    if given:
        raise StudyError(f"{where}: {given[0]} is a study setting: give it as the study's {given[0]}, "
                         "not as an executor option", "settings")  # fmt: skip
    pinned: dict[str, str] = {}
    try:
        executor = executor_for(settings.executor, settings_options(settings))
        for nnodes in sorted({settings.nnodes, *settings.scaling_nodes}):
            launch = LaunchRequest(
                name="s1-l1", spec={"workload": workload, "candidates": []}, env={},
                workdir=settings.study_dir(1) / "launch-0001", nproc_per_node=settings.nproc_per_node,
                nnodes=nnodes, timeout_s=settings.launch_timeout_s, options=settings.executor_options,
            )  # fmt: skip
            executor.check(launch)
            pinned.update(executor.pinned_env(launch))
    except (ValueError, TypeError, OSError) as exc:  # what the executor cannot run as the settings ask
        raise StudyError(f"{where}: {exc}", "settings") from exc
    if space is not None and (clash := pinned_clash(space, pinned)):
        raise StudyError(f"{where} sets {clash} itself (its emulated nodes' transport): the launches would "
                         "measure its value and the config publish the space's; leave them out of the space's "
                         "env and fixed_env", "space")  # fmt: skip


def check_quality_samples(settings: StudySettings, workload: WorkloadSpec, largest_batch: int) -> None:
    """A convergence check the study will make can train and fit: at least one batch per rank at the
    largest batch (else it fails after the search, its knobs unjudged), within the samples' memory cap."""
    if why_no_training(settings, workload) is not None:
        return
    ranks = settings.nnodes * settings.nproc_per_node
    if settings.quality_samples // ranks // largest_batch < 1:
        raise StudyError(f"quality_samples {settings.quality_samples:,} over {ranks} rank(s) is less than one batch "
                         f"of {largest_batch:,} per rank: the convergence check could not train; give at least "
                         f"{ranks * largest_batch:,} (far more for a telling check), or 0 to skip it (then no precision, batch "
                         "or pipeline change is published)", "settings")  # fmt: skip
    if problem := quality_problem(workload, *most_samples(settings.quality_samples, ranks), ranks):
        raise StudyError(problem, "settings")


STORE_MARK = ".nccl-autotuner-store"  # in a workdir: the id of the store whose launches are there


def check_workdir(path: Path) -> None:
    """Launch directories can be made under `path`: its nearest existing ancestor is a directory this
    process may write (a file there failed the study at its first launch, after its row was made)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        why = "not a directory" if not probe.is_dir() else "a directory this process may not write"
        raise StudyError(f"workdir {path}: {probe} is {why}, so no launch directory can be made", "settings")


def claim_workdir(store: Store, path: Path, *, by_hand: bool) -> None:
    """A workdir is one store's: marked with its id. One given by hand (`--workdir`) is refused to any
    other store (two stores given one shared path each had a study 1, and their launches wrote each
    other's spec.json and result.json). A default one is made from the store's URL: its store marks it
    as its own whatever was there (a store deleted and made anew at that URL), so that no other store
    takes it by hand."""
    store_id = store.store_id()
    mark = path / STORE_MARK
    try:
        path.mkdir(
            parents=True, exist_ok=True
        )  # a link to a directory is fine: the mark itself is not followed
        if store_id is not None:
            _mark(mark, store_id, replace=not by_hand)
        owner = _read_mark(mark)
    except OSError as exc:
        raise StudyError(f"workdir {path}: cannot mark it as this store's ({exc})", "settings") from exc
    if store_id is None and owner is None:  # the row was removed by hand: the store works on, unmarked
        log.warning("the store has no id (table at_store is empty): workdir %s is not marked", path)
    elif owner != store_id:
        raise StudyError(f"workdir {path} holds the launches of another store (id {clip(owner or 'unreadable', 64)} "
                         f"in {mark}): two stores in one workdir write each other's launch files; give this one "
                         f"a workdir of its own, or, if that store is gone for good (its database deleted, or "
                         f"this store's id made anew by a restore from before it had one), remove {mark}",
                         "settings.workdir")  # fmt: skip


_NO_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.ENOSYS}


def _mark(mark: Path, store_id: str, *, replace: bool) -> None:
    """The mark, written whole before it appears (a file of its own, linked or renamed in): a second
    study of the same store, at the same moment, read an empty mark for another store's. Where the
    filesystem has no hard links (some FUSE and SMB mounts), created in place (_read_mark waits for it)."""
    own = mark.with_name(f"{mark.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        write_new_only(own, f"{store_id}\n")
        if replace:
            os.replace(own, mark)
        else:
            os.link(own, mark)
    except FileExistsError:
        pass  # marked already: read next
    except OSError as exc:
        if replace or exc.errno not in _NO_LINKS:
            raise
        try:
            write_new_only(mark, f"{store_id}\n")
        except FileExistsError:
            pass
    finally:
        remove(own)


def _read_mark(mark: Path, wait_s: float = 2.0) -> str | None:
    """The id a mark holds (None: no mark); an empty one is waited on a moment (made in place, not yet
    written)."""
    deadline = time.monotonic() + wait_s
    while True:
        if not os.path.lexists(mark):
            return None
        text = read_small_text(mark)
        if text or time.monotonic() > deadline:
            return text or ""
        time.sleep(0.05)


def pinned_clash(space: SearchSpace, pinned: Mapping[str, str]) -> str:
    """The variables the space searches or fixes otherwise among those an executor sets ("" if none)."""
    names = [n for n in space.env if n in pinned] + [
        n for n, v in space.fixed_env.items() if n in pinned and pinned[n] != v
    ]
    return ", ".join(f"{n}={pinned[n]}" for n in sorted(set(names)))


def why_no_training(settings: StudySettings, workload: WorkloadSpec) -> str | None:
    """Why the study's convergence check cannot train models, whatever the study finds (None: it can);
    then a precision, batch or pipeline change is never published (quality.check), except from a
    replay of recorded timings, said first as the reason."""
    if settings.executor == "replay":
        return "the replay executor answers with recorded timings: it cannot train"
    if workload.dense is None:
        return "the workload has no dense part: nothing trains to a loss"
    if not settings.quality_samples:
        return "quality_samples is 0"
    return None


def check_batch_change(space: SearchSpace, job_batch: int) -> None:
    """A batch above the job's is a change to the training, not only to its speed: searched only
    when the space allows it (then the convergence check compares what it costs)."""
    above = [b for b in space.batch_sizes if b > job_batch]
    if above and not space.allow_batch_change:
        message = (f"batch_sizes {', '.join(map(str, above))} are above the job's batch {job_batch}: a bigger batch "
                   "changes the training (fewer, larger steps over the same samples), not only its speed; "
                   "set allow_batch_change: true in the space to search it (the convergence check then says "
                   "what it costs in quality; where it cannot train, as for a workload with no dense part, a "
                   "batch change is measured but never published)")  # fmt: skip
        raise SpaceError([Problem("batch_sizes", "batch-change", message)])


def finalist(store: Store, study_id: int) -> Candidate | None:
    """The fastest feasible candidate the search (or the baseline) measured."""
    rows = store.candidates(study_id, kinds=[LaunchKind.SEARCH, LaunchKind.BASELINE], states=[CandidateState.OK],
                            order_by="samples_per_s", descending=True, limit=1)  # fmt: skip
    return rows[0] if rows else None


def baseline_of(store: Store, study_id: int) -> Candidate | None:
    rows = store.candidates(study_id, kinds=[LaunchKind.BASELINE], states=[CandidateState.OK], limit=1)
    return rows[0] if rows else None


def best_and_baseline(
    store: Store, studies: Sequence[Study], counts: Mapping[int, Mapping[str, int]]
) -> dict[int, tuple[Candidate | None, Candidate | None]]:
    """What each study reports (`counts`: its candidates by state): its chosen best and baseline once
    decided, read for all in one query; the current ones before, looked up only where it measured
    something."""
    ids = {i for study in studies for i in (study.best_candidate_id, study.baseline_candidate_id) if i}
    chosen = store.candidates_by_id(ids) if ids else {}
    out = {}
    for study in studies:
        best = chosen.get(study.best_candidate_id or 0)
        baseline = chosen.get(study.baseline_candidate_id or 0)
        if counts[study.id].get(CandidateState.OK):
            best, baseline = best or finalist(store, study.id), baseline or baseline_of(store, study.id)
        out[study.id] = (best, baseline)
    return out
