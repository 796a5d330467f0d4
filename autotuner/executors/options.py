"""Executor options: declared once per executor, checked in one place (torchx's `runopts`, in pydantic).

Each executor's options are one model beside its executor (`local/options.py`, `slurm/options.py`,
`kubernetes/options.py`, `replay.py`), built from what is here: a field per option with its type,
default and help, and what values it allows (the message when a value is wrong). `ExecutorOptions.parse` is the only place
operator JSON is checked: a ValueError names the executor, the option, the value and what is allowed;
an unknown name gets a did-you-mean and the list of valid ones. Nothing here imports a backend, so the
options of every executor can be listed and checked where no cluster client is installed.
"""

import difflib
import re
from collections.abc import Mapping
from types import UnionType
from typing import Annotated, Any, ClassVar, Literal, NamedTuple, TypeVar, Union, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
)
from pydantic_core import PydanticCustomError

OptionsT = TypeVar("OptionsT", bound="ExecutorOptions")
# How long a launch may wait in a scheduler's queue: finite (infinity overflowed Kubernetes' Job deadline).
QueueTimeout = Annotated[StrictFloat, Field(gt=0, le=30 * 86400, allow_inf_nan=False)]


class OptionError(ValueError):
    """A wrong option value, in words (raised by validators). `option` names it where a check spans
    several options (a model validator) and the error itself has no location."""

    def __init__(self, message: str, option: str | None = None) -> None:
        super().__init__(message)
        self.option = option


class OptionInfo(NamedTuple):
    name: str
    type: str
    default: Any  # None where required
    help: str
    required: bool


def option(default: Any, help: str, allowed: str | None = None) -> Any:
    """One option: its default (`...`: required), what it is for, and what values it takes (said when
    a value is wrong; default: the help)."""
    return Field(default, description=help, json_schema_extra={"allowed": allowed or help})


def fullmatch(pattern: str) -> AfterValidator:
    """For `Annotated[StrictStr, fullmatch(...)]`: the string must match `pattern` whole (Python's re),
    checked before it reaches a script or a manifest."""
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise PydanticCustomError("mismatch", "does not match {pattern}", {"pattern": pattern})
        return value

    return AfterValidator(check)


class ExecutorOptions(BaseModel):
    """The base of every executor's options: frozen, unknown names refused, errors in words."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    executor: ClassVar[str] = ""

    @classmethod
    def parse(cls: type[OptionsT], options: Mapping[str, Any]) -> OptionsT:
        """Check operator JSON; a ValueError names the option, the value and what is allowed."""
        what = f"{cls.executor} executor option"
        if not isinstance(options, Mapping):
            raise ValueError(f"{what}s: an object of name: value, got {options!r}")
        known = list(cls.model_fields)
        unknown = [str(key) for key in options if key not in known]
        if unknown:
            close = difflib.get_close_matches(unknown[0], known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"unknown {what}(s) {', '.join(map(repr, unknown))}{hint}; valid: {', '.join(known)}"
            )
        try:
            return cls.model_validate(dict(options))
        except ValidationError as exc:
            raise ValueError(cls._explain(exc.errors(include_url=False)[0], options)) from None

    @classmethod
    def _explain(cls, error: Any, options: Mapping[str, Any]) -> str:
        cause = error.get("ctx", {}).get("error")
        name = getattr(cause, "option", None) or (str(error["loc"][0]) if error["loc"] else "")
        what = f"{cls.executor} executor option {name}"
        if error["type"] == "missing":
            return f"{what} is required: {cls._allowed(name)}"
        shown = f"{what}={options[name]!r}" if name in options else what
        if isinstance(cause, ValueError):  # a validator's own words
            return f"{shown}: {cause}"
        return f"{shown}: expected {cls._allowed(name)}"

    @classmethod
    def _allowed(cls, name: str) -> str:
        field = cls.model_fields.get(name)
        extra = field.json_schema_extra if field is not None else None
        return str(extra["allowed"]) if isinstance(extra, dict) else "a valid value"

    @classmethod
    def takes_text(cls, name: str, text: str) -> bool | None:
        """Whether option `name` takes `text` as it is, a string (None: no such option). The command
        line asks before it reads a `name=text` as JSON: `account=12345` names the account "12345"."""
        field = cls.model_fields.get(name)
        if field is None:
            return None
        try:
            TypeAdapter(field.rebuild_annotation()).validate_python(text)
        except ValidationError:
            return False
        return True

    @classmethod
    def describe(cls) -> list[OptionInfo]:
        """Every option as (name, type, default, help, required), in declaration order (for listings)."""
        return [
            OptionInfo(
                name,
                _type_name(f.annotation),
                None if f.is_required() else f.default,
                f.description or "",
                f.is_required(),
            )
            for name, f in cls.model_fields.items()
        ]


def _type_name(annotation: Any) -> str:
    """`int | None`, `tuple[str, ...]`: the type as an operator would write it (no validators)."""
    args = get_args(annotation)
    origin = get_origin(annotation)
    if origin is Annotated:
        return _type_name(args[0])
    if origin in (Union, UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin is Literal:
        return " | ".join(map(repr, args))
    if origin is not None:
        return f"{origin.__name__}[{', '.join('...' if a is Ellipsis else _type_name(a) for a in args)}]"
    return "None" if annotation is type(None) else getattr(annotation, "__name__", str(annotation))


# ---------------------------------------------------------------------------------------- shared types

Port = Annotated[StrictInt, Field(ge=1, le=65535)]
Count = Annotated[StrictInt, Field(ge=0)]
NonEmpty = Annotated[StrictStr, Field(min_length=1)]
