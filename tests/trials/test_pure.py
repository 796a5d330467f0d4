"""The pure-Python parts of the trial: statistics, NCCL log parsing, merging ranks' views."""

import pytest

from trials.nccl_log import parse_nccl_info
from trials.percentiles import percentile, summarize
from trials.probe import comm_kind, serialized
from trials.runner import breakdown, comm_per_iteration, env_report, kind_seconds, merged_calls


def test_summarize_matches_numpy_definitions():
    stats = summarize([4.0, 1.0, 3.0, 2.0, 10.0])
    assert stats["median"] == 3.0
    assert stats["p10"] == pytest.approx(1.4)
    assert stats["p90"] == pytest.approx(7.6)
    assert stats["mean"] == 4.0
    assert stats["cv"] == pytest.approx(3.5355339 / 4.0)
    assert summarize([5.0])["cv"] == 0.0
    assert stats["n"] == 5
    assert (stats["min"], stats["max"]) == (1.0, 10.0)
    assert percentile([4.0, 1.0, 3.0], 25) == 2.0  # unsorted input is fine
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    with pytest.raises(ValueError, match="no values"):
        summarize([])


def test_overlapping_collectives_are_not_double_counted():
    # Three calls issued together at t=0 and waited at 1.0, 1.1 and 3.0; then one alone.
    assert serialized([(0.0, 1.0), (0.0, 1.1), (0.0, 3.0), (4.0, 4.5)]) == pytest.approx([1.0, 0.1, 1.9, 0.5])


def test_merge_takes_min_wire_time_per_call_and_mean_bytes():
    rank0 = [
        [("all_to_all_single", 100, 0.010, "input_dist"), ("all_to_all_single", 400, 0.002, "sparse_comm")]
    ]
    rank1 = [
        [("all_to_all_single", 300, 0.001, "input_dist"), ("all_to_all_single", 400, 0.030, "sparse_comm")]
    ]
    calls = merged_calls([rank0, rank1])
    merged = comm_per_iteration(calls)
    assert merged == [{"all_to_all_single": {"bytes": 600.0, "calls": 2, "seconds": pytest.approx(0.003)}}]
    assert kind_seconds(calls) == [
        {"input_dist": pytest.approx(0.001), "sparse_comm": pytest.approx(0.002), "dense_comm": 0.0}
    ]


def test_comm_kinds_follow_what_a_call_moves():
    assert comm_kind("all_to_all_single", "int64") == "input_dist"  # ids and lengths of the input dist
    assert comm_kind("all_to_all_single", "int32") == "input_dist"
    assert comm_kind("all_to_all_single", "float32") == "sparse_comm"  # pooled embeddings
    assert comm_kind("all_to_all_single", "uint8") == "sparse_comm"  # ... through an int8 / fp8 codec
    assert comm_kind("reduce_scatter_tensor", "float16") == "sparse_comm"
    assert comm_kind("all_reduce", "float32") == "dense_comm"  # DDP's gradients


def test_breakdown_splits_each_step_into_compute_and_exposed_comm():
    steps = [0.010, 0.012, 0.011]
    cpu = [0.007, 0.008, 0.020]  # a thread cannot compute longer than its step: capped
    comm = [{"input_dist": 0.001, "sparse_comm": 0.002, "dense_comm": 0.001}] * 3
    cpu_view = breakdown(steps, cpu, comm, cuda=False)
    assert cpu_view["compute"] == pytest.approx(8.0)
    assert cpu_view["exposed_comm"] == pytest.approx(3.0)
    assert cpu_view["sparse_comm"] == pytest.approx(2.0)
    assert cpu_view["dense_comm"] == pytest.approx(1.0)
    # On CUDA the launching thread says nothing of the GPU's compute: comm counts as exposed.
    cuda_view = breakdown(steps, cpu, comm, cuda=True)
    assert cuda_view["exposed_comm"] == pytest.approx(4.0)
    assert cuda_view["compute"] == pytest.approx(7.0)


def test_compute_and_exposed_comm_stack_up_to_the_median_step():
    """The stacked bar is the step the throughput is measured by. The medians of each step's compute and
    of each step's rest (9 + 1 ms here) fell short of the median step (12 ms) when steps varied."""
    steps, cpu = [0.010, 0.012, 0.030], [0.009, 0.003, 0.029]
    comm = [{"input_dist": 0.001, "sparse_comm": 0.002, "dense_comm": 0.001}] * 3
    for cuda in (False, True):
        view = breakdown(steps, cpu, comm, cuda=cuda)
        assert view["compute"] + view["exposed_comm"] == pytest.approx(12.0)
        assert view["exposed_comm"] >= 0
    assert breakdown(steps, cpu, comm, cuda=False)["compute"] == pytest.approx(9.0)


