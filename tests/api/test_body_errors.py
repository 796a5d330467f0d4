"""Bad bodies are answered with what is wrong with them: a body Python's JSON parser gives up on (an
integer past 4,300 digits, nesting thousands deep, bytes that are not UTF-8) got FastAPI's bare "There
was an error parsing the body"; a space's env problem is located under env, at the body's own key."""

from __future__ import annotations

import json

import pytest

from tests.api.service import replay_study_body

BODY = json.dumps(replay_study_body(None))


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        (
            BODY.replace('"trials": 3', '"trials": ' + "1" * 5000).encode(),
            "an integer has more than 4300 digits",
        ),
        (
            BODY.replace(
                '"allow_batch_change": true', '"allow_batch_change": ' + "[" * 5000 + "]" * 5000
            ).encode(),
            "arrays or objects are nested too deep",
        ),
        (BODY.replace('"cpu-box"', '"cpu-b\u00e9x"').encode("latin-1"), "it is not UTF-8 text (byte "),
    ],
    ids=["long-integer", "deep-nesting", "not-utf8"],
)
def test_a_body_the_parser_gives_up_on_says_why(module_server, raw, said):
    assert raw != BODY.encode()  # the body was made bad (the text it replaces is there)
    response = module_server.client("write").post(
        "/v1/studies", content=raw, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400, response.text
    detail = response.json()["detail"]
    assert detail.startswith("the body cannot be read as JSON: "), detail
    assert said in detail


def test_other_http_errors_are_answered_as_before(module_server):
    response = module_server.client(None).get("/v1/studies")
    assert response.status_code == 401
    assert response.json() == {"detail": "a bearer token is required"}
    assert response.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize(
    ("env", "loc"),
    [
        ({"NCCL_NSOCKS_PERTHREAD": [[1]]}, ["body", "space", "env", "NCCL_NSOCKS_PERTHREAD"]),
        ({"NCCL_NSOCKS_PERTHREAD": 5}, ["body", "space", "env", "NCCL_NSOCKS_PERTHREAD"]),
        (
            {"NCCL_NSOCKS_PERTHREAD": {"low": 1, "high": "x"}},
            ["body", "space", "env", "NCCL_NSOCKS_PERTHREAD"],
        ),
        ({"BAD-NAME": ["1"]}, ["body", "space", "env", "BAD-NAME"]),
        ({"BAD'NAME": ["1"]}, ["body", "space", "env", "BAD'NAME"]),
        ({"BAD\x01NAME": ["1"]}, ["body", "space", "env", "BAD\x01NAME"]),
    ],
)
def test_an_env_problem_is_located_at_the_bodys_own_key_under_env(module_server, env, loc):
    body = replay_study_body(None)
    body["space"]["env"] = env
    response = module_server.client("write").post("/v1/studies", json=body)
    assert response.status_code == 422, response.text
    assert [e["loc"] for e in response.json()["detail"]] == [loc]


@pytest.mark.parametrize(
    ("space", "loc"),
    [
        # an entry of fixed_env or allow_risky is located there, not under env (where a client looks
        # in vain: fixed_env's NCCL_NET is not in its env)
        ({"fixed_env": {"NCCL_NET": None}}, ["body", "space", "fixed_env", "NCCL_NET"]),
        ({"fixed_env": {"LD_PRELOAD": "/x.so"}}, ["body", "space", "fixed_env", "LD_PRELOAD"]),
        ({"fixed_env": {"BAD'NAME": "1"}}, ["body", "space", "fixed_env", "BAD'NAME"]),
        ({"allow_risky": ["NCCL_SOCKET_NTHREADS", "NCCL_NET"]}, ["body", "space", "allow_risky", 1]),
        ({"allow_risky": ["NCCL_BOGUS"]}, ["body", "space", "allow_risky", 0]),
        ({"bogus": 1}, ["body", "space", "bogus"]),
        ({"ladder": [{"x": 1}]}, ["body", "space", "ladder", 0]),
        ({"env": []}, ["body", "space", "env"]),
        ({"allow_risky": [1]}, ["body", "space", "allow_risky", 0]),
    ],
)
def test_a_field_problem_stays_at_the_field(module_server, space, loc):
    body = replay_study_body(None)
    body["space"].update(space)
    response = module_server.client("write").post("/v1/studies", json=body)
    assert response.status_code == 422, response.text
    assert [e["loc"] for e in response.json()["detail"]] == [loc]


def nested(depth: int) -> str:
    """A list `depth` levels deep, as JSON text."""
    return "[" * depth + "]" * depth


def deep_bodies(depth: int) -> list[tuple[str, str]]:
    """(path, body) of /v1/lint and POST /v1/studies with a value `depth` levels deep inside (the
    body's own object, and the space's and its env's, add to it)."""
    study = json.dumps(replay_study_body(None))
    return [
        ("/v1/lint", '{"env": {}, "allow_risky": ' + nested(depth) + "}"),
        ("/v1/studies", study.replace('"space": {', '"space": {"env": {"NCCL_NSOCKS_PERTHREAD": ' + nested(depth) + "}, ", 1)),
    ]  # fmt: skip


@pytest.mark.parametrize("depth", [500, 900])
def test_a_body_nested_hundreds_deep_is_refused_naming_the_limit(module_server, depth):
    """Under 2 KB nested 480 to 990 deep: the parser read it, then echoing it in a 422 (jsonable_encoder,
    _finite) or the space's duplicate check recursed past Python's limit: a 500, and 150 KB of
    traceback in the log."""
    for path, body in deep_bodies(depth):
        assert path != "/v1/studies" or body.count("[") > depth  # the env value went in
        response = module_server.client("write").post(
            path, content=body, headers={"content-type": "application/json"}
        )
        assert response.status_code == 400, (path, response.status_code, response.text[:200])
        assert response.json()["detail"] == ("the body cannot be read as JSON: arrays or objects are nested too "
                                             "deep (over 64 levels)")  # fmt: skip
    assert "Traceback" not in module_server.log.read_text()


def chunks(text: str, size: int):
    data = text.encode()
    for at in range(0, len(data), size):
        yield data[at : at + size]


def test_a_streamed_body_is_measured_as_it_arrives_and_brackets_in_strings_do_not_count(module_server):
    """Sent chunked (no Content-Length), in 7-byte pieces: 64 levels pass (a 422 for what is in them,
    the deep value echoed as a short repr), 65 do not; a string's brackets (and escaped quotes) are
    text, not nesting."""
    client = module_server.client("write")
    headers = {"content-type": "application/json"}
    noise = json.dumps('"]]]]\\' * 100)  # were it counted, the levels after it would be hidden
    at_the_limit = '{"env": {"NCCL_ALGO": ' + noise + '}, "allow_risky": ' + nested(63) + "}"  # 1 + 63
    response = client.post("/v1/lint", content=chunks(at_the_limit, 7), headers=headers)
    assert response.status_code == 422, response.text[:300]
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "allow_risky", 0]
    assert error["input"] == "[[[[...]]]]"  # 61 levels: reprlib's first few
    over = at_the_limit.replace(nested(63), nested(64))
    response = client.post("/v1/lint", content=chunks(over, 7), headers=headers)
    assert response.status_code == 400, response.text[:300]
    assert "over 64 levels" in response.json()["detail"]
    quoted = json.dumps("[" * 500)  # 500 brackets in a string: no nesting at all
    response = client.post("/v1/lint", content=chunks('{"env": {"NCCL_ALGO": ' + quoted + "}, "
                           '"allow_risky": ' + nested(64) + "}", 7), headers=headers)  # fmt: skip
    assert response.status_code == 400, response.text[:300]


