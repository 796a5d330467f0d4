"""What a review of the dashboard found it said wrong: a heatmap cell whose trials all crashed labelled
"infeasible" (over the quantization-error limit), bidi controls obeyed in tooltips, "every launch ran
to the end" of a study with no launch, and a re-validation reason that could carry U+202E."""

from __future__ import annotations

import pytest

from tests.api.test_dashboard import browser, open_page, study_page  # noqa: F401
from tests.api.test_dashboard_edges import plant_study

CELLS = [
    {"kind": "baseline", "samples_per_s": 10_000.0, "env": {"NCCL_NSOCKS_PERTHREAD": "\u202e4"}},
    {"fwd_precision": "fp8", "bwd_precision": "fp8", "state": "failed", "error": "fp8 not supported"},
    {"fwd_precision": "fp16", "bwd_precision": "fp16", "state": "infeasible", "samples_per_s": 12_000.0,
     "quant_error_fwd": 0.2, "quant_error_bwd": 0.3},
    {"fwd_precision": "bf16", "bwd_precision": "bf16", "state": "failed", "error": "out of memory"},
    {"fwd_precision": "bf16", "bwd_precision": "bf16", "state": "infeasible", "samples_per_s": 11_000.0,
     "quant_error_fwd": 0.2, "quant_error_bwd": 0.3},
]  # fmt: skip


def matrix_study(srv, name: str) -> int:
    study_id, _ = plant_study(srv, name, "done", candidates=CELLS)
    return study_id


def test_the_matrix_counts_failed_and_infeasible_trials_apart(module_server):
    study_id = matrix_study(module_server, "matrix-rest")
    matrix = module_server.client("read").get(f"/v1/studies/{study_id}/insights").json()["matrix"]
    cells = {
        p: {k: matrix[k][i][0] for k in ("trials", "failed", "infeasible")}
        for i, p in enumerate(matrix["precisions"])
    }
    assert matrix["batch_sizes"] == [64]
    assert cells == {
        "fp32/fp32": {"trials": 1, "failed": 0, "infeasible": 0},
        "fp8/fp8": {"trials": 1, "failed": 1, "infeasible": 0},
        "fp16/fp16": {"trials": 1, "failed": 0, "infeasible": 1},
        "bf16/bf16": {"trials": 2, "failed": 1, "infeasible": 1},
    }


@pytest.mark.browser
def test_a_cell_that_only_failed_says_failed(browser, module_server):  # noqa: F811
    srv = module_server
    page, errors = study_page(browser, srv, matrix_study(srv, "matrix-page"))
    page.wait_for_selector("#chart-matrix .main-svg", timeout=15_000)
    labels = page.locator("#chart-matrix g.heatmap-label text").all_text_contents()  # one a cell with text
    assert sorted(labels) == ["10,000", "failed", "infeasible", "infeasible / failed"], labels
    hover = page.evaluate(
        "document.getElementById('chart-matrix').data[0].customdata"
    )  # the tooltip's counts
    assert sorted(row[0] for row in hover) == [
        "1 trial(s)", "1 trial(s): 1 failed", "1 trial(s): 1 infeasible", "2 trial(s): 1 infeasible, 1 failed",
    ]  # fmt: skip
    assert errors == []


@pytest.mark.browser
def test_a_tooltip_shows_bidi_controls_as_escapes(browser, module_server):  # noqa: F811
    """el() escaped U+202E in text and set it raw in a title, where the tooltip obeyed it."""
    srv = module_server
    page, errors = study_page(browser, srv, matrix_study(srv, "bidi-title"))
    page.wait_for_selector("#trials tbody tr[data-trial] td.env", timeout=15_000)
    title = page.locator("#trials tbody td.env").first.get_attribute("title")
    assert title == "NCCL_NSOCKS_PERTHREAD=\\u202e4"  # shown as an escape, as the cell's text is
    assert "\u202e" not in page.inner_text("#trials tbody")
    assert errors == []


@pytest.mark.browser
def test_a_study_that_ended_before_any_launch_says_no_launches(browser, module_server):  # noqa: F811
    srv = module_server
    study_id, _ = plant_study(srv, "failed-without-launches", "failed", error="could not start")
    page, errors = study_page(browser, srv, study_id)
    page.wait_for_function("document.getElementById('study-state').textContent === 'failed'", timeout=15_000)
    page.wait_for_selector("#failed-list p.empty:not(:has-text('Loading'))", timeout=15_000)
    assert page.inner_text("#failed-list") == "No launches."
    ran, _ = plant_study(srv, "ran-to-the-end", "done", candidates=[{"samples_per_s": 1.0}])
    page.goto(f"{srv.url}/studies/{ran}")
    page.wait_for_selector("#failed-list p.empty:not(:has-text('Loading'))", timeout=15_000)
    assert page.inner_text("#failed-list") == "None: every launch ran to the end."
    assert errors == []


@pytest.mark.parametrize(
    ("reason", "named"),
    [
        ("after the \u202eupgrade", "U+202E (RIGHT-TO-LEFT OVERRIDE) at character 10"),
        ("zero\u200bwidth", "U+200B (ZERO WIDTH SPACE)"),
        ("two\u2028lines", "U+2028 (LINE SEPARATOR)"),
        ("two\u2029paragraphs", "U+2029 (PARAGRAPH SEPARATOR)"),
        ("a tab\there", "U+0009"),
        ("a C1 control \x85", "U+0085"),
        ("a tag \U000e0041", "U+E0041"),
    ],
)
def test_a_revalidation_reason_with_a_format_character_is_refused_naming_it(module_server, reason, named):
    response = module_server.client("write").post(
        "/v1/configs/cpu-box/small/revalidate", json={"reason": reason}
    )
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "reason"]
    assert named in error["msg"]
    assert "give one line of plain text" in error["msg"]


def test_a_plain_reason_is_not_refused(module_server):
    response = module_server.client("write").post(
        "/v1/configs/cpu-box/small/revalidate", json={"reason": "après la mise à jour · 升级后"}
    )
    assert response.status_code == 404, response.text  # no config published: past the body's checks
