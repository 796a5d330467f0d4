"""Request and response bodies. Layered: XCreate (input), XPublic (output), XsPublic (data, count)."""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from datetime import datetime
from functools import partial
from types import UnionType
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    field_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from autotuner.cli.claim_report import ClaimText, claim_text
from autotuner.executors.results import finite
from autotuner.names import NAME_MAX_LEN, NAME_PATTERN, NAME_RULE, BadName, check_name
from autotuner.space import PRESETS, declaration_schema
from autotuner.store import Candidate, Launch, Study, StudyState, name_of
from autotuner.store.configs import MAX_VERSION
from autotuner.tuning import RequestSettings
from autotuner.tuning.outcome import Outcome
from autotuner.tuning.settings import json_number
from trials.spec import WorkloadSpec


class ErrorPublic(BaseModel):
    detail: str


ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorPublic, "description": "the body cannot be read as JSON (`detail` says why)"},
    401: {"model": ErrorPublic, "description": "no or unknown bearer token"},
    403: {"model": ErrorPublic, "description": "the token's scope is too low"},
    404: {"model": ErrorPublic, "description": "no such resource"},
    409: {"model": ErrorPublic, "description": "conflicts with the current state"},
    413: {"model": ErrorPublic, "description": "request body too large"},
}


PresetName = Annotated[str, WithJsonSchema({"type": "string", "enum": list(PRESETS)})]
SpaceObject = Annotated[dict[str, Any], WithJsonSchema(declaration_schema())]  # load_space judges it
UNREAD_DATE = "when it was created; null only where its stored date cannot be read (`error` says so)"
NAME_SCHEMA = {"type": "string", "minLength": 1, "maxLength": NAME_MAX_LEN, "pattern": NAME_PATTERN}


def _name_in_words(kind: str, value: str) -> str:
    """check_name, refused in its own words, as the CLI says them (a pattern's error showed the regex;
    a ValueError's is prefixed "Value error, ")."""
    try:
        return check_name(kind, value)
    except BadName as exc:
        raise PydanticCustomError("value_error", str(exc)) from None


NAME_JSON = WithJsonSchema({**NAME_SCHEMA, "description": NAME_RULE})
ClusterName = Annotated[str, AfterValidator(partial(_name_in_words, "cluster")), NAME_JSON]
WorkloadName = Annotated[str, AfterValidator(partial(_name_in_words, "workload")), NAME_JSON]
StudyName = Annotated[str, AfterValidator(partial(_name_in_words, "study")), NAME_JSON]


class WorkloadCreate(WorkloadSpec):
    """The trial spec's workload (trials.spec.WorkloadSpec), named under the one rule for names."""

    name: WorkloadName


class StudyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: StudyName | None = None
    cluster: ClusterName
    workload: WorkloadCreate = Field(description="the job as it runs today (the trial spec's workload)")
    space: SpaceObject | PresetName = Field(
        description=f"a search space object, or a preset name ({', '.join(PRESETS)}); never a path on the server"
    )
    settings: RequestSettings = Field(default_factory=RequestSettings)

    @field_validator("space")
    @classmethod
    def _preset_name(cls, value: dict[str, Any] | str) -> dict[str, Any] | str:
        # A string is a preset's name, nothing else: the service never opens a file a request names
        # (that read files on the server and said in its errors what they held, or that none existed).
        if isinstance(value, str) and value not in PRESETS:
            raise ValueError(
                f"not a preset: give a preset name ({', '.join(PRESETS)}) or the space as an object "
                "(a path is never read on the server)"
            )
        return value


class CandidateBrief(BaseModel):
    id: int
    env: dict[str, str]
    fwd_precision: str
    bwd_precision: str
    batch_size: int
    sharding: str
    samples_per_s: float | None


class StudyPublic(BaseModel):
    id: int
    name: str
    cluster: str
    workload: str
    state: str
    settings: dict[str, Any]
    space: dict[str, Any]
    launches_done: int
    progress: float = Field(description="search launches done / budget (0..1)")
    trial_counts: dict[str, int]
    best: CandidateBrief | None
    baseline: CandidateBrief | None
    published: CandidateBrief | None = Field(
        None, description="the trial that measured what was published (outcome.chosen_candidate): its env"
    )
    outcome: Outcome | None = Field(description="confirmation, ladder, quality, published version")
    claim: ClaimText = Field(
        description="the ladder, quality and inert knobs in words, as the CLI prints them"
    )
    inert: dict[str, str] = Field(
        default_factory=dict, description="variables that cannot act where the study measures: why"
    )
    error: str | None
    owner: str | None = Field(description="the process running it (host:pid:id), while it runs")
    runner_lost: bool = Field(
        False,
        description="started, but no runner holds it now (interrupted, killed, its host gone): nothing runs "
        "it until `autotuner tune --study NAME` resumes it or a service's scheduler takes it up",
    )
    created_at: datetime | None = Field(description=UNREAD_DATE)
    started_at: datetime | None
    finished_at: datetime | None


