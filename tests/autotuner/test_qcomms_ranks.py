"""Every rank of a job adopts the same tuned config, or none (autotuner.job.qcomms): the hook runs per
node and fails open on each alone, so two nodes can be handed different configs (a cached v3 and
nothing, v3 and v4 across a publish), and mixed comm precision or batch hangs TorchRec's all-to-all.
Real ranks: torchrun, 2 processes on gloo, each with its own environment."""

from __future__ import annotations

import json
from dataclasses import astuple
from types import SimpleNamespace

import pytest

from autotuner.job import qcomms
from autotuner.job.qcomms import Tuned
from tests.helpers import REPO, run_ranks

RANK = REPO / "tests" / "autotuner" / "qcomms_ranks.py"
DEADLINE_S = 120  # torchrun and two torch imports take seconds on 2 CPU cores; gloo's own timeout is 30 s
V3 = {"AUTOTUNER_CONFIG": "c/w/2n/v3", "AUTOTUNER_FWD_PRECISION": "fp16", "AUTOTUNER_BWD_PRECISION": "fp16",
      "AUTOTUNER_BATCH_SIZE": "2048", "AUTOTUNER_LR_SCALE": "2"}  # fmt: skip
V4 = {**V3, "AUTOTUNER_CONFIG": "c/w/2n/v4", "AUTOTUNER_FWD_PRECISION": "fp8"}
CASES = {
    "same": [V3, V3],
    "cached v3 on one node, nothing on the other": [V3, {}],
    "v3 and v4 across a publish": [V3, V4],
    "one label, a value ignored on one node": [V3, {**V3, "AUTOTUNER_BATCH_SIZE": "abc"}],
}
ADOPTED_V3 = Tuned(
    fwd_precision="fp16", bwd_precision="fp16", batch_size=2048, config="c/w/2n/v3", lr_scale=2.0
)


@pytest.fixture(scope="module")
def ranks(torchrun) -> tuple[dict[tuple[int, int], dict], str]:
    """One torchrun launch of every case: ({(case, rank): what it printed}, both ranks' stderr)."""
    cmd = [*torchrun, "--standalone", "--nproc-per-node", "2", str(RANK), json.dumps(list(CASES.values()))]
    out, err = run_ranks(cmd, DEADLINE_S, "the ranks (a rank left waiting on one that never read?)")
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {(line["case"], line["rank"]): line for line in lines}, err


def adopted(ranks, case: str) -> list[Tuned]:
    found, _ = ranks
    index = list(CASES).index(case)
    reads = [found[index, rank] for rank in (0, 1)]
    # later reads adopt what the first agreed on, whatever the environment says by then
    assert all(read["again"] == read["later"] == read["tuned"] for read in reads), reads
    return [Tuned(**read["tuned"]) for read in reads]


@pytest.mark.slow
def test_ranks_handed_the_same_config_both_adopt_it(ranks):
    assert adopted(ranks, "same") == [ADOPTED_V3, ADOPTED_V3]


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c in CASES if c != "same"])
def test_ranks_handed_different_configs_all_keep_the_jobs_own(ranks, case):
    assert adopted(ranks, case) == [Tuned(), Tuned()]


@pytest.mark.slow
def test_each_rank_says_once_which_labels_it_saw(ranks):
    _, err = ranks
    said = [line for line in err.splitlines() if "the ranks were handed different tuned configs" in line]
    assert (
        said.count(
            "nccl-autotuner: the ranks were handed different tuned configs (c/w/2n/v3 on rank 0; none on rank 1, the "
            "first seen to differ): "
            "every rank keeps the job's own settings (the NCCL variables the hook exported stay as each node "
            "got them)"
        )
        == 2
    ), err[-4000:]
    assert (
        sum("(c/w/2n/v3 on rank 0; c/w/2n/v4 on rank 1, the first seen to differ)" in line for line in said)
        == 2
    )
    # one label read two ways: the values tell them apart
    assert (
        sum(
            "c/w/2n/v3 as fwd_precision=fp16, bwd_precision=fp16, batch_size=2048, lr_scale=2.0 on rank 0; "
            "c/w/2n/v3 as fwd_precision=fp16, bwd_precision=fp16 on rank 1" in line
            for line in said
        )
        == 2
    )
    assert len(said) == 6, said  # three cases, one line a rank each
    # rank 1's third read of the first case, from another environment: said, not adopted
    assert (
        "nccl-autotuner: AUTOTUNER_* now read as no config, after the ranks agreed on c/w/2n/v3: keeping what they agreed on"
        in err.splitlines()
    )


