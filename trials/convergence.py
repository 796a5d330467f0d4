"""The convergence check: does a candidate train as well as the job's own setting?

A proxy, said plainly: a fixed hidden teacher (random embeddings over the workload's tables and a
linear map of the dense features) labels samples with Bernoulli(sigmoid(logit)); each candidate
trains a fresh model on the same samples (a bigger batch takes fewer steps), then is scored on the
same held-out set: log loss and AUC. A candidate's model seed sets both its initialization and the
order it sees the samples in, so a baseline and a variant of the same seed differ only by what the
variant changes (a paired comparison); several seeds measure how much the score moves by chance.
With `quality.checkpoints` the held-out log loss is also taken along the way (the curve that time
to quality is read from), and a candidate may train past the common budget (`train_samples`) at the
same spacing. A user's own data replaces the teacher with `data: "module:function"`, a function
`(workload, split, rank, world_size, samples) -> Samples` (split "train" or "eval") that returns
exactly `samples` samples (checked on every rank: a rank with fewer would hang its peers' collectives).
"""

from __future__ import annotations

import importlib
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torchrec.datasets.utils import Batch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from trials.codecs import ROW_DIM, DamagedCodec
from trials.model import ShardedWorkload
from trials.pipelines import make_pipeline, release
from trials.spec import (
    TEACHER_CHUNK_LOOKUPS,
    TEACHER_DIM,
    CandidateSpec,
    QualitySpec,
    TrialSpec,
    WorkloadSpec,
    quality_problem,
    world_problem,
)

TEACHER_SEED = 1234
ID_SKEW = 3.0  # id = rows x u**3: a tenth of the rows draws almost half the lookups
LOGIT_STD = 2.0
SPARSE_SHARE = 0.8  # a task neither trivial nor hopeless (AUC about 0.8 for the teacher itself)
TEACHER_CHUNK = TEACHER_CHUNK_LOOKUPS  # lookups teacher_samples draws or gathers at a time (tests shrink it)
ORDER_SEED = 7919  # the samples' order of model seed s: a permutation drawn from ORDER_SEED + s


@dataclass
class Samples:
    """One rank's samples, fixed for every candidate: ids per table, dense features, 0/1 labels."""

    ids: list[torch.Tensor]  # per table: samples x pooling_factor
    dense: torch.Tensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def subset(self, index: torch.Tensor) -> Samples:
        """These samples at `index`, in that order."""
        return Samples([ids[index] for ids in self.ids], self.dense[index], self.labels[index])

    def batches(self, workload: WorkloadSpec, batch_size: int, device: torch.device) -> Iterator[Batch]:
        """The samples in order, `batch_size` at a time (a last partial batch is dropped)."""
        for start in range(0, len(self) - batch_size + 1, batch_size):
            yield self.batch(workload, slice(start, start + batch_size), device)

    def batch(self, workload: WorkloadSpec, rows: slice | torch.Tensor, device: torch.device) -> Batch:
        """One batch of the samples at `rows` (a slice, or indices in the order given)."""
        keys = [f"f_{t.name}" for t in workload.tables]
        dense = self.dense[rows]
        size = int(dense.shape[0])
        values = torch.cat([ids[rows].reshape(-1) for ids in self.ids])
        lengths = torch.cat([torch.full((size,), ids.shape[1], dtype=torch.int32) for ids in self.ids])
        kjt = KeyedJaggedTensor.from_lengths_sync(keys=keys, values=values, lengths=lengths)
        return Batch(dense_features=dense, sparse_features=kjt, labels=self.labels[rows]).to(device)


