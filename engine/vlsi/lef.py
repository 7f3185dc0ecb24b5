"""LEF: the technology (units, layers, vias) and the cell library (macros) a DEF refers to.

The technology part is parsed at once; each ``MACRO`` block is only located (a text slice) and
parsed the first time ``Lef.macro(name)`` asks for it, because a library holds hundreds of
cells and a design view needs a few pin shapes. Geometry stays in microns, as LEF writes it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from engine.vlsi import VlsiError, read_text

TOKEN = re.compile(r'"[^"]*"|[^\s;]+|;')
COMMENT = re.compile(r"#[^\n]*")
# Top-level blocks closed by "END <name>" (or, for the fixed ones, "END <keyword>").
NAMED_BLOCKS = {"LAYER", "VIA", "VIARULE", "SITE", "NONDEFAULTRULE", "ARRAY"}
# Statements that cannot start inside a block of this kind: they mean its END is missing.
STOPS = {"LAYER": {"LAYER", "VIA", "VIARULE", "MACRO", "SITE"},
         "VIA": {"VIA", "MACRO", "SITE"}, "VIARULE": {"VIARULE", "MACRO", "SITE"},
         "SITE": {"LAYER", "VIA", "VIARULE", "MACRO", "SITE"}}
FIXED_BLOCKS = {"UNITS", "SPACING", "PROPERTYDEFINITIONS", "IRDROP", "NOISETABLE",
                "CORRECTIONTABLE", "MAXVIASTACK_BLOCK"}


@dataclass
class Layer:
    """A LEF layer; distances in microns, ``index`` = its place in the stack (0 = lowest)."""

    name: str
    type: str = ""  # ROUTING, CUT, MASTERSLICE, OVERLAP, ...
    direction: str = ""  # HORIZONTAL / VERTICAL for routing layers
    pitch: float = 0.0
    width: float = 0.0
    offset: float = 0.0
    spacing: float = 0.0
    index: int = 0


@dataclass
class Via:
    """A fixed LEF via: rectangles per layer, microns, relative to the via's origin."""

    name: str
    default: bool = False
    rects: dict[str, list[tuple[float, float, float, float]]] = field(default_factory=dict)

    @property
    def layers(self) -> list[str]:
        return list(self.rects)


@dataclass
class Pin:
    name: str
    direction: str = ""
    use: str = ""
    shapes: list[tuple[str, tuple[float, float, float, float]]] = field(default_factory=list)


@dataclass
class Macro:
    """A cell: size, pins with their shapes, and obstructions (layer, rect), microns."""

    name: str
    cls: str = ""
    size: tuple[float, float] = (0.0, 0.0)
    origin: tuple[float, float] = (0.0, 0.0)
    site: str = ""
    pins: dict[str, Pin] = field(default_factory=dict)
    obstructions: list[tuple[str, tuple[float, float, float, float]]] = field(
        default_factory=list)


@dataclass
class Lef:
    path: str
    version: str = ""
    dbu_per_micron: int = 0  # 0: the file gives no UNITS DATABASE MICRONS
    manufacturing_grid: float = 0.0
    layers: dict[str, Layer] = field(default_factory=dict)
    vias: dict[str, Via] = field(default_factory=dict)
    via_rules: list[str] = field(default_factory=list)
    sites: dict[str, tuple[float, float]] = field(default_factory=dict)
    _text: str = field(default="", repr=False)
    _macro_spans: dict[str, tuple[int, int]] = field(default_factory=dict, repr=False)
    _macros: dict[str, Macro] = field(default_factory=dict, repr=False)

    @property
    def macro_names(self) -> list[str]:
        return list(self._macro_spans)

    @property
    def routing_layers(self) -> list[Layer]:
        return [layer for layer in self.layers.values() if layer.type == "ROUTING"]

    def macro(self, name: str) -> Macro:
        """The cell ``name``, parsed on first use; ``KeyError`` names unknown cells."""
        if name not in self._macros:
            if name not in self._macro_spans:
                raise KeyError(f"{self.path}: no MACRO {name}")
            start, end = self._macro_spans[name]
            self._macros[name] = _parse_macro(self.path, self._text, start, end, name)
        return self._macros[name]


def read_lef(path: str | Path) -> Lef:
    """Read a LEF file; ``VlsiError`` names the file and line of any problem."""
    path = Path(path)
    text = read_text(path)
    return parse_lef(text, str(path))


def parse_lef(text: str, path: str = "<lef>") -> Lef:
    if "#" in text:  # keep offsets (and so line numbers): blank comments out, same length
        text = COMMENT.sub(lambda m: " " * len(m.group()), text)
    if not text.strip():
        raise VlsiError(path, "the file is empty (no LEF statements)")
    lef = Lef(path=path, _text=text)
    tech_ranges, position = [], 0
    for start, name, body_start in _macro_starts(text):
        if start < position:
            continue
        end = _find_end(text, name, body_start)
        if end < 0:
            raise VlsiError(path, f"MACRO {name} has no END {name}", _line(text, start))
        tech_ranges.append((position, start))
        lef._macro_spans[name] = (body_start, end)
        position = end + len("END ") + len(name)
    tech_ranges.append((position, len(text)))
    tokens, line, previous = [], 1, 0
    for a, b in tech_ranges:
        line += text.count("\n", previous, a)
        tokens += _tokenize(text, a, b, line)
        previous = a
    _parse_tech(lef, _Tokens(tokens, text, path))
    return lef


