"""Sorting trials by "Q-err" follows the value the trials table shows: the larger of the forward and
backward codec errors (it sorted on the forward one alone), rows with neither last, on every backend."""

from __future__ import annotations

import pytest

from autotuner.store import Store

WORKLOAD = {
    "name": "w",
    "tables": [{"name": "t", "num_embeddings": 10, "embedding_dim": 32, "pooling_factor": 1}],
}
# id order: fwd, bwd  ->  shown (max): 0.05, 0.30, 0.10, none, 0.20
ERRORS = [(0.05, 0.01), (0.01, 0.30), (0.10, None), (None, None), (None, 0.20)]


def planted(store: Store) -> tuple[int, list[int]]:
    """A done study (the service's scheduler leaves it alone) whose trials carry ERRORS."""
    study = store.create_study(name="q", cluster="c", workload_name="w", workload_spec=WORKLOAD,
                               space={"env": {}}, settings={"trials": 1}, state="done")  # fmt: skip
    launch = store.add_launch(study_id=study.id, kind="search", env={}, spec={"candidates": []},
                              executor="local")  # fmt: skip
    rows = store.add_candidates([
        dict(study_id=study.id, launch_id=launch.id, index=i, kind="search", env={}, fwd_precision="fp8",
             bwd_precision="fp8", batch_size=64, sharding="table_wise", state="ok", samples_per_s=1.0,
             quant_error_fwd=fwd, quant_error_bwd=bwd)
        for i, (fwd, bwd) in enumerate(ERRORS)
    ])  # fmt: skip
    return study.id, [r.id for r in rows]


@pytest.mark.parametrize("descending", [False, True])
def test_quant_error_sorts_on_the_larger_of_the_two_errors_nulls_last(store, descending):
    study_id, ids = planted(store)
    rows = store.candidates(study_id, order_by="quant_error", descending=descending)
    shown = [
        max((e for e in (r.quant_error_fwd, r.quant_error_bwd) if e is not None), default=None) for r in rows
    ]
    measured = [0.05, 0.10, 0.20, 0.30]
    assert shown == [*(measured[::-1] if descending else measured), None]
    assert rows[-1].id == ids[3]


def test_the_trials_route_sorts_q_err_as_shown(module_server):
    srv = module_server
    store = Store(f"sqlite:///{srv.data_dir / 'autotuner.db'}")
    try:
        study_id, ids = planted(store)
    finally:
        store.dispose()
    page = srv.client("read").get(f"/v1/studies/{study_id}/trials?sort=quant_error&order=desc")
    assert page.status_code == 200, page.text
    assert [t["id"] for t in page.json()["data"]] == [ids[1], ids[4], ids[2], ids[0], ids[3]]
