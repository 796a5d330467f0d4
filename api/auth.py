"""Bearer tokens with scopes. read < write < admin: a higher scope can do what a lower one can."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, HTTPException, Request

RANK = {"read": 0, "write": 1, "admin": 2}


def token_scope(header: str, tokens: dict[str, str]) -> str | None:
    """The scope of the bearer token in an Authorization header value (None: no known token)."""
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        return None
    given = token.strip().encode("latin-1", "replace")
    for secret, scope in tokens.items():
        if hmac.compare_digest(secret.encode(), given):
            return scope
    return None


def may(held: str | None, scope: str) -> bool:
    return held is not None and RANK[held] >= RANK[scope]


def scope_of(request: Request) -> str | None:
    return token_scope(request.headers.get("authorization", ""), request.app.state.settings.token_scopes)


def require(scope: str, *, public: bool = True):  # a FastAPI dependency factory
    """`public`: a read is open where AUTOTUNER_PUBLIC_READ says so."""

    def check(request: Request) -> str | None:
        if scope == "read" and public and request.app.state.settings.public_read:
            return None
        held = scope_of(request)
        if held is None:
            raise HTTPException(401, "a bearer token is required", headers={"WWW-Authenticate": "Bearer"})
        if RANK[held] < RANK[scope]:
            raise HTTPException(403, f"this token has scope {held!r}; {scope!r} is needed")
        return held

    return Depends(check)


ReadAccess = Annotated[str | None, require("read")]
WriteAccess = Annotated[str | None, require("write")]
AdminAccess = Annotated[str | None, require("admin")]


def by(scope: str | None) -> str:
    """Who asked, for the service's log: the scope of the token it gave (tokens are not named)."""
    return f"by {'an' if scope.startswith('a') else 'a'} {scope} token" if scope else "no token required"