def _at_line_start(text: str, offset: int) -> bool:
    line_start = text.rfind("\n", 0, offset) + 1
    return not text[line_start:offset].strip()


def _macro_starts(text: str):
    """(offset, name, offset after the name) of every ``MACRO name`` that begins a line."""
    offset = text.find("MACRO")
    while offset >= 0:
        line_end = text.find("\n", offset)
        line_end = len(text) if line_end < 0 else line_end
        words = text[offset:line_end].split()
        if words[0] == "MACRO" and len(words) == 2 and _at_line_start(text, offset):
            yield offset, words[1], line_end
        offset = text.find("MACRO", line_end)


def _find_end(text: str, name: str, offset: int) -> int:
    """Offset of the ``END name`` line closing a block, or -1."""
    needle = f"END {name}"
    while (offset := text.find(needle, offset)) >= 0:
        after = offset + len(needle)
        if (after == len(text) or text[after] in " \t\r\n") and _at_line_start(text, offset):
            return offset
        offset = after
    return -1


def _tokenize(text: str, start: int, end: int, first_line: int) -> list[tuple[str, int]]:
    """(token, line) pairs; ';' is a token of its own, a quoted string is one token."""
    chunk = text[start:end]
    if '"' in chunk:  # quoted strings may hold spaces and ';'
        tokens, line, previous = [], first_line, 0
        for match in TOKEN.finditer(chunk):
            line += chunk.count("\n", previous, match.start())
            previous = match.start()
            tokens.append((match.group(), line))
        return tokens
    return [(token, number) for number, line in enumerate(chunk.split("\n"), first_line)
            for token in line.replace(";", " ; ").split()]


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


class _Tokens:
    """A cursor over (token, offset) pairs that reports errors with line numbers."""

    def __init__(self, tokens: list[tuple[str, int]], text: str, path: str) -> None:
        """``tokens``: (token, line number) pairs."""
        self.tokens, self.text, self.path, self.i = tokens, text, path, 0

    def done(self) -> bool:
        return self.i >= len(self.tokens)

    def peek(self) -> str:
        return self.tokens[self.i][0] if self.i < len(self.tokens) else ""

    def next(self) -> str:
        if self.i >= len(self.tokens):
            raise self.error("unexpected end of file", at_end=True)
        self.i += 1
        return self.tokens[self.i - 1][0]

    def statement(self) -> list[str]:
        """Tokens up to (not including) the next ';'."""
        out = []
        while (token := self.next()) != ";":
            out.append(token)
        return out

    def number(self, token: str) -> float:
        try:
            value = float(token)
        except ValueError:
            raise self.error(f"expected a number, found {token!r}") from None
        if not math.isfinite(value):
            raise self.error(f"expected a finite number, found {token!r}")
        return value

    def positive(self, token: str, what: str) -> float:
        """A number that must be above zero (a pitch or width of 0 or less parses but
        describes no layer a router could use)."""
        value = self.number(token)
        if value <= 0:
            raise self.error(f"{what} must be positive, found {token}")
        return value

    def line(self, back: int = 1) -> int:
        index = min(max(self.i - back, 0), len(self.tokens) - 1)
        return self.tokens[index][1] if self.tokens else 1

    def error(self, problem: str, at_end: bool = False, line: int | None = None) -> VlsiError:
        if line is None:
            line = self.text.count("\n") + 1 if at_end else self.line()
        return VlsiError(self.path, problem, line)


def _parse_tech(lef: Lef, t: _Tokens) -> None:
    while not t.done():
        keyword = t.next()
        if keyword == "END":
            if t.peek() == "LIBRARY":
                return
            raise t.error(f"END {t.peek()} without a matching block")
        if keyword == "VERSION":
            lef.version = " ".join(t.statement())
        elif keyword == "MANUFACTURINGGRID":
            lef.manufacturing_grid = t.number(t.statement()[0])
        elif keyword == "UNITS":
            _parse_units(lef, t)
        elif keyword == "LAYER":
            _parse_layer(lef, t)
        elif keyword == "VIA":
            _parse_via(lef, t)
        elif keyword == "SITE":
            name, start = t.next(), t.line()
            for statement in _block(t, name, start, "SITE"):
                if statement[0] == "SIZE" and len(statement) >= 4:
                    lef.sites[name] = (t.number(statement[1]), t.number(statement[3]))
        elif keyword in NAMED_BLOCKS:
            name, start = t.next(), t.line()
            if keyword == "VIARULE":
                lef.via_rules.append(name)
            for _ in _block(t, name, start, keyword):
                pass
        elif keyword in FIXED_BLOCKS:
            for _ in _block(t, keyword, t.line(), keyword):
                pass
        elif keyword == "BEGINEXT":
            while t.next() != "ENDEXT":
                pass
        else:
            t.statement()  # a one-line setting we do not need (BUSBITCHARS, CLEARANCE...)


