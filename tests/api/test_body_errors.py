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
