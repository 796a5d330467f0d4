"""Replay executor: answers launches from results recorded on a real machine.

A landscape file holds real trial results of a whole grid (env points x in-process candidates,
usually several repeats). Replaying it makes studies deterministic and instant: for tests, and for
benchmarking the search against random and grid search on the very same measurements.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, StrictFloat

from autotuner.executors.base import AppDryrun, Description, Executor, LaunchRequest, LaunchState
from autotuner.executors.options import Count, ExecutorOptions, option
from autotuner.files import read_bounded
from trials.result import SCHEMA_VERSION, write_json_atomic
from trials.spec import parse_workload

MAX_DELAY_S = 3600  # a demo's pace: an hour per launch is already more than any demo wants


class ReplayOptions(ExecutorOptions):
    executor = "replay"

    landscape: Path = option(..., "the recorded landscape file (JSON) whose results answer the launches")
    # strict like every other option: "5", true and inf were taken (inf: no launch ever ended)
    delay_s: Annotated[StrictFloat, Field(ge=0, le=MAX_DELAY_S, allow_inf_nan=False)] = option(
        0.0,
        "seconds each launch 'runs' (lets a demo or a browser test watch a study progress)",
        f"seconds from 0 to {MAX_DELAY_S} (a number)",
    )
    seed: Count = option(0, "which recorded repeat answers a point (the study's seed)", "an integer >= 0")


IN_PROCESS_KEYS = ("fwd_precision", "bwd_precision", "batch_size", "sharding", "num_threads", "pipeline")


def candidate_key(
    candidate: dict[str, Any], default_sharding: str = "table_wise", default_pipeline: str = "none"
) -> str:
    c = {k: candidate.get(k) for k in IN_PROCESS_KEYS}
    c["sharding"] = c["sharding"] or default_sharding
    c["pipeline"] = c["pipeline"] or default_pipeline
    return json.dumps(c, sort_keys=True)


def env_key(env: dict[str, str]) -> str:
    return json.dumps(env, sort_keys=True)


MAX_LANDSCAPE_BYTES = 256 << 20  # a recorded landscape of thousands of points is a few MB


class Landscape:
    """(env, candidate) -> the recorded candidate results (one per repeat)."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.meta = {k: v for k, v in data.items() if k != "points"}
        self.points: dict[tuple[str, str], list[dict[str, Any]]] = {}
        if not data["points"]:
            raise ValueError("a landscape with no recorded points answers no launch")
        for i, point in enumerate(data["points"]):
            try:
                key = (env_key(point["env"]), candidate_key(point["candidate"]))
                results = point["results"]
            except (KeyError, TypeError, AttributeError) as exc:
                raise ValueError(f"landscape point {i}: needs env, candidate and results ({exc!r})") from None
            # a string or an object also iterates: each character or key was taken for a result
            if not isinstance(results, list) or not results or not all(isinstance(r, dict) for r in results):
                raise ValueError(f"landscape point {i}: results must be a non-empty list of recorded results "
                                 "(objects)")  # fmt: skip
            self.points.setdefault(key, []).extend(results)

    @classmethod
    def load(cls, path: str | Path) -> Landscape:
        """A recorded landscape; OSError if the file cannot be read, ValueError if it is not one."""
        try:
            raw = read_bounded(Path(path), MAX_LANDSCAPE_BYTES, follow_links=True)
        except OSError as exc:  # its words name the file alone ("tmp is not a regular file")
            raise type(exc)(f"landscape {path}: {exc.strerror or exc}") from exc  # FileNotFoundError kept
        try:
            data = json.loads(raw)
        except RecursionError:
            raise ValueError(f"landscape {path}: its JSON is nested too deeply") from None
        except ValueError as exc:  # UnicodeDecodeError included
            raise ValueError(f"landscape {path} is not valid JSON: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("points"), list):
            raise ValueError(f"landscape {path}: not a recorded landscape (an object with a list of points)")
        return cls(data)

    def lookup(
        self, env: dict[str, str], candidate: dict[str, Any], sharding: str, pipeline: str = "none"
    ) -> list[dict[str, Any]]:
        return self.points.get((env_key(env), candidate_key(candidate, sharding, pipeline)), [])


def _model_of(workload: Any) -> dict[str, Any] | None:
    """What a recording's figures depend on in a workload: its model (tables, dense part, optimizer,
    kernel), not its name, batch or comm precision. None for a workload that cannot be read."""
    try:
        spec = parse_workload(workload).model_dump(mode="json")
    except ValueError:
        return None
    return {k: spec.get(k) for k in ("tables", "dense", "optimizer", "compute_kernel")}


@dataclass(frozen=True)
class ReplayRequest:
    result: dict[str, Any]


class ReplayExecutor(Executor):
    name = "replay"

    def world_size(self, launch: LaunchRequest) -> int | None:
        return None  # the recording's own world answers, whatever the launch asked for

    def __init__(self, landscape: Landscape, *, seed: int = 0, delay_s: float = 0.0) -> None:
        self.landscape = landscape
        self.seed = seed
        # Seconds each launch "runs": lets a demo or a browser test watch a study progress.
        self.delay_s = delay_s
        self._asked: dict[str, int] = {}
        self._started: dict[str, float] = {}

    def check(self, launch: LaunchRequest) -> None:
        """A landscape recorded for another model answers for none of this workload's launches: its
        figures would be published as this job's (the job's own batch and precision may differ: they
        are candidates of the recording)."""
        recorded = self.landscape.meta.get("workload")
        if recorded is not None:
            theirs, mine = _model_of(recorded), _model_of(launch.spec["workload"])
            if mine is not None and theirs != mine:  # a workload that cannot be read: dryrun says why
                differs = next(k for k in mine if mine[k] != (theirs or {}).get(k))
                raise ValueError(f"the landscape was recorded for another model (its {differs} differ from this "
                                 "workload's): its figures are not this job's")  # fmt: skip
        super().check(launch)

    def dryrun(self, launch: LaunchRequest) -> AppDryrun[ReplayRequest]:
        workload = parse_workload(launch.spec["workload"])
        sharding, pipeline = workload.sharding, workload.default_pipeline
        candidates = []
        for index, cand in enumerate(launch.spec["candidates"]):
            recorded = self.landscape.lookup(launch.env, cand, sharding, pipeline)
            if not recorded:
                candidates.append(
                    {
                        **cand,
                        "index": index,
                        "sharding": cand.get("sharding") or sharding,
                        "pipeline": cand.get("pipeline") or pipeline,
                        "status": "failed",
                        "error": "point not in the recorded landscape",
                    }
                )
                continue
            # Which repeat answers depends only on the seed, the point and how often it was asked before:
            # the same study asks the same questions, so it gets the same answers.
            point = f"{env_key(launch.env)}|{candidate_key(cand, sharding, pipeline)}"
            asked = self._asked[point] = self._asked.get(point, -1) + 1
            digest = hashlib.sha256(f"{self.seed}|{point}|{asked}".encode()).digest()
            pick = recorded[int.from_bytes(digest[:4], "big") % len(recorded)]
            candidates.append({**pick, "index": index})
        result = {
            **{k: v for k, v in self.landscape.meta.items() if k != "description"},
            "schema_version": SCHEMA_VERSION,
            "replayed": True,
            "workload": launch.spec["workload"],
            "env": dict(launch.env),
            "env_consistent": True,
            "nccl_effective": self.landscape.meta.get("nccl_effective", {}),
            "setup_s": 0.0,
            "wall_s": 0.0,
            "candidates": candidates,
            "status": "ok" if all(c["status"] == "ok" for c in candidates) else "partial",
        }
        rendered = f"replay {launch.name}: env {json.dumps(launch.env, sort_keys=True)}, {len(candidates)} candidates"
        return AppDryrun(ReplayRequest(result), rendered, launch)

    def schedule(self, dryrun: AppDryrun[ReplayRequest]) -> str:
        write_json_atomic(dryrun.launch.result_path, dryrun.request.result)
        backend_id = f"replay:{dryrun.launch.name}"
        self._started[backend_id] = time.monotonic()
        return backend_id

    def describe(self, backend_id: str, launch: LaunchRequest) -> Description:
        started = self._started.get(backend_id)
        if started is not None and time.monotonic() - started < self.delay_s:
            return Description(LaunchState.RUNNING)
        return Description(LaunchState.SUCCEEDED, 0)

    def cancel(self, backend_id: str, launch: LaunchRequest) -> str | None:
        return None
