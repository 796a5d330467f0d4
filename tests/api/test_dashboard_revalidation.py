"""The configs page in real headless Chromium: when and on what the served config was validated,
the stale note when jobs run on another stack, and the re-validation history as it happens."""

from __future__ import annotations

import pytest

from tests.api.service import TOKENS
from tests.api.test_dashboard import ARTIFACTS, browser, enter_token, open_page  # noqa: F401 - a fixture
from tests.api.test_revalidation import HEADER, UPGRADED, serve, until
from tests.tuning.test_revalidate import NEW_STACK, landscape


@pytest.mark.browser
def test_the_config_card_shows_validation_staleness_and_history(browser, tmp_path):  # noqa: F811
    server, recorded = serve(tmp_path, AUTOTUNER_REVALIDATE_ON_MISMATCH="0")
    errors: list[str] = []
    try:
        jobs = server.client("read")
        assert (
            jobs.get("/v1/configs/cpu-box/small", headers={HEADER: UPGRADED}).json()["fingerprint_match"]
            is False
        )
        until(
            "the report is written", lambda: jobs.get("/v1/configs/cpu-box/small/validations").json()["stale"]
        )
        page = open_page(browser, errors)
        page.goto(server.url + "/configs")
        enter_token(page, TOKENS["read"])
        page.wait_for_selector(".config-card .warn-note.stale", timeout=20_000)
        card = page.inner_text(".config-card")
        assert "validated just now on driver 550.54.15 · NCCL 2.21.5 · 1 node" in card
        assert page.inner_text(".config-card .warn-note.stale[data-reason=fingerprint]") == (
            "stale: driver 550.54.15 -> 570.86.15, NCCL 2.21.5 -> 2.23.4 since validation (1 job)")  # fmt: skip
        assert "re-validations (0)" in card.lower()
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dashboard-config-stale.png"), full_page=True)

        landscape(recorded, NEW_STACK, gain=True)
        asked = server.client("write").post(
            "/v1/configs/cpu-box/small/revalidate", json={"reason": "after the upgrade"}
        )
        assert asked.status_code == 202, asked.text
        # the page polls: the held re-validation appears, the stale note goes, the stack is the new one
        page.wait_for_selector(".revalidations tr[data-validation] .badge.s-ok", timeout=60_000)
        page.wait_for_selector(".config-card .warn-note.stale", state="detached", timeout=30_000)
        page.wait_for_function("document.querySelector('.config-card .validated').textContent.includes('570.86.15')",
                               timeout=30_000)  # fmt: skip
        row = page.inner_text(".revalidations tr[data-validation]")
        assert "v1" in row
        assert "manual" in row
        assert "held" in row
        assert "driver 570.86.15 · NCCL 2.23.4 · 1 node" in row
        assert "kept v1: validated on driver 570.86.15, NCCL 2.23.4, 1 node" in row
        page.screenshot(path=str(ARTIFACTS / "dashboard-config-revalidated.png"), full_page=True)
        assert errors == []
    finally:
        server.kill()


@pytest.mark.browser
def test_a_long_history_shows_its_latest_versions_and_a_batch_change_its_learning_rate(browser, tmp_path):  # noqa: F811
    from autotuner.store import Store
    from tests.api.service import make_server

    server = make_server(tmp_path)
    store = Store(f"sqlite:///{server.data_dir / 'autotuner.db'}")
    store.upsert_workload("w", {})
    for version in range(1, 26):  # an older store's worth of re-validations and republishes
        store.publish_config(cluster="c", workload="w", nodes=2, env={}, fwd_precision="fp32", bwd_precision="fp32",
                             batch_size=512 * (1 + version % 2), lr_scale=2.0 if version % 2 else None,
                             sharding="table_wise", evidence={"speedup": 1.0 + version / 100})  # fmt: skip
    store.dispose()
    server.start()
    errors: list[str] = []
    try:
        page = open_page(browser, errors)
        page.goto(server.url + "/configs")
        enter_token(page, TOKENS["read"])
        page.wait_for_selector(".config-card .history table tbody tr", timeout=20_000)
        card = page.inner_text(".config-card")
        assert "version history (latest 20)" in card.lower()
        rows = page.locator(".config-card .history:not(.revalidations) tbody tr").all_inner_texts()
        assert [r.split()[0] for r in rows] == [f"v{v}" for v in range(25, 5, -1)]  # newest first
        assert "1,024 (learning rate × 2.00) · table_wise" in card  # v25: batch 1024 under lr x2
        assert "export AUTOTUNER_LR_SCALE=2" in page.inner_text(".config-card pre")
        assert errors == []
    finally:
        server.kill()


@pytest.mark.browser
def test_a_bad_row_is_said_on_its_own_card_and_every_other_card_is_drawn(browser, tmp_path):  # noqa: F811
    """One older version whose data cannot be read made its key's history answer 500, and the page,
    which fetched every card's parts together, drew no card at all."""
    from sqlalchemy import text

    from autotuner.store import Store
    from tests.api.service import make_server

    server = make_server(tmp_path)
    store = Store(f"sqlite:///{server.data_dir / 'autotuner.db'}")
    for workload in ("good", "odd"):
        store.upsert_workload(workload, {})
        for _ in range(2):
            store.publish_config(cluster="c", workload=workload, nodes=1, env={"NCCL_NSOCKS_PERTHREAD": "4"},
                                 fwd_precision="fp32", bwd_precision="fp32", batch_size=512,
                                 sharding="table_wise", evidence={"speedup": 1.1})  # fmt: skip
    with store.engine.begin() as conn:  # odd's v1, as an older version (or a hand) left it
        conn.execute(text("UPDATE at_configs SET env = 'not json' WHERE version = 1 AND workload_id = "
                          "(SELECT id FROM at_workloads WHERE name = 'odd')"))  # fmt: skip
    store.dispose()
    server.start()
    errors: list[str] = []
    try:
        history = server.client("read").get("/v1/configs/c/odd/history", params={"nodes": 1})
        assert history.status_code == 200, history.text
        assert [(v["version"], v["error"] is not None) for v in history.json()] == [(2, False), (1, True)]
        page = open_page(browser, errors)
        page.goto(server.url + "/configs")
        enter_token(page, TOKENS["read"])
        page.wait_for_selector(".config-card[data-key='c/odd/1'] tr.unreadable", timeout=20_000)
        assert page.locator(".config-card").count() == 2
        good = page.inner_text(".config-card[data-key='c/good/1']")
        assert "export NCCL_NSOCKS_PERTHREAD=4" in good
        assert "version history (2)" in good.lower()
        odd = page.inner_text(".config-card[data-key='c/odd/1'] tr.unreadable")
        assert odd.split()[0] == "v1"
        assert "its stored data cannot be read" in odd
        assert errors == []
    finally:
        server.kill()
