"""A study none of whose launches could run is refused before its row exists, naming why: the
executor is built and asked about a launch at each node count the study would use, and nothing is
sent. Before, each of these was created, then failed at its first launch with a traceback, and
failed the same way on every resume (its settings are stored)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from sqlalchemy import text

from autotuner.store import Store
from autotuner.tuning import StudyError, create_study, study_settings
from autotuner.tuning.settings import RequestSettings
from autotuner.tuning.study import STORE_MARK
from tests.helpers import LANDSCAPE, at_once

WORKLOAD = json.loads(LANDSCAPE.read_text())["workload"]


def create(
    store, executor: str, options: dict, workdir: str | None = None, own_workdir: bool = False, **request
):
    settings = study_settings(
        RequestSettings(executor=executor, trials=1, **request), workdir=workdir, executor_options=options
    )
    return create_study(
        store,
        cluster="c1",
        workload=dict(WORKLOAD),
        space="socket",
        settings=settings,
        own_workdir=own_workdir,
    )


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
    assert (
        refused.value.where == "settings"
    )  # where in a REST body: the settings (no longer the body as a whole)


def test_a_file_that_is_not_a_landscape_is_refused_naming_the_point(store, tmp_path):
    bad = tmp_path / "land.json"
    bad.write_text(json.dumps({"points": [{"env": {}}]}))
    with pytest.raises(StudyError, match="landscape point 0: needs env, candidate and results"):
        create(store, "replay", {"landscape": str(bad)})
    bad.write_text("[]")
    with pytest.raises(StudyError, match="not a recorded landscape"):
        create(store, "replay", {"landscape": str(bad)})
    # the file named whole, and what is wrong with it (was "Expecting value: line 1 ...", "tmp is not ...")
    bad.write_text("{not json")
    with pytest.raises(StudyError, match=f"landscape {bad} is not valid JSON: Expecting property name"):
        create(store, "replay", {"landscape": str(bad)})
    bad.write_bytes(b'{"points": ["\xff"]}')
    with pytest.raises(StudyError, match=f"landscape {bad} is not valid JSON: 'utf-8' codec"):
        create(store, "replay", {"landscape": str(bad)})
    with pytest.raises(StudyError, match=f"landscape {tmp_path}: {tmp_path.name} is not a regular file"):
        create(store, "replay", {"landscape": str(tmp_path)})
    assert store.count_studies() == 0


def test_a_relative_workdir_is_kept_absolute(store, tmp_path, monkeypatch):
    """A launch's script runs from inside its directory: a relative one resolved twice ('runs/...'
    under 'runs/'), and every launch failed with 'cannot open runs/study-1/launch-0001/launch.sh'."""
    monkeypatch.chdir(tmp_path)
    study = create(store, "replay", {"landscape": str(LANDSCAPE)}, workdir="runs")
    assert study.settings["workdir"] == str(tmp_path / "runs")
    assert os.path.isabs(study.settings["workdir"])


def test_a_workdir_another_store_launches_in_is_refused(store, tmp_path, monkeypatch):
    """Two stores given one workdir by hand (one shared path for two services' nodes) each had a study 1,
    and their launches wrote each other's spec.json and result.json. The first store to create a study
    there marks it with its id; another store is refused it, the same store (by any URL) is not."""
    shared = str(tmp_path / "shared-runs")
    replay = {"landscape": str(LANDSCAPE)}
    create(store, "replay", replay, workdir=shared, own_workdir=True)
    other = Store(f"sqlite:///{tmp_path / 'other.db'}")
    try:
        with pytest.raises(
            StudyError, match=r"workdir .*shared-runs holds the launches of another store \(id "
        ):
            create(other, "replay", replay, workdir=shared, own_workdir=True)
        assert other.count_studies() == 0
        create(other, "replay", replay, workdir=str(tmp_path / "its-own"), own_workdir=True)  # its own: made
        with pytest.raises(
            StudyError, match=r"if that store is gone for good .*, remove .*shared-runs/\.nccl-"
        ):
            create(other, "replay", replay, workdir=shared, own_workdir=True)
    finally:
        other.dispose()
    assert (tmp_path / "shared-runs" / STORE_MARK).read_text().strip() == store.store_id()
    if store.url.startswith("sqlite"):  # the same store by another URL: its workdir still
        monkeypatch.chdir(tmp_path)
        again = Store(f"sqlite:///{os.path.relpath(store.url.removeprefix('sqlite:///'))}")
        try:
            create(again, "replay", replay, workdir=shared, own_workdir=True)
        finally:
            again.dispose()
        assert store.count_studies() == 2


def test_a_default_workdir_is_its_stores_whatever_mark_it_holds(store, tmp_path):
    """A default workdir is made from the store's URL: a store deleted and made anew there (a new id) takes
    it, where a workdir given by hand would be refused; and once marked, no other store takes it by hand."""
    runs = tmp_path / "default-runs"
    runs.mkdir()
    (runs / STORE_MARK).write_text("the-id-of-a-store-deleted-before\n")
    create(store, "replay", {"landscape": str(LANDSCAPE)}, workdir=str(runs))
    assert (runs / STORE_MARK).read_text().strip() == store.store_id()
    other = Store(f"sqlite:///{tmp_path / 'other.db'}")
    try:
        with pytest.raises(StudyError, match="holds the launches of another store"):
            create(other, "replay", {"landscape": str(LANDSCAPE)}, workdir=str(runs), own_workdir=True)
    finally:
        other.dispose()


def test_a_workdir_on_a_filesystem_without_hard_links_is_marked_in_place(store, tmp_path, monkeypatch):
    def no_links(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    runs = tmp_path / "fuse-runs"
    create(store, "replay", {"landscape": str(LANDSCAPE)}, workdir=str(runs), own_workdir=True)
    create(store, "replay", {"landscape": str(LANDSCAPE)}, workdir=str(runs), own_workdir=True)
    assert sorted(p.name for p in runs.iterdir()) == [STORE_MARK]
    assert (runs / STORE_MARK).read_text().strip() == store.store_id()


def test_a_mark_that_cannot_be_written_leaves_nothing_behind(store, tmp_path, monkeypatch):
    import autotuner.tuning.study as study_module

    def full(path, data, mode=0o644):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(study_module, "write_new_only", full)
    runs = tmp_path / "full-runs"
    with pytest.raises(StudyError, match="cannot mark it as this store's .*No space left"):
        create(store, "replay", {"landscape": str(LANDSCAPE)}, workdir=str(runs), own_workdir=True)
    assert list(runs.iterdir()) == []
    assert store.count_studies() == 0


def test_a_store_without_its_id_still_respects_another_stores_mark(store, tmp_path):
    runs = tmp_path / "theirs"
    runs.mkdir()
    (runs / STORE_MARK).write_text("another-store\n")
    with store.engine.begin() as conn:
        conn.execute(text("DELETE FROM at_store"))
    with pytest.raises(StudyError, match="holds the launches of another store"):
        create(store, "replay", {"landscape": str(LANDSCAPE)}, workdir=str(runs), own_workdir=True)
    create(
        store, "replay", {"landscape": str(LANDSCAPE)}, workdir=str(tmp_path / "unmarked"), own_workdir=True
    )
    assert not (tmp_path / "unmarked" / STORE_MARK).exists()  # nothing to mark it with


def test_workdirs_by_hand_and_by_default(store, tmp_path):
    """A workdir reached through a link is fine (the mark itself is never followed); a default one is
    marked too."""
    (tmp_path / "scratch").mkdir()
    (tmp_path / "runs").symlink_to(tmp_path / "scratch")
    create(store, "replay", {"landscape": str(LANDSCAPE)}, workdir=str(tmp_path / "runs"), own_workdir=True)
    assert (tmp_path / "scratch" / STORE_MARK).is_file()
    create(store, "replay", {"landscape": str(LANDSCAPE)}, workdir=str(tmp_path / "default"))
    assert (tmp_path / "default" / STORE_MARK).read_text().strip() == store.store_id()
    assert sorted(p.name for p in (tmp_path / "scratch").iterdir()) == [STORE_MARK]  # no file of its own left


def _claim(url: str, path: str, barrier, errors) -> None:
    from autotuner.store import Store
    from autotuner.tuning.study import claim_workdir

    store = Store(url)
    try:
        barrier.wait(timeout=60)
        claim_workdir(store, Path(path), by_hand=True)
    except Exception as exc:  # every failure is the finding
        errors.put(repr(exc))
    finally:
        store.dispose()


def test_studies_of_one_store_claiming_a_fresh_workdir_at_once_all_succeed(store, tmp_path):
    """The mark is whole before it appears: a second study of the same store at the same moment read an
    empty mark, taken for another store's (7 of 200 two-process races)."""
    for attempt in range(10):
        path = str(tmp_path / f"fresh-{attempt}")
        assert at_once(_claim, (store.url, path), processes=4, timeout_s=120) == []
        assert (Path(path) / STORE_MARK).read_text().strip() == store.store_id()
