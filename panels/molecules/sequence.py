"""Sequences as residue strips: one letter per residue, coloured by the residue's property
class; a click selects a residue and highlights it.

A track is one chain: a FASTA record, an antibody's VH or VL, or a PDB/mmCIF chain (its
residue numbers come from the file, so a selected residue reads ``A 45 LYS``). An antibody
chain numbered by ANARCI (``numbering.py``) carries each residue's scheme label and region, and
its CDRs are drawn as coloured bars under their letters.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QPoint, QRect, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFont, QPainter, QPen
from PySide6.QtWidgets import QWidget

from engine.io.molecules import THREE_TO_ONE, Sequence, Structure

# Property classes of the amino acids (the usual Clustal-like grouping).
RESIDUE_CLASS = {
    **dict.fromkeys("AVLIMC", "hydrophobic"),
    **dict.fromkeys("FWY", "aromatic"),
    **dict.fromkeys("KRH", "positive"),
    **dict.fromkeys("DE", "negative"),
    **dict.fromkeys("STNQ", "polar"),
    **dict.fromkeys("GP", "special"),
}
CLASS_COLOUR = {
    "hydrophobic": "#f2c14e", "aromatic": "#d98a3d", "positive": "#5b8def",
    "negative": "#e0585b", "polar": "#58b368", "special": "#b07cc6", "other": "#c8c8c8",
}
NUCLEOTIDE_COLOUR = {"A": "#58b368", "C": "#5b8def", "G": "#f2c14e", "T": "#e0585b",
                     "U": "#e0585b"}
ONE_TO_THREE = {one: three for three, one in reversed(THREE_TO_ONE.items())}
CDR_COLOUR = {"CDR1": "#d62728", "CDR2": "#2ca02c", "CDR3": "#1f77b4"}
CELL_WIDTH, ROW_HEIGHT, LABEL_WIDTH = 14, 22, 110
CDR_BAR = 3  # pixels of the bar under a CDR residue


def residue_class(letter: str) -> str:
    return RESIDUE_CLASS.get(letter.upper(), "other")


@dataclass
class Track:
    """One strip: a label, the one-letter sequence, and each residue's number."""

    label: str
    sequence: str
    numbers: list[int]
    kind: str = "protein"  # or "nucleotide"
    labels: list[str] | None = None  # scheme numbers ("111A") of a numbered antibody chain
    regions: list[str] | None = None  # "CDR1".."CDR3" or "" per residue
    scheme: str = ""  # the numbering scheme's title, e.g. "IMGT"

    def region(self, position: int) -> str:
        return self.regions[position] if self.regions else ""

    def colour(self, position: int) -> str:
        letter = self.sequence[position]
        if self.kind == "nucleotide":
            return NUCLEOTIDE_COLOUR.get(letter, CLASS_COLOUR["other"])
        return CLASS_COLOUR[residue_class(letter)]

    def describe(self, position: int) -> str:
        """``A 45 LYS (positive)`` for a chain, ``VH 45 K (positive)`` for a sequence."""
        letter = self.sequence[position]
        name = ONE_TO_THREE.get(letter, letter) if self.kind == "protein" else letter
        what = residue_class(letter) if self.kind == "protein" else "nucleotide"
        text = f"{self.label} {self.numbers[position]} {name} ({what})"
        if self.labels and self.labels[position]:
            text += f"; {self.scheme} {self.labels[position]}"
            text += f" {self.region(position)}" if self.region(position) else " framework"
        return text


def tracks_of(record: Sequence | Structure | None) -> list[Track]:
    """The strips of a sequence record (one) or a structure (one per polymer chain)."""
    if isinstance(record, Sequence):
        return [Track(record.name, record.sequence, list(range(1, len(record.sequence) + 1)),
                      record.kind)]
    if isinstance(record, Structure):
        residues: dict[str, list[tuple[int, str]]] = {}
        seen: set[tuple[str, int]] = set()
        for atom in record.atoms:
            key = (atom.chain, atom.residue_number)
            letter = THREE_TO_ONE.get(atom.residue)
            if atom.hetero or key in seen or not letter:
                continue
            seen.add(key)
            residues.setdefault(atom.chain, []).append((atom.residue_number, letter))
        return [Track(chain or "-", "".join(letter for _, letter in found),
                      [number for number, _ in found]) for chain, found in residues.items()]
    return []


class SequenceStrip(QWidget):
    """Tracks drawn as rows of coloured letter cells; put it in a ``QScrollArea``."""

    residue_selected = Signal(int, int)  # track, position

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.tracks: list[Track] = []
        self.selected: tuple[int, int] | None = None
        self.setFont(QFont("monospace", 9))

    def set_tracks(self, tracks: list[Track]) -> None:
        self.tracks, self.selected = tracks, None
        self.resize(self.sizeHint())
        self.updateGeometry()
        self.update()

    def sizeHint(self) -> QSize:  # noqa: N802
        longest = max((len(t.sequence) for t in self.tracks), default=0)
        return QSize(LABEL_WIDTH + longest * CELL_WIDTH + 8, max(1, len(self.tracks)) *
                     ROW_HEIGHT + 8)

    def cell(self, track: int, position: int) -> QRect:
        return QRect(LABEL_WIDTH + position * CELL_WIDTH, 4 + track * ROW_HEIGHT, CELL_WIDTH,
                     ROW_HEIGHT - 4)

    def residue_at(self, point: QPoint) -> tuple[int, int] | None:
        track = (point.y() - 4) // ROW_HEIGHT
        position = (point.x() - LABEL_WIDTH) // CELL_WIDTH
        if 0 <= track < len(self.tracks) and point.x() >= LABEL_WIDTH and \
                0 <= position < len(self.tracks[track].sequence):
            return track, position
        return None

    def select(self, track: int, position: int) -> None:
        if not (0 <= track < len(self.tracks) and
                0 <= position < len(self.tracks[track].sequence)):
            raise IndexError(f"no residue {position} in track {track}")
        self.selected = (track, position)
        self.update()
        self.residue_selected.emit(track, position)

    def mousePressEvent(self, event) -> None:  # noqa: N802
        found = self.residue_at(event.position().toPoint())
        if found is not None:
            self.select(*found)

    def paintEvent(self, event) -> None:  # noqa: N802
        painter = QPainter(self)
        visible = event.rect()
        for row, track in enumerate(self.tracks):
            painter.setPen(self.palette().text().color())
            painter.drawText(QRect(4, 4 + row * ROW_HEIGHT, LABEL_WIDTH - 8, ROW_HEIGHT - 4),
                             Qt.AlignmentFlag.AlignVCenter, track.label)
            first = max(0, (visible.left() - LABEL_WIDTH) // CELL_WIDTH)
            last = min(len(track.sequence), (visible.right() - LABEL_WIDTH) // CELL_WIDTH + 1)
            for position in range(first, last):
                rect = self.cell(row, position)
                painter.fillRect(rect, QColor(track.colour(position)))
                painter.setPen(Qt.GlobalColor.black)
                painter.drawText(rect, Qt.AlignmentFlag.AlignCenter, track.sequence[position])
                region = track.region(position)
                if region:
                    painter.fillRect(rect.left(), rect.bottom() - CDR_BAR + 1, rect.width(),
                                     CDR_BAR, QColor(CDR_COLOUR[region]))
        if self.selected is not None:
            painter.setPen(QPen(Qt.GlobalColor.black, 2))
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawRect(self.cell(*self.selected).adjusted(1, -2, -1, 2))
        painter.end()
