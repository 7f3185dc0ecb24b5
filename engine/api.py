"""The method interface: what a paper's module declares so the engine can list, validate and run it.

A method module exposes ``SPECS: list[MethodSpec]``. Its top level imports no torch (listing
and validating must stay fast); models are imported inside ``run``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from types import UnionType
from typing import TYPE_CHECKING, Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

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


class ReproduceParams(MethodParams):
    """Parameters every ``<slug>.reproduce`` accepts."""

    smoke: bool = Field(False, description="tiny sizes for CI: computes the numbers, not a verdict")


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
        """The JSON form sent to clients (`list_methods`, `studio-engine list --json`)."""
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
    """One pass/fail line of a reproduction: our measurement against the spec's threshold."""

    name: str
    measured: float
    target: float
    op: str
    paper: str = ""
    note: str = ""
    passed: bool = field(init=False)

    def __post_init__(self) -> None:
        if self.op not in _OPS:
            raise ValueError(f"unknown comparison {self.op!r}")
        value = float(self.measured)
        self.passed = not math.isnan(value) and _OPS[self.op](value, float(self.target))


@dataclass
class Claim:
    """The verdict of ``<slug>.reproduce``: criteria, seeds, wall time, and the paper's numbers."""

    paper: str
    statement: str
    criteria: list[Criterion]
    seeds: list[int]
    wall_s: float
    smoke: bool = False
    notes: str = ""

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.criteria)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["passed"] = self.passed
        return data


def reproduce_spec(
    paper: str,
    title: str,
    run: Callable[[JobContext, Any, dict], dict],
    params: type[ReproduceParams] = ReproduceParams,
    panel: str = "lab",
    resources: Resources = Resources(),
) -> MethodSpec:
    """The ``<paper>.reproduce`` method; ``run`` must return ``{"claim": Claim.to_dict()}``."""
    return MethodSpec(
        id=f"{paper}.reproduce",
        title=title,
        paper=paper,
        params=params,
        run=run,
        panel=panel,
        outputs={"claim": "claim"},
        resources=resources,
        description="Measures the paper's claim at small scale and reports PASS or FAIL.",
    )
