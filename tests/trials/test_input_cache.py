"""A launch keeps each batch size's inputs for reuse, but never more of them at once than one batch
size may hold (trials.spec.MAX_INPUT_BYTES): an audit saw 24 batch sizes in one launch exhaust memory and
kill a rank with no result written, where one candidate needs a few hundred MiB."""

from __future__ import annotations

from tests.helpers import TINY_SPEC
from trials import runner
from trials.spec import parse_spec


def test_inputs_of_other_batch_sizes_are_let_go_oldest_first(monkeypatch):
    spec = parse_spec(TINY_SPEC)
    made = []
    monkeypatch.setattr(
        runner, "make_batches", lambda workload, batch, n, seed, device: made.append(batch) or [batch]
    )
    # room for batch sizes that add up to 100 samples at once
    monkeypatch.setattr(runner, "MAX_INPUT_BYTES", spec.input_bytes(100))
    trial = runner.TrialRunner.__new__(runner.TrialRunner)
    trial.spec, trial.rank, trial.device, trial._batches = spec, 0, "cpu", {}
    for batch in (32, 64, 32, 64, 96, 64):
        assert trial._inputs(batch) == [batch]
    # 32 and 64 fit together and are reused; 96 lets both go; 64 then lets 96 go
    assert made == [32, 64, 96, 64]
    assert list(trial._batches) == [64]
