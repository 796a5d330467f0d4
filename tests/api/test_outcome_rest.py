"""A study's outcome over REST: stored by an older version, returned through the type with the claim's
words beside it, and documented field by field in OpenAPI."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from autotuner.cli.claim_report import claim_text
from autotuner.store import Store
from autotuner.tuning.outcome import Outcome
from tests.tuning.test_outcome import ONE_SEED, STORED


@pytest.fixture
def client(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'at.db'}")
    for name, outcome in STORED.items():
        study = store.create_study(name=name.replace(" ", "-"), cluster="cpu-box", workload_name="small",
                                   workload_spec={"name": "small"}, space={"force_inert": []},
                                   settings={"executor": "local", "trials": 1}, state="done")  # fmt: skip
        store.update_study(study.id, outcome=outcome, inert={"NCCL_NET": "CPU ranks talk over gloo"})
    settings = Settings(data_dir=tmp_path, public_read=True, scheduler=False)
    with TestClient(create_app(settings, store=store)) as c:
        yield c
    store.dispose()


def test_rest_returns_stored_outcomes_through_the_type_with_their_words(client):
    studies = {s["name"]: s for s in client.get("/v1/studies").json()["data"]}
    one_seed = studies["one-seed"]
    assert one_seed["outcome"]["quality"]["knobs"]["batch"] == {
        "delta": pytest.approx(0.00788, abs=1e-5), "ci_low": None, "ci_high": None, "verdict": "refused",
        "k_to_resolve": None, "sd": None, "confidence": None,  # an old outcome: no level recorded (95%)
    }  # fmt: skip
    loaded = Outcome.load(ONE_SEED)
    assert loaded is not None
    expected = claim_text(loaded.ladder or [], loaded.quality, {"NCCL_NET": "CPU ranks talk over gloo"})
    assert one_seed["claim"] == expected.model_dump(mode="json")
    assert one_seed["claim"]["ladder"][0]["label"] == ["1.19x [1.06-1.34]"]
    assert studies["not-confirmed"]["claim"]["quality"] is None  # no ladder and no check: nothing to say
    assert studies["adopted"]["outcome"]["ladder"][0]["changed"]["NCCL_NSOCKS_PERTHREAD"] == [None, "2"]


def test_openapi_documents_the_outcome(client):
    doc = client.get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    outcome = schemas["StudyPublic"]["properties"]["outcome"]
    assert {"$ref": "#/components/schemas/Outcome"} in outcome["anyOf"]
    fields = set(schemas["Outcome"]["properties"])
    assert {"decision", "speedup", "ci_low", "ci_high", "finalist", "ladder", "quality", "reconfirmed", "inert",
            "scaling", "published_version", "chosen_candidate"} <= fields  # fmt: skip
    assert {"k", "delta", "ci_low", "ci_high", "verdict", "k_to_resolve", "knobs", "time_to_quality", "refused",
            "unresolved", "skipped"} <= set(schemas["Quality"]["properties"])  # fmt: skip
    assert {"step", "changed", "kept", "speedup_vs_previous", "ci_low", "ci_high", "time_to_quality"} <= set(
        schemas["LadderStep"]["properties"]
    )
    assert {"ladder", "quality", "inert"} <= set(schemas["ClaimText"]["properties"])
