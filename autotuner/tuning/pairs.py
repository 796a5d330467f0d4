"""Two settings measured against each other in interleaved rounds: the unit of every claim.

Each round measures both and gives one ratio. Rounds are counterbalanced, ABBA: round 0 runs a then
b, round 1 b then a, and so on, both across launches (a setting per launch when their environments
differ) and inside one launch (both in one process when they share one). In a fixed order a steady
drift of a shared machine (it slows down over minutes) favours whichever runs first in every round;
ABBA gives each side the earlier slot in every other round, so a linear drift cancels over each two
rounds instead of adding up to a "significant" speedup of a no-op. Launches carry a tag, so a resumed
study keeps the rounds it finished and a setting measured in two comparisons is never paired across
them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from autotuner.space import InProcPoint
from autotuner.store import MEASURED, Candidate, CandidateState, LaunchKind, env_hash
from autotuner.tuning.context import StudyContext, point_of
from autotuner.tuning.launch import run_launch
from autotuner.tuning.plan import PlannedLaunch
from autotuner.tuning.stats import CONFIDENCE, Speedup, paired_speedup


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
    ctx: StudyContext,
    a: Setting,
    b: Setting,
    rounds: int,
    kind: LaunchKind,
    tag: str,
    confidence: float = CONFIDENCE,
) -> tuple[Speedup | None, Candidate | None]:
    """How much faster `a` is than `b` (paired CI, 95% unless told) over its first `rounds` rounds
    (launching what is missing), and a row that measured `a` (one over the quantization-error limit if
    any was: `a` is then no setting to publish); (None, None) when fewer than two rounds could be
    measured (the launch logs say why)."""
    a_rows, b_rows = measure(ctx, a, b, rounds, kind, tag)
    if len(a_rows) < 2:
        return None, None
    values = [r.samples_per_s or 0.0 for r in a_rows], [r.samples_per_s or 0.0 for r in b_rows]
    over = [r for r in a_rows if r.state == CandidateState.INFEASIBLE]
    return paired_speedup(*values, confidence=confidence), (over or a_rows)[-1]


def over_limit(row: Candidate | None) -> str | None:
    """Why a compared row is no setting to publish, whatever it gains: it measured over the
    quantization-error limit (`compare` returns such a row first). None when it did not."""
    if row is None or row.state != CandidateState.INFEASIBLE:
        return None
    return row.error or "over the quantization-error limit"


def measure(
    ctx: StudyContext, a: Setting, b: Setting, rounds: int, kind: LaunchKind, tag: str
) -> tuple[list[Candidate], list[Candidate]]:
    """Up to `rounds` rounds of `a` against `b`, as two lists paired by position (a_rows[i] and
    b_rows[i] are one round), launching what is missing in ABBA order."""
    same_env = env_hash(a.env) == env_hash(b.env)
    tries: int | None = None
    while True:
        a_rows, b_rows = measured(ctx, a, b, kind, tag)
        paired = rounds_of(a_rows, b_rows, same_env)
        if len(paired) >= rounds:
            break
        # failed launches are retried, within reason: for the rounds missing (a re-validation's second
        # look lacks only its own; it tried twice as many launches as the first look for all of its)
        tries = 3 * (rounds - len(paired)) if tries is None else tries - 1
        if tries <= 0:
            break
        if same_env:  # one process measures both in a single launch, ABBA slot by slot
            plan = PlannedLaunch.of(a.env, refill(a.point, b.point, paired, rounds), kind, tag=tag)
        else:
            row = next_launch(a, b, len(a_rows), len(b_rows))
            plan = PlannedLaunch.of(row.env, [row.point], kind, tag=tag)
        run_launch(ctx, plan, None)
    paired = rounds_of(*measured(ctx, a, b, kind, tag), same_env)[:rounds]
    return [x for x, _ in paired], [y for _, y in paired]


def abba(a: InProcPoint, b: InProcPoint, first: int, n: int) -> list[InProcPoint]:
    """Rounds `first`..`first + n - 1` of one launch: a then b in an even round, b then a in an odd
    one (a b b a a b ...), so that neither side always runs first."""
    return [p for r in range(first, first + n) for p in ((a, b) if r % 2 == 0 else (b, a))]


def refill(
    a: InProcPoint, b: InProcPoint, paired: list[tuple[Candidate, Candidate]], rounds: int
) -> list[InProcPoint]:
    """The slots of one launch that brings `paired` (rounds kept, from one-launch comparisons) up to
    `rounds`, each side first in half of them in all: the rounds a failed slot left out are re-run in
    the order they lacked (by their count, not where they stood: with round 1 of 3 failed, rounds 0 and
    2 are both a-first, and a third a-first round would be the fixed order ABBA is there to avoid)."""
    a_first = sum(1 for x, y in paired if x.index < y.index)
    want = {True: (rounds + 1) // 2 - a_first, False: rounds // 2 - (len(paired) - a_first)}
    slots: list[InProcPoint] = []
    last = False  # so that a tie starts a-first, as round 0 does
    for _ in range(rounds - len(paired)):
        first_a = want[True] > want[False] or (want[True] == want[False] and not last)
        want[first_a] -= 1
        slots += [a, b] if first_a else [b, a]
        last = first_a
    return slots


def next_launch(a: Setting, b: Setting, a_done: int, b_done: int) -> Setting:
    """Which setting the next launch measures when each needs a launch of its own: the side a round
    still lacks, else the first of the next round (a in an even round, b in an odd one: ABBA). A
    failed launch measured nothing, so it is simply asked again."""
    if a_done != b_done:
        return a if a_done < b_done else b
    return a if a_done % 2 == 0 else b


def rounds_of(
    a_rows: list[Candidate], b_rows: list[Candidate], same_env: bool
) -> list[tuple[Candidate, Candidate]]:
    """The rounds: a row of `a` and one of `b` measured side by side. With a launch per setting, the
    i-th of each (launches alternate round by round). In one launch, the two slots of a round (2i and
    2i + 1, in either order): a round one of whose models failed is left out, so a later row is never
    paired with an earlier round's."""
    if not same_env:
        return list(zip(a_rows, b_rows, strict=False))
    b_at = {(r.launch_id, r.index // 2): r for r in b_rows}
    return [(r, b_at[key]) for r in a_rows if (key := (r.launch_id, r.index // 2)) in b_at]


def measured(
    ctx: StudyContext, a: Setting, b: Setting, kind: LaunchKind, tag: str
) -> tuple[list[Candidate], list[Candidate]]:
    """The rows of `a` and of `b` that launches of this comparison measured, in order (rounds_of
    pairs them)."""
    launches = {launch.id for launch in ctx.store.launches(ctx.study_id)
                if launch.kind == kind and tag_of(launch.spec, kind) == tag}  # fmt: skip
    a_rows: list[Candidate] = []
    b_rows: list[Candidate] = []
    for row in ctx.store.candidates(ctx.study_id, kinds=[kind], states=list(MEASURED)):
        # A stored rate that is no positive number (a row an older version or a hand wrote) measured
        # nothing: as a failed slot, it is measured again (its log ratio failed the whole study).
        if row.launch_id in launches and isinstance(row.samples_per_s, float | int) and row.samples_per_s > 0:
            key = Setting.of(row).key()
            (a_rows if key == a.key() else b_rows if key == b.key() else []).append(row)
    return a_rows, b_rows


def tag_of(spec: dict[str, Any], kind: str) -> str:
    """A launch's comparison (confirmation launches from before tags were recorded are "confirm")."""
    return (spec.get("extra") or {}).get("tag") or ("confirm" if kind == LaunchKind.CONFIRM else "")