def test_env_report_flags_ranks_that_disagree():
    same = env_report([{"NCCL_BUFFSIZE": "1"}, {"NCCL_BUFFSIZE": "1"}])
    assert same["env_consistent"]
    assert same["env"] == {"NCCL_BUFFSIZE": "1"}
    diff = env_report([{"NCCL_BUFFSIZE": "1"}, {"NCCL_BUFFSIZE": "2", "FI_PROVIDER": "efa"}])
    assert not diff["env_consistent"]
    assert diff["env_mismatch"] == {"FI_PROVIDER": [None, "efa"], "NCCL_BUFFSIZE": ["1", "2"]}


NCCL_LINES = """\
node1:12:12 [0] NCCL INFO NCCL_NSOCKS_PERTHREAD set by environment to 4.
node1:12:12 [0] NCCL INFO NCCL_SOCKET_NTHREADS set by environment to 2.
node1:12:12 [0] NCCL INFO NET/Socket : Using 2 threads and 4 sockets per thread
node1:12:12 [0] NCCL INFO Using network Socket
node1:12:12 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
node1:12:40 [0] NCCL INFO comm 0x55d rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0
node1:12:40 [0] NCCL INFO 2 coll channels, 2 collnet channels, 0 nvls channels, 2 p2p channels, 2 p2p channels per peer
node1:12:40 [0] NCCL INFO P2P Chunksize set to 131072
node1:12:40 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 4 nics)
some unrelated line
"""


def test_parse_nccl_info_extracts_what_took_effect():
    found = parse_nccl_info(NCCL_LINES.splitlines())
    assert found["set_by_environment"] == {"NCCL_NSOCKS_PERTHREAD": "4", "NCCL_SOCKET_NTHREADS": "2"}
    assert (found["socket_nthreads"], found["socket_nsocks_perthread"]) == (2, 4)
    assert found["network"] == "Socket"
    assert found["nccl_version"] == "2.21.5+cuda12.4"
    assert (found["nranks"], found["nnodes"], found["local_ranks"]) == (16, 2, 8)
    assert (found["coll_channels"], found["p2p_channels"], found["p2p_channels_per_peer"]) == (2, 2, 2)
    assert found["p2p_chunksize"] == 131072
    assert found["ofi_provider"] == "efa"
    assert parse_nccl_info(["no nccl here"]) == {}


class _LateWork:
    """A collective whose backend finishes it before the step gets around to waiting on it."""

    def __init__(self) -> None:
        import torch

        self.future = torch.futures.Future()

    def get_future(self):
        return self.future

    def wait(self, *args, **kwargs):
        return True


def test_cpu_collective_ends_when_the_backend_finishes_it_not_when_the_step_waits():
    import time

    from trials.probe import CommEvent, CommProbe, _TimedWork

    work, event = _LateWork(), CommEvent(op="all_to_all_single", nbytes=8, start=time.perf_counter())
    timed = _TimedWork(work, CommProbe(cuda=False), event)
    work.future.set_result(None)  # the backend is done here ...
    finished = time.perf_counter()
    time.sleep(0.05)  # ... while the step computes something else
    timed.wait()
    assert event.start <= event.end <= finished


class _Clock:
    """Stands in for CUDA events: each stamp is the next tick."""

    def __init__(self) -> None:
        self.tick = 0

    def __call__(self) -> int:
        self.tick += 1
        return self.tick


def test_cuda_collective_is_stamped_when_its_work_completes_not_when_a_later_step_waits():
    from trials.probe import CommEvent, CommProbe, _TimedWork

    probe = CommProbe(cuda=True)
    probe.now = _Clock()  # type: ignore[method-assign]
    work, event = _LateWork(), CommEvent(op="all_to_all_single", nbytes=8, start=probe.now())
    timed = _TimedWork(work, probe, event)
    assert event.end is None  # issued, not done
    work.future.set_result(None)  # the collective completes on the device: tick 2 ...
    done_at = event.end
    probe.now(), probe.now()  # ... the step computes (ticks 3, 4), the next step waits on it
    timed.wait()
    assert done_at == 2
    assert event.end == 2
    # DDP waits on the future: it gets the work's own, already stamped
    assert timed.get_future() is work.future


