"""The verdict of a reproduction (a Claim, ``engine/api.py``; CONTRACT.md, "Verdicts"): each
criterion as a forest row (estimate, interval whisker, threshold line or shaded band, verdict
colour) beside the abstract's words, the parts of a combined criterion indented under it, what
would decide an INCONCLUSIVE one, and the sanity checks apart (they never count).

The header carries the marks a reader must not miss: the spec (v1 criteria are the old
single-number checks), the profile, a smoke run (no verdict required) and an exploratory run
(settings other than the profile's: never the paper's verdict). Claims written before the
schema (``measured op target``, no interval) show in the same rows, their target as the line.
A claim whose units fanned out on a cluster says where they ran.

Also here, for every place that offers a reproduction (the lab, the shell's claim dock): the
profile choice that shows each profile's settings, the exploratory note, and "Open report".
"""

from __future__ import annotations

import html
import math
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QModelIndex, QPointF, QRectF, Qt, QUrl
from PySide6.QtGui import QBrush, QColor, QDesktopServices, QFont, QPainter, QPen, QPolygonF
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

PASS_COLOUR = QColor("#1e8449")
FAIL_COLOUR = QColor("#c0392b")
OPEN_COLOUR = QColor("#d68910")  # INCONCLUSIVE: amber
VERDICT_COLOURS = {"PASS": PASS_COLOUR, "FAIL": FAIL_COLOUR, "INCONCLUSIVE": OPEN_COLOUR}
BAND_COLOUR = QColor(52, 152, 219, 60)
THRESHOLD_COLOUR = QColor("#34495e")
OP_SYMBOLS = {">=": "≥", ">": ">", "<=": "≤", "<": "<", "==": "="}
COLUMNS = ("criterion", "estimate", "interval", "rule", "verdict", "quote")
NAME, ESTIMATE, FOREST, RULE, VERDICT, QUOTE = range(len(COLUMNS))
FOREST_COLUMN_PX = 240
QUOTE_COLUMN_PX = 220
COMPACT_FOREST_PX = 150  # a narrow view (a dock): the quote moves under the table
INDENT = "    "
ROW_MIN_PX = 34
TABLE_MIN_PX = 150  # the header and three rows, however long the notes below
FOREST_ROLE = Qt.ItemDataRole.UserRole + 1
PROFILES = ("smoke", "cpu", "gpu")  # engine.api.PROFILES (the GUI does not import pydantic)
PROFILE_HINTS = {"smoke": "tiny sizes, seconds: the numbers, no verdict",
                 "cpu": "the spec's sizes for this machine",
                 "gpu": "the spec's full sizes, on one GPU"}


def format_value(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, float)):
        if isinstance(value, float) and math.isnan(value):
            return "NaN"
        return f"{value:.4g}"
    return str(value)


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes} min {rest:02d} s"


def criterion_verdict(criterion: dict) -> str:
    """A criterion's verdict; one written before the schema has only ``passed``."""
    return criterion.get("verdict") or ("PASS" if criterion.get("passed") else "FAIL")


def claim_verdict(claim: dict) -> str:
    if claim.get("verdict"):
        return claim["verdict"]
    criteria = claim.get("criteria", [])
    return "PASS" if claim.get("passed", all(c.get("passed") for c in criteria)) else "FAIL"


def flatten(criteria: list[dict], depth: int = 0) -> list[tuple[int, dict]]:
    """Each criterion with its depth, parts right after the criterion they combine."""
    rows = []
    for criterion in criteria:
        rows.append((depth, criterion))
        rows += flatten(criterion.get("parts") or [], depth + 1)
    return rows


