"""The demo's progress line says the convergence check while it trains and its cost once done."""

import httpx

from autotuner.cli.demo import _quality_progress


def client(launches):
    """A service whose study 3 has `launches` (in seq order), listed newest first as asked (a page of
    the oldest would miss a late quality launch)."""

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/studies/3/launches"
        assert request.url.params["order"] == "desc"
        return httpx.Response(200, json=launches[::-1])

    return httpx.Client(base_url="http://demo", transport=httpx.MockTransport(answer))


def launch(kind, wall_s, candidates=12):
    return {"kind": kind, "wall_s": wall_s, "candidates": candidates}


def test_the_progress_line_follows_the_quality_launch():
    assert _quality_progress(client([launch("confirm", 9.0)]), 3) is None  # not started: the usual line
    assert _quality_progress(client([launch("confirm", 9.0), launch("quality", None)]), 3) == (
        "convergence check: training 12 models"
    )
    done = _quality_progress(client([launch("quality", 61.6)]), 3)
    assert done == "convergence check: 12 models trained in 62 s"
