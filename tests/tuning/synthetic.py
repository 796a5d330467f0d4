"""Synthetic landscapes for replay studies: the recorded small landscape's points at rates (and
quantization errors) a test chooses, and an executor whose launches of some phases die without a
result (an outage), for the tests of what a study publishes when a phase could not be measured."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotuner.executors import Landscape, LaunchState, ReplayExecutor
from autotuner.executors.base import AppDryrun, Description, LaunchRequest
from autotuner.executors.replay import ReplayRequest
from autotuner.store import Store, Study
from autotuner.tuning import StudyDriver, StudySettings, create_study
from tests.helpers import LANDSCAPE, at_rate

RECORDED = json.loads(LANDSCAPE.read_text())
NOISE = (1.0, 1.01, 0.99, 1.005)  # per repeat: rounds that differ a little, as real ones do
Rate = Callable[[dict[str, str], dict[str, Any]], float]


def synth(path: Path, rate: Rate, quant: Callable[[dict[str, Any]], float] | None = None,
          pipeline: str | None = None) -> Path:  # fmt: skip
    """The recorded points at `rate(env, candidate)` samples/s (times NOISE per repeat), with a forward
    quantization error of `quant(candidate)`; `pipeline`: the points as measured under it (a workload
    with a dense part runs sparse_dist)."""
    points = []
    for p in RECORDED["points"]:
        candidate = {**p["candidate"], **({"pipeline": pipeline} if pipeline else {})}
        results = []
        for r, noise in enumerate(NOISE):
            m = at_rate(copy.deepcopy(p["results"][r % len(p["results"])]), rate(p["env"], candidate) * noise,
                        RECORDED["world_size"])  # fmt: skip
            if quant is not None:
                m["quant_error"] = {"fwd_rel_l2": quant(candidate), "bwd_rel_l2": 0.0}
            results.append({**m, **({"pipeline": pipeline} if pipeline else {})})
        points.append({"env": p["env"], "candidate": candidate, "results": results})
    path.write_text(json.dumps({**{k: v for k, v in RECORDED.items() if k != "points"}, "points": points}))
    return path


def study(store: Store, tmp: Path, space: dict[str, Any], landscape: Path, name: str | None = None,
          workload: dict[str, Any] | None = None, **settings: Any) -> Study:  # fmt: skip
    options = {"executor": "replay", "trials": 2, "candidates_per_launch": 4, "confirm_rounds": 3,
               "ladder_rounds": 3, "seed": 7, "workdir": str(tmp / "runs"),
               "executor_options": {"landscape": str(landscape)}, **settings}  # fmt: skip
    return create_study(store, cluster="cpu-box", workload=workload or RECORDED["workload"], space=space,
                        settings=StudySettings(**options), name=name)  # fmt: skip


def replay(landscape: Path) -> ReplayExecutor:
    return ReplayExecutor(Landscape.load(landscape), seed=7)


def tag(launch: LaunchRequest) -> str:
    return (launch.spec.get("extra") or {}).get("tag") or ("quality" if "quality" in launch.spec else "")


class Outage(ReplayExecutor):
    """Every launch whose tag `down` accepts dies without a result (the cluster went away)."""

    def __init__(self, landscape: Path, down: Callable[[str], bool]) -> None:
        super().__init__(Landscape.load(landscape), seed=7)
        self.down = down

    def describe(self, backend_id: str, launch: LaunchRequest) -> Description:
        if self.down(tag(launch)):
            launch.result_path.unlink(missing_ok=True)
            return Description(LaunchState.FAILED, 1, "node unreachable")
        return super().describe(backend_id, launch)


def run(store: Store, study_id: int, executor: ReplayExecutor) -> Study:
    final = StudyDriver(store, study_id, executor, poll_s=0.01).run()
    assert final.state == "done", final.error
    return final


class OverLimit(ReplayExecutor):
    """Replay whose launches that `when(tag)` picks measure `precision`'s forward error at 0.08 (over a
    0.05 limit), whatever the landscape recorded: a codec's error that moves between launches."""

    def __init__(self, landscape: Path, precision: str, when: Callable[[str], bool]) -> None:
        super().__init__(Landscape.load(landscape), seed=7)
        self.precision, self.when = precision, when

    def dryrun(self, launch: LaunchRequest) -> AppDryrun[ReplayRequest]:
        planned = super().dryrun(launch)
        if self.when(tag(launch)):
            for c in planned.request.result["candidates"]:
                if c["fwd_precision"] == self.precision:
                    c["quant_error"] = {"fwd_rel_l2": 0.08, "bwd_rel_l2": 0.0}
        return planned
