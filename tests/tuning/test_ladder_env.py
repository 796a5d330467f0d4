"""The ladder climbs the env a variable at a time: a variable is published on its own gain, never on
another's. Before, the env was one step: a finalist's NCCL_BUFFSIZE that did nothing rode along with
the socket settings that did, and was exported to every job. The launches here train nothing: each
measured slot's samples/s is a known function of the env with a small seeded jitter."""

from __future__ import annotations

import random

import pytest

from autotuner.cli.claim_report import claim_text
from autotuner.envvars import acting_with, read_together
from autotuner.executors import LocalExecutor
from autotuner.store import LaunchKind, Store
from autotuner.tuning import StudySettings, create_study, pairs
from autotuner.tuning.context import StudyContext
from autotuner.tuning.ladder import climb
from autotuner.tuning.launch import spec_of
from autotuner.tuning.lease import Lease
from autotuner.tuning.outcome import LadderStep
from autotuner.tuning.pairs import Setting, compare, tag_of

SOCKETS = {"NCCL_NSOCKS_PERTHREAD": "8", "NCCL_SOCKET_NTHREADS": "2"}
TARGET = {"NCCL_BUFFSIZE": "16777216", **SOCKETS, "NCCL_P2P_NET_CHUNKSIZE": "524288"}


def rate(env: dict[str, str]) -> float:
    """Sockets only help together (1.5x), a bigger chunk helps (1.2x), the buffer does nothing."""
    sockets = 1.5 if all(env.get(k) == v for k, v in SOCKETS.items()) else 1.0
    chunk = 1.2 if env.get("NCCL_P2P_NET_CHUNKSIZE") == "524288" else 1.0
    return 1000.0 * sockets * chunk


class EnvLaunches:
    """run_launch stand-in: each slot measured at rate(env) with a seeded 1% jitter; `over` says which
    envs' rows come back over the quantization-error limit."""

    def __init__(self, over=lambda env: False) -> None:
        self.jitter, self.envs, self.over = random.Random(7), [], over

    def __call__(self, study, plan, search) -> None:
        spec = spec_of(study, plan)
        launch = study.store.add_launch(study_id=study.study_id, kind=plan.kind, env=plan.env, spec=spec,
                                        executor="fake", attempt=1, nnodes=None)  # fmt: skip
        self.envs.append(dict(plan.env))
        rows = [{"study_id": study.study_id, "launch_id": launch.id, "index": i, "kind": plan.kind, "env": plan.env,
                 "fwd_precision": p.fwd_precision, "bwd_precision": p.bwd_precision, "batch_size": p.batch_size,
                 "sharding": p.sharding, "pipeline": p.pipeline,
                 "state": "infeasible" if self.over(plan.env) else "ok",
                 "error": "quantization error 0.09 > tolerance 0.05" if self.over(plan.env) else None,
                 "samples_per_s": rate(plan.env) * (1 + self.jitter.uniform(-0.01, 0.01))}
                for i, p in enumerate(plan.points)]  # fmt: skip
        study.store.finish_launch(launch.id, rows, state="succeeded")


