"""A store the oldest code wrote, opened by this code: it serves the exports it served, lists its
studies and configs, renders its dashboard pages, and pairs what it measured with what is measured
now (a re-validation of its config, a study it was running when it was upgraded).

tests/data/store-cae41b7.db.gz is a SQLite store (schema 0001) written by commit cae41b7's own CLI,
run from a git worktree with this project's venv (PYTHONPATH=<worktree> python -m autotuner ...),
replay executor on that commit's tests/data/landscape-small.json (the measurements ours holds),
its workload ("small"), cluster cpu-lab, and the space NCCL_NSOCKS_PERTHREAD [null, 4] x precisions
fp32, fp16 x batch_sizes 64, 256:

    tune --study s0001 --trials 2             done; published v1 (NCCL_NSOCKS_PERTHREAD=4, batch 256)
    tune --study s0001b --trials 2 --seed 1   done; published v2
    configs pin cpu-lab small 2, configs unpin cpu-lab small, configs rollback cpu-lab small
                                              v1 served, pinned
    tune --study s0001-failed (a workload the landscape does not hold)   failed
    tune --study s0001-interrupted --seed 2, SIGKILLed after its baseline and one search launch
                                              running

then gzip -9n. EXPORTS is what that commit's `autotuner env --db` printed for it (sh and slurm alike).
"""

from __future__ import annotations

import gzip
import shutil
import signal
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from api.app import create_app
from api.settings import Settings
from autotuner.cli.commands import app
from autotuner.executors import Landscape, ReplayExecutor
from autotuner.job.hook import env_main
from autotuner.store import Store, ValidationState
from autotuner.tuning import StudyDriver
from autotuner.tuning.confirm import ADOPTED
from autotuner.tuning.revalidate import Revalidation, request
from tests.api.service import make_server
from tests.api.test_dashboard import browser, open_page, wait_for_text  # noqa: F401 - a fixture
from tests.helpers import DATA, LANDSCAPE

OLD_STORE = DATA / "store-cae41b7.db.gz"
EXPORTS = """\
# nccl-autotuner cpu-lab/small/1n/v1
export AUTOTUNER_BATCH_SIZE=256
export AUTOTUNER_BWD_PRECISION=fp32
export AUTOTUNER_CONFIG=cpu-lab/small/1n/v1
export AUTOTUNER_FWD_PRECISION=fp32
export AUTOTUNER_SHARDING=table_wise
export NCCL_NSOCKS_PERTHREAD=4
"""
STUDIES = {1: ("s0001", "done"), 2: ("s0001b", "done"), 3: ("s0001-failed", "failed"),
           4: ("s0001-interrupted", "running")}  # fmt: skip

runner = CliRunner()


def unpack(db: Path) -> Path:
    """A copy of the old store: this code migrates whatever it opens."""
    with gzip.open(OLD_STORE) as packed, db.open("wb") as out:
        shutil.copyfileobj(packed, out)
    return db


@pytest.fixture
def old_store(tmp_path):
    return f"sqlite:///{unpack(tmp_path / 'autotuner.db')}"


@pytest.fixture
def upgraded(old_store, tmp_path):
    """The upgraded store, its launch directories under tmp_path (it recorded the old machine's)."""
    s = Store(old_store)
    for study in s.studies():
        s.update_study(study.id, settings={**study.settings, "workdir": str(tmp_path / "runs")})
    yield s
    s.dispose()


@pytest.fixture
def client(old_store, tmp_path):
    settings = Settings(data_dir=tmp_path, database_url=old_store, public_read=True, scheduler=False)
    with TestClient(create_app(settings)) as c:
        yield c


def replay(store: Store, study_id: int) -> ReplayExecutor:
    study = store.study(study_id)
    assert study is not None
    return ReplayExecutor(Landscape.load(LANDSCAPE), seed=study.settings["seed"])


