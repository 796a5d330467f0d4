"""A study's launches: a bounded page in seq order, filtered by state, without the log tails (16 KB each,
a dashboard polled them all every 2 s); one launch, with its whole tail, at its own route."""

from __future__ import annotations

import re

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings

WORKLOAD = {
    "name": "w",
    "tables": [{"name": "t", "num_embeddings": 10, "embedding_dim": 32, "pooling_factor": 1}],
}
LAUNCHES = 250  # over the default page (100)
TAIL = ("NCCL WARN socket connect failed: Connection refused\n" * 400)[:16384]


def failing(seq: int) -> str | None:
    """The state of the launch numbered `seq`: every third failed, every seventh timed out."""
    return "failed" if seq % 3 == 0 else "timeout" if seq % 7 == 0 else None


@pytest.fixture
def planted(store, tmp_path):
    """A study of LAUNCHES launches (those that failed with a 16 KB log tail) and another study's one."""

    def study(name: str):
        return store.create_study(name=name, cluster="c", workload_name="w", workload_spec=WORKLOAD,
                                  space={"env": {}}, settings={"trials": 10_000}, state="running")  # fmt: skip

    def launch(study_id: int, state: str | None):
        row = store.add_launch(study_id=study_id, kind="search", env={"NCCL_NSOCKS_PERTHREAD": "4"},
                               spec={"candidates": [{}]}, executor="replay")  # fmt: skip
        if state:
            store.update_launch(
                row.id, state=state, error="NCCL error: unhandled system error", log_tail=TAIL
            )
        else:
            store.update_launch(row.id, state="succeeded")
        return row.id

    big, other = study("big"), study("other")
    ids = [launch(big.id, failing(seq)) for seq in range(1, LAUNCHES + 1)]
    foreign = launch(other.id, "failed")
    settings = Settings(data_dir=tmp_path, public_read=True, scheduler=False)
    with TestClient(create_app(settings, store=store)) as client:
        yield client, big.id, ids, foreign


def test_the_listing_is_a_bounded_page_without_log_tails(planted):
    client, study, ids, _ = planted
    listed = client.get(f"/v1/studies/{study}/launches")
    assert listed.status_code == 200, listed.text
    rows = listed.json()
    assert [r["seq"] for r in rows] == list(range(1, 101))  # seq order, as before, a page of 100
    assert listed.headers["X-Total-Count"] == str(LAUNCHES)
    assert all("log_tail" not in r for r in rows)
    assert {r["log_tail_chars"] for r in rows if failing(r["seq"])} == {len(TAIL)}
    assert {r["log_tail_chars"] for r in rows if not failing(r["seq"])} == {0}
    assert len(listed.content) < 100 * 1000  # 100 launches with 16 KB tails each were 1.6 MB
    assert len(client.get(f"/v1/studies/{study}/launches", params={"limit": 1000}).json()) == LAUNCHES


def test_the_listing_reads_no_log_tail_from_the_database(planted, store):
    """A page is read as a page, the tails' lengths only: not every launch's 16 KB, cut afterwards."""
    client, study, _, _ = planted
    statements: list[str] = []

    def seen(conn, cursor, statement, *args) -> None:
        statements.append(statement)

    sa.event.listen(store.engine, "before_cursor_execute", seen)
    try:
        client.get(f"/v1/studies/{study}/launches", params={"state": "failed"})
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", seen)
    launch_reads = [s for s in statements if "FROM at_launches" in s]
    assert launch_reads
    assert [s for s in launch_reads if re.search(r"at_launches\.log_tail(?!\))", s)] == []
    assert len(statements) <= 5, statements


