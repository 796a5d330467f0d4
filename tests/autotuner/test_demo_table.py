"""The demo's table of fastest candidates stays readable in an 80-column log (what CI and a narrow
terminal show): nothing is cut to "…", and a precision that ran as another says so."""

import io

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
