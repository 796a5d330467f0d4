"""The demo's table of fastest candidates stays readable in an 80-column log (what CI and a narrow
terminal show): nothing is cut to "…", and a precision that ran as another says so."""

import io

import pytest
from rich.console import Console

import autotuner.cli.demo as demo


def _trial(kind, fwd, bwd, ran_fwd, ran_bwd, batch, samples_per_s, state="ok", threads="2"):
    env = {"NCCL_NET": "Socket", "NCCL_NSOCKS_PERTHREAD": "4", "NCCL_SOCKET_NTHREADS": threads}
    return {"kind": kind, "env": env,
            "fwd_precision": fwd, "bwd_precision": bwd, "effective_fwd_precision": ran_fwd,
            "effective_bwd_precision": ran_bwd, "batch_size": batch, "samples_per_s": samples_per_s,
            "a2a_ms": 4.56, "quant_error_fwd": 4.6e-3, "quant_error_bwd": None, "state": state,
            "pipeline": "sparse_dist", "iter_ms": 9.66 if samples_per_s else None,
            "breakdown_ms": {"compute": 7.2, "exposed_comm": 2.4, "input_dist": 0.5, "sparse_comm": 1.5,
                             "dense_comm": 1.0} if samples_per_s else None}  # fmt: skip


class _Client:
    def __init__(self, rows):
        self.rows, self.params = rows, None

    def get(self, url, params=None):
        self.params = params
        rows = self.rows

        class Response:
            def json(self):
                return {"data": rows}

        return Response()


def test_fastest_candidates_fit_80_columns(monkeypatch):
    console = Console(width=80, record=True, file=io.StringIO())
    monkeypatch.setattr(demo, "console", console)
    client = _Client([
        _trial("confirm", "int8", "int8", "int8", "int8", 1024, 106012.4),
        _trial("search", "bf16", "bf16", "fp16", "fp16", 512, 63821.0),
        _trial("search", "fp8", "bf16", "fp8", "bf16", 256, None, state="failed", threads="4"),
    ])  # fmt: skip
    demo._print_trials(client, 7)
    text = console.export_text()
    assert client.params["sort"] == "samples_per_s"
    assert client.params["order"] == "desc"
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    for expected in ("106,012", "bf16*", "fp8/bf16 ", "failed", "SOCKET_NTHREADS=2", "SOCKET_NTHREADS=4"):
        assert expected in text
    assert text.splitlines()[-1] == "* ran as fp16 (asked bf16)"
    assert "exposed comm" in text.splitlines()[-2]
    # What every row shares is said once, above the table
    assert text.splitlines()[1] == "in every row: NET=Socket NSOCKS_PERTHREAD=4, pipeline sparse_dist"
    # Each step as a bar to the same scale: 7.2 ms of 9.66 compute (7 of 10 cells), the rest exposed comm
    assert "9.7 " + "█" * 7 + "▒" * 3 in text
    assert text.count("NSOCKS_PERTHREAD") == 1
    assert "NCCL_" not in text.replace("NCCL_ prefix", "")


def test_no_measured_candidate_says_so(monkeypatch):
    console = Console(width=80, record=True, file=io.StringIO())
    monkeypatch.setattr(demo, "console", console)
    demo._print_trials(_Client([]), 7)
    assert console.export_text() == "no candidate was measured\n"


def test_step_bars_start_in_one_column(monkeypatch):
    # before: "9.7 ███" and "12.3 ███" were one right-justified cell, so bars to one scale began at
    # different columns and their lengths could not be compared by eye
    console = Console(width=80, record=True, file=io.StringIO())
    monkeypatch.setattr(demo, "console", console)
    slow = {**_trial("search", "fp32", "fp32", "fp32", "fp32", 512, 41000.0), "iter_ms": 12.34}
    slow["breakdown_ms"] = {**slow["breakdown_ms"], "compute": 9.9}
    demo._print_trials(_Client([_trial("confirm", "int8", "int8", "int8", "int8", 1024, 106012.4), slow]), 7)
    rows = [line for line in console.export_text().splitlines() if "█" in line and "compute" not in line]
    assert len(rows) == 2
    assert len({line.index("█") for line in rows}) == 1
    assert rows[1].count("█") + rows[1].count("▒") == 10  # the longest step fills the bar


