"""The method interface: what a paper's module declares so the engine can list, validate and run it.

A method module exposes ``SPECS: list[MethodSpec]``. Its top level imports no torch (listing
and validating must stay fast); models are imported inside ``run``.
"""

from __future__ import annotations

import contextvars
import functools
import math
import operator
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from types import UnionType
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from engine import verdicts

# A parameter type for API keys: shown masked in params.json, logs, results and exports.
Secret = SecretStr

if TYPE_CHECKING:
    from engine.context import JobContext


class MethodParams(BaseModel):
    """Base for every method's parameters: a misspelt parameter is an error, not a default,
    and a boolean is not a number (``--set steps=true`` is refused, not run as 1)."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        for name, value in data.items():
            field_info = cls.model_fields.get(name)
            if isinstance(value, bool) and field_info is not None and _numeric_only(
                    field_info.annotation):
                raise ValueError(f"{name}: expected a number, got the boolean {value!r}")
        return data


def _numeric_only(annotation: Any) -> bool:
    """True for ``int``, ``float`` and their optionals: types a boolean must not stand for."""
    if annotation in (int, float):
        return True
    args = [a for a in get_args(annotation) if a is not type(None)]
    return get_origin(annotation) in (Union, UnionType) and bool(args) and all(
        a in (int, float) for a in args)


PROFILES = ("smoke", "cpu", "gpu")
# The parameters that choose a profile rather than being one of its settings.
PROFILE_FIELDS = frozenset({"profile", "smoke"})


class ReproduceParams(MethodParams):
    """Parameters every ``<slug>.reproduce`` accepts. ``smoke`` is kept for the methods that
    read it and always equals ``profile == "smoke"``; ``smoke=true`` alone picks that profile.

    ``PROFILE_SETTINGS``: each profile's settings where they differ from the fields' defaults,
    as data (a test can hold them to the spec). A parameter not given takes its profile's
    value; one given with another value makes the run exploratory."""

    PROFILE_SETTINGS: ClassVar[dict[str, dict[str, Any]]] = {}

    profile: Literal["smoke", "cpu", "gpu"] = Field(
        "cpu", description="smoke: tiny sizes for CI (no verdict); cpu: the spec on a laptop; "
                           "gpu: the spec's full sizes on one GPU")
    smoke: bool = Field(False, description="tiny sizes for CI: computes the numbers, not a verdict")

    @model_validator(mode="before")
    @classmethod
    def _profile_fills_the_rest(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        profile = data.get("profile") or ("smoke" if data.get("smoke") is True else "cpu")
        own = cls.PROFILE_SETTINGS.get(profile, {}) if isinstance(profile, str) else {}
        return {**own, **data}

    @model_validator(mode="after")
    def _smoke_is_the_smoke_profile(self) -> ReproduceParams:
        if self.smoke and self.profile != "smoke":
            if "profile" in self.model_fields_set:
                raise ValueError(f"smoke=true contradicts profile {self.profile!r} "
                                 "(smoke is the profile 'smoke')")
            self.profile = "smoke"
        self.smoke = self.profile == "smoke"
        return self


@dataclass(frozen=True)
class Resources:
    """What one job of a method needs; the Ray executor turns it into resource requests."""

    cpus: float = 1
    gpus: float = 0
    memory_gb: float = 1


@dataclass(frozen=True)
class MethodSpec:
    id: str
    title: str
    paper: str
    params: type[MethodParams]
    run: Callable[[JobContext, Any, dict], dict]
    panel: str = "lab"
    inputs: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    resources: Resources = Resources()
    description: str = ""

    def describe(self) -> dict:
        """The JSON form sent to clients (`list_methods`, `studio-engine list --json`);
        ``profiles``: a reproduce method's settings per profile (the lab compares its form
        with them to mark a run exploratory)."""
        return {
            "id": self.id,
            "paper": self.paper,
            "title": self.title,
            "panel": self.panel,
            "description": self.description,
            "params_schema": self.params.model_json_schema(),
            "inputs": dict(self.inputs),
            "outputs": dict(self.outputs),
            "resources": asdict(self.resources),
            "profiles": {profile: profile_settings(self.params, profile) for profile in PROFILES}
            if issubclass(self.params, ReproduceParams) else {},
        }


_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
    "==": operator.eq,
}


@dataclass
class Criterion:
    """One v1 pass/fail line of a reproduction: our measurement against the spec's threshold.

    ``interval``: the measurement's interval, for a method that has seeds and passes it; the
    criterion is then decided from it (``schema``) rather than from one value."""

    name: str
    measured: float
    target: float
    op: str
    paper: str = ""
    note: str = ""
    interval: verdicts.Interval | None = None
    passed: bool = field(init=False)

    def __post_init__(self) -> None:
        if self.op not in _OPS:
            raise ValueError(f"unknown comparison {self.op!r}")
        self.passed = self.schema().passed

    def schema(self) -> verdicts.Criterion:
        """This criterion in the criterion schema (``verdicts.from_v1``; the paper's words are
        its quote)."""
        return verdicts.from_v1(self.name, float(self.measured), self.op, float(self.target),
                                quote=self.paper, measured_interval=self.interval)

    def to_dict(self) -> dict:
        """The schema's form plus the v1 keys (measured, target, op, paper, note, passed), so
        readers of v1 claims keep working."""
        return {**self.schema().to_dict(), "measured": _finite_or_none(float(self.measured)),
                "target": self.target, "op": self.op, "paper": self.paper, "note": self.note,
                "passed": self.passed}


@dataclass
class Claim:
    """The verdict of ``<slug>.reproduce``: criteria (CONTRACT.md, "Verdicts"), sanity checks
    (never counted), seeds, wall time, the profile it ran and the paper's numbers.

    ``criteria`` may be v1 ``Criterion`` lines (converted with ``verdicts.from_v1``; their notes
    join ``notes``) or ``verdicts.Criterion``. ``profile``, ``settings`` and ``exploratory`` are
    filled in by ``reproduce_spec``'s wrapper from the parameters the run got."""

    paper: str
    statement: str
    criteria: list[Criterion | verdicts.Criterion]
    seeds: list[int]
    wall_s: float
    smoke: bool = False
    notes: str = ""
    spec: Literal["v1", "v2"] = "v1"
    sanity: list[verdicts.SanityCheck] = field(default_factory=list)
    profile: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    exploratory: bool = False

    def __post_init__(self) -> None:
        if self.spec not in ("v1", "v2"):
            raise ValueError(f"unknown spec {self.spec!r} (v1 or v2)")
        self.profile = self.profile or ("smoke" if self.smoke else "cpu")
        if self.profile not in PROFILES:
            raise ValueError(f"unknown profile {self.profile!r} ({', '.join(PROFILES)})")

    def schema_criteria(self) -> list[verdicts.Criterion]:
        return [c.schema() if isinstance(c, Criterion) else c for c in self.criteria]

    @property
    def verdict(self) -> str:
        """PASS, FAIL or INCONCLUSIVE (``verdicts.paper_verdict``); sanity checks never count."""
        return verdicts.paper_verdict(self.schema_criteria())

    @property
    def passed(self) -> bool:
        return self.verdict == verdicts.PASS

    def to_dict(self) -> dict:
        v1_notes = [f"{c.name}: {c.note}" for c in self.criteria
                    if isinstance(c, Criterion) and c.note]
        return {
            "paper": self.paper,
            "statement": self.statement,
            "spec": self.spec,
            "verdict": self.verdict,
            "passed": self.passed,
            "criteria": [c.to_dict() for c in self.criteria],
            "sanity": [check.to_dict() for check in self.sanity],
            "seeds": list(self.seeds),
            "wall_s": self.wall_s,
            "smoke": self.smoke,
            "profile": self.profile,
            "settings": dict(self.settings),
            "exploratory": self.exploratory,
            "notes": "\n".join(filter(None, [self.notes, *v1_notes])),
        } | (_PROFILE_RECORD.get() or {})