@pytest.fixture
def ctx(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    workload = {"name": "w", "batch_size": 512, "dense": {"in_features": 13, "arch": [16], "over_arch": [16, 1]},
                "tables": [{"name": "t0", "num_embeddings": 100, "embedding_dim": 16, "pooling_factor": 2}]}  # fmt: skip
    # The space's order, which the env steps follow: buffer, the two socket variables, chunk.
    space = {"env": {"NCCL_BUFFSIZE": [4194304, 16777216], "NCCL_NSOCKS_PERTHREAD": [1, 8],
                     "NCCL_SOCKET_NTHREADS": [1, 2], "NCCL_P2P_NET_CHUNKSIZE": [131072, 524288]}}  # fmt: skip
    settings = StudySettings(executor="local", trials=1, workdir=str(tmp_path / "runs"))
    study = create_study(store, cluster="c", workload=workload, space=space, settings=settings)
    yield StudyContext.load(store, study.id, LocalExecutor(), Lease(store, study.id))
    store.dispose()


def test_each_env_variable_is_kept_on_its_own_gain_and_the_useless_one_is_not_published(ctx, monkeypatch):
    launches = EnvLaunches()
    monkeypatch.setattr(pairs, "run_launch", launches)
    baseline = Setting({}, ctx.baseline_point)
    steps: list[LadderStep] = []
    top, row = climb(ctx, baseline, Setting(dict(TARGET), ctx.baseline_point), steps)

    assert [list(s.changed) for s in steps] == [
        ["NCCL_BUFFSIZE"], ["NCCL_NSOCKS_PERTHREAD", "NCCL_SOCKET_NTHREADS"], ["NCCL_P2P_NET_CHUNKSIZE"]
    ]  # fmt: skip
    assert all(s.step == "env" and s.rounds == ctx.settings.ladder_rounds for s in steps)
    buffer, sockets, chunk = steps
    assert not buffer.kept
    assert buffer.verdict == "no measurable gain"
    assert buffer.ci_low <= 1 <= buffer.ci_high
    assert sockets.kept
    assert chunk.kept
    assert sockets.speedup_vs_previous == pytest.approx(1.5, rel=0.02)
    assert chunk.speedup_vs_previous == pytest.approx(1.2, rel=0.02)
    assert chunk.cumulative == pytest.approx(1.8, rel=0.03)
    # The buffer is not published: the top is the finalist without it, measured by the last kept step
    assert top.env == {k: v for k, v in TARGET.items() if k != "NCCL_BUFFSIZE"}
    assert row is not None
    assert Setting.of(row) == top
    # Each step measured from where the ladder stood: the socket step without the dropped buffer
    assert {"NCCL_BUFFSIZE": "16777216", **SOCKETS} not in launches.envs
    # Each step its own comparison: rows of one are never paired with another's
    tags = {tag_of(launch.spec, launch.kind) for launch in ctx.store.launches(ctx.study_id)}
    assert tags == {"ladder-3-env-NCCL_BUFFSIZE", "ladder-3-env-NCCL_NSOCKS_PERTHREAD+NCCL_SOCKET_NTHREADS",
                    "ladder-3-env-NCCL_P2P_NET_CHUNKSIZE"}  # fmt: skip
    # ... and each its own name where the claim is read (the dashboard's bars are categories)
    words = claim_text(steps, None, None).ladder
    assert [w.name for w in words] == [
        "env BUFFSIZE",
        "env NSOCKS_PERTHREAD+SOCKET_NTHREADS",
        "env P2P_NET_CHUNKSIZE",
    ]
    assert words[0].line.startswith("env BUFFSIZE 1.0")
    assert words[0].line.endswith("(dropped)")


def test_a_resumed_ladder_keeps_its_env_steps_and_launches_nothing_again(ctx, monkeypatch):
    launches = EnvLaunches()
    monkeypatch.setattr(pairs, "run_launch", launches)
    baseline, target = Setting({}, ctx.baseline_point), Setting(dict(TARGET), ctx.baseline_point)
    steps: list[LadderStep] = []
    top, _ = climb(ctx, baseline, target, steps)
    done = len(launches.envs)
    again = list(steps[:2])  # interrupted after the socket step
    top_again, _ = climb(ctx, baseline, target, again)
    assert top_again == top
    assert [s.changed for s in again] == [s.changed for s in steps]
    assert len(launches.envs) == done  # the third step's rounds were in the store: nothing re-run


def test_a_study_interrupted_inside_a_whole_env_step_keeps_its_rounds(ctx, monkeypatch):
    # Measured before the env was climbed a variable at a time: one comparison changed all four, tagged
    # as the whole env step. A study resumed after the upgrade keeps the step whole.
    launches = EnvLaunches()
    monkeypatch.setattr(pairs, "run_launch", launches)
    baseline, target = Setting({}, ctx.baseline_point), Setting(dict(TARGET), ctx.baseline_point)
    compare(ctx, target, baseline, ctx.settings.ladder_rounds, LaunchKind.LADDER, "ladder-3-env")
    steps: list[LadderStep] = []
    top, _ = climb(ctx, baseline, target, steps)
    assert [set(s.changed) for s in steps] == [set(TARGET)]
    assert steps[0].kept
    assert top.env == TARGET
    # not measured again a variable at a time (this one step is the confirmation's own pair here)
    assert {tag_of(launch.spec, launch.kind) for launch in ctx.store.launches(ctx.study_id)} <= {
        "ladder-3-env",
        "confirm",
    }


def test_a_chunk_that_acts_only_with_the_new_buffer_moves_with_it(ctx, monkeypatch):
    # NCCL caps the P2P chunk at NCCL_BUFFSIZE/8: a 2 MiB chunk on the default 4 MiB buffer runs as
    # 512 KiB, so measured alone it would be exported as a chunk that never ran.
    launches = EnvLaunches()
    monkeypatch.setattr(pairs, "run_launch", launches)
    target = {**TARGET, "NCCL_P2P_NET_CHUNKSIZE": "2097152"}
    steps: list[LadderStep] = []
    climb(ctx, Setting({}, ctx.baseline_point), Setting(target, ctx.baseline_point), steps)
    assert [list(s.changed) for s in steps] == [
        ["NCCL_BUFFSIZE", "NCCL_P2P_NET_CHUNKSIZE"], ["NCCL_NSOCKS_PERTHREAD", "NCCL_SOCKET_NTHREADS"]
    ]  # fmt: skip
    # within the cap of the buffer the ladder stands on, the chunk is a step of its own
    assert acting_with(target, {"NCCL_BUFFSIZE": "16777216"}) == []
    assert acting_with(TARGET, {}) == []


def test_variables_nccl_reads_as_one_setting_move_together_in_the_given_order():
    names = ["NCCL_BUFFSIZE", "NCCL_SOCKET_NTHREADS", "NCCL_MAX_NCHANNELS", "NCCL_NSOCKS_PERTHREAD",
             "NCCL_MIN_NCHANNELS", "NCCL_P2P_NET_CHUNKSIZE"]  # fmt: skip
    assert read_together(names) == [
        ["NCCL_BUFFSIZE"],
        ["NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD"],
        ["NCCL_MAX_NCHANNELS", "NCCL_MIN_NCHANNELS"],
        ["NCCL_P2P_NET_CHUNKSIZE"],
    ]
    assert read_together(["NCCL_NSOCKS_PERTHREAD"]) == [["NCCL_NSOCKS_PERTHREAD"]]


def test_a_step_measured_over_the_quantization_error_limit_is_not_kept(ctx, monkeypatch):
    # Rows over the limit still pair (their speed was measured), but such a setting is never published.
    launches = EnvLaunches(over=lambda env: env.get("NCCL_NSOCKS_PERTHREAD") == "8")
    monkeypatch.setattr(pairs, "run_launch", launches)
    steps: list[LadderStep] = []
    top, _ = climb(ctx, Setting({}, ctx.baseline_point), Setting(dict(TARGET), ctx.baseline_point), steps)
    sockets = steps[1]
    assert sockets.speedup_vs_previous == pytest.approx(1.5, rel=0.02)
    assert not sockets.kept
    assert sockets.verdict == "over the limit: quantization error 0.09 > tolerance 0.05"
    assert "NCCL_NSOCKS_PERTHREAD" not in top.env