def rule_text(criterion: dict) -> str:
    rule = criterion.get("rule")
    if criterion.get("parts"):
        return f"{criterion.get('aggregate', 'all')} of {len(criterion['parts'])} parts"
    if not rule or "op" in criterion:  # a v1 line reads as it did: measured op target
        op = criterion.get("op", "")
        return f"{OP_SYMBOLS.get(op, op)} {format_value(criterion.get('target'))}"
    censored = " (censored)" if rule.get("censored") else ""
    if rule.get("band") is None:
        symbol = ">" if rule["kind"] == "above" else "<"
        return f"{symbol} {format_value(rule['threshold'])}{censored}"
    lo, hi = (("−∞" if i == 0 else "∞") if v is None else format_value(v)
              for i, v in enumerate(rule["band"]))
    inside = "in" if rule["kind"] == "inside_band" else "outside"
    return f"{inside} [{lo}, {hi}]{censored}"


@dataclass(frozen=True)
class Forest:
    """What one forest row draws, in data units, and the range its axis shows. ``lo``/``hi``
    of None: an unbounded end (drawn as an arrow to the edge)."""

    estimate: float | None
    lo: float | None
    hi: float | None
    threshold: float | None
    band: tuple[float | None, float | None] | None
    verdict: str
    axis: tuple[float, float]


def forest_of(criterion: dict) -> Forest | None:
    """The row's drawing, or None for a combined criterion (its parts are drawn)."""
    if criterion.get("parts"):
        return None
    rule = criterion.get("rule") or {}
    estimate = _number(criterion.get("estimate", criterion.get("measured")))
    interval = criterion.get("interval")
    if interval is None:  # before the schema: one value
        lo = hi = estimate
    else:
        lo, hi = (_number(v) for v in interval)
    threshold = _number(rule.get("threshold") if rule else criterion.get("target"))
    band = tuple(_number(v) for v in rule["band"]) if rule.get("band") is not None else None
    points = [v for v in (estimate, lo, hi, threshold, *(band or ())) if v is not None]
    if not points:
        axis = (-1.0, 1.0)
    else:
        left, right = min(points), max(points)
        pad = 0.12 * (right - left) if right > left else max(abs(left) * 0.1, 0.5)
        axis = (left - pad, right + pad)
    return Forest(estimate, lo, hi, threshold, band, criterion_verdict(criterion), axis)


def _number(value) -> float | None:
    """A finite float, or None (missing, NaN, or an unbounded end written as null)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


class ForestDelegate(QStyledItemDelegate):
    """Paints a ``Forest`` (stored under ``FOREST_ROLE``) across its cell."""

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex) -> None:
        super().paint(painter, option, index)
        forest = index.data(FOREST_ROLE)
        if isinstance(forest, Forest):
            painter.save()
            painter.setRenderHint(QPainter.RenderHint.Antialiasing)
            draw_forest(painter, QRectF(option.rect).adjusted(8, 4, -8, -4), forest)
            painter.restore()


def draw_forest(painter: QPainter, rect: QRectF, forest: Forest) -> None:
    """Band (shaded), threshold (dashed line), interval (whisker with caps, an arrow where
    unbounded) and estimate (dot), in the verdict's colour; each row has its own axis."""
    left, right = forest.axis

    def x(value: float | None, unbounded_at: float) -> float:
        if value is None:
            return unbounded_at
        share = (value - left) / (right - left)
        return rect.left() + min(max(share, 0.0), 1.0) * rect.width()

    middle = rect.center().y()
    lines = [forest.threshold]
    if forest.band is not None:
        x0, x1 = x(forest.band[0], rect.left()), x(forest.band[1], rect.right())
        painter.fillRect(QRectF(x0, rect.top(), max(x1 - x0, 1.5), rect.height()),
                         BAND_COLOUR)
        lines += list(forest.band)
    painter.setPen(QPen(THRESHOLD_COLOUR, 2))
    for value in lines:
        if value is not None:
            tx = x(value, rect.left())
            painter.drawLine(QPointF(tx, rect.top()), QPointF(tx, rect.bottom()))
    colour = VERDICT_COLOURS.get(forest.verdict, OPEN_COLOUR)
    if forest.estimate is None and forest.lo is None and forest.hi is None:
        painter.setPen(QPen(colour))
        painter.drawText(rect, Qt.AlignmentFlag.AlignCenter, "no finite value")
        return
    painter.setPen(QPen(colour, 3))
    x_lo, x_hi = x(forest.lo, rect.left()), x(forest.hi, rect.right())
    painter.drawLine(QPointF(x_lo, middle), QPointF(x_hi, middle))
    cap = min(7.0, rect.height() / 2)
    for end, bounded, direction in ((x_lo, forest.lo is not None, -1),
                                    (x_hi, forest.hi is not None, 1)):
        if bounded:
            painter.drawLine(QPointF(end, middle - cap), QPointF(end, middle + cap))
        else:
            painter.setBrush(QBrush(colour))
            painter.drawPolygon(QPolygonF([QPointF(end, middle),
                                           QPointF(end - 8 * direction, middle - 5),
                                           QPointF(end - 8 * direction, middle + 5)]))
    if forest.estimate is not None:
        painter.setPen(QPen(QColor("white"), 1.5))
        painter.setBrush(QBrush(colour))
        painter.drawEllipse(QPointF(x(forest.estimate, rect.left()), middle), 5.5, 5.5)


