"""What the pre-job hook makes of the service's answer beyond its variables one by one: what a training
script takes together is dropped together, an answer labelled for another cluster or workload (or not
at all) is refused as the cache's is, and a failure is named by its cause (a refused request with what
the service said, an answer that is no JSON, a name the service would refuse, asked about at all)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotuner.job.exports import checked_config
from autotuner.job.qcomms import Tuned, tuned
from tests.autotuner.test_hook_hostile import GOOD, cached_files, hook, serve  # noqa: F401

# The reviewer's answer: an unknown forward precision beside a valid backward one, a batch beside a
# factor the gate refuses ("+" is no part of a plain decimal).
SKEW = {"AUTOTUNER_CONFIG": "c/w/2n/v4", "AUTOTUNER_FWD_PRECISION": "fp4", "AUTOTUNER_BWD_PRECISION": "bf16",
        "AUTOTUNER_BATCH_SIZE": "4096", "AUTOTUNER_LR_SCALE": "2.0e+00", "NCCL_NSOCKS_PERTHREAD": "4"}  # fmt: skip


def test_what_a_script_takes_together_the_hook_drops_together():
    config, dropped = checked_config({"exports": SKEW})
    assert config["exports"] == {"AUTOTUNER_CONFIG": "c/w/2n/v4", "NCCL_NSOCKS_PERTHREAD": "4"}
    assert "qcomms" not in config
    assert "batch_size" not in config
    assert "goes with AUTOTUNER_FWD_PRECISION, which was dropped" in dropped["AUTOTUNER_BWD_PRECISION"]
    assert "goes with AUTOTUNER_LR_SCALE, which was dropped" in dropped["AUTOTUNER_BATCH_SIZE"]
    assert tuned(config["exports"]) == Tuned(config="c/w/2n/v4")  # what a script then adopts: its own


def test_a_learning_rate_factor_without_its_batch_is_not_handed_on():
    config, dropped = checked_config(
        {"exports": {"AUTOTUNER_CONFIG": "c/w/2n/v4", "AUTOTUNER_LR_SCALE": "2"}}
    )
    assert config["exports"] == {"AUTOTUNER_CONFIG": "c/w/2n/v4"}
    assert "without AUTOTUNER_BATCH_SIZE" in dropped["AUTOTUNER_LR_SCALE"]
    whole, nothing = checked_config({"exports": {**SKEW, "AUTOTUNER_FWD_PRECISION": "fp8",
                                                 "AUTOTUNER_LR_SCALE": "2"}})  # fmt: skip
    assert (nothing, whole["batch_size"], whole["lr_scale"]) == ({}, 4096, 2.0)  # a whole config stays whole


def test_the_hook_prints_neither_half_and_says_why(tmp_path, serve):  # noqa: F811
    server = serve({"exports": {**SKEW, "AUTOTUNER_CONFIG": "c/w/2n/v4"}})
    proc = hook(tmp_path, server.url)
    assert proc.returncode == 0, proc.stderr
    exported = [line for line in proc.stdout.splitlines() if line.startswith("export ")]
    assert exported == ["export AUTOTUNER_CONFIG=c/w/2n/v4", "export NCCL_NSOCKS_PERTHREAD=4"]
    for name in (
        "AUTOTUNER_FWD_PRECISION",
        "AUTOTUNER_BWD_PRECISION",
        "AUTOTUNER_BATCH_SIZE",
        "AUTOTUNER_LR_SCALE",
    ):
        assert f"# nccl-autotuner: not exported: {name}: " in proc.stdout


@pytest.mark.parametrize(
    ("exports", "said"),
    [({**GOOD, "AUTOTUNER_CONFIG": "prod-b/w/1n/v3"}, "the config of prod-b/w, not of c/w"),
     ({**GOOD, "AUTOTUNER_CONFIG": "c/other/1n/v3"}, "the config of c/other, not of c/w"),
     ({k: v for k, v in GOOD.items() if k != "AUTOTUNER_CONFIG"}, "a config without its AUTOTUNER_CONFIG label"),
     # the gate's reason, not "without its label" (it had one)
     ({**GOOD, "AUTOTUNER_CONFIG": "c/w/v3"},
      "a config whose AUTOTUNER_CONFIG label was refused ('c/w/v3' is not a value of AUTOTUNER_CONFIG)")],
    ids=["another cluster", "another workload", "no label", "a label the gate drops"],
)  # fmt: skip
def test_a_live_answer_for_another_config_is_refused_as_a_cached_one_is(tmp_path, serve, exports, said):  # noqa: F811
    server = serve({"exports": exports})
    proc = hook(tmp_path, server.url)
    assert (proc.returncode, [line for line in proc.stdout.splitlines() if line[:1] != "#"]) == (0, [])
    assert f"the config service answered with {said}" in proc.stderr
    assert "and no cached config: starting the job with its own environment" in proc.stderr
    assert "# nccl-autotuner: the answer was not used" in proc.stdout
    assert cached_files(tmp_path) == []
    # with a config of its own cached, the job gets that one, and the cache stays as it was
    server.body = json.dumps({"exports": GOOD}).encode()
    assert hook(tmp_path, server.url).returncode == 0
    (cache,) = cached_files(tmp_path)
    before = cache.read_text()
    server.body = json.dumps({"exports": exports}).encode()
    fallback = hook(tmp_path, server.url)
    assert "export AUTOTUNER_CONFIG=c/w/1n/v3" in fallback.stdout
    assert "using the cached config c/w/1n/v3" in fallback.stderr
    assert cache.read_text() == before


FASTAPI_422 = {"detail": [{"type": "string_pattern_mismatch", "loc": ["path", "cluster"],
                           "msg": "String should match pattern '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$'"}]}  # fmt: skip


@pytest.mark.parametrize(
    ("status", "body", "said"),
    [(422, json.dumps(FASTAPI_422).encode(),
      "config service refused the request (HTTP 422: cluster: String should match pattern"),
     (403, b'{"detail": "this token may not read configs of c"}',
      "config service refused the request (HTTP 403: this token may not read configs of c)"),
     (400, b"<html>nginx</html>", "config service refused the request (HTTP 400: Bad Request)"),
     (503, b'{"detail": "the store is not reachable"}', "config service failed (HTTP 503: the store is not reachable)"),
     (200, b"[" * (1 << 20), "the config service's answer is malformed (not a config: JSON nested deeper"),
     (200, b"\xff\xfe{", "the config service's answer is malformed (not JSON: "),
     (200, b"1" * 900_000, "the config service's answer is malformed (not JSON: "),
     (200, b" " * ((1 << 20) + 1), "the config service's answer is malformed (over 1 MiB)"),
     # a detail list whose loc is not a list: said as the refusal it is, not "unreachable (TypeError)"
     (422, b'{"detail": [{"loc": 5, "msg": "nodes out of range"}, {"loc": null, "msg": "bad"}]}',
      "config service refused the request (HTTP 422: nodes out of range; bad)"),
     (401, b'{"detail": [{"loc": {"a": 1}, "msg": "bad token"}]}', "the config service refused the token (HTTP 401")],
    ids=["422", "403", "400 html", "503", "deep", "not utf-8", "huge int", "over 1 MiB", "odd loc", "401 odd loc"],
)  # fmt: skip
def test_a_failure_is_named_by_its_cause(tmp_path, serve, status, body, said):  # noqa: F811
    server = serve(body, status=status)
    proc = hook(tmp_path, server.url)
    assert (proc.returncode, proc.stdout) == (0, ""), proc.stderr
    assert said in proc.stderr
    assert "unreachable" not in proc.stderr
    assert "RecursionError" not in proc.stderr


def local_hook(tmp_path: Path, *args: str, extra_env: dict | None = None):
    """The hook pointed at a port nothing listens on: asked at all, it would say "unreachable"."""
    return hook(tmp_path, "http://127.0.0.1:9", *args, extra_env=extra_env)


@pytest.mark.parametrize(
    ("args", "said"),
    [(["--cluster", "p5 prod"], "autotuner env: cluster name 'p5 prod' is invalid: 1-128 characters"),
     (["--workload", "w\n"], "autotuner env: workload name 'w\\n' is invalid"),
     (["--nodes", "0"], "autotuner env: --nodes 0 is not a node count (1 to 1,000,000)"),
     (["--nodes", "1000001"], "autotuner env: --nodes 1000001 is not a node count")],
)  # fmt: skip
def test_what_the_service_would_refuse_is_said_before_asking(tmp_path, args, said):
    proc = local_hook(tmp_path, *args)
    assert proc.returncode == 0
    assert said in proc.stderr
    assert "no tuned config, the job starts with its own environment" in proc.stderr
    assert "unreachable" not in proc.stderr  # never asked


def test_an_odd_node_count_in_the_environment_is_passed_over_not_refused(tmp_path, serve):  # noqa: F811
    server = serve({"exports": GOOD})
    asked: list[str] = []
    answer = server.httpd.RequestHandlerClass.do_GET

    def recorded(handler) -> None:
        asked.append(handler.path)
        answer(handler)

    server.httpd.RequestHandlerClass.do_GET = recorded  # type: ignore[method-assign]
    proc = hook(tmp_path, server.url, extra_env={"AUTOTUNER_NODES": "0", "SLURM_JOB_NUM_NODES": "0"})
    assert proc.returncode == 0
    assert (
        "export AUTOTUNER_CONFIG=c/w/1n/v3" in proc.stdout
    )  # asked, without a node count (was: ?nodes=0, a 422)
    assert asked == ["/v1/configs/c/w"]


@pytest.mark.parametrize(
    ("args", "said", "secret"),
    [(["--server", "http://127.0.0.1:abc"], "no request was made (the server URL cannot be read", None),
     (["--server", "http://tok:s3cr3t@127.0.0.1:9/"], "the server URL carries credentials", "s3cr3t"),
     (["--server", "http://127.0.0.1:9/a b"], "the server URL holds a space or a control character", None),
     (["--server", "ftp://127.0.0.1:9"], "the server URL is not http(s)://host[:port]", None),
     (["--token", "SECRET1'SECRET2\nSECRET3"], "the token cannot be sent in a header", "SECRET"),
     (["--token", "SECRET1 SECRET2\nSECRET3"], "the token cannot be sent in a header", "SECRET"),
     (["--token", "t\u00f6k\u20acn"], "the token cannot be sent in a header", "k\u20ac")],
    ids=["port", "password", "space", "scheme", "quote", "space+newline", "not latin-1"],
)  # fmt: skip
def test_a_request_the_command_line_cannot_make_is_said_as_its_fault_and_shows_no_secret(
    tmp_path, args, said, secret
):
    """A bad URL read as "the service's answer is malformed", a token no header carries as "unreachable",
    and both printed part of what they held (the token after a quote or a space, the URL's password)."""
    proc = hook(tmp_path, "http://127.0.0.1:9", *args)
    assert (proc.returncode, proc.stdout) == (0, ""), proc.stderr
    assert said in proc.stderr
    assert "unreachable" not in proc.stderr
    assert "malformed" not in proc.stderr
    if secret:
        assert secret not in proc.stderr


def test_long_names_cut_alike_are_each_named():
    """Keyed by their first 60 characters, three dropped names were said as one."""
    names = ["X" * 56 + tail for tail in ("A" * 25, "B" * 25, "C" * 23)]
    config, dropped = checked_config({"exports": {**GOOD, **dict.fromkeys(names, "1")}})
    assert config is not None
    assert len(dropped) == 3
    assert all("characters (no variable a config sets has over" in why for why in dropped.values())
