"""What a method's parameter form holds, read from its pydantic JSON Schema. Qt-free.

``parse_schema`` turns ``params_schema`` (from ``list_methods``) into ``FieldSpec``s: the kind
of editor each field needs, its bounds, choices and default. ``FieldSpec.parse`` reads what a
user typed; ``FieldSpec.check`` applies the schema's bounds the way the engine will, so most
mistakes show before a job is submitted. ``errors_from_message`` splits the engine's
"invalid parameters" message (``engine/jobs.py``) into per-field messages for the form.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

BOOL, INTEGER, NUMBER, CHOICE, STRING, PATH, SECRET, JSON = (
    "bool", "integer", "number", "choice", "string", "path", "secret", "json")
PATH_SUFFIXES = {"_path": "file", "_file": "file", "_dir": "dir"}
_MISSING = object()


@dataclass(frozen=True)
class FieldSpec:
    name: str
    kind: str
    title: str = ""
    description: str = ""
    default: Any = None
    required: bool = False
    optional: bool = False          # None is allowed (``Optional[...]``)
    choices: tuple = ()
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: float | None = None
    exclusive_maximum: float | None = None
    path_mode: str = "file"         # "file" or "dir" for PATH fields
    schema: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def label(self) -> str:
        """``delay_s`` -> ``delay (s)``; a title the Params class set itself is kept."""
        if self.title and self.title != self.name.replace("_", " ").title():
            return self.title
        return label_for(self.name)

    def bounds_text(self) -> str:
        """``1 … 10000000``, ``> 0``: the range shown as a placeholder and in tooltips."""
        low = (f"> {format_number(self.exclusive_minimum)}"
               if self.exclusive_minimum is not None else
               f"≥ {format_number(self.minimum)}" if self.minimum is not None else "")
        high = (f"< {format_number(self.exclusive_maximum)}"
                if self.exclusive_maximum is not None else
                f"≤ {format_number(self.maximum)}" if self.maximum is not None else "")
        return ", ".join(part for part in (low, high) if part)

    def parse(self, text: str) -> Any:
        """The value a user's text stands for; ``ValueError`` with a short reason."""
        text = text.strip()
        if text == "" and (self.optional or self.kind not in (INTEGER, NUMBER, JSON)):
            return None if self.optional else ""
        if self.kind == INTEGER:
            try:
                number = float(text.replace("_", ""))
            except ValueError:
                raise ValueError("must be a whole number") from None
            if not number.is_integer():
                raise ValueError("must be a whole number")
            return int(number)
        if self.kind == NUMBER:
            try:
                return float(text.replace("_", ""))
            except ValueError:
                raise ValueError("must be a number") from None
        if self.kind == JSON:
            try:
                return json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"not valid JSON ({exc.msg})") from None
        return text

    def check(self, value: Any) -> str | None:
        """The engine's verdict on ``value``, predicted: ``None`` when it will be accepted."""
        if value is None:
            return None if self.optional else "a value is required"
        if self.kind in (INTEGER, NUMBER):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return "must be a number"
            if self.kind == INTEGER and not float(value).is_integer():
                return "must be a whole number"
            if isinstance(value, float) and math.isnan(value):
                return "must be a number"
            return self._bound_error(float(value))
        if self.kind == CHOICE and value not in self.choices:
            return "must be one of " + ", ".join(str(c) for c in self.choices)
        if self.kind in (STRING, PATH) and self.required and value == "":
            return "a value is required"
        return None

    def _bound_error(self, value: float) -> str | None:
        if self.minimum is not None and value < self.minimum:
            return f"must be at least {format_number(self.minimum)}"
        if self.exclusive_minimum is not None and value <= self.exclusive_minimum:
            return f"must be greater than {format_number(self.exclusive_minimum)}"
        if self.maximum is not None and value > self.maximum:
            return f"must be at most {format_number(self.maximum)}"
        if self.exclusive_maximum is not None and value >= self.exclusive_maximum:
            return f"must be less than {format_number(self.exclusive_maximum)}"
        return None

    def to_text(self, value: Any) -> str:
        """How a value is written in a text box (the inverse of ``parse``)."""
        if value is None:
            return ""
        if self.kind in (INTEGER, NUMBER) and not isinstance(value, bool):
            return format_number(value)
        if self.kind == JSON:
            return json.dumps(value)
        return str(value)


UNIT_SUFFIXES = {"s": "s", "ms": "ms", "mm": "mm", "gb": "GB", "mb": "MB", "px": "px",
                 "hz": "Hz", "pct": "%"}


