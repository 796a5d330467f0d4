"""Where a declaration comes from: a .yaml/.yml/.json file, a preset name, or a preset with overrides.

The readers are strict on purpose: YAML 1.1 would turn 010 into 8 and 0x10 into 16 before the linter saw
them, and a duplicated key would silently keep the last value. Anything unreadable is a SpaceError.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from autotuner.envvars import Problem
from autotuner.files import read_bounded
from autotuner.space.checks import SpaceError

PRESET_DIR = Path(__file__).parent / "presets"
PRESETS: dict[str, Path] = {p.stem: p for p in sorted(PRESET_DIR.glob("*.yaml"))}


class _StrictLoader(yaml.SafeLoader):
    """YAML 1.1 reads 010 as 8, 0x10 as 16 and 1_000 as 1000: only plain decimals are integers here, the
    rest stay strings so the linter can say what NCCL would do with them. Duplicate keys, keys that are
    not plain scalars, merge keys and aliases are refused: nine levels of aliases in 300 bytes expand to 9^9 values."""

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):  # type: ignore[no-untyped-call]
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(
                None,
                None,
                "aliases (*name) are not allowed in a space file: write the values out",
                event.start_mark,
            )
        return super().compose_node(parent, index)  # type: ignore[no-untyped-call,no-any-return]

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise yaml.constructor.ConstructorError(
                    None, None, "a key must be a plain name, not a list or a mapping", key_node.start_mark
                )
            if key_node.tag == "tag:yaml.org,2002:merge":  # it read "could not determine a constructor"
                raise yaml.constructor.ConstructorError(
                    None, None, "merge keys (<<) are not allowed in a space file: write the values out",
                    key_node.start_mark,
                )  # fmt: skip
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if isinstance(key, str) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:int"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^-?(?:0|[1-9][0-9]*)$"), list("-0123456789")
)


def source_path(source: str | Path) -> Path:
    """The file a --space value names: a preset's own file for a preset name, else the path itself."""
    if isinstance(source, str) and source in PRESETS:
        return PRESETS[source]
    return Path(source)


def no_such_source() -> str:
    """What a --space value that is neither a file nor a preset is told."""
    return f"no such file or preset (presets: {', '.join(PRESETS)})"


def read_source(source: str | Path) -> dict[str, Any]:
    """A preset name or a file path -> the declaration it holds, as decoded (not yet validated)."""
    path = source_path(source)
    if not path.exists() and path.suffix == "" and isinstance(source, str):
        raise SpaceError([Problem(str(source), "schema", no_such_source())])
    return read_file(path)


MAX_SPACE_FILE_BYTES = 4 << 20  # a space is a few KB; the REST body holding one is capped at 1 MiB


def read_file(path: Path) -> dict[str, Any]:
    """One .yaml/.yml/.json file -> its top-level mapping; a SpaceError names the file otherwise."""
    where = str(path)
    if path.suffix not in (".yaml", ".yml", ".json"):
        raise SpaceError([Problem(where, "schema", "a space file ends in .yaml, .yml or .json")])
    try:
        text = read_bounded(path, MAX_SPACE_FILE_BYTES, follow_links=True).decode()
    except OSError as exc:
        raise SpaceError([Problem(where, "schema", f"cannot read: {exc.strerror or exc}")]) from None
    except UnicodeDecodeError as exc:
        raise SpaceError([Problem(where, "schema", f"not UTF-8 text (byte {exc.start})")]) from None
    try:
        if path.suffix == ".json":
            data = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
        else:
            data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass: no arbitrary objects
    except (ValueError, yaml.YAMLError, RecursionError) as exc:
        kind = "JSON" if path.suffix == ".json" else "YAML"
        detail = "nested too deeply" if isinstance(exc, RecursionError) else " ".join(str(exc).split())
        raise SpaceError([Problem(where, "schema", f"not valid {kind}: {detail}")]) from None
    if not isinstance(data, dict):
        raise SpaceError(
            [Problem(where, "schema", f"must hold a mapping of fields, got {type(data).__name__}")]
        )
    return data


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} appears twice")
        out[key] = value
    return out


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not allowed")


def with_preset(data: dict[str, Any]) -> dict[str, Any]:
    """{"preset": name, **overrides}: the preset's fields, each top-level key given replacing the preset's."""
    if "preset" not in data:
        return data
    name = data.pop("preset")
    if not isinstance(name, str) or name not in PRESETS:
        said = f"unknown preset {name!r} (presets: {', '.join(PRESETS)})"
        problem = Problem("preset", "schema", said, where=("preset",))  # the space's key, not a variable
        raise SpaceError([problem])
    base = read_file(PRESETS[name])
    base.pop("preset", None)
    return {**base, **data}


# --------------------------------------------------------------------------- validation
