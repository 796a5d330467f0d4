"""OpenAPI links: which fields of an answer name the resource another operation acts on.

A created study's `id` is what `/v1/studies/{study_id}/...` takes; a served config's `cluster`,
`workload`, `nodes` and `version` are what `/v1/configs/{cluster}/{workload}/...` takes, in the
path and in the pin / rollback / revalidate bodies. Written here once, added to every answer that
carries them in `/openapi.json`, so a client generator or a fuzzer (schemathesis's stateful phase,
tests/api/test_openapi_fuzz.py) follows a real study or config instead of guessing ids into 404s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

STUDY = "/v1/studies/{study_id}"
CONFIG = "/v1/configs/{cluster}/{workload}"

# What a study's id opens: link name -> (method, path).
STUDY_OPERATIONS = {
    "GetStudy": ("get", STUDY),
    "CancelStudy": ("post", f"{STUDY}/cancel"),
    "StudyTrials": ("get", f"{STUDY}/trials"),
    "StudyLaunches": ("get", f"{STUDY}/launches"),
    "StudyInsights": ("get", f"{STUDY}/insights"),
}
# What a config's (cluster, workload) opens: link name -> (method, path, body fields taken from it).
CONFIG_OPERATIONS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "GetConfig": ("get", CONFIG, ()),
    "ConfigHistory": ("get", f"{CONFIG}/history", ()),
    "ConfigValidations": ("get", f"{CONFIG}/validations", ()),
    "RevalidateConfig": ("post", f"{CONFIG}/revalidate", ("nodes", "version")),
    "PinConfig": ("post", f"{CONFIG}/pin", ("nodes", "version")),
    "RollbackConfig": ("post", f"{CONFIG}/rollback", ("nodes",)),
}
# The answers that name a study or a config: (method, path, status, JSON pointer to it in the body).
# A resource is reached from where it is made or listed, and from its own page to the rest of it.
STUDY_SOURCES = [("post", "/v1/studies", "201", ""), ("get", STUDY, "200", "")]
CONFIG_SOURCES = [("get", "/v1/configs", "200", "/0"), ("get", CONFIG, "200", "")]


def study_links(at: str) -> dict[str, dict[str, Any]]:
    """Links from an answer whose body holds a study at JSON pointer `at`."""
    return {
        name: {"operationRef": _ref(method, path), "parameters": {"path.study_id": f"$response.body#{at}/id"}}
        for name, (method, path) in STUDY_OPERATIONS.items()
    }


def config_links(at: str) -> dict[str, dict[str, Any]]:
    """Links from an answer whose body holds a config at JSON pointer `at`."""
    links: dict[str, dict[str, Any]] = {}
    for name, (method, path, body) in CONFIG_OPERATIONS.items():
        link: dict[str, Any] = {
            "operationRef": _ref(method, path),
            "parameters": {
                "path.cluster": f"$response.body#{at}/cluster",
                "path.workload": f"$response.body#{at}/workload",
            },
        }
        if body:
            link["requestBody"] = {field: f"$response.body#{at}/{field}" for field in body}
        links[name] = link
    return links


def add_links(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` (an OpenAPI document) with the links above on the answers that carry them."""
    sources = [(*s, study_links(s[3])) for s in STUDY_SOURCES]
    sources += [(*s, config_links(s[3])) for s in CONFIG_SOURCES]
    for method, path, status, _, links in sources:
        answer = doc["paths"][path][method]["responses"][status]
        # not to itself: the same id again tells nothing new
        links = {name: link for name, link in links.items() if link["operationRef"] != _ref(method, path)}
        answer.setdefault("links", {}).update(links)
    return doc


def install(app: FastAPI) -> None:
    """Serve `/openapi.json` with the links (FastAPI builds the document once, on first request)."""
    generate: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = add_links(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _ref(method: str, path: str) -> str:
    """A JSON pointer to an operation of this document ('/' in the path escaped as '~1')."""
    return "#/paths/" + path.replace("~", "~0").replace("/", "~1") + "/" + method