class ClaimView(QWidget):
    """``set_claim(claim)`` shows a Claim dict; ``verdict()`` reads back PASS, FAIL or
    INCONCLUSIVE."""

    def __init__(self, claim: dict | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.verdict_label = QLabel()
        font = QFont(self.verdict_label.font())
        font.setPointSizeF(font.pointSizeF() * 1.5)
        font.setBold(True)
        self.verdict_label.setFont(font)
        self.marks = QLabel()  # spec, profile, EXPLORATORY
        header = QHBoxLayout()
        header.addWidget(self.verdict_label)
        header.addWidget(self.marks, 1)
        self.statement = QLabel()
        self.details = QLabel()
        self.smoke_note = QLabel()
        self.exploratory_note = QLabel()
        for label, colour in ((self.smoke_note, OPEN_COLOUR), (self.exploratory_note,
                                                                OPEN_COLOUR)):
            label.setStyleSheet(f"color: {colour.name()};")
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.verticalHeader().setVisible(False)
        self.table.verticalHeader().setMinimumSectionSize(ROW_MIN_PX)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setWordWrap(True)
        self.table.setMinimumHeight(TABLE_MIN_PX)
        self.table.setItemDelegateForColumn(FOREST, ForestDelegate(self.table))
        columns = self.table.horizontalHeader()
        columns.setSectionResizeMode(NAME, QHeaderView.ResizeMode.Stretch)
        for column in (ESTIMATE, RULE, VERDICT):
            columns.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        for column, width in ((FOREST, FOREST_COLUMN_PX), (QUOTE, QUOTE_COLUMN_PX)):
            columns.setSectionResizeMode(column, QHeaderView.ResizeMode.Interactive)
            columns.resizeSection(column, width)
        columns.sectionResized.connect(lambda *_args: self.table.resizeRowsToContents())
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.currentCellChanged.connect(self._show_note)
        self.criterion_note = QLabel()
        self.criterion_note.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse)
        self.undecided = QLabel()  # what would decide each INCONCLUSIVE criterion
        self.sanity = QLabel()
        self.notes = QLabel()
        layout.addLayout(header)
        for widget in (self.statement, self.smoke_note, self.exploratory_note, self.details):
            layout.addWidget(widget)
        layout.addWidget(self.table, 1)
        for widget in (self.criterion_note, self.undecided, self.sanity, self.notes):
            layout.addWidget(widget)
        for label in (self.statement, self.details, self.smoke_note, self.exploratory_note,
                      self.criterion_note, self.undecided, self.sanity, self.notes):
            label.setWordWrap(True)
        self.claim: dict | None = None
        self.rows: list[tuple[int, dict]] = []
        self.clear()
        if claim is not None:
            self.set_claim(claim)

    def clear(self) -> None:
        self.claim = None
        self.rows = []
        self.verdict_label.setText("No claim checked yet")
        self.verdict_label.setStyleSheet("")
        for label in (self.marks, self.statement, self.details, self.smoke_note,
                      self.exploratory_note, self.notes, self.criterion_note, self.undecided,
                      self.sanity):
            label.clear()
            label.setVisible(False)
        self.table.setRowCount(0)

    def set_claim(self, claim: dict) -> None:
        """Show ``claim``; one that cannot be read (a damaged or foreign claim file) clears
        the view and says so, instead of raising into the event loop."""
        try:
            self._show_claim(claim)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            self.clear()
            self.verdict_label.setText(f"Not a readable claim ({type(exc).__name__}: {exc})")

    def _show_claim(self, claim: dict) -> None:
        self.claim = claim
        criteria = claim.get("criteria", [])
        verdict = claim_verdict(claim)
        self.verdict_label.setText(f"{verdict}  {claim.get('paper', '')}".strip())
        colour = VERDICT_COLOURS.get(verdict, OPEN_COLOUR)
        self.verdict_label.setStyleSheet(f"color: {colour.name()};")
        self._show(self.marks, self._marks_html(claim))
        self._show(self.statement, claim.get("statement", ""))
        seeds = ", ".join(str(s) for s in claim.get("seeds", [])) or "—"
        verdicts = [criterion_verdict(c) for c in criteria]
        held = verdicts.count("PASS")
        open_ = verdicts.count("INCONCLUSIVE")
        self._show(self.details, f"{held} of {len(criteria)} criteria hold"
                                 + (f", {open_} undecided" if open_ else "")
                                 + f" · seeds {seeds} · wall time "
                                   f"{format_seconds(claim.get('wall_s'))}"
                                 + units_text(claim.get("units") or []))
        self._show(self.smoke_note, "Smoke run: tiny sizes for CI. The numbers are computed, "
                                    "but the verdict is not required to hold; run the cpu or "
                                    "gpu profile for the reproduction."
                   if claim.get("smoke") else "")
        overrides = ", ".join(f"{k} = {format_value(v)}"
                              for k, v in (claim.get("overrides") or {}).items())
        self._show(self.exploratory_note,
                   "Exploratory run: settings other than the profile's"
                   + (f" ({overrides})" if overrides else "")
                   + ". This is not the paper's verdict." if claim.get("exploratory") else "")
        self.rows = flatten(criteria)
        self.table.setRowCount(len(self.rows))
        for row, (depth, criterion) in enumerate(self.rows):
            self._fill_row(row, depth, criterion)
        self.table.resizeRowsToContents()
        if self.rows:
            self.table.setCurrentCell(0, 0)
        self._show(self.undecided, "<br>".join(
            f"<b>{html.escape(str(c['name']))}</b> is undecided; it would be decided by: "
            f"{html.escape(str(c['decides_with']))}"
            for _d, c in self.rows
            if criterion_verdict(c) == "INCONCLUSIVE" and c.get("decides_with")))
        self._show(self.sanity, self._sanity_html(claim.get("sanity") or []))
        self._show(self.notes, f"Notes: {claim['notes']}" if claim.get("notes") else "")

    @staticmethod
    def _marks_html(claim: dict) -> str:
        marks = [f"spec {claim.get('spec', 'v1')}"]
        profile = claim.get("profile") or ("smoke" if claim.get("smoke") else "")
        if profile:
            marks.append(f"profile {profile}")
        text = " · ".join(marks)
        if claim.get("exploratory"):
            text += f" · <b style='color:{OPEN_COLOUR.name()}'>EXPLORATORY</b>"
        return text

    @staticmethod
    def _sanity_html(checks: list[dict]) -> str:
        if not checks:
            return ""
        lines = []
        for check in checks:
            ok = bool(check.get("passed"))
            colour = (PASS_COLOUR if ok else FAIL_COLOUR).name()
            detail = f" — {html.escape(str(check['detail']))}" if check.get("detail") else ""
            lines.append(f"<span style='color:{colour}'>{'✓' if ok else '✗'}</span> "
                         f"{html.escape(str(check.get('name', '')))}{detail}")
        return "<b>Sanity checks</b> (never counted toward the verdict):<br>" + "<br>".join(
            lines)

    def _fill_row(self, row: int, depth: int, criterion: dict) -> None:
        verdict = self._verdict_cell(criterion)
        interval = criterion.get("interval")
        interval_text = ("" if not interval else "[" + ", ".join(
            format_value(v) if v is not None else ("−∞" if i == 0 else "∞")
            for i, v in enumerate(interval)) + "]")
        estimate = criterion.get("estimate", criterion.get("measured"))
        quote = str(criterion.get("quote") or criterion.get("paper") or "")
        cells = {NAME: INDENT * depth + criterion.get("name", ""),
                 ESTIMATE: "" if criterion.get("parts") else format_value(estimate),
                 FOREST: "", RULE: rule_text(criterion), VERDICT: verdict, QUOTE: quote}
        note = str(criterion.get("note", "") or "")
        for column, text in cells.items():
            item = QTableWidgetItem(text)
            item.setToolTip(f"{text}\n\nnote: {note}" if note and column == NAME else text)
            if column == FOREST:
                item.setData(FOREST_ROLE, forest_of(criterion))
                item.setToolTip(" ".join(filter(None, [
                    f"estimate {format_value(estimate)}", interval_text,
                    f"({criterion['method']}, level {criterion.get('level', 0.95):g})"
                    if criterion.get("method") else "", rule_text(criterion)])))
            if column in (ESTIMATE, RULE):
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            if column == VERDICT:
                item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
                item.setForeground(QBrush(QColor("white")))
                item.setBackground(QBrush(VERDICT_COLOURS.get(criterion_verdict(criterion),
                                                               OPEN_COLOUR)))
                bold = QFont(item.font())
                bold.setBold(True)
                item.setFont(bold)
            self.table.setItem(row, column, item)

    def set_compact(self, compact: bool = True) -> None:
        """For a narrow place (the claims dock): a narrower forest (its dot is the estimate,
        its line or band the rule), and each criterion's estimate, rule and quote under the
        table (for the selected row) instead of in columns of their own."""
        for column in (ESTIMATE, RULE, QUOTE):
            self.table.setColumnHidden(column, compact)
        for row, (_depth, criterion) in enumerate(self.rows):
            self.table.item(row, VERDICT).setText(self._verdict_cell(criterion))
        self.table.horizontalHeader().resizeSection(
            FOREST, COMPACT_FOREST_PX if compact else FOREST_COLUMN_PX)
        self._show_note(self.table.currentRow())

    def _verdict_cell(self, criterion: dict) -> str:
        """The verdict, with the aggregate of a combined criterion (left to the rule in the
        note when the view is compact)."""
        verdict = criterion_verdict(criterion)
        if criterion.get("parts") and not self.table.isColumnHidden(RULE):
            verdict = f"{verdict} ({criterion.get('aggregate', 'all')})"
        return verdict

    def _show_note(self, row: int, *_args) -> None:
        criterion = self.rows[row][1] if 0 <= row < len(self.rows) else {}
        quote = str(criterion.get("quote") or criterion.get("paper") or "")
        estimate = criterion.get("estimate", criterion.get("measured"))
        compact = self.table.isColumnHidden(QUOTE)
        lines = [f"“{quote}”" if quote and compact else "",
                 f"estimate {format_value(estimate)}" if compact and criterion
                 and not criterion.get("parts") else "",
                 f"rule {rule_text(criterion)}" if compact and criterion else "",
                 str(criterion.get("note", "") or "")]
        if criterion.get("method"):
            lines.append(f"interval: {criterion['method']}, level "
                         f"{criterion.get('level', 0.95):g}")
        text = html.escape("; ".join(filter(None, lines)))  # a rule's "<" is text, not a tag
        name = html.escape(str(criterion.get("name", "")))
        self._show(self.criterion_note, f"<b>{name}</b>: {text}" if text else "")

    def showEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        """Rows measured before the columns had their widths wrap too much: measure again."""
        super().showEvent(event)
        self.table.resizeRowsToContents()

    def verdict(self) -> str:
        """``PASS``, ``FAIL``, ``INCONCLUSIVE`` or ``""`` when no claim is shown."""
        if self.claim is None:
            return ""
        return self.verdict_label.text().split()[0]

    def row_verdicts(self) -> list[str]:
        """The verdict of each top-level criterion (parts left out), in order."""
        return [criterion_verdict(c) for depth, c in self.rows if depth == 0]

    @staticmethod
    def _show(label: QLabel, text: str) -> None:
        label.setText(text)
        label.setVisible(bool(text))


