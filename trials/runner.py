"""Runs every candidate of a spec inside one torchrun process group (imported after validation)."""

from __future__ import annotations

import itertools
import os
import socket
import sys
import time
import traceback
from datetime import timedelta
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from trials.codecs import relative_l2_error
from trials.convergence import QualityContext, train_and_score
from trials.model import ShardedWorkload, make_batches
from trials.nccl_log import hand_over, parse_nccl_info, read_log, route_nccl_debug
from trials.percentiles import summarize
from trials.pipelines import CPU_NOTE, make_pipeline, pipeline_error, release
from trials.plain_a2a import replay_calls, same_instrument_algbw
from trials.probe import COMM_KINDS, CommProbe
from trials.result import SCHEMA_VERSION, nvidia_driver_version, read_nccl_conf_files
from trials.spec import MAX_INPUT_BYTES, CandidateSpec, TrialSpec
from trials.watchdog import Watchdog

PG_TIMEOUT = timedelta(seconds=int(os.environ.get("AUTOTUNER_TRIAL_PG_TIMEOUT_S", "300")))


def _versions(backend: str) -> dict[str, str]:
    versions = {"python": sys.version.split()[0], "torch": torch.__version__}
    for dist_name, key in (
        ("torchrec", "torchrec"),
        ("fbgemm-gpu", "fbgemm"),
        ("fbgemm-gpu-cpu", "fbgemm"),
        ("fbgemm-gpu-nightly", "fbgemm"),
    ):
        try:
            versions.setdefault(key, metadata.version(dist_name))
        except metadata.PackageNotFoundError:
            pass
    if backend == "nccl":
        versions["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
        versions["cuda"] = str(torch.version.cuda)
    return versions


class TrialRunner:
    def __init__(
        self, spec: TrialSpec, started: float, launch_env: dict[str, str], watchdog: Watchdog | None = None
    ) -> None:
        self.spec = spec
        self.watchdog = watchdog
        self.started = started
        self.launch_env = launch_env
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.local_size = int(os.environ.get("LOCAL_WORLD_SIZE", str(self.world_size)))
        self.nccl_log: Path | None = None
        self.joined = False  # in the process group
        self._batches: dict[int, list[Any]] = {}
        # What a stall leaves (stalled_result): the launch's facts once known, and each candidate's
        # result as it is merged, so the candidates measured before a rank hung are not lost with it.
        self.header: dict[str, Any] | None = None
        self.results: list[dict[str, Any] | None] = [None] * len(spec.candidates)
        self.current: int | None = None  # the candidate being measured

    # ------------------------------------------------------------------ setup

    def _pick_device(self) -> tuple[torch.device, str]:
        want = self.spec.device
        has_gpu = torch.cuda.is_available() and torch.cuda.device_count() > 0
        if want == "cuda" and not has_gpu:
            raise RuntimeError("spec asks for device 'cuda' but no GPU is visible to this process")
        if want == "cuda" or (want == "auto" and has_gpu):
            gpus = torch.cuda.device_count()
            if self.local_size > gpus:  # NCCL would fail init with "Duplicate GPU detected"
                raise RuntimeError(
                    f"{self.local_size} ranks of this host on {gpus} GPU(s): NCCL refuses two ranks of one "
                    f"host on one GPU. Run at most {gpus} rank(s) per node (--nproc-per-node {gpus}), or "
                    "emulate nodes that share the GPU, each a host of its own (the local executor's "
                    "nodes=hostids)"
                )
            device = torch.device("cuda", self.local_rank % gpus)
            torch.cuda.set_device(device)
            return device, "nccl"
        return torch.device("cpu"), "gloo"

    def setup(self) -> None:
        self.device, self.backend = self._pick_device()
        if self.backend == "nccl":
            self.nccl_log = route_nccl_debug("nccl")
            # NCCL's own start/end events per collective (read by the probe): set before the group exists
            os.environ.setdefault("TORCH_NCCL_ENABLE_TIMING", "1")
        kwargs: dict[str, Any] = {"backend": self.backend, "timeout": PG_TIMEOUT}
        if self.device.type == "cuda":
            kwargs["device_id"] = self.device
        dist.init_process_group(**kwargs)
        self.joined = True
        assert dist.group.WORLD is not None  # init_process_group just made it
        self.pg = dist.group.WORLD
        self.default_threads = torch.get_num_threads()
        self.probe = CommProbe(
            cuda=self.device.type == "cuda",
            nccl_timing=self.backend == "nccl" and os.environ.get("TORCH_NCCL_ENABLE_TIMING") == "1",
            on_call=self._beat,
        )
        self.probe.install()

    # ------------------------------------------------------------------ measuring

    def _beat(self, stage: str | None = None) -> None:
        if self.watchdog is not None:
            self.watchdog.beat(stage)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @staticmethod
    def _elapsed(start: Any, end: Any) -> float:
        if isinstance(start, float):
            return end - start
        return start.elapsed_time(end) / 1000.0

    def _inputs(self, batch_size: int) -> list[Any]:
        """Training batches for a batch size: made once per launch, reused. Those of other sizes are let
        go (oldest first) while keeping them would hold more than one size may (MAX_INPUT_BYTES)."""
        if batch_size not in self._batches:
            while self._batches and self.spec.input_bytes(sum(self._batches) + batch_size) > MAX_INPUT_BYTES:
                del self._batches[next(iter(self._batches))]
            seed = self.spec.seed * 1000 + self.rank
            self._batches[batch_size] = make_batches(
                self.spec.workload, batch_size, self.spec.input_batches, seed, self.device
            )
        return self._batches[batch_size]

    def _measure(self, sw: ShardedWorkload, cand: CandidateSpec) -> dict[str, Any]:
        sw.check_row_alignment(cand.fwd_precision, cand.bwd_precision, cand.batch_size)
        effective = sw.set_precision(cand.fwd_precision, cand.bwd_precision)
        torch.set_num_threads(cand.num_threads or self.default_threads)
        batches = itertools.cycle(self._inputs(cand.batch_size))
        pipeline_name = self.spec.pipeline_of(cand)
        pipeline = make_pipeline(pipeline_name, sw.model, sw.optimizer, self.device)
        try:
            try:
                quant_error = self._warm_up(sw, pipeline, batches)
            except Exception as exc:  # the pipeline's first steps: name it, as what failed
                if pipeline_name == "none":
                    raise
                raise pipeline_error(pipeline_name, self.device, exc) from exc
            self._sync()
            dist.barrier()
            self.probe.reset()
            marks, cpu_s = [], []
            loop_start = time.perf_counter()
            for _ in range(self.spec.iterations):
                start, cpu_start = self.probe.begin_iteration(), time.thread_time()
                pipeline.progress(batches)
                marks.append((start, self.probe.now()))
                cpu_s.append(time.thread_time() - cpu_start)
            self._sync()
            measured_s = time.perf_counter() - loop_start
            self.probe.stop()
        finally:
            release(pipeline)
        return {
            "effective_fwd_precision": effective.fwd,
            "effective_bwd_precision": effective.bwd,
            "precision_note": effective.note,
            "effective_pipeline": pipeline_name,
            "compute_kernels": sw.kernels,
            "pipeline_note": CPU_NOTE if pipeline_name != "none" and self.device.type != "cuda" else "",
            "iter_s": [self._elapsed(a, b) for a, b in marks],
            "cpu_s": cpu_s,
            "cuda": self.device.type == "cuda",
            "comm": self.probe.per_iteration(),
            "a2a_calls": self.probe.a2a_calls(0),
            "quant_error": quant_error,
            "measured_s": measured_s,
        }

    def _warm_up(self, sw: ShardedWorkload, pipeline: Any, batches: Any) -> dict[str, float | None]:
        """Warmup steps; the first also captures real payloads for the quantization error."""
        slots = sw.output_slots
        slots.fwd.capture = slots.bwd.capture = True
        slots.fwd.captured = slots.bwd.captured = None
        for _ in range(max(1, self.spec.warmup)):
            pipeline.progress(batches)
            slots.fwd.capture = slots.bwd.capture = False
        quant_error = {"fwd_rel_l2": _error_of(slots.fwd), "bwd_rel_l2": _error_of(slots.bwd)}
        slots.fwd.captured = slots.bwd.captured = None
        return quant_error

    def _candidate(self, sw: ShardedWorkload, index: int, cand: CandidateSpec) -> dict[str, Any]:
        """Measure one candidate on every rank and merge the ranks' views on rank 0's side."""
        self._beat(f"candidate {index} ({cand.label()})")
        try:
            local: dict[str, Any] = {"ok": True, **self._measure(sw, cand)}
        except Exception as exc:  # a failed candidate is a result, not a crash
            local = {"ok": False, "error": f"rank {self.rank}: {type(exc).__name__}: {exc}"}
            traceback.print_exc(file=sys.stderr)
        views: list[dict[str, Any]] = [{}] * self.world_size
        dist.all_gather_object(views, local)
        return merge_rank_views(self.spec, index, cand, views, self.world_size)

    # ------------------------------------------------------------------ the launch

    def _inject_fault(self) -> None:
        """`"extra": {"inject": "hang" | "crash"}`: the last rank hangs or dies right after joining
        the process group, as a wedged or crashed peer would. For testing what runs trials."""
        fault = self.spec.extra.inject
        if fault is None or self.rank != self.world_size - 1:
            return
        print(f"trials.run: injecting fault {fault!r} on rank {self.rank}", file=sys.stderr, flush=True)
        if fault == "hang":
            while True:
                time.sleep(3600)
        if fault == "crash":
            os._exit(139)

    def run(self) -> dict[str, Any]:
        self.setup()
        self._inject_fault()
        # Every rank reports what it saw, so a launcher that exported different values is caught.
        rank_env: list[dict[str, str]] = [{}] * self.world_size
        dist.all_gather_object(rank_env, self.launch_env)
        hosts: list[str] = [""] * self.world_size
        dist.all_gather_object(hosts, socket.gethostname())

        self.header = launch_facts(self, rank_env, hosts, time.perf_counter() - self.started)
        fidelity: list[dict[str, Any]] = []
        results = self._check_quality() if self.spec.quality else self._time(fidelity)
        result = {**self.header, "nccl_effective": self._nccl_effective(),
                  "wall_s": time.perf_counter() - self.started, "candidates": results}  # fmt: skip
        if fidelity:
            result["fidelity"] = fidelity
        return result

    def stalled_result(self, message: str, how: str = "stalled") -> dict[str, Any] | None:
        """The result a stall or a failed launch leaves (stalled_result below). Called from the
        watchdog's thread while a collective hangs, or from a signal's: local work only."""
        try:
            nccl_effective = self._nccl_effective()
        except Exception:  # a log half written: the measured candidates matter more
            nccl_effective = {}
        return stalled_result(self.spec, self.header, self.results, self.current, message,
                              {"nccl_effective": nccl_effective, "wall_s": time.perf_counter() - self.started}, how)  # fmt: skip

    def _time(self, fidelity: list[dict[str, Any]]) -> list[Any]:
        """Every candidate timed, in the spec's order: paired rounds put A B B A in one launch so that a
        drifting machine cancels (autotuner/tuning/pairs.py), and grouping by sharding ran A A B B. A run
        of candidates of one sharding shares its sharded model; the engine puts a search launch's
        candidates of one sharding together (plan.by_sharding), so that re-shards once per type."""
        results = self.results
        runs = itertools.groupby(enumerate(self.spec.candidates), key=lambda ic: self.spec.sharding_of(ic[1]))
        for sharding, run in runs:
            indices = [i for i, _ in run]
            sw = self._shard(sharding, indices, results)
            if sw is None:
                continue
            for i in indices:
                self.current = i
                measured = results[i] = self._candidate(sw, i, self.spec.candidates[i])
                if self.spec.extra.fidelity and measured["status"] == "ok":
                    fidelity.append(self._replay(i, measured))
            del sw
        return results

    def _check_quality(self) -> list[Any]:
        """Every candidate trained afresh on the same samples and scored (trials.convergence)."""
        ctx = QualityContext.make(self.spec, self.device, self.pg, self.local_size)
        results = self.results
        for i, cand in enumerate(self.spec.candidates):
            self.current = i
            self._beat(f"quality candidate {i} ({cand.label()})")
            try:
                local: dict[str, Any] = {"ok": True, **train_and_score(
                    ctx, cand, self.spec.sharding_of(cand), self.spec.pipeline_of(cand))}  # fmt: skip
            except Exception as exc:
                local = {"ok": False, "error": f"rank {self.rank}: {type(exc).__name__}: {exc}"}
                traceback.print_exc(file=sys.stderr)
            views: list[dict[str, Any]] = [{}] * self.world_size
            dist.all_gather_object(views, local)
            errors = [v["error"] for v in views if not v["ok"]]
            base = failed_candidate(i, cand, self.spec, errors[0] if errors else "")
            results[i] = base if errors else {**base, "status": "ok", "error": None, "quality": views[0],
                                              "train_s": max(v["train_s"] for v in views)}  # fmt: skip
        return results

    def _shard(self, sharding: str, indices: list[int], results: list[Any]) -> ShardedWorkload | None:
        try:
            return ShardedWorkload(
                self.spec.workload, sharding, self.device, self.pg, self.local_size, self.spec.seed
            )
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            for i in indices:
                results[i] = failed_candidate(
                    i, self.spec.candidates[i], self.spec, f"sharding {sharding} failed: {exc}"
                )
            return None

    def _replay(self, index: int, measured: dict[str, Any]) -> dict[str, Any]:
        """Fidelity: the same all-to-all calls in a plain loop, right after the candidate."""
        raw = replay_calls(
            measured["a2a_calls_by_rank"][self.rank],
            self.device,
            self.spec.warmup,
            self.spec.iterations,
            self.world_size,
        )
        # the same instrument on both sides: NCCL's own events when the trial's breakdown used them (the
        # issuing stream's also count the kernel's launch and queueing, which pushed the ratio above 1)
        plain = same_instrument_algbw(raw, self.probe.nccl_timing)
        return {
            "candidate": index,
            "trial_algbw_gbps": measured["algbw_gbps"],
            "raw_algbw_gbps": plain,
            "ratio": measured["algbw_gbps"] / plain if plain else None,
            "raw": raw,
        }

    def _nccl_effective(self) -> dict[str, Any]:
        if self.backend != "nccl" or self.nccl_log is None:
            return {}
        return parse_nccl_info(
            read_log(self.nccl_log), self.launch_env, read_nccl_conf_files(self.launch_env)
        )

    def close(self) -> None:
        if dist.is_initialized():
            self.probe.uninstall()
            dist.destroy_process_group()
        self.hand_over_nccl_log()

    def hand_over_nccl_log(self) -> None:
        """NCCL's warnings into this rank's stderr (the launch log), its routed file removed (also from
        the watchdog's thread, when a collective hangs: then they say why)."""
        log, self.nccl_log = self.nccl_log, None
        hand_over(log, sys.stderr)


def _error_of(slot: Any) -> float | None:
    if slot.captured is None:
        return None
    return relative_l2_error(slot.current, slot.captured)


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu"


# Set per node by design (an emulated node's host id): reported per rank, not as a mismatch.
PER_NODE_ENV = ("NCCL_HOSTID",)


def env_report(rank_env: list[dict[str, str]]) -> dict[str, Any]:
    keys = sorted(set().union(*rank_env))
    per_node = {k: [env.get(k) for env in rank_env] for k in keys if k in PER_NODE_ENV}
    mismatch = {
        k: [env.get(k) for env in rank_env]
        for k in keys
        if k not in PER_NODE_ENV and len({env.get(k) for env in rank_env}) > 1
    }
    shared = {k: v for k, v in rank_env[0].items() if k not in PER_NODE_ENV}
    report = {"env": shared, "env_consistent": not mismatch, "env_mismatch": mismatch}
    if per_node:
        report["env_per_rank"] = per_node
    return report


def launch_facts(
    r: TrialRunner, rank_env: list[dict[str, str]], hosts: list[str], setup_s: float
) -> dict[str, Any]:
    """What the result says of the launch itself, known once every rank joined."""
    return {
        "schema_version": SCHEMA_VERSION,
        "workload": r.spec.to_dict()["workload"],
        "world_size": r.world_size,
        "local_world_size": r.local_size,
        # emulated nodes share a hostname: the agents torchrun started say how many nodes there are
        "nnodes": max(len(set(hosts)), int(os.environ.get("GROUP_WORLD_SIZE", "1"))),
        "hosts": sorted(set(hosts)),
        "backend": r.backend,
        "device": r.device.type,
        "device_name": torch.cuda.get_device_name(r.device) if r.device.type == "cuda" else _cpu_name(),
        "versions": _versions(r.backend),
        "driver_version": nvidia_driver_version(),
        **env_report(rank_env),
        "nccl_conf": read_nccl_conf_files(r.launch_env),
        # how a collective's wire time was taken (the breakdown's comm columns)
        "comm_timing": "NCCL's own start/end events on its stream"
        if r.probe.nccl_timing
        else "issue to completion (the backend's future)",
        "setup_s": setup_s,
    }


def stalled_result(
    spec: TrialSpec, header: dict[str, Any] | None, results: list[dict[str, Any] | None], current: int | None,
    message: str, rest: dict[str, Any], how: str = "stalled",
) -> dict[str, Any] | None:  # fmt: skip
    """The result a stall (`how` "stalled") or a launch that failed mid-way ("failed": a peer died, the
    launcher stopped it) leaves when some candidates were measured before: those as they are, the one
    it stopped in (`current`) and the rest failed, naming why; `rest`: the result's other facts. The
    why is under "stalled" or "launch_error". None when nothing was measured yet: the launch failed as
    a whole."""
    if header is None or all(r is None for r in results):
        return None
    at = current if current is not None and results[current] is None else None
    out = []
    for i, (measured, cand) in enumerate(zip(results, spec.candidates, strict=True)):
        why = (
            f"the launch {how} during it: {message}"
            if i == at
            else f"not measured: the launch {how} ({message})"
        )
        out.append(measured if measured is not None else failed_candidate(i, cand, spec, why))
    ok = any(r["status"] == "ok" for r in out)
    key = "stalled" if how == "stalled" else "launch_error"
    return {**header, **rest, "candidates": out, "status": "partial" if ok else "failed", key: message}


def failed_candidate(index: int, cand: CandidateSpec, spec: TrialSpec, error: str) -> dict[str, Any]:
    return {
        "index": index,
        "label": cand.label(),
        "fwd_precision": cand.fwd_precision,
        "bwd_precision": cand.bwd_precision,
        "batch_size": cand.batch_size,
        "sharding": spec.sharding_of(cand),
        "num_threads": cand.num_threads,
        "pipeline": spec.pipeline_of(cand),
        "status": "failed",
        "error": error,
    }


def merge_rank_views(
    spec: TrialSpec, index: int, cand: CandidateSpec, views: list[dict[str, Any]], world_size: int
) -> dict[str, Any]:
    """One candidate's result from every rank's measurements.

    A step is as slow as its slowest rank, so per-iteration step times take the max over ranks;
    bytes are the mean over ranks of what each rank sends (ranks can hold different tables).
    """
    errors = [v["error"] for v in views if not v["ok"]]
    if errors:
        return failed_candidate(index, cand, spec, errors[0])
    iterations = len(views[0]["iter_s"])
    iter_s = [max(v["iter_s"][i] for v in views) for i in range(iterations)]
    calls = merged_calls([v["comm"] for v in views])
    comm = comm_per_iteration(calls)
    a2a_s = [it.get("all_to_all_single", {}).get("seconds", 0.0) for it in comm]
    a2a_bytes = sum(it.get("all_to_all_single", {}).get("bytes", 0) for it in comm) / iterations
    collectives = {
        op: {
            "calls_per_iter": sum(it[op]["calls"] for it in comm) / iterations,
            "bytes_per_iter": sum(it[op]["bytes"] for it in comm) / iterations,
            "ms_median": summarize([it[op]["seconds"] for it in comm])["median"] * 1000,
        }
        for op in sorted({op for it in comm for op in it})
    }
    iter_stats = summarize(iter_s)
    a2a_stats = summarize(a2a_s)
    algbw = a2a_bytes / a2a_stats["median"] / 1e9 if a2a_stats["median"] > 0 else 0.0
    quant = {
        key: _mean_or_none([v["quant_error"][key] for v in views]) for key in ("fwd_rel_l2", "bwd_rel_l2")
    }
    cpu_s = [max(v["cpu_s"][i] for v in views) for i in range(iterations)]
    return {
        **failed_candidate(index, cand, spec, ""),
        "status": "ok",
        "error": None,
        "effective_fwd_precision": views[0]["effective_fwd_precision"],
        "effective_bwd_precision": views[0]["effective_bwd_precision"],
        "precision_note": views[0]["precision_note"],
        "effective_pipeline": views[0]["effective_pipeline"],
        "compute_kernels": views[0]["compute_kernels"],
        "pipeline_note": views[0]["pipeline_note"],
        "iterations": iterations,
        "iter_ms": _ms(iter_stats),
        "samples_per_s": cand.batch_size * world_size / iter_stats["median"],
        "a2a_ms": _ms(a2a_stats),
        "a2a_bytes_per_iter": a2a_bytes,
        "dense_allreduce_bytes": collectives.get("all_reduce", {}).get("bytes_per_iter", 0.0),
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * (world_size - 1) / world_size,
        "collectives": collectives,
        "breakdown_ms": breakdown(iter_s, cpu_s, kind_seconds(calls), cuda=views[0].get("cuda", False)),
        "quant_error": quant,
        "measured_s": max(v["measured_s"] for v in views),
        "a2a_calls_by_rank": [v["a2a_calls"] for v in views],
    }


Call = tuple[str, int, float, str]  # (op, bytes sent, seconds on the wire, kind), as the probe gives


def merged_calls(ranks: list[list[list[Call]]]) -> list[list[Call]]:
    """The ranks' call lists as one: per iteration, per call, mean bytes and min seconds.

    Every rank issues the same collectives in the same order, so call j of an iteration is the same
    collective everywhere. Its wire time is best seen by the last rank to reach it (the others also
    wait for that rank to arrive): take the min over ranks per call. Bytes: mean over ranks.
    """
    return [
        [
            (same[0][0], sum(c[1] for c in same) / len(same), min(c[2] for c in same), same[0][3])
            for same in zip(*calls_by_rank, strict=True)
        ]
        for calls_by_rank in zip(*ranks, strict=True)
    ]


def comm_per_iteration(calls: list[list[Call]]) -> list[dict[str, dict[str, float]]]:
    """Per iteration {op: bytes, calls, seconds} of merged calls."""
    merged = []
    for iteration in calls:
        per_op: dict[str, dict[str, float]] = {}
        for op, nbytes, seconds, _ in iteration:
            row = per_op.setdefault(op, {"bytes": 0.0, "calls": 0, "seconds": 0.0})
            row["bytes"] += nbytes
            row["calls"] += 1
            row["seconds"] += seconds
        merged.append(per_op)
    return merged


def kind_seconds(calls: list[list[Call]]) -> list[dict[str, float]]:
    """Per iteration, seconds on the wire of each kind of comm (input dist, sparse, dense)."""
    out = []
    for iteration in calls:
        seconds = dict.fromkeys(COMM_KINDS, 0.0)
        for _, _, wire_s, kind in iteration:
            seconds[kind] += wire_s
        out.append(seconds)
    return out


def breakdown(
    step_s: list[float], compute_s: list[float], comm_s: list[dict[str, float]], *, cuda: bool
) -> dict[str, float]:
    """Where a step's time goes (median per step, ms): each kind of comm, compute, exposed comm.

    On CPU, compute is the training thread's CPU time (the slowest rank's): the rest of the step it
    spent waiting, on comm or on the cores the comm threads held. That rest is `exposed_comm`. On
    CUDA the thread only launches kernels: comm is taken as exposed (an upper bound) and compute is
    what is left of the step. Exposed comm is the median step less the median compute, so that the two
    stack up to the step the throughput is measured by: the median of each step's rest did not (on a
    busy machine 10.4 ms against a 12.3 ms step). Compute is at most the step in every step, so its
    median is at most the step's, and the rest is never negative.
    """
    compute = [max(0.0, step - sum(comm.values())) if cuda else min(cpu, step)
               for step, cpu, comm in zip(step_s, compute_s, comm_s, strict=True)]  # fmt: skip
    out = {kind: summarize([c[kind] for c in comm_s])["median"] * 1000 for kind in COMM_KINDS}
    out["compute"] = summarize(compute)["median"] * 1000
    out["exposed_comm"] = max(0.0, summarize(step_s)["median"] * 1000 - out["compute"])
    return out


def _mean_or_none(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _ms(stats: dict[str, float]) -> dict[str, float]:
    return {k: (v * 1000 if k not in ("cv", "n") else v) for k, v in stats.items()}
