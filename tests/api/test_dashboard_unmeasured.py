"""What a study did not measure says so, and why: a failed study whose baseline never ran read
"Baseline — measured first"; a replay study's step panel read "No step measured." with no reason; a
(precision, batch) cell no trial tried was a blank square."""

from __future__ import annotations

import pytest

from tests.api.test_dashboard import browser, study_page  # noqa: F401
from tests.api.test_dashboard_edges import plant_study


@pytest.mark.browser
def test_a_failed_study_says_its_baseline_was_not_measured(browser, module_server):  # noqa: F811
    srv = module_server
    study, _ = plant_study(srv, "failed-early", "failed", error="the first launch could not start")
    page, errors = study_page(browser, srv, study)
    page.wait_for_function("document.getElementById('study-state').textContent === 'failed'", timeout=15_000)
    assert page.inner_text("#kpi-base") == "—"
    assert page.inner_text("#kpi-base-sub") == "not measured"
    assert not errors, errors
    page.context.close()


@pytest.mark.browser
def test_empty_panels_say_why(browser, module_server):  # noqa: F811
    srv = module_server
    study, _ = plant_study(srv, "replayed", "done", candidates=[
        {"kind": "baseline", "samples_per_s": 12_000.0},
        {"samples_per_s": 15_000.0, "fwd_precision": "bf16", "bwd_precision": "bf16", "batch_size": 128},
    ])  # fmt: skip
    page, errors = study_page(browser, srv, study)
    page.wait_for_selector("#chart-matrix .main-svg .xtick text", timeout=15_000)
    assert "replay executor" in page.inner_text("#chart-breakdown .chart-empty")
    # fp32 at 128 and bf16 at 64 were never tried: each cell says so
    cells = page.eval_on_selector_all("#chart-matrix .heatmaplayer text",
                                      "nodes => nodes.map(n => n.textContent)")  # fmt: skip
    assert sorted(cells) == ["12,000", "15,000", "not tried", "not tried"], cells
    assert not errors, errors
    page.context.close()
