"""A study whose runner stopped (a tuner interrupted or killed, its host gone) stayed "running" in
`autotuner studies` and on the dashboard while nothing ran it: a user who ran the command again had two
studies "running" and neither moving. The store tells them apart by the lease, on the database's clock;
the listing, REST and the page say "no runner" and how to resume."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from autotuner.cli.commands import app
from autotuner.store import Store, StudyState
from tests.autotuner.test_cli import runner
from tests.store.test_store import make_study


def _four_studies(store: Store) -> dict[str, int]:
    """held: running under a live lease; lost: running, its runner gone; queued; done."""
    ids = {name: make_study(store, name).id for name in ("held", "lost", "queued", "done")}
    for name in ("held", "lost"):
        store.update_study(ids[name], state=StudyState.RUNNING)
    store.update_study(ids["done"], state=StudyState.DONE)
    assert store.acquire_study(ids["held"], "host:1:a", 600)
    assert store.acquire_study(ids["lost"], "host:2:b", 600)
    store.release_study(ids["lost"], "host:2:b")  # as an interrupted tuner lets go
    return ids


def test_the_store_names_started_studies_that_no_runner_holds(store: Store):
    ids = _four_studies(store)
    assert store.runnerless(list(ids.values())) == {ids["lost"]}
    assert store.runnerless([]) == set()
    # a runner killed outright holds its lease until it lapses by the database's clock
    assert store.acquire_study(ids["lost"], "host:3:c", 0.2)
    assert store.runnerless([ids["lost"]]) == set()
    deadline = time.monotonic() + 30
    while not store.runnerless([ids["lost"]]):
        assert time.monotonic() < deadline, "a lease of 0.2 s never lapsed"
        time.sleep(0.05)


def test_rest_and_the_cli_say_no_runner(tmp_path):
    db = f"sqlite:///{tmp_path / 'at.db'}"
    store = Store(db)
    ids = _four_studies(store)
    settings = Settings(data_dir=tmp_path, tokens="r:read", scheduler=False)
    with TestClient(create_app(settings, store=store), headers={"Authorization": "Bearer r"}) as client:
        listed = {s["name"]: s["runner_lost"] for s in client.get("/v1/studies").json()["data"]}
        one = client.get(f"/v1/studies/{ids['lost']}").json()
    assert listed == {"held": False, "lost": True, "queued": False, "done": False}
    assert one["runner_lost"] is True
    store.dispose()
    result = runner.invoke(app, ["studies", "--db", db], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = next(line for line in lines if line.startswith("id name"))
    state_at, state_end = header.index("state"), header.index("searched")
    states = {
        line.split()[1]: line[state_at:state_end].strip() for line in lines if line[:3].strip().isdigit()
    }
    assert states == {"held": "running", "lost": "running, no runner", "queued": "queued", "done": "done"}
    assert "`autotuner tune --study NAME` resumes it" in result.output
