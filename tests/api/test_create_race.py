"""Studies created at once: the store's unique name decides who gets it, and the others hear 409 (a
500 before, when two passed the check before either inserted); unnamed studies each get a free name."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from autotuner.store import NameTaken
from tests.api.service import replay_study_body


def _post_all(server, bodies: list[dict]) -> list:
    with server.client("write") as client, ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(lambda body: client.post("/v1/studies", json=body), bodies))


def test_the_same_name_at_once_is_created_once_and_refused_with_409_else(module_server):
    answers = _post_all(module_server, [replay_study_body("raced") for _ in range(12)])
    assert Counter(a.status_code for a in answers) == {201: 1, 409: 11}, [a.text for a in answers]
    assert all("study 'raced' already exists" in a.text for a in answers if a.status_code == 409)


def test_unnamed_studies_at_once_and_after_a_squatted_name_all_get_one(module_server):
    def unnamed() -> dict:
        body = replay_study_body("x")
        del body["name"]
        return body

    answers = _post_all(module_server, [unnamed() for _ in range(8)])
    assert Counter(a.status_code for a in answers) == {201: 8}, [a.text for a in answers]
    names = [a.json()["name"] for a in answers]
    assert len(set(names)) == 8
    # a name given by hand where the count points next: the unnamed ones go past it, not 409 for ever
    with module_server.client("write") as client:
        count = client.get("/v1/studies", params={"limit": 1}).json()["count"]
        cluster, workload = names[0].split(".")[:2]
        squatted = replay_study_body(f"{cluster}.{workload}.{count + 1}")
        assert client.post("/v1/studies", json=squatted).status_code == 201
        for _ in range(2):
            after = client.post("/v1/studies", json=unnamed())
            assert after.status_code == 201, after.text


def test_the_store_says_a_name_was_taken(store):
    row = {"cluster": "c", "workload_name": "w", "workload_spec": {"name": "w", "tables": []}, "space": {},
           "settings": {}}  # fmt: skip
    store.create_study(name="once", **row)
    other = {**row, "workload_spec": {"name": "w", "tables": [{"name": "t"}]}}
    with pytest.raises(NameTaken, match="study 'once' already exists"):
        store.create_study(name="once", **other)
    # refused whole: the workload its studies run is not rewritten by a create that did not happen
    assert store.workload("w").spec == row["workload_spec"]