def teacher_samples(workload: WorkloadSpec, n: int, seed: int) -> Samples:
    """`n` samples labelled by the hidden teacher (the same teacher on every rank and launch). Built
    TEACHER_CHUNK lookups at a time, so what it holds past the samples themselves is bounded
    (trials.spec.quality_problem counts it): the same numbers as built in one go, draw for draw."""
    assert workload.dense is not None
    teacher = torch.Generator().manual_seed(TEACHER_SEED)
    tables = [torch.randn(t.num_embeddings, TEACHER_DIM, generator=teacher) for t in workload.tables]
    w_sparse = torch.randn(len(tables), TEACHER_DIM, generator=teacher)
    w_dense = torch.randn(workload.dense.in_features, generator=teacher)
    gen = torch.Generator().manual_seed(seed)
    # Skewed ids, as in recommendation data: the frequent ones are learnable, the tail is not.
    ids = [_skewed_ids(t.num_embeddings, n, t.pooling_factor, gen) for t in workload.tables]
    dense = torch.randn(n, workload.dense.in_features, generator=gen)
    sparse = torch.empty(n)
    for rows in _chunks(n, sum(t.pooling_factor for t in workload.tables)):
        pooled = torch.stack(
            [table[i[rows]].mean(dim=1) for table, i in zip(tables, ids, strict=True)], dim=1
        )
        sparse[rows] = (pooled * w_sparse).sum(dim=(1, 2))
    del tables
    # Mostly the embeddings: what the comms carry is what a candidate can get wrong. In place: the
    # same arithmetic as SPARSE_SHARE * _unit(sparse) + (1 - SPARSE_SHARE) * _unit(dense @ w_dense).
    logit = _unit_(sparse).mul_(SPARSE_SHARE)
    logit.add_(_unit_(dense @ w_dense).mul_(1 - SPARSE_SHARE))
    logit = _unit_(logit).mul_(LOGIT_STD).sigmoid_()
    labels = torch.bernoulli(logit, generator=gen)
    return Samples(ids, dense, labels)


def _skewed_ids(rows: int, n: int, pooling: int, gen: torch.Generator) -> torch.Tensor:
    """`n` x `pooling` ids, rows x u**ID_SKEW: drawn a chunk at a time, in the order one draw of all
    of them takes (CPU uniforms are drawn one after another), so the same ids as in one go."""
    ids = torch.empty(n, pooling, dtype=torch.long)
    for chunk in _chunks(n, pooling):
        ids[chunk] = (rows * torch.rand(chunk.stop - chunk.start, pooling, generator=gen) ** ID_SKEW).long()
    return ids


