"""The optimization history of a study with a few trials: plotly stepped its trial axis by 0.5 and the
integer format rounded each step, so the axis read "0 1 1 2 2 3 3" and the baseline's point (trial 1)
sat beside the second "1"."""

from __future__ import annotations

import pytest

from tests.api.test_dashboard import browser, study_page  # noqa: F401
from tests.api.test_dashboard_edges import plant_study


@pytest.mark.browser
def test_a_short_history_labels_each_trial_once(browser, module_server):  # noqa: F811
    srv = module_server
    study, _ = plant_study(srv, "three-trials", "done", candidates=[
        {"kind": "baseline", "samples_per_s": 12_000.0},
        {"samples_per_s": 15_000.0},
        {"samples_per_s": 11_000.0},
    ])  # fmt: skip
    page, errors = study_page(browser, srv, study)
    page.wait_for_selector("#chart-history .main-svg .xtick", timeout=15_000)
    ticks = page.eval_on_selector_all("#chart-history .xtick text", "nodes => nodes.map(n => n.textContent)")
    assert len(ticks) == len(set(ticks)), ticks
    assert ticks == ["0", "1", "2", "3"], ticks
    assert not errors, errors
    page.context.close()