def test_pages_follow_one_another_in_either_order(planted):
    client, study, _, _ = planted
    url = f"/v1/studies/{study}/launches"
    page = client.get(url, params={"limit": 10, "offset": 20}).json()
    assert [r["seq"] for r in page] == list(range(21, 31))
    newest = client.get(url, params={"order": "desc", "limit": 3})
    seqs = [r["seq"] for r in newest.json()]
    assert seqs == [LAUNCHES, LAUNCHES - 1, LAUNCHES - 2]
    assert newest.headers["X-Total-Count"] == str(LAUNCHES)
    seen = [r["seq"] for offset in range(0, LAUNCHES, 60)
            for r in client.get(url, params={"limit": 60, "offset": offset}).json()]  # fmt: skip
    assert seen == list(range(1, LAUNCHES + 1))
    assert client.get(url, params={"offset": LAUNCHES}).json() == []


def test_the_state_filter_keeps_those_launches_and_counts_them(planted):
    client, study, _, _ = planted
    url = f"/v1/studies/{study}/launches"
    failed = client.get(url, params={"state": "failed", "limit": 1000})
    seqs = [r["seq"] for r in failed.json()]
    assert seqs == [s for s in range(1, LAUNCHES + 1) if failing(s) == "failed"]
    assert failed.headers["X-Total-Count"] == str(len(failed.json()))
    # any of several states (the dashboard's failed list): the latest 20 of them, and how many in all
    latest = client.get(
        url, params=[("state", "failed"), ("state", "timeout"), ("order", "desc"), ("limit", "20")]
    )
    expected = [s for s in range(LAUNCHES, 0, -1) if failing(s)]
    seqs = [r["seq"] for r in latest.json()]
    assert seqs == expected[:20]
    assert latest.headers["X-Total-Count"] == str(len(expected))
    assert client.get(url, params={"state": "pending"}).json() == []


def test_the_id_filter_answers_those_launches_only(planted):
    client, study, ids, foreign = planted
    url = f"/v1/studies/{study}/launches"
    shown = client.get(url, params=[("id", ids[4]), ("id", ids[0]), ("id", foreign)]).json()
    assert [(r["id"], r["seq"]) for r in shown] == [(ids[0], 1), (ids[4], 5)]  # not another study's


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"state": "exploded"}, ["query", "state", 0]),
        ({"limit": 0}, ["query", "limit"]),
        ({"limit": 1001}, ["query", "limit"]),
        ({"offset": -1}, ["query", "offset"]),
        ({"order": "sideways"}, ["query", "order"]),
        ({"id": "x"}, ["query", "id", 0]),
    ],
)
def test_a_bad_parameter_is_a_422_naming_it(planted, params, named):
    client, study, _, _ = planted
    answer = client.get(f"/v1/studies/{study}/launches", params=params)
    assert answer.status_code == 422, answer.text
    [error] = answer.json()["detail"]
    assert error["loc"] == named
    if named[1] == "state":
        assert "'failed'" in error["msg"]  # says what it may be
        assert "'timeout'" in error["msg"]


def test_one_launch_has_its_whole_log_tail(planted):
    client, study, ids, _ = planted
    shown = client.get(f"/v1/studies/{study}/launches/{ids[2]}")  # seq 3: failed
    assert shown.status_code == 200, shown.text
    launch = shown.json()
    assert (launch["id"], launch["seq"], launch["state"]) == (ids[2], 3, "failed")
    assert launch["log_tail"] == TAIL
    assert launch["error"] == "NCCL error: unhandled system error"
    assert client.get(f"/v1/studies/{study}/launches/{ids[0]}").json()["log_tail"] is None


def test_another_studys_launch_or_none_is_a_404(planted):
    client, study, ids, foreign = planted
    other = client.get(f"/v1/studies/{study}/launches/{foreign}")
    assert other.status_code == 404
    assert other.json()["detail"] == f"launch {foreign} of study {study} not found"
    assert "log_tail" not in other.text
    assert client.get(f"/v1/studies/{study}/launches/999999").status_code == 404
    assert client.get(f"/v1/studies/999999/launches/{ids[0]}").status_code == 404
    assert client.get(f"/v1/studies/{study}/launches/0").status_code == 422
    assert client.get(f"/v1/studies/{study}/launches/{2**31}").status_code == 422
