"""Two settings measured against each other in interleaved rounds: the unit of every claim.

Interleaved (a, b, a, b, ...) so the slow drift of a shared machine hits both alike; each round's
pair gives one ratio. Launches carry a tag, so a resumed study keeps the rounds it finished and a
setting measured in two comparisons is never paired across them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from autotuner.space import InProcPoint
from autotuner.store import MEASURED, Candidate, LaunchKind, env_hash
from autotuner.tuning.context import StudyContext, point_of
from autotuner.tuning.launch import run_launch
from autotuner.tuning.plan import PlannedLaunch
from autotuner.tuning.stats import Speedup, paired_speedup


@dataclass(frozen=True)
class Setting:
    """A whole configuration as a launch runs it: its environment and its in-process point."""

    env: dict[str, str]
    point: InProcPoint

    @classmethod
    def of(cls, row: Candidate) -> Setting:
        return cls(dict(row.env), point_of(row))

    def key(self) -> tuple[str, str]:
        return env_hash(self.env), self.point.key()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Setting) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def but(self, **point: Any) -> Setting:
        return Setting(self.env, replace(self.point, **point))


def compare(
    ctx: StudyContext, a: Setting, b: Setting, rounds: int, kind: LaunchKind, tag: str
) -> tuple[Speedup | None, Candidate | None]:
    """How much faster `a` is than `b` (paired, 95% CI), and a row that measured `a`; (None, None)
    when fewer than two rounds could be measured (the launch logs say why)."""
    a_rows, b_rows = measure(ctx, a, b, rounds, kind, tag)
    if len(a_rows) < 2:
        return None, None
    values = [r.samples_per_s or 0.0 for r in a_rows], [r.samples_per_s or 0.0 for r in b_rows]
    return paired_speedup(*values), a_rows[-1]


def measure(
    ctx: StudyContext, a: Setting, b: Setting, rounds: int, kind: LaunchKind, tag: str
) -> tuple[list[Candidate], list[Candidate]]:
    same_env = env_hash(a.env) == env_hash(b.env)
    for _ in range(3 * rounds):  # failed launches are retried, within reason
        a_rows, b_rows = measured(ctx, a, b, kind, tag)
        if min(len(a_rows), len(b_rows)) >= rounds:
            break
        if same_env:  # one process measures both, alternating, in a single launch
            pairs = rounds - min(len(a_rows), len(b_rows))
            plan = PlannedLaunch.of(a.env, [a.point, b.point] * pairs, kind, tag=tag)
        else:
            row = a if len(a_rows) <= len(b_rows) else b
            plan = PlannedLaunch.of(row.env, [row.point], kind, tag=tag)
        run_launch(ctx, plan, None)
    a_rows, b_rows = measured(ctx, a, b, kind, tag)
    n = min(len(a_rows), len(b_rows), rounds)
    return a_rows[:n], b_rows[:n]


def measured(
    ctx: StudyContext, a: Setting, b: Setting, kind: LaunchKind, tag: str
) -> tuple[list[Candidate], list[Candidate]]:
    """The rows of `a` and of `b` that launches of this comparison measured, in order."""
    launches = {launch.id for launch in ctx.store.launches(ctx.study_id)
                if launch.kind == kind and tag_of(launch.spec, kind) == tag}  # fmt: skip
    a_rows: list[Candidate] = []
    b_rows: list[Candidate] = []
    for row in ctx.store.candidates(ctx.study_id, kinds=[kind], states=list(MEASURED)):
        if row.launch_id in launches:
            key = Setting.of(row).key()
            (a_rows if key == a.key() else b_rows if key == b.key() else []).append(row)
    return a_rows, b_rows


def tag_of(spec: dict[str, Any], kind: str) -> str:
    """A launch's comparison (confirmation launches from before tags were recorded are "confirm")."""
    return (spec.get("extra") or {}).get("tag") or ("confirm" if kind == LaunchKind.CONFIRM else "")