class StudiesPublic(BaseModel):
    data: list[StudyPublic]
    count: int


class TrialPublic(BaseModel):
    id: int
    launch_id: int
    index: int
    kind: str
    optuna_number: int | None
    env: dict[str, str]
    fwd_precision: str
    bwd_precision: str
    effective_fwd_precision: str | None
    effective_bwd_precision: str | None
    batch_size: int
    sharding: str
    num_threads: int | None
    pipeline: str | None
    state: str
    samples_per_s: float | None
    iter_ms: float | None
    iter_cv: float | None
    a2a_ms: float | None
    a2a_bytes: float | None
    busbw_gbps: float | None
    quant_error_fwd: float | None
    quant_error_bwd: float | None
    breakdown_ms: dict[str, float] | None = Field(
        None, description="median per step: input_dist, sparse_comm, dense_comm (wire), compute, exposed_comm"
    )
    dense_allreduce_bytes: float | None = None
    error: str | None
    created_at: datetime | None = Field(description=UNREAD_DATE)


class TrialsPublic(BaseModel):
    data: list[TrialPublic]
    count: int


class LaunchPublic(BaseModel):
    id: int
    seq: int
    kind: str
    attempt: int
    state: str
    env: dict[str, str]
    executor: str
    backend_id: str | None
    candidates: int
    error: str | None
    log_tail: str | None
    waiting_on: str | None = Field(
        None, description="while queued: what it waits on, in the scheduler's words"
    )
    setup_s: float | None
    wall_s: float | None
    started_at: datetime | None
    finished_at: datetime | None


class ConfigPublic(BaseModel):
    cluster: str
    workload: str
    nodes: int = Field(description="the node count it was tuned at (a fetch picks the nearest)")
    version: int = Field(description="versions count up per (cluster, workload, nodes)")
    pinned: bool = Field(description="served regardless of newer versions")
    created_at: str = Field(description="when it was published (ISO 8601, UTC)")
    env: dict[str, str] = Field(description="the NCCL / EFA variables exported to jobs")
    qcomms: dict[str, str]
    batch_size: int | None = Field(description="null only for a version whose data cannot be read (`error`)")
    sharding: str | None = Field(description="null only for a version whose data cannot be read (`error`)")
    num_threads: int | None
    pipeline: str | None = None
    lr_scale: float | None = Field(
        default=None,
        description="with a batch change: the factor on the job's learning rate it was validated with "
        "(AUTOTUNER_LR_SCALE); null: the job's own rate",
    )
    exports: dict[str, str]
    evidence: dict[str, Any]
    claim: ClaimText | None = Field(
        default=None, description="the evidence's ladder and quality in words (the list)"
    )
    fingerprint: dict[str, Any]
    study_id: int | None
    validated_at: str | None = Field(
        None,
        description="when it was last shown to hold: its last re-validation that held, else when published",
    )
    validated_on: dict[str, str] = Field(
        default_factory=dict,
        description="the stack it was validated on: gpu, driver, nccl, aws_ofi_nccl, nodes",
    )
    last_validation: dict[str, Any] | None = Field(None, description="its last finished re-validation")
    flagged: str | None = Field(
        None, description="its last re-validation failed and it was kept (pinned): why"
    )
    error: str | None = Field(
        None, description="history only: why this version's stored data cannot be shown"
    )
    fingerprint_match: bool | Literal["unknown"] | None = Field(
        None,
        description="a single config's fetch: whether the job's X-Autotuner-Fingerprint matches validated_on",
    )
    fingerprint_diff: dict[str, list[str]] | None = Field(
        None, description="what differs: key -> [validated on, the job's]"
    )


class ValidationPublic(BaseModel):
    """One re-validation of a version: its published setting against the study's baseline again."""

    id: int
    config_id: int
    version: int | None = None
    state: str = Field(description="queued | running | held | failed | unresolved | error")
    trigger: str = Field(description="manual | schedule | fingerprint")
    reason: str
    requested_at: str
    started_at: str | None
    finished_at: str | None
    fingerprint: dict[str, str] | None = Field(description="the stack it ran on")
    requested_fingerprint: dict[str, str] | None = Field(description="the jobs' stack that asked for it")
    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    rounds: int | None
    why: str | None
    wall_s: float | None
    action: str | None = Field(description="what it did: kept, replaced by a new version, flagged (pinned)")
    new_config_id: int | None
    new_version: int | None = None
    error: str | None


