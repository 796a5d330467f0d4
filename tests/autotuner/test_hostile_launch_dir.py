"""What a node may plant or write in a launch directory, before the tuner gets there or in its result:
a link where the tuner writes (it must never write through it), a directory where a file goes, JSON
nested hundreds deep or an integer of 400 digits, a step of no time, NaN in a figure the tuner does not
read, a world size the launch did not run, an entry of megabytes. Each fails its launch or its candidate
with the reason, or is stored harmless; no launch stays "running", and nothing outside the launch
directory changes."""

from __future__ import annotations

import json
import math

import pytest

from autotuner.executors import LaunchRequest, LocalExecutor
from autotuner.executors.files import launch_dir, open_log, write_new
from autotuner.executors.results import MAX_DEPTH, ResultError, candidate_problem, parse_result
from autotuner.store import Store
from autotuner.tuning import StudyDriver
from autotuner.tuning.ingest import MAX_STORED_ENTRY
from tests.autotuner.test_driver import RECORDED, study_with
from tests.autotuner.test_hostile_results import TamperingReplay


def result_of(**top) -> dict:
    candidate = {
        "index": 0, "status": "ok", "fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 512,
        "samples_per_s": 1024 * 1000 / 4.0, "iter_ms": {"median": 4.0, "cv": 0.01}, "a2a_ms": {"median": 1.0},
        "a2a_bytes_per_iter": 1e6, "busbw_gbps": 1.0,
    }  # fmt: skip
    return {"schema_version": 1, "status": "ok", "world_size": 2, "candidates": [candidate], **top}


SPEC = {"candidates": [{"fwd_precision": "fp32", "bwd_precision": "fp32", "batch_size": 512}]}


def nested(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels):
        value = {"x": value}
    return value


# ------------------------------------------------------------------ the result, as parse_result reads it


@pytest.mark.parametrize("levels", [MAX_DEPTH, 600, 50_000])
def test_a_result_nested_deeper_than_any_trial_writes_is_refused_with_why(levels):
    data = json.dumps(result_of(extra="NEST")).replace('"NEST"', '{"x": ' * levels + "{}" + "}" * levels)
    with pytest.raises(ResultError, match=f"nests deeper than {MAX_DEPTH} levels"):
        parse_result(data, SPEC)


def test_a_result_nested_as_a_trial_writes_is_read():
    assert parse_result(json.dumps(result_of(extra=nested(MAX_DEPTH - 3))), SPEC)["world_size"] == 2


@pytest.mark.parametrize("where", ["setup_s", "world_size"])
def test_an_integer_too_large_for_a_float_is_refused_with_why(where):
    with pytest.raises(ResultError, match=f"{where} is 1000000000"):
        parse_result(json.dumps(result_of(**{where: 10**400})), SPEC)


def test_a_candidate_with_an_integer_too_large_for_a_float_fails_alone():
    measured = {**result_of()["candidates"][0], "a2a_bytes_per_iter": 10**400}
    assert "a2a_bytes_per_iter is 1000000000" in candidate_problem(measured, SPEC["candidates"][0], 0, 2)


@pytest.mark.parametrize("median", [0, 0.0, 5e-324])
def test_a_step_of_no_time_cannot_pass_off_any_rate(median):
    measured = {
        **result_of()["candidates"][0],
        "iter_ms": {"median": median, "cv": 0.0},
        "samples_per_s": 1e300,
    }
    problem = candidate_problem(measured, SPEC["candidates"][0], 0, 2)
    assert problem is not None
    assert "iter_ms.median" in problem or "samples_per_s 1e+300 is not batch 512" in problem


def test_a_result_must_say_the_world_size_the_launch_ran():
    data = json.dumps(result_of(world_size=4096))
    assert parse_result(data, SPEC)["world_size"] == 4096  # nothing to hold it to
    with pytest.raises(ResultError, match="world_size is 4096, the launch ran 2 ranks"):
        parse_result(data, SPEC, world_size=2)


def test_an_executor_holds_a_result_to_its_launchs_ranks(tmp_path):
    launch = LaunchRequest(name="s1-l1", spec=SPEC, env={}, workdir=tmp_path, nproc_per_node=2, nnodes=3)
    launch.result_path.write_text(json.dumps(result_of(world_size=2)))
    with pytest.raises(ResultError, match="world_size is 2, the launch ran 6 ranks"):
        LocalExecutor().fetch_result("1", launch)


# ------------------------------------------------------------------ writing into the launch directory


def test_the_tuner_never_writes_through_a_link_planted_where_it_writes(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    workdir = launch_dir(tmp_path / "launch-0001")
    for name in ("spec.json", "trial.sh", "tag"):
        (workdir / name).symlink_to(victim)
        write_new(workdir / name, "the tuner's")
        assert (workdir / name).read_text() == "the tuner's"
        assert not (workdir / name).is_symlink()
    (workdir / "trial.log").symlink_to(victim)
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        open_log(workdir / "trial.log")
    assert victim.read_text() == "precious"


def test_a_launch_directory_that_is_a_link_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "launch-0001").symlink_to(elsewhere)
    with pytest.raises(OSError, match="launch-0001 is a symbolic link: refusing to write through it"):
        launch_dir(tmp_path / "launch-0001")