def units_text(units: list[dict]) -> str:
    """Where a reproduction's units ran (the claim's ``units``): `` · 3 units on node-a
    (Ray tasks)``; empty when they ran in the local worker."""
    if not units:
        return ""
    hosts = Counter(str(unit.get("host") or "?") for unit in units)
    where = ", ".join(f"{count} on {host}" for host, count in hosts.items())
    tasks = " (Ray tasks)" if all(unit.get("task") for unit in units) else ""
    return f" · {len(units)} unit{'' if len(units) == 1 else 's'}: {where}{tasks}"


# -- what every place that offers a reproduction shares --------------------------------------

def settings_text(settings: dict) -> str:
    """A profile's settings on one line: ``seeds 3; steps 2000; tasks a, b``."""
    return "; ".join(f"{name} {setting_value(value)}" for name, value in settings.items())


def setting_value(value: Any) -> str:
    """A setting as the form shows it: integers whole, lists as their items."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(setting_value(item) for item in value) or "none"
    return format_value(value)


def exploratory_text(overrides: dict, settings: dict, profile: str) -> str:
    """What the form says before an exploratory run: each changed setting with the
    profile's value; empty when the form keeps the profile's settings."""
    if not overrides:
        return ""
    changes = ", ".join(f"{name} changed ({setting_value(value)}; the {profile} profile has "
                        f"{setting_value(settings.get(name))})"
                        for name, value in overrides.items())
    return (f"Exploratory: {changes}. The claim will be marked exploratory, never the "
            "paper's verdict.")


class ProfileChoice(QComboBox):
    """smoke, cpu or gpu; each item's tooltip lists that profile's settings (``describe``
    with the ``profiles`` field of the engine's method listing)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.addItems(list(PROFILES))
        self.setCurrentText("cpu")
        self.describe({})

    def describe(self, profiles: dict[str, dict]) -> None:
        for index, profile in enumerate(PROFILES):
            settings = profiles.get(profile) or {}
            self.setItemData(index, f"{profile}: {PROFILE_HINTS[profile]}"
                             + (f"\n{settings_text(settings)}" if settings else ""),
                             Qt.ItemDataRole.ToolTipRole)
        self.setToolTip("\n".join(f"{p}: {PROFILE_HINTS[p]}" for p in PROFILES))


def report_folder(host: Any, slugs: list[str]) -> Path:
    """Where a report of ``slugs`` is written: the workspace's ``reports/`` (a temporary
    folder for a host without a workspace)."""
    workspace = getattr(host, "workspace_path", None)
    root = Path(workspace()) if callable(workspace) else Path(tempfile.gettempdir()) / "studio"
    return root / "reports" / ("-".join(sorted(slugs)) or "all")


def open_in_browser(path: str) -> bool:
    """The desktop's program for HTML opens ``path``; False when there is none."""
    return QDesktopServices.openUrl(QUrl.fromLocalFile(path))


def request_report(host: Any, slugs: list[str], on_opened: Callable[[str], None],
                   on_error: Callable[[str], None]) -> None:
    """Ask the engine to write the report of ``slugs`` (request ``report``), then open its
    ``index.html`` in the desktop's browser. ``on_error`` hears the engine's refusal (no
    reproduction yet) or that nothing opens HTML here."""

    def opened(reply: dict) -> None:
        path = str(reply.get("path") or "")
        if not path:
            on_error("the engine wrote no report")
        elif open_in_browser(path):
            on_opened(path)
        else:
            on_error(f"{path}: written, but no program here opens HTML")

    host.request("report", {"slugs": list(slugs), "out": str(report_folder(host, slugs))},
                 on_reply=opened, on_error=on_error)