class FingerprintReportPublic(BaseModel):
    fingerprint: dict[str, str] = Field(description="what the jobs run on")
    diff: dict[str, list[str]] = Field(description="key -> [validated on, the jobs']")
    jobs: int
    first_seen: str
    last_seen: str
    validation_id: int | None
    error: str | None = Field(None, description="why a stored field of this report cannot be shown")


class ValidationStatus(BaseModel):
    """Where the served version of (cluster, workload, nodes) stands: validated when and on what,
    stale or not and why, the re-validations of its versions and what jobs reported."""

    cluster: str
    workload: str
    nodes: int
    version: int
    validated_at: str
    validated_on: dict[str, str]
    age_s: float
    stale: bool
    stale_reasons: dict[str, str] = Field(description="fingerprint | failed | overdue -> why")
    revalidate_every_s: float | None
    validations: list[ValidationPublic] = Field(
        description="of every version at this node count, newest first"
    )
    reports: list[FingerprintReportPublic]
    error: str | None = Field(None, description="why a stored field of the served version cannot be shown")


def _unshown(char: str) -> bool:
    """A character a one-line text must not hold: a control (C0, DEL, C1), a format character (bidi
    overrides such as U+202E make "evil" read "live"; zero-width ones hide text) or a line or paragraph
    separator (U+2028, U+2029 break the line)."""
    return unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp")


def _one_line(value: str) -> str:
    at = next((i for i, c in enumerate(value) if _unshown(c)), None)
    if at is None:
        return value
    char = value[at]
    name = unicodedata.name(char, "a control character")
    raise ValueError(
        f"has U+{ord(char):04X} ({name}) at character {at}: give one line of plain text "
        "(no control or format characters, no line or paragraph separators)"
    )


def _excluded_class(test: Callable[[str], bool]) -> str:
    """A regex that matches text with no character of the Basic Multilingual Plane that `test` picks
    (the schema's pattern; _one_line judges the other planes too)."""
    ranges: list[tuple[int, int]] = []
    for code in range(0x10000):
        if not test(chr(code)):
            continue
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1] = (ranges[-1][0], code)
        else:
            ranges.append((code, code))
    spans = "".join(f"\\u{a:04x}" if a == b else f"\\u{a:04x}-\\u{b:04x}" for a, b in ranges)
    return f"^[^{spans}]*$"


ONE_LINE_PATTERN = _excluded_class(_unshown)
# One line of plain text, up to 500 characters (the schema's pattern says it for the BMP; _one_line
# checks every plane).
OneLine = Annotated[
    str, Field(max_length=500, json_schema_extra={"pattern": ONE_LINE_PATTERN}), AfterValidator(_one_line)
]


# A node count or version: `true` or "2" is none, 2.0 is 2 (as in a study's settings).
JsonInt = Annotated[int, BeforeValidator(json_number)]


class RevalidateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    nodes: JsonInt | None = Field(
        None, ge=1, le=4096, description="the node count of the config (default: the served one)"
    )
    version: JsonInt | None = Field(
        None, ge=1, le=MAX_VERSION, description="re-check this version (default: the served one)"
    )
    reason: OneLine | None = Field(
        None,
        description="why (one line: no control or format characters such as U+202E, no line or paragraph "
        "separators)",
    )


class PinRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    nodes: JsonInt = Field(1, ge=1, le=4096)
    # Asked for by name: a body without it (`{}`) unpinned, a version forgotten became an unpin.
    version: JsonInt | None = Field(
        ge=1, le=MAX_VERSION, description="the version to serve; null unpins (serve the latest)"
    )


class RollbackRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    nodes: JsonInt = Field(1, ge=1, le=4096)


class LintRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    env: dict[str, str] = Field(max_length=500)
    allow_risky: list[str] = Field(default_factory=list, max_length=100)


class ProblemPublic(BaseModel):
    variable: str
    rule: str
    message: str
    severity: str


class LintPublic(BaseModel):
    ok: bool
    problems: list[ProblemPublic]


M = TypeVar("M", bound=BaseModel)