def test_a_422_echoes_a_value_nested_past_python_s_limit_as_a_short_repr():
    """Behind the edge's limit too (a handler's own defence): jsonable_encoder and _finite recursed."""
    import asyncio

    from fastapi.exceptions import RequestValidationError

    from api.errors import _request

    deep = json.loads(nested(900))
    exc = RequestValidationError([{"type": "string_type", "loc": ("body", "allow_risky", 0), "msg": "Input should be a valid string",
                                   "input": deep, "ctx": {"limit": float("nan")}}])  # fmt: skip
    response = asyncio.run(_request(None, exc))  # type: ignore[arg-type]
    assert response.status_code == 422
    (error,) = json.loads(response.body)["detail"]
    assert error["loc"] == ["body", "allow_risky", 0]
    assert error["input"] == "[[[[...]]]]"
    assert error["ctx"] == {"limit": "nan"}


def test_a_replay_study_where_the_operator_set_no_landscape_says_where_it_is_set(tmp_path):
    """It said "needs executor_options.landscape", a field a request cannot give (extra_forbidden)."""
    from fastapi.testclient import TestClient

    from api.app import create_app
    from api.settings import Settings

    settings = Settings(data_dir=tmp_path, tokens="w:write", scheduler=False, executors="replay")
    with TestClient(create_app(settings), headers={"Authorization": "Bearer w"}) as client:
        response = client.post("/v1/studies", json=replay_study_body("no-landscape"))
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "settings", "executor"]
    assert "set in AUTOTUNER_EXECUTOR_OPTIONS" in error["msg"]


@pytest.mark.parametrize(("field", "value"), [("name", "my study"), ("cluster", "a b"), ("name", "x" * 129)])
def test_a_bad_name_is_refused_in_the_cli_s_words(module_server, field, value):
    """A study's or cluster's name was refused with the regex of the rule ("String should match pattern
    '^[A-Za-z0-9]...'"), where the CLI and the workload's name say the rule in words."""
    from autotuner.names import NAME_RULE

    body = {**replay_study_body(None), field: value}
    response = module_server.client("write").post("/v1/studies", json=body)
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    kind = "study" if field == "name" else "cluster"
    assert error["loc"] == ["body", field]
    assert error["type"] == "value_error"
    assert error["msg"].startswith(f"{kind} name ")
    assert error["msg"].endswith(f"is invalid: {NAME_RULE}")
