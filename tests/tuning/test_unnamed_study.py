"""An unnamed study is named `cluster.workload.N`; with long names (each may be 128 characters) it is
cut to a name's length, a short hash keeping cut names apart. Before, a valid 128-character cluster was
refused, naming a study name the user never gave (found by the CLI review)."""

from __future__ import annotations

import json

from autotuner.names import NAME_MAX_LEN, is_name
from autotuner.tuning import StudySettings, create_study
from tests.helpers import LANDSCAPE

RECORDED = json.loads(LANDSCAPE.read_text())


def test_long_cluster_and_workload_names_make_a_valid_study_name(store, tmp_path):
    settings = StudySettings(executor="replay", trials=1, workdir=str(tmp_path / "runs"),
                             executor_options={"landscape": str(LANDSCAPE)})  # fmt: skip
    workload = {**RECORDED["workload"], "name": "w" * NAME_MAX_LEN}
    names = []
    for cluster in ("c" * NAME_MAX_LEN, "c" * (NAME_MAX_LEN - 1) + "d", "c" * NAME_MAX_LEN):
        study = create_study(store, cluster=cluster, workload=workload, space={}, settings=settings)
        assert study.cluster.name == cluster
        names.append(study.name)
    assert all(is_name(name) and len(name) <= NAME_MAX_LEN for name in names)
    assert len(set(names)) == 3  # two clusters alike but for their last letter, and a second study of one
    short = create_study(store, cluster="cpu-box", workload=RECORDED["workload"], space={}, settings=settings)
    assert short.name == f"cpu-box.{RECORDED['workload']['name']}.4"  # short names as before