class _At:
    """A CUDA event stand-in recorded at time `t` (seconds)."""

    def __init__(self, t: float) -> None:
        self.t = t

    def elapsed_time(self, other: "_At") -> float:
        return (other.t - self.t) * 1000.0


class _TimedByNccl(_LateWork):
    def _get_duration(self) -> float:
        return 500.0  # ms between NCCL's own start and end events on its stream


@pytest.mark.parametrize(("nccl_timing", "wire_s"), [(True, 0.5), (False, 4.0)])
def test_with_nccl_timing_a_collective_starts_when_ncclstream_runs_it_not_when_it_was_issued(
    nccl_timing, wire_s
):
    from trials.probe import CommProbe

    probe = CommProbe(cuda=True, nccl_timing=nccl_timing)
    clock = iter([_At(0.0), _At(1.0), _At(5.0)])  # iteration start, issue, completion
    probe.now = lambda: next(clock)  # type: ignore[method-assign]
    work = _TimedByNccl()
    probe.begin_iteration()
    timed = probe._wrap("all_to_all_single", lambda *a, **k: work)
    handle = timed(_tensor(4), _tensor(4), async_op=True)
    work.future.set_result(None)  # done on the device at t=5
    handle.wait()
    event = probe.iterations[0][0]
    ((_, _, seconds, _),) = probe.per_iteration()[0]
    assert seconds == pytest.approx(wire_s)  # NCCL's kernel ran 0.5 s of the 4 s since the issue
    assert event.work is None  # NCCL's events read once, the work released


def _tensor(n: int):
    import torch

    return torch.zeros(n)


def test_a_replay_is_read_as_the_trial_reads_it_with_nccls_events_where_every_call_has_them():
    from bench.gpu_check import alone_figures
    from trials.plain_a2a import wire_figures

    # rank -> iteration -> call: (seconds on the issuing stream, seconds by NCCL's own events)
    rank0 = [[(0.004, 0.001), (0.002, 0.0015)], [(0.003, 0.001), (0.002, 0.001)]]
    rank1 = [[(0.001, 0.0005), (0.005, 0.002)], [(0.002, 0.002), (0.001, 0.001)]]
    raw = wire_figures([rank0, rank1], mean_bytes=3e6)
    # per call, the last rank to arrive: min over ranks, summed over the iteration's calls
    assert raw["ms"]["n"] == 2
    assert raw["ms"]["median"] == pytest.approx((0.003 + 0.003) / 2 * 1000)
    assert raw["nccl_ms"]["median"] == pytest.approx((0.002 + 0.002) / 2 * 1000)
    assert raw["algbw_gbps"] == pytest.approx(3e6 / 0.003 / 1e9)
    assert raw["busbw_gbps"] == pytest.approx(raw["algbw_gbps"] / 2)
    same = alone_figures(raw, wire_ms=3.0)
    assert (same["a2a_alone_ms"], same["alone_timing"]) == (pytest.approx(2.0), "NCCL's own events")
    assert same["wire_vs_alone"] == pytest.approx(1.5)
    assert same["a2a_alone_stream_ms"] == pytest.approx(3.0)
    rank1[1][0] = (0.002, None)  # one call without NCCL's events (gloo, timing off): the stream's alone
    partial = wire_figures([rank0, rank1], mean_bytes=3e6)
    assert "nccl_ms" not in partial
    assert alone_figures(partial, wire_ms=3.0)["alone_timing"] == "the issuing stream's events"


def test_the_fidelity_ratio_reads_the_plain_loop_with_the_trials_own_instrument():
    from trials.plain_a2a import same_instrument_algbw, wire_figures

    rank0 = [[(0.004, 0.001)], [(0.004, 0.001)]]
    rank1 = [[(0.004, 0.001)], [(0.004, 0.001)]]
    raw = wire_figures([rank0, rank1], mean_bytes=4e6)
    # NCCL's events on the trial's side: the loop's events too (1 ms, not the stream's 4 ms with the
    # kernel's launch and queueing: a ratio 4x too high)
    assert same_instrument_algbw(raw, nccl_timing=True) == pytest.approx(4e6 / 0.001 / 1e9)
    assert same_instrument_algbw(raw, nccl_timing=False) == pytest.approx(raw["algbw_gbps"])
    rank1[1][0] = (0.004, None)  # the loop lacks them on a call: the stream's, as before
    assert same_instrument_algbw(wire_figures([rank0, rank1], mean_bytes=4e6), nccl_timing=True) == (
        pytest.approx(4e6 / 0.004 / 1e9)
    )
