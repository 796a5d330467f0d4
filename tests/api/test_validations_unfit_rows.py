"""A stored re-validation, job report or served version that does not fit the validations endpoint's
schema (a row an older version or a hand wrote: a list where a stack belongs, a count or a date that is
text) is listed with its own `error` naming the field, shown empty, and every other entry as it is: it
failed the response's validation after the route returned, and the whole status was a bare 500."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from autotuner.store import Store, ValidationState
from autotuner.tuning.revalidate import request
from tests.autotuner.test_driver import study_with
from tests.helpers import by_hand

OLD, NEW = "550.54.15", "570.86.15"
# Each: (what a hand wrote, the entry it lands in, the field named in that entry's error)
UNFIT = {
    "a report's stack is a list": ("UPDATE at_fingerprint_reports SET fingerprint = '[1]' WHERE id = {report}",
                                   "report", "fingerprint"),
    "a report's stack is not JSON": ("UPDATE at_fingerprint_reports SET fingerprint = 'nope' WHERE id = {report}",
                                     "report", "fingerprint"),
    "a report's diff is a list": ("UPDATE at_fingerprint_reports SET diff = '[1]' WHERE id = {report}",
                                  "report", "diff"),
    "a report's diff is text": ("""UPDATE at_fingerprint_reports SET diff = '"x"' WHERE id = {report}""",
                                "report", "diff"),
    "a report's diff holds numbers": (
        """UPDATE at_fingerprint_reports SET diff = '{"driver": [1, 2, 3]}' WHERE id = {report}""",
        "report", "diff"),
    "a report's count is text": ("UPDATE at_fingerprint_reports SET jobs = 'x' WHERE id = {report}", "report", "jobs"),
    "a report's count is past any integer": (
        "UPDATE at_fingerprint_reports SET jobs = 99999999999999999999 WHERE id = {report}", "report", "jobs"),
    "a report's dates are no dates": (
        "UPDATE at_fingerprint_reports SET first_seen = 'garbage', last_seen = 'garbage' WHERE id = {report}",
        "report", "first_seen, last_seen"),
    "a re-validation's date is no date": (
        "UPDATE at_config_validations SET created_at = 'garbage' WHERE id = {validation}",
        "validation", "requested_at"),
    "a re-validation's figures are not numbers": (
        """UPDATE at_config_validations SET result = '{"speedup": "x", "ci_low": []}' WHERE id = {validation}""",
        "validation", "ci_low, speedup"),
    "the version's node count is text": ("UPDATE at_configs SET nodes = 'x' WHERE id = {config}", "status", "nodes"),
    "the version's number is text": ("UPDATE at_configs SET version = 'x' WHERE id = {config}", "status", "version"),
}  # fmt: skip


@pytest.fixture
def planted(tmp_path):
    """cpu-box/small v1, validated on driver OLD: a held re-validation, then a second one; jobs on NEW,
    then on another stack."""
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    study = study_with(store, tmp_path)
    store.update_study(study.id, state="done")
    store.update_fingerprint(store.cluster("cpu-box", create=True).id, {"driver": OLD})
    config = store.publish_config(cluster="cpu-box", workload="small", nodes=1, env={}, fwd_precision="fp32",
                                  bwd_precision="fp32", batch_size=256, sharding="table_wise", evidence={},
                                  study_id=study.id)  # fmt: skip
    ids = []
    for speedup in (1.5, 1.4):
        row, _ = request(store, config)
        store.finish_validation(row.id, ValidationState.HELD, fingerprint={"driver": OLD, "nodes": "1"},
                                result={"speedup": speedup, "ci_low": 1.1, "ci_high": 1.9, "why": "still faster"})  # fmt: skip
        ids.append(row.id)
    reports = store.record_reports([
        {"config_id": config.id, "fingerprint": {"driver": NEW, "nodes": "1"}, "diff": {"driver": [OLD, NEW]},
         "jobs": 3},
        {"config_id": config.id, "fingerprint": {"driver": "580.1", "nodes": "1"},
         "diff": {"driver": [OLD, "580.1"]}, "jobs": 2},
    ])  # fmt: skip
    yield store, {"config": config.id, "validation": ids[1], "report": reports[1].id}
    store.dispose()


@pytest.mark.parametrize("unfit", list(UNFIT))
def test_an_entry_that_does_not_fit_is_listed_with_why_beside_the_others(planted, tmp_path, unfit):
    store, ids = planted
    sql, where, fields = UNFIT[unfit]
    by_hand(store, sql.replace("{report}", str(ids["report"])).replace("{validation}", str(ids["validation"]))
            .replace("{config}", str(ids["config"])))  # fmt: skip
    settings = Settings(data_dir=tmp_path, tokens="r:read", scheduler=False)
    with TestClient(create_app(settings, store=store), headers={"Authorization": "Bearer r"}) as client:
        response = client.get("/v1/configs/cpu-box/small/validations")
        metrics = client.get("/metrics")  # its staleness gauges read the same reports
    assert metrics.status_code == 200, metrics.text
    if where != "status":  # (a version stored so is not served: no gauge of its own)
        gauge = 'autotuner_config_stale{cluster="cpu-box",nodes="1",reason="fingerprint",version="1",workload="small"}'
        assert f"{gauge} 1.0" in metrics.text
    assert response.status_code == 200, response.text
    status = response.json()
    said = f"stored {fields} cannot be read (shown empty)"
    assert status["error"] == (said if where == "status" else None)
    assert (status["cluster"], status["workload"]) == ("cpu-box", "small")
    assert (status["nodes"], status["version"]) == (
        0 if unfit == "the version's node count is text" else 1,
        0 if unfit == "the version's number is text" else 1,
    )
    # the reports: the untouched one as recorded, and what jobs on it make of the version
    assert f"driver {OLD} -> {NEW} since validation (3 jobs)" in status["stale_reasons"]["fingerprint"]
    bad, good = status["reports"]  # most recently seen first: the second recorded, then the first
    assert {k: v for k, v in good.items() if not k.endswith("_seen")} == {
        "fingerprint": {"driver": NEW, "nodes": "1"}, "diff": {"driver": [OLD, NEW]}, "jobs": 3,
        "validation_id": None, "error": None}  # fmt: skip
    if where == "report":
        assert bad["error"] == said
        for field in fields.split(", "):
            assert bad[field] == {"fingerprint": {}, "diff": {}, "jobs": 0}.get(field, ""), bad
    else:
        assert (bad["error"], bad["jobs"], bad["fingerprint"]) == (None, 2, {"driver": "580.1", "nodes": "1"})
    # the re-validations, newest first: the untouched one as recorded
    newer, older = status["validations"]
    version = None if unfit == "the version's number is text" else 1
    assert (older["id"], older["version"], older["speedup"], older["ci_low"], older["ci_high"]) == (
        ids["validation"] - 1, version, 1.5, 1.1, 1.9)  # fmt: skip
    assert older["error"] is None
    assert older["requested_at"]
    assert (newer["id"], newer["version"]) == (ids["validation"], version)
    if where == "validation":
        assert newer["error"] == said
        for field in fields.split(", "):
            assert newer[field] == ("" if field == "requested_at" else None), newer
    else:
        assert (newer["error"], newer["speedup"], newer["ci_low"], newer["ci_high"]) == (None, 1.4, 1.1, 1.9)