def test_the_warning_names_ranks_in_spans_and_caps_the_configs_it_lists():
    seen = [(f"c/w/2n/v{rank // 3}", ()) for rank in range(30)] + [(None, ())] * 2
    text = qcomms._labels(list(enumerate(seen)))
    assert text.startswith("c/w/2n/v0 on ranks 0-2; c/w/2n/v1 on ranks 3-5; ")
    assert text.endswith("; and 3 more")  # 11 configs, 8 named
    assert qcomms._spans([0, 1, 2, 5, 7, 8]) == "0-2, 5, 7-8"


@pytest.mark.slow
def test_a_rank_that_reads_the_config_alone_keeps_the_jobs_own_instead_of_hanging_and_so_do_the_rest(ranks):
    """Rank 0 reads it before a barrier the others wait in: it waits, gives up, and its decision stands
    for the rank that reads it after the barrier (which adopted the config while rank 0 did not)."""
    found, err = ranks
    assert Tuned(**found["alone", 0]["tuned"]) == Tuned()
    assert Tuned(**found["alone", 1]["tuned"]) == Tuned()
    assert "could not check that every rank adopts the same tuned config" in err


class Store:
    """The c10d store's operations that qcomms uses, in a dict (a wait on a missing key times out)."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def set(self, key, value):
        self.data[key] = value.encode()

    def get(self, key):
        return self.data[key]

    def wait(self, keys, timeout):
        if any(key not in self.data for key in keys):
            raise RuntimeError(f"wait timeout after {timeout}, keys: {keys}")

    def add(self, key, n):
        self.data[key] = str(int(self.data.get(key, b"0")) + n).encode()
        return int(self.data[key])

    def compare_set(self, key, expected, desired):
        if key not in self.data and expected == "":
            self.data[key] = desired.encode()
        return self.data[key]


def test_a_restarted_job_never_reads_the_decision_of_the_attempt_before(monkeypatch):
    """torchrun keeps one store across restarts: an attempt's keys carry its restart count. Attempt 0
    agreed on v3; in attempt 1 rank 1 comes back first, handed nothing: read against attempt 0's keys,
    it kept nothing while rank 0 adopted v3 under attempt 0's "agree"."""
    store = Store()
    before = "nccl-autotuner/job-1/0/1/"  # run id, restart count, round
    v3 = qcomms.tuned(V3, strict=True)
    store.set(before + "reference", json.dumps([v3.config, list(astuple(v3))]))
    store.set(before + "matched", "2")
    store.set(before + "decision", json.dumps(["agree"]))
    world = {"rank": 1}
    dist = SimpleNamespace(distributed_c10d=SimpleNamespace(_get_default_store=lambda: store),
                           get_rank=lambda: world["rank"], get_world_size=lambda: 2)  # fmt: skip
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-1")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    monkeypatch.setattr(qcomms, "_round", 0)
    assert qcomms._compared(Tuned(), dist) == Tuned()
    world["rank"] = 0
    monkeypatch.setattr(qcomms, "_round", 0)
    assert qcomms._compared(v3, dist) == Tuned()  # the decision of attempt 1 stands for rank 0 too


def test_a_decision_this_version_cannot_word_still_leaves_the_job_its_own_settings(monkeypatch):
    """Written by another version of this module (one more field in a rank's values): the words fail,
    the job does not."""
    store = Store()
    odd = ["differ", 1, ["c/w/2n/v3", ["fp16"] * 10], ["c/w/2n/v3", ["fp16"] * 9]]
    store.set("nccl-autotuner///1/decision", json.dumps(odd))
    store.set("nccl-autotuner///1/reference", json.dumps(["c/w/2n/v3", ["fp16"] * 9]))
    dist = SimpleNamespace(distributed_c10d=SimpleNamespace(_get_default_store=lambda: store),
                           get_rank=lambda: 1, get_world_size=lambda: 2)  # fmt: skip
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)
    monkeypatch.setattr(qcomms, "_round", 0)
    assert qcomms._compared(qcomms.tuned(V3, strict=True), dist) == Tuned()  # was: TypeError out of tuned()