def salvaged(model: type[M], data: dict[str, Any]) -> M:
    """`model` of a stored row; a field whose stored value does not validate (an older version's, or a
    hand's) is shown empty and named in `error`: the row is listed, the page is not a 500."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        bad = sorted({str(e["loc"][0]) for e in exc.errors() if e["loc"]})
    note = f"stored {', '.join(bad)} cannot be read (shown empty)"
    error = data.get("error")
    fixed = {**data, **{name: _empty(model.model_fields[name]) for name in bad if name in model.model_fields}}
    return model.model_validate({**fixed, "error": f"{error}; {note}" if isinstance(error, str) else note})


def _empty(field: FieldInfo) -> Any:
    if not field.is_required():
        return field.get_default(call_default_factory=True)
    kind = field.annotation
    if get_origin(kind) in (Union, UnionType):
        if type(None) in get_args(kind):
            return None
        kind = get_args(kind)[0]
    empty: dict[Any, Any] = {dict: {}, list: [], str: "", int: 0, float: 0.0, bool: False}
    return empty.get(get_origin(kind) or kind)


def _stored_date(value: datetime | None) -> datetime | str:
    """A date every row has; the store reads one whose text is no date as None, and this makes it fail
    validation so that `salvaged` names it."""
    return "unreadable" if value is None else value


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def brief(row: Candidate | None) -> CandidateBrief | None:
    if row is None:
        return None
    try:
        return CandidateBrief(
            id=row.id, env=row.env, fwd_precision=row.fwd_precision, bwd_precision=row.bwd_precision,
            batch_size=row.batch_size, sharding=row.sharding, samples_per_s=row.samples_per_s,
        )  # fmt: skip
    except ValidationError:  # a row stored wrong: its study is listed without it (its trials page says why)
        return None


def trial_public(row: Candidate) -> TrialPublic:
    data = {name: getattr(row, name, None) for name in TrialPublic.model_fields}
    metrics = _object(row.metrics)  # a tampered row: shown without them
    breakdown = metrics.get("breakdown_ms")
    ok = isinstance(breakdown, dict) and all(_seconds(v) is not None for v in breakdown.values())
    data.update(
        breakdown_ms=breakdown if ok else None,
        dense_allreduce_bytes=_seconds(metrics.get("dense_allreduce_bytes")),
        created_at=_stored_date(row.created_at),
    )
    return salvaged(TrialPublic, data)


def _seconds(value: Any) -> float | None:
    """A finite number from a stored result (a duration, a size); None for what an older version
    stored unchecked."""
    return float(value) if finite(value) else None


def launch_public(row: Launch) -> LaunchPublic:
    summary = _object(row.summary)
    candidates = _object(row.spec).get("candidates")
    return salvaged(LaunchPublic, dict(
        id=row.id, seq=row.seq, kind=row.kind, attempt=row.attempt, state=row.state, env=row.env,
        executor=row.executor, backend_id=row.backend_id,
        candidates=len(candidates) if isinstance(candidates, list) else "unreadable",
        error=row.error, log_tail=row.log_tail, waiting_on=row.waiting_on, setup_s=_seconds(summary.get("setup_s")),
        wall_s=_seconds(summary.get("wall_s")),
        started_at=row.started_at, finished_at=row.finished_at,
    ))  # fmt: skip


HIDDEN = "(set by the operator; not shown)"


def public_settings(settings: Any) -> Any:
    """A study's settings as readers see them: the executor's options come from the service's own
    settings (a request cannot give them) and may hold what only the operator should read (a Slurm
    `env` with a token, a kubeconfig): their names are shown, not their values. Read tokens sit on
    every job node."""
    if not isinstance(settings, dict) or not isinstance(settings.get("executor_options"), dict):
        return settings
    return {**settings, "executor_options": dict.fromkeys(settings["executor_options"], HIDDEN)}


def study_public(
    row: Study,
    counts: dict[str, int],
    best: Candidate | None,
    baseline: Candidate | None,
    published: Candidate | None = None,
    runner_lost: bool = False,
) -> StudyPublic:
    budget, done = _object(row.settings).get("trials"), row.launches_done
    counted = all(isinstance(n, int) and not isinstance(n, bool) for n in (budget, done))
    progress = (
        1.0 if row.state == StudyState.DONE else (min(1.0, done / budget) if counted and budget else 0.0)
    )
    error = row.error
    try:
        outcome = Outcome.load(row.outcome)
    except (ValueError, TypeError) as exc:  # a row an older version (or a hand) wrote: listed, said
        outcome = None
        error = f"{error + '; ' if error else ''}its stored outcome cannot be read: {exc}"[:2000]
    said = outcome or Outcome()  # before it concludes: the inert knobs alone
    inert = {k: v for k, v in _object(row.inert).items() if isinstance(v, str)}
    forced = _object(row.space).get("force_inert")
    claim = claim_text(said.ladder or [], said.quality, inert, forced if isinstance(forced, list) else [])
    return salvaged(StudyPublic, dict(
        # a missing cluster or workload row fails validation: named in `error`, the study still listed
        id=row.id, name=row.name, cluster=name_of(row.cluster), workload=name_of(row.workload), state=row.state,
        settings=public_settings(row.settings), space=row.space, launches_done=row.launches_done, progress=progress,
        trial_counts=counts, best=brief(best), baseline=brief(baseline), published=brief(published),
        outcome=outcome, claim=claim, error=error,
        inert=row.inert or {},
        owner=row.owner, runner_lost=runner_lost,
        created_at=_stored_date(row.created_at), started_at=row.started_at, finished_at=row.finished_at,
    ))  # fmt: skip
