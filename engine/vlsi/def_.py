"""DEF: a placed and routed design (die, rows, tracks, components, pins, nets with wiring).

``read_def`` keeps every net's wiring as flat numpy arrays over the whole design, ordered by
net, so the canvas draws all wires of a layer in one batch and a net's own wires are a slice:

* ``segments`` (S, 10) int64: ``SEG`` columns net, layer, x1, y1, x2, y2, width (0 = the
  layer's default), ext1, ext2 (point extensions, -1 = none), shape (index into ``SHAPES``);
* ``vias`` (V, 6) int64: ``VIA`` columns net, layer (the statement's layer), via (index into
  ``Design.via_names``), x, y, orient (index into ``ORIENTS``, 0 = none);
* ``patches`` (P, 6) int64: net, layer, x1, y1, x2, y2 (DEF 5.8 ``RECT`` wiring, absolute).

Coordinates are database units (``Design.dbu_per_micron`` per micron). ``write_def`` writes a
design back (one ``NEW`` statement per segment or via); reading what it wrote gives the same
arrays. Given a LEF, every layer and via name must be defined by it (or by the DEF's own VIAS).
Sections we do not model (BLOCKAGES, REGIONS, GROUPS, ...) are kept verbatim and written back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from engine.io.limits import ELEMENTS
from engine.vlsi import VlsiError, read_text

if TYPE_CHECKING:
    from engine.vlsi.lef import Lef

SEG = {name: i for i, name in enumerate(
    ("net", "layer", "x1", "y1", "x2", "y2", "width", "ext1", "ext2", "shape"))}
VIA = {name: i for i, name in enumerate(("net", "layer", "via", "x", "y", "orient"))}
SHAPES = ("", "RING", "PADRING", "BLOCKRING", "STRIPE", "FOLLOWPIN", "IOWIRE", "COREWIRE",
          "BLOCKWIRE", "BLOCKAGEWIRE", "FILLWIRE", "FILLWIREOPC", "DRCFILL")
ORIENTS = ("", "N", "S", "E", "W", "FN", "FS", "FE", "FW")
WIRING = ("ROUTED", "FIXED", "COVER", "NOSHIELD")
MODELLED_SECTIONS = ("VIAS", "COMPONENTS", "PINS", "SPECIALNETS", "NETS")
RAW_SECTIONS = ("PROPERTYDEFINITIONS", "NONDEFAULTRULES", "REGIONS", "COMPONENTMASKSHIFT",
                "BLOCKAGES", "SLOTS", "FILLS", "SCANCHAINS", "GROUPS", "STYLES", "BEGINEXT",
                "PINPROPERTIES")
SECTION_STARTS = set(MODELLED_SECTIONS) | set(RAW_SECTIONS)
TOP_STATEMENTS = {"VERSION", "NAMESCASESENSITIVE", "DIVIDERCHAR", "BUSBITCHARS", "DESIGN",
                  "TECHNOLOGY", "UNITS", "HISTORY", "DIEAREA", "ROW", "TRACKS", "GCELLGRID",
                  "FIXEDMASK"}
COMMENT = re.compile(r"#[^\n]*")
# The fast path for regular nets: options split at " + ", then whitespace tokens walked a point
# at a time (a regex over every token costs three times as much); wiring with any of FANCY goes
# through the general token parser instead.
OPTION_SPLIT = re.compile(r"\s\+\s")
FANCY = ("MASK", "RECT", "VIRTUAL", "TAPER", "STYLE", " DO ")  # substrings: cheap to test


@dataclass
class Component:
    name: str
    macro: str
    status: str = "UNPLACED"  # PLACED, FIXED, COVER, UNPLACED
    x: int = 0
    y: int = 0
    orient: str = "N"
    options: list[str] = field(default_factory=list)  # other "+ KEY ..." options, verbatim


@dataclass
class Port:
    shapes: list[tuple[str, tuple[int, int, int, int]]] = field(default_factory=list)
    status: str = ""  # PLACED, FIXED, COVER or "" (unplaced)
    x: int = 0
    y: int = 0
    orient: str = "N"


@dataclass
class IoPin:
    name: str
    net: str
    direction: str = ""
    use: str = ""
    ports: list[Port] = field(default_factory=list)
    options: list[str] = field(default_factory=list)


@dataclass
class Net:
    name: str
    pins: list[tuple[str, str]] = field(default_factory=list)  # (component or "PIN", pin)
    use: str = ""
    special: bool = False
    status: str = "ROUTED"  # the wiring keyword, when the net has wiring
    options: list[str] = field(default_factory=list)


@dataclass
class DefVia:
    name: str
    layers: list[str]
    body: str  # the definition after the name, verbatim ("+ VIARULE ... + ROWCOL 1 3")


@dataclass
class Design:
    path: str
    name: str = ""
    version: str = ""
    dbu_per_micron: int = 1000
    die_area: tuple[int, ...] = ()
    header: list[str] = field(default_factory=list)  # other top statements (BUSBITCHARS...)
    rows: list[str] = field(default_factory=list)  # ROW statements, verbatim
    tracks: list[tuple[str, int, int, int, list[str]]] = field(default_factory=list)
    gcell_grid: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # axis: start,n,step
    vias: dict[str, DefVia] = field(default_factory=dict)
    components: list[Component] = field(default_factory=list)
    pins: list[IoPin] = field(default_factory=list)
    nets: list[Net] = field(default_factory=list)
    layer_names: list[str] = field(default_factory=list)
    via_names: list[str] = field(default_factory=list)
    segments: np.ndarray = field(default_factory=lambda: np.zeros((0, len(SEG)), np.int64))
    vias_placed: np.ndarray = field(default_factory=lambda: np.zeros((0, len(VIA)), np.int64))
    patches: np.ndarray = field(default_factory=lambda: np.zeros((0, 6), np.int64))
    raw_sections: list[tuple[str, str]] = field(default_factory=list)  # (before, text)
    warnings: list[str] = field(default_factory=list)

    def net_index(self, name: str) -> int:
        for index, net in enumerate(self.nets):
            if net.name == name:
                return index
        raise KeyError(f"{self.path}: no net {name}")

    def net_wiring(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """(segments, vias) of net ``index`` (slices of the design's sorted arrays)."""
        s = np.searchsorted(self.segments[:, SEG["net"]], [index, index + 1])
        v = np.searchsorted(self.vias_placed[:, VIA["net"]], [index, index + 1])
        return self.segments[s[0]:s[1]], self.vias_placed[v[0]:v[1]]

    def layer_index(self, name: str) -> int:
        if name not in self.layer_names:
            self.layer_names.append(name)
        return self.layer_names.index(name)

    def via_index(self, name: str) -> int:
        if name not in self.via_names:
            self.via_names.append(name)
        return self.via_names.index(name)

    def summary(self) -> dict:
        """Counts for people: nets, routed nets, segments and vias are the signal nets' (as
        "nets" is); the special (power) nets' wiring is counted apart."""
        special = np.array([n.special for n in self.nets], dtype=bool)
        seg_special = special[self.segments[:, SEG["net"]]]
        via_special = special[self.vias_placed[:, VIA["net"]]]
        routed = set(self.segments[~seg_special, SEG["net"]].tolist()) | set(
            self.vias_placed[~via_special, VIA["net"]].tolist())
        return {"design": self.name, "components": len(self.components),
                "pins": len(self.pins), "nets": int((~special).sum()),
                "special_nets": int(special.sum()), "routed_nets": len(routed),
                "segments": int((~seg_special).sum()), "vias": int((~via_special).sum()),
                "special_segments": int(seg_special.sum()),
                "special_vias": int(via_special.sum()), "layers": list(self.layer_names)}


# -- reading -----------------------------------------------------------------------------------

def read_def(path: str | Path, lef: Lef | None = None) -> Design:
    """Read a DEF file; with ``lef``, layer and via names are checked against it."""
    path = Path(path)
    text = read_text(path)
    return parse_def(text, str(path), lef)


def parse_def(text: str, path: str = "<def>", lef: Lef | None = None) -> Design:
    return _DefParser(text, path, lef).parse()


class _DefParser:
    def __init__(self, text: str, path: str, lef: Lef | None) -> None:
        if "#" in text:
            text = COMMENT.sub(lambda m: " " * len(m.group()), text)
        self.text, self.path, self.lef = text, path, lef
        self.design = Design(path=path)
        self.layers: dict[str, int] = {}
        self.via_ids: dict[str, int] = {}
        self.via_switch: dict[str, dict[str, str]] = {}  # via -> {layer: the other layer}
        self.segments: list[tuple[int, ...]] = []
        self.vias: list[tuple[int, ...]] = []
        self.patches: list[tuple[int, ...]] = []

    # errors carry the file and the line of the statement (or of a token in it)
    def error(self, problem: str, offset: int, piece: str = "", token: str = "") -> VlsiError:
        line = self.text.count("\n", 0, offset) + 1
        if piece and token:
            found = re.search(rf"(?<!\S){re.escape(token)}(?!\S)", piece)
            line += piece.count("\n", 0, found.start()) if found else 0
        elif piece:
            line += piece.count("\n", 0, len(piece) - len(piece.lstrip()))
        return VlsiError(self.path, problem, line)

    def statements(self):
        """(offset, piece) per ';'-terminated statement (quotes may hold ';')."""
        offset, pending, pending_offset = 0, "", 0
        for piece in self.text.split(";"):
            start = offset
            offset += len(piece) + 1
            if pending:
                piece, start = pending + ";" + piece, pending_offset
                pending = ""
            if '"' in piece and piece.count('"') % 2:
                pending, pending_offset = piece, start
                continue
            yield start, piece
        if pending:
            yield pending_offset, pending

    def parse(self) -> Design:
        d = self.design
        if not self.text.strip():  # comments are blanked already
            raise VlsiError(self.path, "the file is empty (no DEF statements)")
        section, section_start, section_piece, expected, raw = "", 0, "", -1, []
        items = 0
        ended = False
        for offset, piece in self.statements():
            if section == "NETS":  # the bulk of a design: split a net only when needed
                head = piece.split(None, 2)
                if len(head) >= 2 and head[0] == "-":
                    items += 1
                    self.net(head[1], offset, piece, special=False)
                    continue
            tokens = piece.split()
            while tokens and tokens[0] == "END" and not ended:
                what = tokens[1] if len(tokens) > 1 else ""
                if section and what == section:
                    if expected >= 0 and items != expected:
                        d.warnings.append(f"{section} declares {expected} items, has {items}")
                    if section in RAW_SECTIONS:
                        d.raw_sections.append((section, "\n".join(raw)))
                    section, tokens = "", tokens[2:]
                elif what == "DESIGN" and not section:
                    ended, tokens = True, []
                elif section:
                    raise self.error(f"{section} section has no END {section}", section_start,
                                     section_piece, section)
                else:
                    raise self.error(f"END {what} without a matching section", offset, piece)
            if not tokens or ended:
                continue
            if section:
                if section in RAW_SECTIONS:
                    if tokens[0] in SECTION_STARTS and tokens[0] != section:
                        raise self.error(f"{section} section has no END {section}",
                                         section_start, section_piece, section)
                    raw.append("   " + " ".join(tokens) + " ;")
                    continue
                if tokens[0] != "-":
                    if tokens[0] in SECTION_STARTS or tokens[0] in ("DESIGN", "ROW", "TRACKS"):
                        raise self.error(f"{section} section has no END {section}",
                                         section_start, section_piece, section)
                    raise self.error(f"expected '- name ...' in {section}, found "
                                     f"{tokens[0]!r}", offset, piece)
                items += 1
                self.section_item(section, tokens, offset, piece)
                continue
            keyword = tokens[0]
            if keyword in SECTION_STARTS:
                section, section_start, section_piece, items, raw = keyword, offset, piece, 0, []
                expected = self.integer(tokens[1], offset, piece) if len(tokens) > 1 else -1
                if expected > ELEMENTS.value:
                    start = offset + len(piece) - len(piece.lstrip())
                    line = self.text.count("\n", 0, start) + 1
                    over = ELEMENTS.refuse(self.path, expected, f"{keyword} declares")
                    raise VlsiError(self.path, over.problem, line)
                if keyword in RAW_SECTIONS:
                    raw.append(" ".join(tokens) + " ;")
            else:
                self.top_statement(tokens, offset, piece)
        if section:
            raise self.error(f"{section} section has no END {section}", section_start,
                             section_piece, section)
        if not ended:
            d.warnings.append("no END DESIGN")
        d.segments = _array(self.segments, len(SEG))
        d.vias_placed = _array(self.vias, len(VIA))
        d.patches = _array(self.patches, 6)
        return d

    def integer(self, token: str, offset: int, piece: str) -> int:
        try:
            return int(token)
        except ValueError:
            try:
                return int(float(token))
            except ValueError:
                raise self.error(f"expected a number, found {token!r}", offset, piece,
                                 token) from None

    def top_statement(self, tokens: list[str], offset: int, piece: str) -> None:
        d, keyword = self.design, tokens[0]
        if keyword == "DESIGN":
            d.name = tokens[1] if len(tokens) > 1 else ""
        elif keyword == "VERSION":
            d.version = " ".join(tokens[1:])
        elif keyword == "UNITS":
            if tokens[1:3] != ["DISTANCE", "MICRONS"] or len(tokens) != 4:
                raise self.error("expected UNITS DISTANCE MICRONS <n>", offset, piece)
            d.dbu_per_micron = self.integer(tokens[3], offset, piece)
        elif keyword == "DIEAREA":
            values = [t for t in tokens[1:] if t not in ("(", ")")]
            shape = [t if t in ("(", ")") else "n" for t in tokens[1:]]
            if len(values) < 4 or len(values) % 2 or shape != ["(", "n", "n", ")"] * (
                    len(values) // 2):
                raise self.error("expected DIEAREA ( x y ) ( x y ) [( x y ) ...]", offset, piece)
            d.die_area = tuple(self.integer(t, offset, piece) for t in values)
        elif keyword == "ROW":
            d.rows.append(" ".join(tokens))
        elif keyword == "TRACKS":
            # TRACKS X start DO n STEP s [MASK m [SAMEMASK]] LAYER l ...
            try:
                layers = tokens[tokens.index("LAYER") + 1:]
                d.tracks.append((tokens[1], int(tokens[2]), int(tokens[4]), int(tokens[6]),
                                 layers))
            except (ValueError, IndexError):
                raise self.error("malformed TRACKS statement", offset, piece) from None
            for layer in layers:
                self.layer(layer, offset, piece)
        elif keyword == "GCELLGRID":
            if len(tokens) != 7:
                raise self.error("expected GCELLGRID X|Y start DO n STEP s", offset, piece)
            axis = tokens[1]
            start, count, step = (self.integer(tokens[i], offset, piece) for i in (2, 4, 6))
            if axis in d.gcell_grid:  # several statements per axis: keep the main (largest)
                if count <= d.gcell_grid[axis][1]:
                    d.header.append(" ".join(tokens))
                    return
                d.header.append("GCELLGRID {} {} DO {} STEP {}".format(axis, *d.gcell_grid[axis]))
            d.gcell_grid[axis] = (start, count, step)
        elif keyword in TOP_STATEMENTS:
            d.header.append(" ".join(tokens))
        else:
            raise self.error(f"unknown DEF statement {keyword!r}", offset, piece, keyword)

    def layer(self, name: str, offset: int, piece: str) -> int:
        index = self.layers.get(name)
        if index is None:
            if self.lef is not None and name not in self.lef.layers:
                raise self.error(f"layer {name} is not defined in {self.lef.path}", offset,
                                 piece, name)
            index = self.layers[name] = self.design.layer_index(name)
        return index

    def via(self, name: str, offset: int, piece: str) -> int:
        index = self.via_ids.get(name)
        if index is None:
            if (self.lef is not None and name not in self.lef.vias
                    and name not in self.design.vias):
                raise self.error(f"via {name} is defined neither in {self.lef.path} nor in "
                                 "the DEF's VIAS", offset, piece, name)
            index = self.via_ids[name] = self.design.via_index(name)
        return index

    def other_layer(self, via: str, layer: str) -> str:
        """The routing layer a wire continues on after ``via`` (unknown vias: the same)."""
        if via not in self.via_switch:
            if via in self.design.vias:
                names = self.design.vias[via].layers
            elif self.lef is not None and via in self.lef.vias:
                names = self.lef.vias[via].layers
            else:
                names = []
            metal = [n for n in names if self.lef is None or n not in self.lef.layers
                     or self.lef.layers[n].type != "CUT"]
            routing = [metal[0], metal[-1]] if len(metal) >= 2 else []
            self.via_switch[via] = ({routing[0]: routing[1], routing[1]: routing[0]}
                                    if routing else {})
        return self.via_switch[via].get(layer, layer)

    # -- section items ---------------------------------------------------------------------------
    def section_item(self, section: str, tokens: list[str], offset: int, piece: str) -> None:
        if len(tokens) < 2:
            raise self.error(f"{section} item without a name", offset, piece)
        if section == "COMPONENTS":
            self.component(tokens, offset, piece)
        elif section == "NETS" or section == "SPECIALNETS":
            self.net(tokens[1], offset, piece, special=section == "SPECIALNETS", tokens=tokens)
        elif section == "PINS":
            self.pin(tokens, offset, piece)
        elif section == "VIAS":
            layers = []
            for i, token in enumerate(tokens):
                if token == "LAYERS" and tokens[i - 1] == "+":
                    layers = tokens[i + 1:i + 4]
                elif (token in ("RECT", "POLYGON") and tokens[i - 1] == "+"
                      and tokens[i + 1] not in layers):
                    layers.append(tokens[i + 1])
            for layer in layers:
                self.layer(layer, offset, piece)
            self.design.vias[tokens[1]] = DefVia(tokens[1], layers, " ".join(tokens[2:]))

    def component(self, tokens: list[str], offset: int, piece: str) -> None:
        if len(tokens) < 3:
            raise self.error("component without a cell name", offset, piece)
        if self.lef is not None and tokens[2] not in self.lef._macro_spans:
            raise self.error(f"component {tokens[1]}: cell {tokens[2]} is not defined in "
                             f"{self.lef.path}", offset, piece, tokens[2])
        if len(tokens) == 10 and tokens[5] == "(" and tokens[8] == ")":  # - c m + PLACED ( x y ) o
            try:
                self.design.components.append(Component(
                    tokens[1], tokens[2], tokens[4], int(tokens[6]), int(tokens[7]), tokens[9]))
                return
            except ValueError:
                pass  # the general path names the bad number
        component = Component(tokens[1], tokens[2])
        for option in _options(tokens, 3):
            if option[0] in ("PLACED", "FIXED", "COVER") and len(option) >= 6:
                component.status = option[0]
                component.x = self.integer(option[2], offset, piece)
                component.y = self.integer(option[3], offset, piece)
                component.orient = option[5]
            elif option[0] == "UNPLACED":
                component.status = "UNPLACED"
            else:
                component.options.append(" ".join(option))
        self.design.components.append(component)

    def pin(self, tokens: list[str], offset: int, piece: str) -> None:
        pin = IoPin(tokens[1], "")
        port: Port | None = None
        for option in _options(tokens, 2):
            key = option[0]
            if key == "NET":
                pin.net = option[1]
            elif key == "DIRECTION":
                pin.direction = option[1]
            elif key == "USE":
                pin.use = option[1]
            elif key == "PORT" or (port is None and key in ("LAYER", "PLACED", "FIXED",
                                                            "COVER")):
                port = Port()
                pin.ports.append(port)
                if key != "PORT":
                    self.port_option(port, option, offset, piece)
            elif key in ("LAYER", "PLACED", "FIXED", "COVER") and port is not None:
                self.port_option(port, option, offset, piece)
            else:
                pin.options.append(" ".join(option))
        self.design.pins.append(pin)

    def port_option(self, port: Port, option: list[str], offset: int, piece: str) -> None:
        if option[0] == "LAYER":
            numbers = [self.integer(t, offset, piece) for t in option[2:]
                       if t not in ("(", ")")][-4:]
            if len(numbers) != 4:
                raise self.error("pin LAYER needs two points", offset, piece)
            port.shapes.append((option[1], tuple(numbers)))
            self.layer(option[1], offset, piece)
        elif len(option) >= 6:
            port.status = option[0]
            port.x = self.integer(option[2], offset, piece)
            port.y = self.integer(option[3], offset, piece)
            port.orient = option[5]

    def net(self, name: str, offset: int, piece: str, special: bool,
            tokens: list[str] | None = None) -> None:
        net = Net(name, special=special)
        index = len(self.design.nets)
        self.design.nets.append(net)
        if (not special and not any(word in piece for word in FANCY)
                and self.fast_net(net, index, offset, piece)):
            return
        tokens = tokens or piece.split()
        i, n = 2, len(tokens)
        while i < n and tokens[i] == "(":  # ( component pin [+ SYNTHESIZED] )
            close = tokens.index(")", i)
            if close - i < 3:
                raise self.error(f"net {net.name}: malformed connection", offset, piece)
            net.pins.append((tokens[i + 1], tokens[i + 2]))
            i = close + 1
        while i < n:
            if tokens[i] != "+" or i + 1 >= n:
                raise self.error(f"net {net.name}: expected '+ option', found {tokens[i]!r}",
                                 offset, piece, tokens[i])
            key = tokens[i + 1]
            if key in WIRING:
                net.status = key
                i = self.wiring(tokens, i + 2, index, special, offset, piece)
                continue
            j = i + 2
            while j < n and tokens[j] != "+":
                j += 1
            if key == "USE" and j == i + 3:
                net.use = tokens[i + 2]
            else:
                net.options.append(" ".join(tokens[i + 1:j]))
            i = j

    def fast_net(self, net: Net, index: int, offset: int, piece: str) -> bool:
        """Regular-net wiring from whitespace tokens, a point at a time; False (nothing
        recorded) when the text needs the general parser."""
        parts = OPTION_SPLIT.split(piece)
        head = parts[0].split()
        pins = []
        for i in range(2, len(head), 4):
            if head[i] != "(" or i + 3 >= len(head) or head[i + 3] != ")":
                return False
            pins.append((head[i + 1], head[i + 2]))
        segments, vias, options, use, status = [], [], [], "", "ROUTED"
        for part in parts[1:]:
            key, _, rest = part.strip().partition(" ")
            if key not in WIRING:
                if key == "USE" and len(rest.split()) == 1:
                    use = rest.strip()
                else:
                    options.append(" ".join(part.split()))
                continue
            status = key
            try:
                tokens = rest.replace("(", " ( ").replace(")", " ) ").split()  # "(1 2)" too
                if not self._fast_wiring(tokens, index, offset, piece, segments, vias):
                    return False
            except (IndexError, ValueError):
                return False  # a short or odd point: the general parser says where
        net.pins, net.use, net.options, net.status = pins, use, options, status
        self.segments.extend(segments)
        self.vias.extend(vias)
        return True

    def _fast_wiring(self, tokens: list[str], index: int, offset: int, piece: str,
                     segments: list, vias: list) -> bool:
        """``layer ( x y [ext] ) ... [via] NEW ...`` statements into ``segments`` and ``vias``;
        False at anything else (a via must end its statement)."""
        layers, via_ids = self.layers, self.via_ids
        i, n = 0, len(tokens)
        while i < n:
            layer = layers.get(tokens[i])
            if layer is None:
                layer = self.layer(tokens[i], offset, piece)
            if i + 1 >= n or tokens[i + 1] != "(":
                return False
            a, b = tokens[i + 2], tokens[i + 3]
            if a == "*" or b == "*":
                return False
            x, y = int(a), int(b)
            if tokens[i + 4] == ")":
                ext, i = -1, i + 5
            elif tokens[i + 5] == ")":
                ext, i = int(tokens[i + 4]), i + 6
            else:
                return False
            while i < n:
                token = tokens[i]
                if token == "(":
                    a, b = tokens[i + 1], tokens[i + 2]
                    nx = x if a == "*" else int(a)
                    ny = y if b == "*" else int(b)
                    if tokens[i + 3] == ")":
                        next_ext, i = -1, i + 4
                    elif tokens[i + 4] == ")":
                        next_ext, i = int(tokens[i + 3]), i + 5
                    else:
                        return False
                    segments.append((index, layer, x, y, nx, ny, 0, ext, next_ext, 0))
                    x, y, ext = nx, ny, next_ext
                elif token == "NEW":
                    i += 1
                    break
                elif "(" in token or ")" in token:
                    return False
                else:
                    via = via_ids.get(token)
                    if via is None:
                        via = self.via(token, offset, piece)
                    vias.append((index, layer, via, x, y, 0))
                    i += 1
                    if i < n and tokens[i] != "NEW":
                        return False
        return tokens[-1:] != ["NEW"]  # a NEW with no statement after it

    def wiring(self, tokens: list[str], i: int, net: int, special: bool, offset: int,
               piece: str) -> int:
        """Parse wiring statements from ``tokens[i]`` (a layer); return the index after them."""
        n = len(tokens)
        segments, vias, patches = self.segments, self.vias, self.patches
        while i < n:
            layer_name = tokens[i]
            layer = self.layer(layer_name, offset, piece)
            i += 1
            width = shape = 0
            if special and i < n and tokens[i] not in ("(", "+"):
                width = self.integer(tokens[i], offset, piece)
                i += 1
            while i < n and tokens[i] in ("+", "TAPER", "TAPERRULE", "STYLE"):
                if tokens[i] == "+":
                    if i + 1 < n and tokens[i + 1] == "SHAPE":
                        shape = SHAPES.index(tokens[i + 2]) if tokens[i + 2] in SHAPES else 0
                        i += 3
                    elif i + 1 < n and tokens[i + 1] in ("STYLE", "MASK"):
                        i += 3
                    else:
                        return i
                else:
                    i += 1 if tokens[i] == "TAPER" else 2
            x = y = ext = -1
            have_point = False
            while i < n:
                token = tokens[i]
                if token == "(":
                    if i + 3 >= n:
                        raise self.error("unterminated point", offset, piece)
                    a, b = tokens[i + 1], tokens[i + 2]
                    nx = x if a == "*" else self.integer(a, offset, piece)
                    ny = y if b == "*" else self.integer(b, offset, piece)
                    if tokens[i + 3] == ")":
                        next_ext, i = -1, i + 4
                    elif i + 4 < n and tokens[i + 4] == ")":
                        next_ext, i = self.integer(tokens[i + 3], offset, piece), i + 5
                    else:
                        raise self.error(f"malformed point near {a} {b}", offset, piece, a)
                    if have_point:
                        segments.append((net, layer, x, y, nx, ny, width, ext, next_ext, shape))
                    x, y, ext, have_point = nx, ny, next_ext, True
                elif token == "NEW":
                    i += 1
                    break
                elif token == "+":
                    return i
                elif token == "MASK":
                    i += 2
                elif token == "VIRTUAL":
                    have_point = False  # the next point starts a new wire
                    i += 1
                elif token == "RECT":
                    values = [self.integer(t, offset, piece) for t in tokens[i + 1:i + 7]
                              if t not in "()"]
                    patches.append((net, layer, x + values[0], y + values[1], x + values[2],
                                    y + values[3]))
                    i += 7
                else:  # a via at the current point
                    if not have_point:
                        raise self.error(f"via {token} before any point", offset, piece, token)
                    via = self.via(token, offset, piece)
                    i += 1
                    orient = 0
                    if i < n and tokens[i] in ORIENTS:
                        orient, i = ORIENTS.index(tokens[i]), i + 1
                    if i < n and tokens[i] == "DO":  # an array of vias: DO nx BY ny STEP dx dy
                        nx, ny, dx, dy = (self.integer(tokens[i + k], offset, piece)
                                          for k in (1, 3, 5, 6))
                        vias.extend((net, layer, via, x + a * dx, y + b * dy, orient)
                                    for a in range(nx) for b in range(ny))
                        i += 7
                    else:
                        vias.append((net, layer, via, x, y, orient))
                    if i < n and tokens[i] not in ("(", "NEW", "+", "MASK", "RECT", "VIRTUAL"):
                        raise self.error(f"unexpected {tokens[i]!r} after via {token}", offset,
                                         piece, tokens[i])
                    layer_name = self.other_layer(token, layer_name)
                    layer = self.layer(layer_name, offset, piece)
            else:
                return i
        return i


def _options(tokens: list[str], start: int):
    """The "+ KEY values..." groups of a statement from ``tokens[start]``."""
    option: list[str] = []
    for token in tokens[start:]:
        if token == "+":
            if option:
                yield option
            option = []
        else:
            option.append(token)
    if option:
        yield option


def _array(rows: list[tuple[int, ...]], width: int) -> np.ndarray:
    return np.array(rows, dtype=np.int64).reshape(-1, width)


# -- writing -----------------------------------------------------------------------------------

def write_def(design: Design, path: str | Path) -> Path:
    """Write ``design`` as DEF (atomically); see ``def_text``."""
    from engine.atomic import write_bytes_atomic

    path = Path(path)
    write_bytes_atomic(path, def_text(design).encode())
    return path


def def_text(design: Design) -> str:
    d = design
    out = [f"VERSION {d.version or '5.8'} ;"]
    out += [f"{h} ;" for h in d.header if not h.startswith(("GCELLGRID", "DIVIDERCHAR",
                                                              "BUSBITCHARS"))]
    out += [f"{h} ;" for h in d.header if h.startswith(("DIVIDERCHAR", "BUSBITCHARS"))]
    out.append(f"DESIGN {d.name} ;")
    out.append(f"UNITS DISTANCE MICRONS {d.dbu_per_micron} ;")
    if d.die_area:
        points = " ".join(f"( {d.die_area[i]} {d.die_area[i + 1]} )"
                          for i in range(0, len(d.die_area), 2))
        out.append(f"DIEAREA {points} ;")
    out += [f"{r} ;" for r in d.rows]
    for axis, start, count, step, layers in d.tracks:
        out.append(f"TRACKS {axis} {start} DO {count} STEP {step} LAYER {' '.join(layers)} ;")
    for axis, (start, count, step) in d.gcell_grid.items():
        out.append(f"GCELLGRID {axis} {start} DO {count} STEP {step} ;")
    out += [f"{h} ;" for h in d.header if h.startswith("GCELLGRID")]
    raw = dict(d.raw_sections)
    for name in ("PROPERTYDEFINITIONS",):
        if name in raw:
            out += [raw[name], f"END {name}"]
    if d.vias:
        out.append(f"VIAS {len(d.vias)} ;")
        out += [f"    - {v.name} {v.body} ;" for v in d.vias.values()]
        out.append("END VIAS")
    for name in ("NONDEFAULTRULES", "REGIONS", "COMPONENTMASKSHIFT"):
        if name in raw:
            out += [raw[name], f"END {name}"]
    out.append(f"COMPONENTS {len(d.components)} ;")
    for c in d.components:
        place = (f" + {c.status} ( {c.x} {c.y} ) {c.orient}" if c.status != "UNPLACED"
                 else " + UNPLACED")
        extra = "".join(f" + {o}" for o in c.options)
        out.append(f"    - {c.name} {c.macro}{extra}{place} ;")
    out.append("END COMPONENTS")
    out.append(f"PINS {len(d.pins)} ;")
    for p in d.pins:
        text = f"    - {p.name} + NET {p.net}"
        text += f" + DIRECTION {p.direction}" if p.direction else ""
        text += f" + USE {p.use}" if p.use else ""
        text += "".join(f" + {o}" for o in p.options)
        for port in p.ports:
            text += "\n      + PORT" if len(p.ports) > 1 else ""
            for layer, (x1, y1, x2, y2) in port.shapes:
                text += f"\n        + LAYER {layer} ( {x1} {y1} ) ( {x2} {y2} )"
            if port.status:
                text += f"\n        + {port.status} ( {port.x} {port.y} ) {port.orient}"
        out.append(text + " ;")
    out.append("END PINS")
    for name in ("BLOCKAGES", "SLOTS", "FILLS"):
        if name in raw:
            out += [raw[name], f"END {name}"]
    for special in (True, False):
        nets = [(i, n) for i, n in enumerate(d.nets) if n.special == special]
        section = "SPECIALNETS" if special else "NETS"
        out.append(f"{section} {len(nets)} ;")
        out += [_net_text(d, i, net) for i, net in nets]
        out.append(f"END {section}")
    for name in ("SCANCHAINS", "GROUPS", "BEGINEXT", "STYLES", "PINPROPERTIES"):
        if name in raw:
            out += [raw[name], f"END {name}"]
    out.append("END DESIGN")
    return "\n".join(out) + "\n"


def _net_text(d: Design, index: int, net: Net) -> str:
    pins = " ".join(f"( {c} {p} )" for c, p in net.pins)
    text = f"    - {net.name} {pins}".rstrip()
    segments, vias = d.net_wiring(index)
    s = np.searchsorted(d.patches[:, 0], [index, index + 1]) if len(d.patches) else (0, 0)
    patches = d.patches[s[0]:s[1]]
    statements = []
    for _, layer, x1, y1, x2, y2, width, ext1, ext2, shape in segments.tolist():
        head = d.layer_names[layer]
        if net.special:
            head += f" {width}" + (f" + SHAPE {SHAPES[shape]}" if shape else "")
        a = f"( {x1} {y1}{f' {ext1}' if ext1 >= 0 else ''} )"
        b = f"( {x2} {y2}{f' {ext2}' if ext2 >= 0 else ''} )"
        statements.append(f"{head} {a} {b}")
    for _, layer, x1, y1, x2, y2 in patches.tolist():
        statements.append(f"{d.layer_names[layer]} ( {x1} {y1} ) RECT ( 0 0 {x2 - x1} "
                          f"{y2 - y1} )")
    for _, layer, via, x, y, orient in vias.tolist():
        head = d.layer_names[layer] + (" 0" if net.special else "")
        statements.append(f"{head} ( {x} {y} ) {d.via_names[via]}"
                          + (f" {ORIENTS[orient]}" if orient else ""))
    if statements:
        text += f"\n      + {net.status} " + "\n      NEW ".join(statements)
    if net.use:
        text += f"\n      + USE {net.use}"
    text += "".join(f"\n      + {o}" for o in net.options)
    return text + " ;"