def _chunks(n: int, width: int) -> Iterator[slice]:
    """Slices of `n` rows of `width` values each, about TEACHER_CHUNK values a slice (one row at least)."""
    step = max(1, TEACHER_CHUNK // max(1, width))
    for start in range(0, n, step):
        yield slice(start, min(n, start + step))


def _unit_(x: torch.Tensor) -> torch.Tensor:
    """`x` over its standard deviation, in place; as it is where that has no value (one sample: std() of
    one value is NaN, and Bernoulli(sigmoid(NaN)) fails) or is 0."""
    std = x.std() if x.numel() > 1 else None
    return x.div_(std) if std is not None and bool(std > 0) else x


def rank_samples(
    workload: WorkloadSpec, quality: QualitySpec, split: str, rank: int, world: int, total: int | None = None
) -> Samples:
    """This rank's share of the train or eval split (`total` samples over all ranks, else the spec's).
    Every held-out sample is scored: the first `eval_samples % world` ranks hold one more."""
    total = total or (quality.train_samples if split == "train" else quality.eval_samples)
    n = total // world + (split == "eval" and rank < total % world)
    if quality.data is not None:
        return user_samples(quality.data, workload, split, rank, world, n)
    offset = 0 if split == "train" else 1_000_003
    return teacher_samples(workload, n, seed=quality.data_seed * 7919 + offset + rank)


def user_samples(data: str, workload: WorkloadSpec, split: str, rank: int, world: int, n: int) -> Samples:
    """The user's `data` function's samples, checked to be the `n` asked for: a rank holding fewer or
    more would take another number of steps than its peers, and their collectives would hang."""
    module, _, function = data.partition(":")
    samples = getattr(importlib.import_module(module), function)(workload, split, rank, world, n)
    try:
        got: int | str = len(samples)
    except TypeError:
        got = f"a {type(samples).__name__} (no length)"
    if got != n:
        raise ValueError(
            f"quality.data {data} returned {got} {split} samples for rank {rank} of {world}, "
            f"asked for {n}: it must return exactly the samples asked for"
        )
    return samples


def eval_batches(most: int, largest: int) -> tuple[int, int]:
    """(batch size, batches) that score `most` samples (the most any rank holds) in batches of at most
    `largest`: a multiple of ROW_DIM, so a row-wise codec (int8, fp8) takes it whatever the dims."""
    size = min(largest, -(-most // ROW_DIM) * ROW_DIM)
    return size, -(-most // size)


def evaluate(model: torch.nn.Module, workload: WorkloadSpec, samples: Samples, batch_size: int,
             device: torch.device) -> tuple[float, float, int]:  # fmt: skip
    """(log loss, AUC, samples) over every rank's held-out samples, each scored exactly once.

    The sharded model's forward is collective, so every rank runs the same batches: as many, of the
    same size, as the rank holding the most samples needs; a rank's last batch is filled up with its
    own samples again, and the scores of that filling are dropped."""
    counts: list[int] = [0] * dist.get_world_size()
    dist.all_gather_object(counts, len(samples))
    if min(counts) == 0:
        raise ValueError(f"no held-out sample on some rank (per rank: {counts}): more eval_samples")
    size, steps = eval_batches(max(counts), batch_size)
    model.eval()
    scores, labels = [], []
    with torch.no_grad():
        for step in range(steps):
            rows = torch.arange(step * size, (step + 1) * size) % len(samples)
            _, (_, logits, batch_labels) = model(samples.batch(workload, rows, device))
            scores.append(logits.float().cpu())
            labels.append(batch_labels.float().cpu())
    model.train()
    mine = (torch.cat(scores)[: len(samples)], torch.cat(labels)[: len(samples)])
    views: list[tuple[torch.Tensor, torch.Tensor]] = [mine] * dist.get_world_size()
    dist.all_gather_object(views, mine)
    logits, y = torch.cat([v[0] for v in views]), torch.cat([v[1] for v in views])
    loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, y).item()
    return loss, auc(logits, y), int(y.numel())


def auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """Area under the ROC curve: the chance a positive outranks a negative (ties count half)."""
    _, inverse, counts = torch.unique(scores, return_inverse=True, return_counts=True)
    upper = torch.cumsum(counts, 0).double()
    ranks = (upper - (counts.double() - 1) / 2)[inverse]  # tied scores share their mean rank
    positives = labels > 0.5
    n_pos, n_neg = int(positives.sum()), int((~positives).sum())
    if not n_pos or not n_neg:
        return float("nan")
    return float((ranks[positives].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def train_and_score(
    ctx: QualityContext, cand: CandidateSpec, sharding: str, pipeline_name: str
) -> dict[str, Any]:
    """Train a fresh model of the candidate's kind on this rank's samples (in its seed's order, up to
    its budget), scoring it on the held-out set at each checkpoint; its score is the one at the
    common budget (`quality.train_samples`), where every candidate has seen the same samples."""
    seed = ctx.seed if cand.model_seed is None else cand.model_seed
    workload = ctx.workload if cand.lr_scale is None else scaled_lr(ctx.workload, cand.lr_scale)
    sw = ShardedWorkload(workload, sharding, ctx.device, ctx.pg, ctx.local_size, seed=seed, learn=True)
    sw.check_row_alignment(cand.fwd_precision, cand.bwd_precision, cand.batch_size)
    effective = sw.set_precision(cand.fwd_precision, cand.bwd_precision)
    if ctx.damaged is not None and ctx.damaged == cand.fwd_precision:
        sw.output_slots.fwd.current = sw.output_slots.bwd.current = DamagedCodec()
    world, batch = dist.get_world_size(), cand.batch_size
    order = ctx.order(seed)[: (cand.train_samples or ctx.quality.train_samples) // world]
    common = ctx.quality.train_samples // world // batch  # steps at the common budget
    marks = checkpoint_steps(common, len(order) // batch, ctx.quality.checkpoints)
    scored_at = min(common, marks[-1])  # a candidate's score: at the common budget (or its own end)
    target = None if cand.stop_at is None else ctx.scored.get(ctx.candidates[cand.stop_at])
    curve: list[list[float]] = []
    steps, train_s, eval_s = 0, 0.0, 0.0
    for mark in marks:
        started = time.perf_counter()
        steps += train_pass(
            sw, pipeline_name, ctx.train.subset(order[steps * batch : mark * batch]), ctx, batch
        )
        scored = time.perf_counter()
        now = evaluate(sw.model, ctx.workload, ctx.eval, ctx.eval_batch, ctx.device)
        train_s, eval_s = train_s + scored - started, eval_s + time.perf_counter() - scored
        curve.append([steps * batch * world, now[0]])
        if mark == scored_at:
            logloss, score, samples = now
            if not math.isfinite(score):  # a score of nothing, not one to rank candidates by
                raise ValueError(f"AUC has no value: the {samples:,} held-out samples are all of one class "
                                 "(more quality.eval_samples)")  # fmt: skip
        if target is not None and mark >= scored_at and now[0] <= target:
            break  # past the common budget and at the target's log loss: the rest would show nothing
    ctx.scored[cand] = logloss
    return {"effective_fwd_precision": effective.fwd, "effective_bwd_precision": effective.bwd,
            "effective_pipeline": pipeline_name, "logloss": logloss, "auc": score, "eval_samples": samples,
            "train_samples": scored_at * batch * world, "train_steps": scored_at,
            "budget_samples": steps * batch * world, "curve": curve, "model_seed": seed,
            "lr_scale": 1.0 if cand.lr_scale is None else cand.lr_scale,
            "train_s": train_s, "eval_s": eval_s, "damaged_codec": ctx.damaged == cand.fwd_precision}  # fmt: skip


def checkpoint_steps(common: int, total: int, checkpoints: int) -> list[int]:
    """The steps after which a candidate is scored: every common/checkpoints steps (the common
    budget among them) until its own last step, which is always one."""
    if total <= 0 or common <= 0:
        raise ValueError("fewer samples than one batch per rank: nothing to train on")
    spacing = max(common, 1) / checkpoints
    marks = {
        total,
        *(s for m in range(1, int(total / spacing) + 1) if 0 < (s := round(m * spacing)) <= total),
    }
    return sorted(marks | ({common} if 0 < common <= total else set()))


def train_pass(
    sw: ShardedWorkload, pipeline_name: str, samples: Samples, ctx: QualityContext, batch: int
) -> int:
    """One pass over `samples` under the candidate's pipeline (made anew for each stretch between
    checkpoints, so the model is scored with its own forwards); returns the steps taken."""
    pipeline = make_pipeline(pipeline_name, sw.model, sw.optimizer, ctx.device)
    batches, steps = samples.batches(ctx.workload, batch, ctx.device), 0
    try:
        while True:
            try:
                pipeline.progress(batches)
            except StopIteration:
                break
            steps += 1
    finally:
        release(pipeline)
    return steps


def scaled_lr(workload: WorkloadSpec, scale: float) -> WorkloadSpec:
    """The workload with both learning rates multiplied (a learning-rate rule for a batch change)."""
    opt = workload.optimizer
    scaled = opt.model_copy(
        update={"embedding_lr": opt.embedding_lr * scale, "dense_lr": opt.dense_lr * scale}
    )
    return workload.model_copy(update={"optimizer": scaled})


@dataclass
class QualityContext:
    """What every candidate of a quality launch shares: the samples, made once per launch."""

    workload: WorkloadSpec
    quality: QualitySpec
    device: torch.device
    pg: Any
    local_size: int
    seed: int
    damaged: str | None
    train: Samples
    eval: Samples
    candidates: tuple[CandidateSpec, ...] = ()
    scored: dict[CandidateSpec, float] = field(default_factory=dict)  # log loss at the common budget
    eval_batch: int = 4096

    def order(self, seed: int) -> torch.Tensor:
        """The order model seed `seed` sees this rank's samples in (the same for every candidate)."""
        return torch.randperm(len(self.train), generator=torch.Generator().manual_seed(ORDER_SEED + seed))

    @classmethod
    def make(cls, spec: TrialSpec, device: torch.device, pg: Any, local_size: int) -> QualityContext:
        assert spec.quality is not None
        world_problem(spec, dist.get_world_size())  # trials.run checked WORLD_SIZE's; a group may differ
        most = max(c.train_samples or spec.quality.train_samples for c in spec.candidates)
        if problem := quality_problem(spec.workload, most, spec.quality.eval_samples, dist.get_world_size()):
            raise ValueError(problem)  # before building them: past it, the kernel kills the rank, no result
        train, held_out = agreed_samples(spec.workload, spec.quality, most)
        return cls(spec.workload, spec.quality, device, pg, local_size, spec.seed,
                   spec.extra.damaged_codec, train, held_out, spec.candidates)  # fmt: skip


def agreed_samples(workload: WorkloadSpec, quality: QualitySpec, most: int) -> tuple[Samples, Samples]:
    """This rank's (training, held-out) samples, or the same error on every rank when any rank could
    not make its own: a rank left alone in the first collective would wait there until the timeout."""
    rank, world = dist.get_rank(), dist.get_world_size()
    made, problem = None, None
    try:
        made = (
            rank_samples(workload, quality, "train", rank, world, most),
            rank_samples(workload, quality, "eval", rank, world),
        )
    except Exception as exc:
        problem = f"rank {rank}: {exc if isinstance(exc, ValueError) else f'{type(exc).__name__}: {exc}'}"
    problems: list[str | None] = [None] * world
    dist.all_gather_object(problems, problem)
    if made is None or any(problems):
        raise ValueError(next(p for p in problems if p))
    return made