def label_for(name: str) -> str:
    words = name.split("_")
    if len(words) > 1 and words[-1].lower() in UNIT_SUFFIXES:
        return f"{' '.join(words[:-1])} ({UNIT_SUFFIXES[words[-1].lower()]})"
    return " ".join(words)


def format_number(value: float | int | None) -> str:
    if value is None:
        return ""
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()
                                  and abs(value) < 1e15):
        return str(int(value))
    return repr(float(value))


def parse_schema(schema: dict) -> list[FieldSpec]:
    """One ``FieldSpec`` per property, in the schema's (the Params class's) order."""
    definitions = schema.get("$defs", {})
    required = set(schema.get("required", []))
    return [_field(name, prop, definitions, name in required)
            for name, prop in schema.get("properties", {}).items()]


def _resolve(node: dict, definitions: dict) -> dict:
    """Follow a local ``$ref`` (pydantic puts Enum classes in ``$defs``), keeping siblings."""
    ref = node.get("$ref", "")
    if not ref.startswith("#/$defs/"):
        return node
    target = dict(definitions.get(ref.rsplit("/", 1)[1], {}))
    return target | {k: v for k, v in node.items() if k != "$ref"}


def _field(name: str, prop: dict, definitions: dict, required: bool) -> FieldSpec:
    prop = _resolve(prop, definitions)
    body, optional = prop, False
    variants = [_resolve(v, definitions) for v in prop.get("anyOf", prop.get("oneOf", []))]
    if variants:
        non_null = [v for v in variants if v.get("type") != "null"]
        optional = len(non_null) < len(variants)
        if len(non_null) == 1:
            body = non_null[0]
        elif non_null and all("const" in v or "enum" in v for v in non_null):
            body = {"enum": [c for v in non_null for c in v.get("enum", [v.get("const")])]}
        else:
            body = {"type": "json"}
    common = {
        "name": name,
        "title": prop.get("title", ""),
        "description": prop.get("description", body.get("description", "")),
        "default": prop.get("default", _MISSING if required else None),
        "required": required,
        "optional": optional,
        "schema": prop,
    }
    if common["default"] is _MISSING:
        common["default"] = None
    if "enum" in body or "const" in body:
        return FieldSpec(kind=CHOICE, choices=tuple(body.get("enum", [body.get("const")])),
                         **common)
    kind = body.get("type")
    if kind == "boolean":
        return FieldSpec(kind=BOOL, **common)
    if kind in ("integer", "number"):
        return FieldSpec(kind=INTEGER if kind == "integer" else NUMBER,
                         minimum=body.get("minimum"), maximum=body.get("maximum"),
                         exclusive_minimum=body.get("exclusiveMinimum"),
                         exclusive_maximum=body.get("exclusiveMaximum"), **common)
    if kind == "string":
        if body.get("format") == "password" or body.get("writeOnly"):
            return FieldSpec(kind=SECRET, **common)
        suffix = next((s for s in PATH_SUFFIXES if name.endswith(s)), None)
        if suffix or body.get("format") == "path":
            mode = PATH_SUFFIXES.get(suffix, "dir" if name.endswith("dir") else "file")
            return FieldSpec(kind=PATH, path_mode=mode, **common)
        return FieldSpec(kind=STRING, **common)
    return FieldSpec(kind=JSON, **common)


def validate_values(fields: list[FieldSpec], values: dict) -> dict[str, str]:
    """Per-field messages for values the engine would refuse (bounds, choices, required)."""
    errors = {}
    for spec in fields:
        message = spec.check(values.get(spec.name))
        if message:
            errors[spec.name] = message
    return errors


_FIELD_LINE = re.compile(r"^\s+(?P<where>[^:]+):\s*(?P<message>.+)$")
_INPUT_LINE = re.compile(r"^input (?P<name>[\w.-]+):\s*(?P<message>.+)$")


def errors_from_message(message: str) -> tuple[dict[str, str], list[str]]:
    """Split an engine error into ``({field or input: message}, [other lines])``.

    Understands ``invalid parameters for M:\\n  steps: Input should be ...`` (one line per
    field, nested fields as ``a.b``: the first part names the form's field) and
    ``input data: /x.npy: no such file or folder``.
    """
    fields: dict[str, str] = {}
    general: list[str] = []
    for line in message.splitlines():
        if not line.strip() or line.startswith("invalid parameters for "):
            continue
        found = _FIELD_LINE.match(line) or _INPUT_LINE.match(line.strip())
        if found is None:
            general.append(line.strip())
            continue
        where = found.groupdict().get("where") or found.group("name")
        name = where.split(".")[0].strip()
        if name == "(parameters)":
            general.append(found.group("message"))
        else:
            fields[name] = "; ".join(filter(None, (fields.get(name), found.group("message"))))
    return fields, general