def profile_settings(params: type[ReproduceParams], profile: str) -> dict[str, Any]:
    """The settings ``profile`` runs with, as JSON data: the parameters' defaults with the
    profile's ``PROFILE_SETTINGS`` over them (the profile fields themselves left out)."""
    return _settings_of(params(profile=profile))


def _settings_of(params: ReproduceParams) -> dict[str, Any]:
    return {k: v for k, v in params.model_dump(mode="json").items() if k not in PROFILE_FIELDS}


# What the running reproduction's parameters say about its profile. ``Claim.to_dict`` merges
# it in, so the claim a method saves as an artifact carries the same marks as the one it
# returns (a method saves its claim before ``reproduce_spec``'s wrapper sees it).
_PROFILE_RECORD: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "profile_record", default=None)


def _recording_profile(run: Callable[[JobContext, Any, dict], dict]
                       ) -> Callable[[JobContext, Any, dict], dict]:
    """``run``, with the profile, its settings and the exploratory mark written into the
    claim it returns and any it saves. Any setting other than the profile's (from ``--set``,
    ``--params`` or the lab's form) marks the claim exploratory, and ``overrides`` says which."""

    @functools.wraps(run)
    def recorded(ctx: JobContext, params: Any, inputs: dict) -> dict:
        if not isinstance(params, ReproduceParams):
            return run(ctx, params, inputs)
        settings = profile_settings(type(params), params.profile)
        overrides = {k: v for k, v in _settings_of(params).items() if settings.get(k) != v}
        record = {"profile": params.profile, "settings": settings,
                  "exploratory": bool(overrides), "overrides": overrides}
        token = _PROFILE_RECORD.set(record)
        try:
            result = run(ctx, params, inputs)
        finally:
            _PROFILE_RECORD.reset(token)
        claim = result.get("claim") if isinstance(result, dict) else None
        if isinstance(claim, dict):
            claim.update(record)
        return result

    return recorded


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def reproduce_spec(
    paper: str,
    title: str,
    run: Callable[[JobContext, Any, dict], dict],
    params: type[ReproduceParams] = ReproduceParams,
    panel: str = "lab",
    resources: Resources = Resources(),
) -> MethodSpec:
    """The ``<paper>.reproduce`` method; ``run`` must return ``{"claim": Claim.to_dict()}``.
    The claim records the profile, its settings (``params.PROFILE_SETTINGS``) and whether the
    run was exploratory."""
    unknown = set(params.PROFILE_SETTINGS) - set(PROFILES)
    if unknown:
        raise ValueError(f"{paper}.reproduce: unknown profiles {sorted(unknown)}")
    for profile in PROFILES:
        profile_settings(params, profile)  # a bad setting fails at import, not in a run
    return MethodSpec(
        id=f"{paper}.reproduce",
        title=title,
        paper=paper,
        params=params,
        run=_recording_profile(run),
        panel=panel,
        outputs={"claim": "claim"},
        resources=resources,
        description=("Measures the paper's claim and reports PASS, FAIL or INCONCLUSIVE "
                     "(--profile smoke|cpu|gpu)."),
    )
