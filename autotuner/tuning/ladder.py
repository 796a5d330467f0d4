"""The ladder: from the job's baseline to the tuned config, one knob group at a time.

Each step changes one group (in the space's `ladder` order; by default the published case's:
precision, batch, pipeline, env, then sharding and threads; the env a variable at a time) and is
measured against the step before it in interleaved rounds (in ABBA order: pairs.py) with a paired
95% CI. A step whose interval includes 1 shows no measurable gain: its knob is left out, and the
ladder goes on from where it stood. What is left at the top is all a config may claim.

A variable that cannot act where the study measures (inert: the study's `inert`, searched only when the
space forces it in) is no step: it is recorded as such and never credited, whatever its rows read (a
config never exports it, so its "gain" would be drift claimed for a config that is the baseline). A
step that could not be measured (its launches failed: an outage) ends the ladder: nothing is shown
either way, and the study publishes nothing (claim.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autotuner.envvars import acting_with, read_together
from autotuner.store import Candidate, LaunchKind
from autotuner.tuning.context import StudyContext
from autotuner.tuning.outcome import LadderStep
from autotuner.tuning.pairs import Setting, compare, over_limit, tag_of

KEPT, NO_GAIN = "kept", "no measurable gain"
NOT_MEASURED = "not measured (see the launch logs)"
INERT = "inert here: not credited"


def _env(s: Setting) -> dict[str, str]:
    return s.env


# Knob group -> (what it reads off a setting, how it puts that into another)
GROUPS: dict[str, tuple[Callable[[Setting], Any], Callable[[Setting, Setting], Setting]]] = {
    "precision": (lambda s: [s.point.fwd_precision, s.point.bwd_precision],
                  lambda s, t: s.but(fwd_precision=t.point.fwd_precision, bwd_precision=t.point.bwd_precision)),
    "batch": (lambda s: s.point.batch_size, lambda s, t: s.but(batch_size=t.point.batch_size)),
    "pipeline": (lambda s: s.point.pipeline, lambda s, t: s.but(pipeline=t.point.pipeline)),
    "env": (_env, lambda s, t: Setting(t.env, s.point)),
    "sharding": (lambda s: s.point.sharding, lambda s, t: s.but(sharding=t.point.sharding)),
    "threads": (lambda s: s.point.num_threads, lambda s, t: s.but(num_threads=t.point.num_threads)),
}  # fmt: skip


def climb(
    ctx: StudyContext, baseline: Setting, target: Setting, steps: list[LadderStep]
) -> tuple[Setting, Candidate | None]:
    """Walk the ladder; `steps` holds the steps done so far (a resumed study keeps them) and grows
    as they are measured. Returns the setting at the top and a row that measured it.

    The env group is climbed a variable at a time (variables NCCL reads as one setting together:
    read_together), in the space's order, so that no variable is published on another's gain.
    A group whose step cannot run where the ladder stands (int8 comms onto the baseline's row_wise
    sharding when the finalist's is table_wise: InProcPoint.problem) is taken after the later groups;
    if it still cannot run there, its step is recorded as such and never launched. Inert variables are
    recorded as such and never launched; a step that could not be measured ends the climb."""
    current, row, cumulative = baseline, None, 1.0
    order, walked = list(ctx.space.ladder), 0
    deferred: set[str] = set()
    while order:
        group = order.pop(0)
        i = ctx.space.ladder.index(group)  # the launches' tag: the group's place in the ladder
        read, put = GROUPS[group]
        if put(current, target) == current:
            continue
        problem = put(current, target).point.problem()
        if problem and order and group not in deferred:
            # int8 onto a reduce-scatter sharding (the finalist's is another): after the later groups
            deferred.add(group)
            order.append(group)
            continue
        units = _units(ctx, i, group, current, target)
        for names in units:
            nxt = put(current, target) if names is None else _with_env(current, target, names)
            changed = _changed(group, read(current), read(nxt))
            recorded = steps[walked] if walked < len(steps) else None
            if recorded is not None and recorded.step == group and set(recorded.changed) == set(changed):
                step = recorded  # done before the study was interrupted
            elif problem or (names is not None and set(names) <= set(ctx.inert)):  # never launched
                why = f"cannot run: {problem}" if problem else INERT
                step = LadderStep(step=group, changed=changed, kept=False, verdict=why, candidate=None,
                                  cumulative=cumulative)  # fmt: skip
                steps.append(step)
            else:
                # A step from the baseline straight to the finalist is the confirmation itself: its
                # rounds are reused, so the ladder never contradicts the confirmation with fresh noise.
                same_as_confirmed = current == baseline and nxt == target and ctx.settings.confirm_rounds > 0
                tag = (
                    f"ladder-{i}-{group}"
                    if len(units) == 1
                    else f"ladder-{i}-{group}-{'+'.join(names or ())}"
                )
                step = _step(ctx, tag, group, current, nxt, changed, cumulative, same_as_confirmed)
                steps.append(step)
            walked += 1
            if step.verdict == NOT_MEASURED:  # nothing after it could be published: no more launches
                return current, row
            if step.kept:
                current, cumulative = nxt, step.cumulative or cumulative
                row = (ctx.store.candidate(step.candidate) if step.candidate is not None else None) or row
    return current, row


def _units(
    ctx: StudyContext, i: int, group: str, current: Setting, target: Setting
) -> list[list[str] | None]:
    """A group's steps: one (None: the whole group), or for the env one per variable that differs,
    in the space's order, those NCCL reads as one setting together (or that act only together from
    where the ladder stands: acting_with); then each inert variable alone (never launched: climb)."""
    if group != "env":
        return [None]
    differ = set(_changed(group, current.env, target.env))
    inert = sorted(differ & set(ctx.inert))
    differ -= set(inert)
    ordered = [name for name in ctx.space.env if name in differ] + sorted(differ - set(ctx.space.env))
    units: list[list[str] | None] = list(read_together(ordered, also=acting_with(target.env, current.env)))
    whole = f"ladder-{i}-{group}"
    if len(units) > 1 and any(
        tag_of(launch.spec, launch.kind) == whole for launch in ctx.store.launches(ctx.study_id)
    ):
        # A study interrupted inside an env step measured whole, before the env was split: its rounds stand.
        units = [ordered]
    return units + [[name] for name in inert]


def _with_env(current: Setting, target: Setting, names: list[str]) -> Setting:
    """`current` with these variables as `target` has them (set, or unset)."""
    env = {k: v for k, v in current.env.items() if k not in names}
    env.update({k: target.env[k] for k in names if k in target.env})
    return Setting(env, current.point)


def _step(ctx: StudyContext, tag: str, group: str, current: Setting, nxt: Setting, changed: dict[str, list[Any]],
          cumulative: float, confirmed: bool) -> LadderStep:  # fmt: skip
    rounds, kind, tag = (
        (ctx.settings.confirm_rounds, LaunchKind.CONFIRM, "confirm")
        if confirmed
        else (ctx.settings.ladder_rounds, LaunchKind.LADDER, tag)
    )
    speedup, row = compare(ctx, nxt, current, rounds, kind, tag)
    candidate = row.id if row is not None else None
    if speedup is None:
        return LadderStep(step=group, changed=changed, kept=False, verdict=NOT_MEASURED,
                          candidate=candidate, cumulative=cumulative)  # fmt: skip
    # A setting over the quantization-error limit is no setting to publish, whatever it gains.
    over = over_limit(row)
    kept = speedup.significant and over is None
    verdict = f"over the limit: {over}" if over is not None else KEPT if kept else NO_GAIN
    return LadderStep(step=group, changed=changed, kept=kept, verdict=verdict, candidate=candidate,
                      samples_per_s=speedup.tuned, previous_samples_per_s=speedup.baseline,
                      speedup_vs_previous=speedup.ratio, ci_low=speedup.ci_low, ci_high=speedup.ci_high,
                      rounds=speedup.rounds, cumulative=cumulative * speedup.ratio if kept else cumulative)  # fmt: skip


def _changed(group: str, before: Any, after: Any) -> dict[str, list[Any]]:
    """What a step changes: the group's value, or for the env each variable that differs."""
    if isinstance(before, dict):
        return {
            k: [before.get(k), after.get(k)]
            for k in sorted(set(before) | set(after))
            if before.get(k) != after.get(k)
        }
    return {group: [before, after]}