def test_a_study_never_writes_through_links_planted_in_launch_directories_to_come(store: Store, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    study = study_with(store, tmp_path, trials=4)
    planted = tmp_path / "runs" / f"study-{study.id}"
    (planted / "launch-0002").mkdir(parents=True)
    (planted / "launch-0002" / "spec.json").symlink_to(victim)
    (planted / "launch-0003").symlink_to(tmp_path)  # the whole directory
    final = StudyDriver(store, study.id, TamperingReplay({}, seed=7), poll_s=0.01).run()
    assert victim.read_text() == "precious"
    assert not (tmp_path / "spec.json").exists()
    # the link in launch 2 was replaced by the tuner's own file; the linked directory failed its launch
    assert not (planted / "launch-0002" / "spec.json").is_symlink()
    launches = {launch.seq: launch for launch in store.launches(study.id)}
    assert launches[2].state == "succeeded"
    assert final.state == "failed"
    assert "launch-0003 is a symbolic link" in final.error
    assert launches[3].state == "failed"
    assert launches[3].error.startswith("it could not be submitted: OSError: the launch directory")
    assert all(launch.state != "running" for launch in launches.values())


def test_a_directory_planted_where_the_result_goes_fails_the_launch_never_leaves_it_running(store, tmp_path):
    study = study_with(store, tmp_path, trials=4)
    (tmp_path / "runs" / f"study-{study.id}" / "launch-0002" / "result.json").mkdir(parents=True)
    final = StudyDriver(store, study.id, TamperingReplay({}, seed=7), poll_s=0.01).run()
    assert final.state == "failed"
    assert "result.json is a directory" in final.error
    launches = {launch.seq: launch for launch in store.launches(study.id)}
    assert launches[2].state == "failed"
    assert "result.json is a directory" in launches[2].error


# ------------------------------------------------------------------ a study past hostile results


def deep(launch, result):
    result["extra"] = nested(600)
    launch.result_path.write_text(json.dumps(result))


def huge_setup(launch, result):
    launch.result_path.write_text(json.dumps(result).replace('"setup_s": 0.0', '"setup_s": 1' + "0" * 400))


def zero_step(launch, result):
    first = result["candidates"][0]
    first["iter_ms"]["median"], first["samples_per_s"] = 0.0, 1e300
    launch.result_path.write_text(json.dumps(result))


def nan_and_padding(launch, result):
    result["candidates"][0]["iter_ms"]["p90"] = math.nan  # a figure the tuner does not read
    result["padding"] = "P" * (MAX_STORED_ENTRY + 1)
    launch.result_path.write_text(json.dumps(result))


def test_a_study_concludes_past_results_nested_deep_or_holding_huge_integers(store: Store, tmp_path):
    study = study_with(store, tmp_path)
    final = StudyDriver(store, study.id, TamperingReplay({2: deep, 3: huge_setup}, seed=7), poll_s=0.01).run()
    assert final.state == "done", final.error
    launches = {launch.seq: launch for launch in store.launches(study.id)}
    assert launches[2].state == "failed"
    assert f"nests deeper than {MAX_DEPTH} levels" in launches[2].error
    assert launches[3].state == "failed"
    assert "setup_s is 1000000000" in launches[3].error
    assert all(launch.state != "running" for launch in launches.values())


def test_a_study_concludes_past_a_timeless_step_nan_and_padding(store: Store, tmp_path):
    study = study_with(store, tmp_path)
    final = StudyDriver(store, study.id, TamperingReplay({2: zero_step, 3: nan_and_padding}, seed=7),
                        poll_s=0.01).run()  # fmt: skip
    assert final.state == "done", final.error
    launches = {launch.seq: launch for launch in store.launches(study.id)}
    zero, *rest = store.candidates(study.id, launch_id=launches[2].id)
    assert zero.state == "failed"
    assert "iter_ms.median is 0.0, expected a finite number > 0" in zero.error
    assert rest
    assert all(c.state == "ok" for c in rest)
    best = store.candidate(final.best_candidate_id)
    assert best is not None
    assert best.samples_per_s < 1e9
    # NaN is stored as null (PostgreSQL refuses NaN in JSON: the whole write failed), the padding left out
    first = store.candidates(study.id, launch_id=launches[3].id)[0]
    assert first.state == "ok"
    assert first.metrics["iter_ms"]["p90"] is None
    assert "padding" not in launches[3].summary
    assert launches[3].summary["not_stored"]["bytes_over_limit"]["padding"] > MAX_STORED_ENTRY
    assert launches[3].summary["world_size"] == RECORDED["world_size"]
