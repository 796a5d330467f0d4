"""A trial's text reaches people: the CLI's terminal, the service's log, a re-validation's words. It is
user code on the cluster and may write escape sequences (a terminal obeys them: a clipboard write, a
screen clear, a hyperlink), rich markup ("[/]" crashed the print), a newline (a forged log record). What
it wrote is shown, never obeyed (audit: each case below was reproduced on the code before)."""

from __future__ import annotations

import copy
import json

from fastapi.testclient import TestClient
from rich.console import Console

from api.app import create_app
from api.settings import Settings
from autotuner.cli.claim_report import ClaimText, print_claim
from autotuner.cli.commands import app
from autotuner.executors.results import parse_result
from autotuner.job.fingerprint import describe, describe_diff
from autotuner.store import Store
from tests.autotuner.test_cli import db, runner, tuned  # noqa: F401 (fixtures)
from tests.helpers import DATA

REAL = json.loads((DATA / "trial-result-dlrm.json").read_text())
ESCAPES = "\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2J"  # a clipboard write, a screen clear
MARKUP = "[/] [link=https://evil.example]IB[/link] [bold green]all checks passed"
FORGED = "NVIDIA H100\r\n2099-01-01 00:00:00,000 WARNING api.auth: admin token rotated"


def test_a_results_text_is_stored_printable_and_an_error_keeps_its_lines():
    result = copy.deepcopy(REAL)
    result["nccl_effective"]["network"] = f"Socket{ESCAPES}"
    result["device_name"] = FORGED
    result["candidates"][0] = {
        **result["candidates"][0],
        "status": "failed",
        "error": f"Traceback\n  {ESCAPES}\u202e",
    }
    parsed = parse_result(json.dumps(result))
    assert parsed["nccl_effective"]["network"] == "Socket\\x1b]52;c;cm0gLXJmIH4K\\x07\\x1b[2J"
    assert (
        parsed["device_name"]
        == "NVIDIA H100\\x0d\\x0a2099-01-01 00:00:00,000 WARNING api.auth: admin token rotated"
    )
    assert parsed["candidates"][0]["error"] == "Traceback\n  \\x1b]52;c;cm0gLXJmIH4K\\x07\\x1b[2J\\u202e"
    assert parse_result(json.dumps(REAL)) == REAL  # a real result is unchanged


def test_a_stored_fingerprint_is_described_on_one_printable_line():
    said = describe({"gpu": FORGED, "driver": f"550{ESCAPES}", "nodes": "1"})
    assert "\n" not in said
    assert "\x1b" not in said
    assert said.startswith("NVIDIA H100\\x0d\\x0a2099-01-01")
    assert "\n" not in describe_diff({"gpu": (FORGED, "NVIDIA A100")})


def test_the_cli_shows_stored_text_and_never_reads_it_as_markup(tuned, db):  # noqa: F811
    store = Store(db)
    study = store.studies()[0]
    store.update_study(study.id, inert={"NCCL_NSOCKS_PERTHREAD": f"NCCL uses Socket{ESCAPES} {MARKUP}"})
    config = store.served_configs()[0]
    with store.engine.begin() as conn:  # what the config was published with, as a trial's words
        conn.exec_driver_sql("UPDATE at_configs SET evidence = ? WHERE id = ?",
                             (json.dumps({**config.evidence, "inert": {"NCCL_X": MARKUP + ESCAPES}}), config.id))  # fmt: skip
    store.dispose()
    for args in (["tune", "--study", study.name], ["configs", "show", "cpu-box", "small"]):
        result = runner.invoke(app, [*args, "--db", db])
        assert result.exit_code == 0, (
            result.output
        )  # before: MarkupError, and `configs show` printed no config
        assert "\x1b" not in result.output
        assert "\\x1b]52;c;" in result.output  # the escape, shown
        assert "[/] [link=https://evil.example]IB[/link]" in result.output  # as written, not a link


def test_a_failed_studys_error_with_markup_is_printed_as_it_is(tuned, db):  # noqa: F811
    store = Store(db)
    study = store.studies()[0]
    store.update_study(study.id, state="failed", error=f"exit 1 [/] {ESCAPES}")
    store.dispose()
    result = runner.invoke(app, ["tune", "--study", study.name, "--db", db])
    assert "exit 1 [/] \\x1b]52" in result.output
    assert "\x1b" not in result.output


def test_a_revalidation_reason_must_be_one_line(tmp_path):
    settings = Settings(data_dir=tmp_path, tokens="w:write", scheduler=False)
    with TestClient(create_app(settings), headers={"Authorization": "Bearer w"}) as client:
        answer = client.post("/v1/configs/c/w/revalidate", json={"reason": "fine\n2099 WARNING forged"})
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == ["body", "reason"]


def test_our_own_words_keep_their_unicode_and_only_controls_are_escaped():
    # before: every non-ASCII character was escaped on the terminal, so the demo's quality line read
    # "baseline 0.5752 \xb1 0.0023 (seed spread)"
    console = Console(record=True, width=200)
    text = ClaimText(ladder=[], quality="quality: baseline 0.5752 ± 0.0023 (seed spread)",
                     inert=[f"NCCL_X: measured on 英伟达 H100{ESCAPES}\u202e\x9b2J\u2028"])  # fmt: skip
    print_claim(console, [], text)
    said = console.export_text()
    assert "baseline 0.5752 ± 0.0023 (seed spread)" in said
    assert "measured on 英伟达 H100\\x1b]52;c;cm0gLXJmIH4K\\x07\\x1b[2J\\u202e\\x9b2J\\u2028" in said