def test_it_serves_the_exports_the_old_code_served(client, old_store, tmp_path, monkeypatch, capsys):
    for fmt in ("env", "slurm"):
        answer = client.get(f"/v1/configs/cpu-lab/small?format={fmt}")
        assert answer.status_code == 200, answer.text
        assert answer.text == EXPORTS
    config = client.get("/v1/configs/cpu-lab/small").json()
    assert (config["version"], config["pinned"], config["pipeline"]) == (1, True, None)
    monkeypatch.delenv("AUTOTUNER_SERVER", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    hook = ["--db", old_store, "--cluster", "cpu-lab", "--workload", "small", "--format"]
    for fmt in ("sh", "slurm"):  # the hook reading the store, as a job's prolog would
        assert env_main([*hook, fmt]) == 0
        assert capsys.readouterr().out == EXPORTS


def test_its_studies_and_configs_are_listed(client, old_store):
    listed = {s["id"]: (s["name"], s["state"]) for s in client.get("/v1/studies").json()["data"]}
    assert listed == STUDIES
    for study_id in STUDIES:
        assert client.get(f"/v1/studies/{study_id}").status_code == 200
    assert client.get("/v1/studies/1").json()["outcome"]["significant"] is True
    served = client.get("/v1/configs").json()
    assert [(c["cluster"], c["workload"], c["version"], c["pinned"]) for c in served] == [
        ("cpu-lab", "small", 1, True)
    ]
    history = client.get("/v1/configs/cpu-lab/small/history").json()
    assert [c["version"] for c in history] == [2, 1]
    shown = {}
    for args in (["studies"], ["configs"], ["configs", "history", "cpu-lab", "small"]):
        result = runner.invoke(app, [*args, "--db", old_store], env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        shown[args[-1]] = result.output
    assert all(name in shown["studies"] for name, _ in STUDIES.values())
    assert all(word in shown["configs"] for word in ("v1", "pinned"))
    assert all(version in shown["small"] for version in ("v2", "v1"))


def test_its_dashboard_pages_render(client):
    for page in ("/", "/configs", *(f"/studies/{i}" for i in STUDIES)):
        assert client.get(page).status_code == 200, page
    assert 'data-study-id="1"' in client.get("/studies/1").text
    for study_id in STUDIES:  # what the study page asks for
        for part in ("trials", "launches", "insights"):
            assert client.get(f"/v1/studies/{study_id}/{part}").status_code == 200, (study_id, part)


def test_a_re_validation_pairs_the_old_baseline_with_what_it_measures_now(upgraded):
    """The old baseline row recorded no pipeline; the rounds measured now do (left NULL, they never
    paired: the baseline was launched again and again, then 'not enough rounds', exit 3)."""
    store = upgraded
    config = store.served_config("cpu-lab", "small")
    assert config is not None
    assert config.version == 1
    row, _ = request(store, config, reason="after the upgrade")
    done = Revalidation(store, row.id, replay(store, config.study_id), poll_s=0.01).run()
    assert done.state == ValidationState.HELD, (done.error, done.result)
    assert done.result["rounds"] == 3


def test_a_study_running_when_it_was_upgraded_confirms_its_finalist(upgraded):
    """Its finalist was measured before the upgrade: confirmed now, not dropped for the baseline as
    'not confirmed' (its rows, without a pipeline, never paired with the confirmation's)."""
    store = upgraded
    final = StudyDriver(store, 4, replay(store, 4), poll_s=0.01).run()
    assert final.state == "done", final.error
    assert final.outcome.get("significant") is True, final.outcome.get("decision")
    assert final.outcome["decision"] == ADOPTED
    published = store.config_row("cpu-lab", "small", 1, final.outcome["published_version"])
    assert published is not None
    assert published.batch_size == 256
    assert store.served_config("cpu-lab", "small").version == 1  # still pinned: v3 waits beside it


@pytest.mark.browser
def test_a_confirmed_study_without_ladder_says_why_there_is_none(browser, tmp_path):  # noqa: F811 - the fixture
    """The old store's first study was confirmed faster (4.38x) before ladders existed, and a study of
    now can skip its ladder (ladder_rounds 0): both pages said "No ladder: the finalist was not
    confirmed faster than the baseline" under the confirmed speedup."""
    srv = make_server(tmp_path, AUTOTUNER_PUBLIC_READ="1", AUTOTUNER_SCHEDULER="0")
    store = Store(f"sqlite:///{unpack(srv.data_dir / 'autotuner.db')}")
    try:
        old = store.study(1)
        assert old is not None
        skipped = store.create_study(name="ladder-skipped", cluster="cpu-lab", workload_name="small",
                                     workload_spec=old.workload.spec, space=old.space,
                                     settings={**old.settings, "ladder_rounds": 0}, state="done")  # fmt: skip
        store.update_study(skipped.id, outcome={**old.outcome, "ladder": []})
    finally:
        store.dispose()
    srv.start()
    errors: list[str] = []
    try:
        page = open_page(browser, errors)
        for study_id, why in ((1, "this study ran before ladders were measured"),
                              (skipped.id, "this study skipped it (ladder_rounds 0)")):  # fmt: skip
            page.goto(f"{srv.url}/studies/{study_id}")
            wait_for_text(page, "study-state", "done")
            wait_for_text(page, "chart-ladder", f"No ladder: {why}.")
            assert "Confirmed speedup" in page.inner_text("#panel-outcome")
        assert errors == []
    finally:
        srv.kill(signal.SIGTERM)
