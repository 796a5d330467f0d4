"""A study none of whose launches could run is refused before its row exists, naming why: the
executor is built and asked about a launch at each node count the study would use, and nothing is
sent. Before, each of these was created, then failed at its first launch with a traceback, and
failed the same way on every resume (its settings are stored)."""

from __future__ import annotations

import json
import os

import pytest

from autotuner.store import Store
from autotuner.tuning import StudyError, create_study, study_settings
from autotuner.tuning.settings import RequestSettings
from autotuner.tuning.study import STORE_MARK
from tests.helpers import LANDSCAPE

WORKLOAD = json.loads(LANDSCAPE.read_text())["workload"]


def create(store, executor: str, options: dict, workdir: str | None = None, **request):
    settings = study_settings(
        RequestSettings(executor=executor, trials=1, **request), workdir=workdir, executor_options=options
    )
    return create_study(store, cluster="c1", workload=dict(WORKLOAD), space="socket", settings=settings)


@pytest.mark.parametrize(
    ("executor", "options", "workdir", "request_", "words"),
    [
        ("slurm", {}, "/srv/a b", {}, "launch directory '/srv/a b/study-1/launch-0001'"),
        ("kubernetes", {"image": "img:1", "gpus_per_node": 1}, None, {"nproc_per_node": 2},
         "nproc_per_node 2 > gpus_per_node 1"),
        ("local", {}, None, {"nnodes": 2}, "the local executor runs one node"),
        ("local", {}, None, {"scaling_nodes": [1, 2]}, "the local executor runs one node"),
        ("replay", {"landscape": "/nonexistent/land.json"}, None, {}, "No such file"),
        # given as options these were silently replaced by the study's own (no fabric, seed 0)
        ("local", {"fabric": "1gbit"}, None, {}, "fabric is a study setting"),
        ("replay", {"landscape": str(LANDSCAPE), "seed": 7}, None, {}, "seed is a study setting"),
    ],
    ids=["slurm-workdir", "k8s-gpus", "local-nodes", "local-scaling-nodes", "replay-missing",
         "fabric-option", "seed-option"],
)  # fmt: skip
def test_a_study_no_launch_could_run_is_refused_before_it_exists(
    store, executor, options, workdir, request_, words
):
    with pytest.raises(StudyError, match=f"executor {executor}: .*{words}") as refused:
        create(store, executor, options, workdir, **request_)
    assert store.count_studies() == 0
    # where in a REST body it is ("" was the body as a whole): the operator's options, or the settings
    assert refused.value.where == ("settings.executor_options" if "study setting" in words else "settings")


def test_a_file_that_is_not_a_landscape_is_refused_naming_the_point(store, tmp_path):
    bad = tmp_path / "land.json"
    bad.write_text(json.dumps({"points": [{"env": {}}]}))
    with pytest.raises(StudyError, match="landscape point 0: needs env, candidate and results"):
        create(store, "replay", {"landscape": str(bad)})
    bad.write_text("[]")
    with pytest.raises(StudyError, match="not a recorded landscape"):
        create(store, "replay", {"landscape": str(bad)})
    assert store.count_studies() == 0


def test_a_relative_workdir_is_kept_absolute(store, tmp_path, monkeypatch):
    """A launch's script runs from inside its directory: a relative one resolved twice ('runs/...'
    under 'runs/'), and every launch failed with 'cannot open runs/study-1/launch-0001/launch.sh'."""
    monkeypatch.chdir(tmp_path)
    study = create(store, "replay", {"landscape": str(LANDSCAPE)}, workdir="runs")
    assert study.settings["workdir"] == str(tmp_path / "runs")
    assert os.path.isabs(study.settings["workdir"])


def test_a_workdir_another_store_launches_in_is_refused(store, tmp_path, monkeypatch):
    """Two stores given one workdir (one shared path set alike for two services) each had a study 1, and
    their launches wrote each other's spec.json and result.json. The first store to create a study there
    marks it with its id; another store is refused it, the same store (by any URL) is not."""
    shared = str(tmp_path / "shared-runs")
    replay = {"landscape": str(LANDSCAPE)}
    create(store, "replay", replay, workdir=shared)
    other = Store(f"sqlite:///{tmp_path / 'other.db'}")
    try:
        with pytest.raises(
            StudyError, match=r"workdir .*shared-runs holds the launches of another store \(id "
        ):
            create(other, "replay", replay, workdir=shared)
        assert other.count_studies() == 0
        create(other, "replay", replay, workdir=str(tmp_path / "its-own"))  # a workdir of its own: made
        with pytest.raises(
            StudyError, match=r"if that store is gone for good .*, remove .*shared-runs/\.nccl-"
        ):
            create(other, "replay", replay, workdir=shared)
    finally:
        other.dispose()
    assert (tmp_path / "shared-runs" / STORE_MARK).read_text().strip() == store.store_id()
    if store.url.startswith("sqlite"):  # the same store by another URL: its workdir still
        monkeypatch.chdir(tmp_path)
        again = Store(f"sqlite:///{os.path.relpath(store.url.removeprefix('sqlite:///'))}")
        try:
            create(again, "replay", replay, workdir=shared)
        finally:
            again.dispose()
        assert store.count_studies() == 2