def _block(t: _Tokens, name: str, start: int, kind: str):
    """Yield the statements of a block up to ``END name``; a missing END is an error."""
    while True:
        if t.done():
            raise t.error(f"{kind} {name} (line {start}) has no END {name}", at_end=True)
        token = t.peek()
        if token == "END":
            t.next()
            if t.peek() == name:
                t.next()
                return
            t.next()  # the END of a nested block (a NONDEFAULTRULE's LAYER)
            continue
        if token in STOPS.get(kind, {"MACRO"}):
            raise t.error(f"{kind} {name} (line {start}) has no END {name} before {token}",
                          line=t.line(0))
        yield t.statement()


def _parse_units(lef: Lef, t: _Tokens) -> None:
    for statement in _block(t, "UNITS", t.line(), "UNITS"):
        if statement[:2] == ["DATABASE", "MICRONS"] and len(statement) == 3:
            lef.dbu_per_micron = int(t.positive(statement[2], "DATABASE MICRONS"))


def _parse_layer(lef: Lef, t: _Tokens) -> None:
    name, start = t.next(), t.line()
    layer = Layer(name=name, index=len(lef.layers))
    for statement in _block(t, name, start, "LAYER"):
        key, values = statement[0], statement[1:]
        if key == "TYPE" and values:
            layer.type = values[0]
        elif key == "DIRECTION" and values:
            layer.direction = values[0]
        elif key == "PITCH" and values:
            layer.pitch = t.positive(values[0], f"LAYER {name} PITCH")
        elif key == "WIDTH" and values:
            layer.width = t.positive(values[0], f"LAYER {name} WIDTH")
        elif key == "OFFSET" and values:
            layer.offset = t.number(values[0])
        elif key == "SPACING" and len(values) == 1:
            layer.spacing = t.number(values[0])
    lef.layers[name] = layer


def _parse_via(lef: Lef, t: _Tokens) -> None:
    name, start = t.next(), t.line()
    via = Via(name=name)
    if t.peek() in ("DEFAULT", "GENERATED"):
        via.default = t.next() == "DEFAULT"
    layer = ""
    for statement in _block(t, name, start, "VIA"):
        if statement[0] == "LAYER" and len(statement) >= 2:
            layer = statement[1]
            if layer not in lef.layers:
                raise t.error(f"VIA {name} uses layer {layer}, which no LAYER defines")
            via.rects.setdefault(layer, [])
        elif statement[0] == "RECT" and layer:
            numbers = [t.number(v) for v in statement[1:] if v != "MASK"][-4:]
            via.rects[layer].append(tuple(numbers))
    lef.vias[name] = via


def _parse_macro(path: str, text: str, start: int, end: int, name: str) -> Macro:
    t = _Tokens(_tokenize(text, start, end, _line(text, start)), text, path)
    macro = Macro(name=name)
    while not t.done():
        keyword = t.next()
        if keyword == "PIN":
            pin = Pin(name=t.next())
            _parse_pin(t, pin)
            macro.pins[pin.name] = pin
        elif keyword == "OBS":
            macro.obstructions.extend(_shapes(t))
        elif keyword == "CLASS":
            macro.cls = " ".join(t.statement())
        elif keyword == "SIZE":
            values = t.statement()
            macro.size = (t.number(values[0]), t.number(values[2]))
        elif keyword == "ORIGIN":
            values = t.statement()
            macro.origin = (t.number(values[0]), t.number(values[1]))
        elif keyword == "SITE":
            macro.site = t.statement()[0]
        else:
            t.statement()
    return macro


def _parse_pin(t: _Tokens, pin: Pin) -> None:
    while True:
        keyword = t.next()
        if keyword == "END":
            if t.next() != pin.name:
                raise t.error(f"PIN {pin.name} closed by a different END")
            return
        if keyword == "PORT":
            pin.shapes.extend(_shapes(t))
        elif keyword == "DIRECTION":
            pin.direction = t.statement()[0]
        elif keyword == "USE":
            pin.use = t.statement()[0]
        else:
            t.statement()


def _shapes(t: _Tokens) -> list[tuple[str, tuple[float, float, float, float]]]:
    """LAYER/RECT statements of a PORT or OBS up to its bare END."""
    shapes, layer = [], ""
    while (keyword := t.next()) != "END":
        values = t.statement()
        if keyword == "LAYER":
            layer = values[0]
        elif keyword == "RECT":
            numbers = [t.number(v) for v in values if v not in ("MASK", "ITERATE")][-4:]
            shapes.append((layer, tuple(numbers)))
    return shapes
