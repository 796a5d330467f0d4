"""The throughput matrix of a study that measured one (precision, batch) cell: its colour bar spread a
single value over five ticks that read "15,665 15,665 15,665 15,664 15,664". One value has no scale."""

from __future__ import annotations

import pytest

from tests.api.test_dashboard import browser, study_page  # noqa: F401
from tests.api.test_dashboard_edges import plant_study


@pytest.mark.browser
def test_one_measured_cell_draws_no_colour_scale(browser, module_server):  # noqa: F811
    srv = module_server
    one, _ = plant_study(srv, "one-cell", "done", candidates=[
        {"kind": "baseline", "samples_per_s": 12_145.2},
        {"samples_per_s": 15_664.7},
    ])  # fmt: skip
    two, _ = plant_study(srv, "two-cells", "done", candidates=[
        {"kind": "baseline", "samples_per_s": 12_145.2},
        {"samples_per_s": 48_000.0, "batch_size": 256},
    ])  # fmt: skip
    for study, scales in ((one, 0), (two, 1)):
        page, errors = study_page(browser, srv, study)
        page.wait_for_selector("#chart-matrix .main-svg .xtick text", timeout=15_000)
        assert page.locator("#chart-matrix .colorbar").count() == scales
        ticks = page.eval_on_selector_all("#chart-matrix .colorbar .cbaxis text, #chart-matrix .colorbar .ytick text",
                                          "nodes => nodes.map(n => n.textContent)")  # fmt: skip
        assert len(ticks) == len(set(ticks)), ticks
        assert not errors, errors
        page.context.close()
