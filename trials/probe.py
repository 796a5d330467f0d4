"""Time and size every collective a training step issues, without changing what it issues.

TorchRec calls `torch.distributed.<collective>` through the module attribute, so wrapping those
attributes sees every all-to-all of the sparse input dist and the pooled-embedding output dist,
forward and backward, and DDP's gradient all-reduce (issued from Python by the standard
`allreduce_hook` the trial registers). A call is timed from issue to completion, never to the
`wait()`: TorchRec issues an all-to-all, runs other work, and waits later (under `sparse_dist` the
ids of batch i+1 are waited on in step i+1), and that work is not time on the wire. The end is
stamped through the work's future: on CPU its callback runs on gloo's thread when the backend
finishes (a perf_counter); on CUDA (NCCL) the callback runs at once on a stream made to wait for the
collective's own events, so an event recorded there completes when the collective does on the device.
On NCCL the start is the one NCCL records on its own stream (TORCH_NCCL_ENABLE_TIMING, which the trial
sets): a collective queued behind another one, or behind the issuing stream's kernels, is not on the wire.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

# Collectives a step uses -> the send buffer's keyword; positional 1, but where _SEND_POS says.
_SEND_ARG = {
    "all_to_all_single": "input",
    "reduce_scatter_tensor": "input",
    "reduce_scatter": "input_list",
    "all_gather_into_tensor": "input_tensor",
    "all_gather": "tensor",
    "all_reduce": "tensor",
}
_SEND_POS = {"all_reduce": 0}
# Where a call's time goes in a step's breakdown. The input dist moves ids and lengths (integers);
# the pooled embeddings move floats, or the bytes of a quantized codec; DDP all-reduces gradients.
INPUT_DIST, SPARSE_COMM, DENSE_COMM = "input_dist", "sparse_comm", "dense_comm"
COMM_KINDS = (INPUT_DIST, SPARSE_COMM, DENSE_COMM)
_INTEGER_DTYPES = ("int32", "int64")


def comm_kind(op: str, dtype: str) -> str:
    if op == "all_reduce":
        return DENSE_COMM
    if op == "all_to_all_single" and dtype in _INTEGER_DTYPES:
        return INPUT_DIST
    return SPARSE_COMM


def _dtype(obj: Any) -> str:
    if isinstance(obj, (list, tuple)):
        return _dtype(obj[0]) if obj else ""
    return str(obj.dtype).removeprefix("torch.") if isinstance(obj, torch.Tensor) else ""


def _nbytes(obj: Any) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(t) for t in obj)
    return 0


@dataclass
class CommEvent:
    op: str
    nbytes: int
    # CPU: perf_counter seconds; CUDA: torch.cuda.Event. `end` stays None until the work completes
    # (or, for a backend without futures, until wait() returns).
    start: Any
    end: Any = None
    dtype: str = ""
    # all_to_all_single only: what a plain loop needs to replay the call exactly.
    out_numel: int = 0
    in_splits: list[int] | None = None
    out_splits: list[int] | None = None
    # NCCL with TORCH_NCCL_ENABLE_TIMING: the work, until its own start/end events on NCCL's stream
    # are read (after the loop's synchronize), and the seconds between them.
    work: Any = None
    device_s: float | None = None

    def interval(self, marker: Any) -> tuple[float, float] | None:
        """(start, end) in seconds after `marker` (the iteration's start), or None if never waited.

        Where NCCL timed the collective on its own stream, the start is its kernel's, not the issuing
        stream's: queued behind other collectives or the issuing stream's work is not time on the wire."""
        if self.end is None:
            return None
        if isinstance(self.start, float):
            return self.start - marker, self.end - marker
        end = marker.elapsed_time(self.end) / 1000.0
        if self.device_s is not None:
            return end - self.device_s, end
        return marker.elapsed_time(self.start) / 1000.0, end

    def read_device_time(self) -> None:
        """NCCL's own duration of the collective, once it completed."""
        if self.work is None:
            return
        self.device_s = nccl_seconds(self.work)
        self.work = None


def nccl_seconds(work: Any) -> float | None:
    """Seconds between the start and end events NCCL recorded on its own stream for a completed `work`
    (Work._get_duration, ms); None without them (timing off, gloo, or an older torch)."""
    try:
        return float(work._get_duration()) / 1000.0
    except (RuntimeError, AttributeError, ValueError):
        return None


def serialized(intervals: list[tuple[float, float]]) -> list[float]:
    """Durations of collectives that one process group runs in issue order.

    TorchRec issues several all-to-alls before waiting on any (lengths, values, ...). They share
    one queue, so a call cannot start moving bytes before the one issued ahead of it is done:
    clip each start to the previous end, or the same wall time is counted more than once.
    """
    durations, reach = [], float("-inf")
    for start, end in intervals:
        begin = max(start, reach)
        durations.append(max(0.0, end - begin))
        reach = max(reach, end)
    return durations


class _TimedWork(dist.Work):
    """Stands in for the dist.Work an async collective returns; stamps the event's end when the
    work completes (its future), falling back to the return of wait() where there is no future.

    A real dist.Work subclass, because TorchRec checks `isinstance(req, dist.Work)` before waiting.
    """

    def __init__(self, work: Any, probe: CommProbe, event: CommEvent) -> None:
        super().__init__()
        self._work = work
        self._probe = probe
        self._event = event
        if probe.nccl_timing:
            event.work = work
        self._stamp_completion()

    def _stamp_completion(self) -> None:
        try:
            future = self._work.get_future()
            if self._probe.cuda:
                # NCCL's future is marked complete at enqueue with events on its stream: `then` runs
                # the callback now, on a stream that waits for them, so the event it records there
                # completes with the collective on the device.
                future.then(self._stamp)
            else:
                future.add_done_callback(self._stamp)
        except RuntimeError:  # a backend without futures: fall back to the return of wait()
            pass

    def _stamp(self, _: Any) -> None:
        if self._event.end is None:
            self._event.end = self._probe.now()

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        out = self._work.wait(*args, **kwargs)
        if self._event.end is None:
            self._event.end = self._probe.now()
        return out

    def is_completed(self) -> bool:
        return self._work.is_completed()

    def get_future(self) -> Any:
        return self._work.get_future()  # completion is stamped already (DDP waits on the future)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


@dataclass
class CommProbe:
    """Records CommEvents into per-iteration buckets while installed."""

    cuda: bool = False
    # NCCL records start/end events on its own stream (TORCH_NCCL_ENABLE_TIMING=1 at process-group creation)
    nccl_timing: bool = False
    on_call: Any = None  # called on every collective issued, recording or not (the trial's watchdog)
    iterations: list[list[CommEvent]] = field(default_factory=list)
    markers: list[Any] = field(default_factory=list)
    _originals: dict[str, Any] = field(default_factory=dict)
    recording: bool = False

    def now(self) -> Any:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def install(self) -> None:
        for name in _SEND_ARG:
            original = getattr(dist, name)
            self._originals[name] = original
            setattr(dist, name, self._wrap(name, original))

    def uninstall(self) -> None:
        for name, original in self._originals.items():
            setattr(dist, name, original)
        self._originals.clear()

    def begin_iteration(self) -> Any:
        """Open a new bucket; returns its start marker (also usable as the iteration's start)."""
        marker = self.now()
        self.markers.append(marker)
        self.iterations.append([])
        self.recording = True
        return marker

    def stop(self) -> None:
        self.recording = False

    def reset(self) -> None:
        self.iterations, self.markers = [], []
        self.recording = False

    def _wrap(self, name: str, original: Any) -> Any:
        send_arg = _SEND_ARG[name]

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self.on_call is not None:
                self.on_call()
            if not self.recording:
                return original(*args, **kwargs)
            pos = _SEND_POS.get(name, 1)
            send = kwargs.get(send_arg, args[pos] if len(args) > pos else None)
            event = CommEvent(op=name, nbytes=_nbytes(send), start=None, dtype=_dtype(send))
            if name == "all_to_all_single":
                _describe_a2a(event, args, kwargs)
            event.start = self.now()
            self.iterations[-1].append(event)
            work = original(*args, **kwargs)
            if kwargs.get("async_op", False) and work is not None:
                return _TimedWork(work, self, event)
            event.end = self.now()
            return work

        return timed

    def per_iteration(self) -> list[list[tuple[str, int, float, str]]]:
        """Per iteration, the calls in issue order as (op, bytes sent, seconds on the wire, kind).

        Synchronize CUDA before calling. A call never waited on counts 0 seconds.
        """
        out = []
        for marker, events in zip(self.markers, self.iterations, strict=True):
            for e in events:
                e.read_device_time()
            spans = [e.interval(marker) for e in events]
            waited = [iv for iv in spans if iv is not None]
            durations = iter(serialized(waited))
            out.append(
                [
                    (e.op, e.nbytes, next(durations) if iv is not None else 0.0, comm_kind(e.op, e.dtype))
                    for e, iv in zip(events, spans, strict=True)
                ]
            )
        return out

    def a2a_calls(self, iteration: int = 0) -> list[dict[str, Any]]:
        """The all-to-all calls of one iteration, as plain_a2a replays them."""
        if not self.iterations:
            return []
        return [
            {
                "dtype": e.dtype,
                "in_numel": e.nbytes // torch.empty(0, dtype=getattr(torch, e.dtype)).element_size(),
                "out_numel": e.out_numel,
                "in_splits": e.in_splits,
                "out_splits": e.out_splits,
            }
            for e in self.iterations[iteration]
            if e.op == "all_to_all_single"
        ]


def _describe_a2a(event: CommEvent, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    def arg(name: str, pos: int) -> Any:
        return kwargs.get(name, args[pos] if len(args) > pos else None)

    output = arg("output", 0)
    out_splits, in_splits = arg("output_split_sizes", 2), arg("input_split_sizes", 3)
    event.out_numel = output.numel()
    event.out_splits = None if out_splits is None else [int(x) for x in out_splits]
    event.in_splits = None if in_splits is None else [int(x) for x in in_splits]
