"""The JSON schema of a space as a request declares it: what `load_space` takes, for `/openapi.json`.

SearchSpace's own schema, with what the registry checks written into it: the names each field takes
(searched, fixed, allowed risky, forced inert), `preset`, and the in-process lists' rule (non-empty,
no value twice). Values are still judged against each variable's domain, and relations between
fields (a batch above the job's, the grid's size) when a study is created; they are not a schema's.
"""

from __future__ import annotations

from typing import Any

from autotuner.envvars import REGISTRY, Safety
from autotuner.space.checks import INPROC_FIELDS
from autotuner.space.model import SearchSpace
from autotuner.space.sources import PRESETS


def declaration_schema() -> dict[str, Any]:
    """A space object as REST takes it, self-contained (no `$ref`)."""
    schema = _inlined(SearchSpace.model_json_schema())
    props = schema["properties"]
    searched = _names(lambda v: v.safety is not Safety.NEVER)
    props["env"]["propertyNames"] = searched
    props["fixed_env"]["propertyNames"] = _names(lambda v: v.safety is not Safety.NEVER or v.passthrough)
    props["allow_risky"]["items"] = {"type": "string", **_names(lambda v: v.safety is Safety.RISKY)}
    props["force_inert"]["items"] = {"type": "string", **searched}
    for key in INPROC_FIELDS:
        props[key] |= {"minItems": 1, "uniqueItems": True}
    props["preset"] = {
        "type": "string",
        "enum": list(PRESETS),
        "description": "start from this preset: each field given replaces the preset's",
    }
    return schema


def _names(which: Any) -> dict[str, Any]:
    """The registry's names that `which` takes, as a JSON schema for a string (a prefix entry such as
    NCCL_IB_* as a pattern)."""
    chosen = [v for v in REGISTRY.values() if which(v)]
    names = {"enum": sorted(v.name for v in chosen if not v.prefix)}
    prefixes = [v.name.rstrip("*") for v in chosen if v.prefix]
    return {"anyOf": [names, {"pattern": f"^({'|'.join(prefixes)})"}]} if prefixes else names


def _inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with each `{"$ref": "#/$defs/X"}` replaced by X itself (OpenAPI has no `$defs` here)."""
    defs = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return walk(defs[ref.removeprefix("#/$defs/")])
            return {key: walk(value) for key, value in node.items()}
        if isinstance(node, list):
            return [walk(item) for item in node]
        return node

    result: dict[str, Any] = walk(schema)
    return result