class _Studies:
    """GET /v1/studies/{id} answering each state in turn; no quality launch yet."""

    def __init__(self, states):
        self.states = list(states)

    def get(self, url, params=None):
        body = self.states.pop(0) if url.endswith("/7") else []

        class Response:
            def json(self):
                return body

        return Response()


def test_a_search_that_ends_early_fills_its_bar(monkeypatch):
    # the demo's space on CPU is measured whole in 2 of its 3 search launches: it said "done 2/3"
    console = Console(width=80, record=True, file=io.StringIO(), force_terminal=True)  # the bar's
    monkeypatch.setattr(demo, "console", console)
    monkeypatch.setattr(demo.time, "sleep", lambda s: None)
    study = {"id": 7, "state": "running", "launches_done": 0, "best": None}
    states = [{**study, "launches_done": 2}, {**study, "state": "confirming", "launches_done": 2},
              {**study, "state": "done", "launches_done": 2}]  # fmt: skip
    assert demo._follow(_Studies(states), study)["state"] == "done"
    drawn = console.export_text().strip()  # a terminal's redraws, recorded one after another
    assert "done " in drawn
    assert "2/2" in drawn.rpartition("done ")[2]


def test_off_a_terminal_the_demo_says_a_line_each_time_its_standing_changes(monkeypatch):
    """rich's bar draws nothing off a terminal (CI, `make demo | tee`): minutes of silence."""
    console = Console(width=80, record=True, file=io.StringIO())
    monkeypatch.setattr(demo, "console", console)
    monkeypatch.setattr(demo.time, "sleep", lambda s: None)
    study = {"id": 7, "state": "queued", "launches_done": 0, "best": None}
    best = {"samples_per_s": 12345.0}
    states = [{**study, "state": "running"}, {**study, "state": "running"}, {**study, "state": "running"},
              {**study, "state": "running", "launches_done": 1, "best": best},
              {**study, "state": "running", "launches_done": 1, "best": best},
              {**study, "state": "confirming", "launches_done": 2, "best": best},
              {**study, "state": "done", "launches_done": 2, "best": best}]  # fmt: skip
    assert demo._follow(_Studies(states), study)["state"] == "done"
    assert console.export_text().splitlines() == [
        "running 0/3", "running 1/3 best 12,345 samples/s", "confirming 2/2 best 12,345 samples/s",
        "done 2/2 best 12,345 samples/s",
    ]  # fmt: skip


def test_the_demos_browse_again_command_runs_as_printed(tmp_path):
    """It said `autotuner serve`, not on PATH after `make demo`, on port 8000 whatever port the demo took."""
    import shlex
    import sys
    from pathlib import Path

    from autotuner.cli.demo import browse_again

    data = tmp_path / "a dir"
    words = shlex.split(browse_again(data, 8123))
    assert words[:2] == [f"AUTOTUNER_DATA_DIR={data}", "AUTOTUNER_PUBLIC_READ=1"]
    assert Path(words[2]) == Path(sys.executable).parent / "autotuner"
    assert Path(words[2]).exists()
    assert words[3:] == ["serve", "--port", "8123"]


def test_the_demos_help_says_a_whole_sentence(capsys):
    """It took the docstring's first line, which stopped at "a small study on 2 local CPU ranks, the"."""
    with pytest.raises(SystemExit):
        demo.main(["--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert (
        "2 local CPU ranks, the dashboard URL while it runs, and the tuned export lines a job would get when it ends."
        in said
    )
