"""A config card read whole: its speedups and their 95% CIs in one notation, the claim's own
("3.43x [3.26-3.61]", as the ladder's lines come written), where one card wrote it three ways; and on
a phone, which version is served, the export lines and the live state in view, not scrolled or cut."""

from __future__ import annotations

import pytest

from autotuner.store import Store
from tests.api.service import TOKENS, make_server
from tests.api.test_dashboard import browser, enter_token, open_page  # noqa: F401
from tests.api.test_dashboard_edges import plant_study

EVIDENCE = {"speedup": 3.43, "ci_low": 3.26, "ci_high": 3.61, "rounds": 4, "significant": True,
            "tuned_samples_per_s": 51_363.0, "baseline_samples_per_s": 14_975.0}  # fmt: skip
PHONE = {
    "viewport": {"width": 390, "height": 844},
    "device_scale_factor": 1,
    "is_mobile": True,
    "bypass_csp": True,
}


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    srv = make_server(tmp_path_factory.mktemp("cards"), replay_delay_s=0)
    store = Store(f"sqlite:///{srv.data_dir / 'autotuner.db'}")
    store.upsert_workload("a-rather-long-workload-name", {})
    # v1 (pinned, served) as a re-validation's look publishes a version again: its interval at 97.5%
    for speedup, level in ((3.43, {"confidence": 0.975}), (2.10, {})):
        store.publish_config(cluster="a-cluster-with-a-long-name", workload="a-rather-long-workload-name", nodes=1,
                             env={"NCCL_NSOCKS_PERTHREAD": "4", "NCCL_SOCKET_NTHREADS": "8"}, fwd_precision="fp32",
                             bwd_precision="fp32", batch_size=256, sharding="table_wise",
                             evidence={**EVIDENCE, "speedup": speedup, **level})  # fmt: skip
    store.pin_config("a-cluster-with-a-long-name", "a-rather-long-workload-name", 1, 1)
    store.dispose()
    srv.start()
    yield srv
    srv.kill()


def configs_page(page, srv):
    page.goto(srv.url + "/configs")
    enter_token(page, TOKENS["read"])
    page.wait_for_selector(".config-card .history tbody tr", timeout=20_000)


@pytest.mark.browser
def test_a_card_writes_each_interval_one_way(browser, published):  # noqa: F811
    errors: list[str] = []
    page = open_page(browser, errors)
    configs_page(page, published)
    speedup = (
        page.locator(".config-card dt", has_text="Speedup")
        .locator("xpath=following-sibling::dd[1]")
        .inner_text()
    )
    assert speedup == "3.43x [3.26-3.61] 97.5% CI, 4 rounds", speedup  # its level, not always 95%
    rows = page.locator(".config-card .history tbody tr").all_inner_texts()
    assert any("3.43x [3.26-3.61]" in row for row in rows), rows
    assert any("2.10x [3.26-3.61]" in row for row in rows), rows
    card = page.inner_text(".config-card")
    for other in ("×", "–", "[3.26, 3.61]"):
        assert other not in card.replace("learning rate ×", ""), other
    assert errors == []
    page.context.close()


@pytest.mark.browser
def test_a_card_on_a_phone_shows_what_is_served_and_the_whole_export(browser, published):  # noqa: F811
    context = browser.new_context(**PHONE)
    page = context.new_page()
    configs_page(page, published)
    width = page.evaluate("window.innerWidth")
    for badge in ("serving", "pinned"):
        box = page.locator(".config-card .history tbody .badge", has_text=badge).bounding_box()
        assert box, badge
        assert box["x"] >= 0, (badge, box)
        assert box["x"] + box["width"] <= width, (badge, box, width)
    pre = page.locator(".config-card pre")
    assert "AUTOTUNER_CONFIG=a-cluster-with-a-long-name/a-rather-long-workload-name/1n/v1" in pre.inner_text()
    assert pre.evaluate("n => n.scrollWidth <= n.clientWidth"), "an export line runs out of view"
    box = pre.bounding_box()
    assert box["x"] + box["width"] <= width, box
    context.close()


@pytest.mark.browser
def test_the_live_state_is_read_whole_on_a_phone(browser, published):  # noqa: F811
    study, _ = plant_study(
        published, "live-state", "done", candidates=[{"kind": "baseline", "samples_per_s": 1.0}]
    )
    context = browser.new_context(**PHONE)
    page = context.new_page()
    page.goto(f"{published.url}/studies/{study}")
    enter_token(page, TOKENS["read"])
    page.wait_for_function(
        "document.getElementById('live-text').textContent === 'study done'", timeout=15_000
    )
    live = page.locator("#live-text")
    assert live.evaluate("n => n.scrollWidth <= n.clientWidth"), "the live state is cut"
    box, bar = live.bounding_box(), page.locator(".topbar-inner").bounding_box()
    assert box["x"] + box["width"] <= page.evaluate("window.innerWidth"), box
    assert box["y"] >= bar["y"], (box, bar)
    assert box["y"] + box["height"] <= bar["y"] + bar["height"], (box, bar)
    context.close()
