"""The claim view draws each criterion as a forest row (issue 23): estimate, interval whisker,
threshold line or band, verdict colour; parts indented; marks, open criteria and sanity checks."""

from __future__ import annotations

import math

import pytest
from PySide6.QtGui import QColor

from engine import verdicts as v
from engine.api import Claim, Criterion
from studio.widgets.claim_view import (
    COMPACT_FOREST_PX,
    ESTIMATE,
    FOREST,
    FOREST_ROLE,
    NAME,
    QUOTE,
    RULE,
    VERDICT,
    ClaimView,
    exploratory_text,
    forest_of,
    settings_text,
    units_text,
)

AMBER, GREEN, RED = "#d68910", "#1e8449", "#c0392b"


def interval(estimate, lo, hi):
    return v.Interval(estimate, lo, hi, 0.95, "t-interval over 5 seeds")


def v2_claim() -> dict:
    parts = [v.criterion("(3a) binary", "rises, then converges", interval(0.8, 0.5, 1.1),
                         v.Rule.above(0.3)),
             v.criterion("(3b) 3-class", "rises, then converges", interval(0.2, -0.1, 0.5),
                         v.Rule.above(0.3))]
    criteria = [
        v.criterion("(1) gain", "the bypass raises recovery", interval(0.2, 0.1, 0.3),
                    v.Rule.above(0.05)),
        v.criterion("(2) equivalence", "matches the closed form", interval(0.3, -0.6, 1.2),
                    v.Rule.inside((-1, 1))),
        v.criterion("(4) loss", "lower loss", interval(2.0, 1.5, 2.5), v.Rule.below(1.0)),
        v.combine("(3) in at least one", "in at least one geometry", parts, "any"),
    ]
    sanity = [v.SanityCheck("identity", True, "err 1e-12"),
              v.SanityCheck("positive control", False, "missed by 3%")]
    claim = Claim("eos", "edge of stability", criteria, [0, 1, 2, 3, 4], 60.0, spec="v2",
                  sanity=sanity).to_dict()
    return claim | {"profile": "gpu", "exploratory": True, "overrides": {"seeds": 8}}


def test_forest_geometry_of_leaves_bands_unbounded_ends_and_v1_rows():
    claim = v2_claim()
    gain = forest_of(claim["criteria"][0])
    assert (gain.estimate, gain.lo, gain.hi, gain.threshold, gain.verdict) == (
        0.2, 0.1, 0.3, 0.05, "PASS")
    assert gain.axis[0] < 0.05 and gain.axis[1] > 0.3  # every mark inside the axis
    band = forest_of(claim["criteria"][1])
    assert band.band == (-1.0, 1.0) and band.threshold is None and band.verdict == "INCONCLUSIVE"
    assert forest_of(claim["criteria"][3]) is None  # a combined criterion draws its parts
    open_end = forest_of(v.criterion("one seed", "q", v.t_interval([2.0]),
                                     v.Rule.above(1.0)).to_dict())
    assert open_end.lo is None and open_end.hi is None and open_end.estimate == 2.0
    old = forest_of({"name": "c", "measured": 0.97, "target": 0.99, "op": ">=",
                     "passed": False})
    assert (old.estimate, old.lo, old.hi, old.threshold, old.verdict) == (
        0.97, 0.97, 0.97, 0.99, "FAIL")
    nan = forest_of(Criterion("nan", math.nan, 1.0, ">").to_dict())
    assert nan.estimate is None and nan.verdict == "INCONCLUSIVE"


def test_rows_marks_open_criteria_and_sanity_checks(make_widget):
    view = make_widget(ClaimView, v2_claim())
    assert view.verdict() == "FAIL"  # (4) fails; the failing sanity check does not count
    names = [view.table.item(r, NAME).text() for r in range(view.table.rowCount())]
    assert names == ["(1) gain", "(2) equivalence", "(4) loss", "(3) in at least one",
                     "    (3a) binary", "    (3b) 3-class"]
    assert view.row_verdicts() == ["PASS", "INCONCLUSIVE", "FAIL", "PASS"]
    colours = [view.table.item(r, VERDICT).background().color().name() for r in range(6)]
    assert colours == [GREEN, AMBER, RED, GREEN, GREEN, AMBER]
    assert view.table.item(3, VERDICT).text() == "PASS (any)"
    assert [view.table.item(r, RULE).text() for r in (0, 1, 2, 3)] == [
        "> 0.05", "in [-1, 1]", "< 1", "any of 2 parts"]
    assert view.table.item(0, QUOTE).text() == "the bypass raises recovery"
    assert view.table.item(3, FOREST).data(FOREST_ROLE) is None
    assert view.table.item(0, FOREST).data(FOREST_ROLE) == forest_of(v2_claim()["criteria"][0])
    marks = view.marks.text()
    assert "spec v2" in marks and "profile gpu" in marks and "EXPLORATORY" in marks
    assert "seeds = 8" in view.exploratory_note.text() and not view.exploratory_note.isHidden()
    undecided = view.undecided.text()
    assert "(2) equivalence" in undecided and "(3b) 3-class" in undecided
    assert "a narrower interval" in undecided and "(1) gain" not in undecided
    sanity = view.sanity.text()
    assert "never counted" in sanity and "positive control — missed by 3%" in sanity
    assert "2 of 4 criteria hold, 1 undecided" in view.details.text()


def colour_share(image, rect, colour: str) -> int:
    """How many pixels inside ``rect`` are close to ``colour``."""
    target = QColor(colour)
    count = 0
    for x in range(rect.left(), rect.right()):
        for y in range(rect.top(), rect.bottom()):
            pixel = image.pixelColor(x, y)
            if (abs(pixel.red() - target.red()) + abs(pixel.green() - target.green())
                    + abs(pixel.blue() - target.blue())) < 40:
                count += 1
    return count


@pytest.mark.parametrize("row,colour", [(0, GREEN), (1, AMBER), (2, RED), (4, GREEN),
                                        (5, AMBER)])
def test_each_forest_row_is_drawn_in_its_verdict_colour(make_widget, qtbot, row, colour):
    view = make_widget(ClaimView, v2_claim())
    view.resize(1200, 500)
    view.show()
    qtbot.waitExposed(view)
    view.table.setCurrentCell(3, NAME)  # the selection's highlight stays off the drawn rows
    image = view.table.viewport().grab().toImage()
    cell = view.table.visualRect(view.table.model().index(row, FOREST))
    assert colour_share(image, cell, colour) > 60  # the whisker and the dot
    others = {GREEN, AMBER, RED} - {colour}
    assert all(colour_share(image, cell, other) == 0 for other in others)
    combined = view.table.visualRect(view.table.model().index(3, FOREST))
    assert all(colour_share(image, combined, c) == 0 for c in (GREEN, AMBER, RED))


@pytest.fixture
def light_theme(qapp):
    """The pixel checks below assume the light theme's white cells; an earlier test of the
    same process may have left the dark one on the application."""
    from studio.theme import apply_theme

    before = qapp.property("studioTheme")
    apply_theme(qapp, "light")
    yield
    if before:
        apply_theme(qapp, before)


def test_threshold_line_and_band_are_drawn(make_widget, qtbot, light_theme):
    view = make_widget(ClaimView, v2_claim())
    view.resize(1200, 500)
    view.show()
    qtbot.waitExposed(view)
    view.table.setCurrentCell(3, NAME)
    image = view.table.viewport().grab().toImage()
    line = view.table.visualRect(view.table.model().index(0, FOREST))
    assert colour_share(image, line, "#34495e") > 20  # the threshold line
    band = view.table.visualRect(view.table.model().index(1, FOREST))
    shaded = "#cfe7f6"  # the band's translucent blue over white
    assert colour_share(image, band, shaded) > 200
    assert colour_share(image, line, shaded) < 40  # no band: only the line's soft edges


def test_v1_claims_show_in_the_same_rows(make_widget):
    v1 = Claim("chipstar", "s", [Criterion("(1a) gain", 6.2, 5.0, ">=", paper="+5 pp",
                                           note="with 0.5"),
                                 Criterion("(2) growth", 7.1, 5.0, "<", paper="< 5x")],
               [0], 12.0, smoke=True).to_dict()
    view = make_widget(ClaimView, v1)
    assert view.verdict() == "FAIL" and view.row_verdicts() == ["PASS", "FAIL"]
    assert "spec v1" in view.marks.text() and "profile smoke" in view.marks.text()
    assert "EXPLORATORY" not in view.marks.text() and view.exploratory_note.isHidden()
    assert not view.smoke_note.isHidden() and view.sanity.isHidden()
    assert view.table.item(0, QUOTE).text() == "+5 pp"
    assert [view.table.item(r, RULE).text() for r in (0, 1)] == ["≥ 5", "< 5"]
    assert "with 0.5" in view.criterion_note.text()
    old = {"paper": "old", "statement": "s", "seeds": [0], "wall_s": 3, "passed": False,
           "criteria": [{"name": "cosine", "measured": 0.97, "target": 0.99, "op": ">=",
                         "paper": "→ 1", "passed": False}]}
    view.set_claim(old)
    assert view.verdict() == "FAIL" and view.table.item(0, RULE).text() == "≥ 0.99"
    assert view.table.item(0, FOREST).data(FOREST_ROLE).threshold == 0.99
    assert view.marks.text() == "spec v1"


def test_a_claim_that_cannot_be_read_is_said_so(make_widget):
    view = make_widget(ClaimView, v2_claim())
    view.set_claim({"paper": "x", "verdict": "ERROR",
                    "criteria": [{"name": "c", "rule": {"band": None}, "interval": [1]}]})
    assert view.claim is None and "Not a readable claim" in view.verdict_label.text()


def test_compact_view_moves_the_quote_under_the_table(make_widget):
    view = make_widget(ClaimView, v2_claim())
    assert "raises recovery" not in view.criterion_note.text()  # it has its own column
    view.set_compact()
    assert all(view.table.isColumnHidden(c) for c in (QUOTE, ESTIMATE, RULE))
    assert "estimate 0.2" in view.criterion_note.text()
    assert "rule &gt; 0.05" in view.criterion_note.text()
    assert view.table.item(3, VERDICT).text() == "PASS"  # "any of 2 parts" is in the note
    assert view.table.columnWidth(FOREST) == COMPACT_FOREST_PX
    assert "“the bypass raises recovery”" in view.criterion_note.text()
    view.table.setCurrentCell(2, 0)
    assert "“lower loss”" in view.criterion_note.text()
    view.set_claim(v2_claim() | {"criteria": [{"name": "TV < 0.1", "measured": 0.4,
                                               "target": 0.1, "op": "<", "paper": "TV < 0.1",
                                               "note": "a < b", "passed": False}]})
    assert "TV &lt; 0.1" in view.criterion_note.text()  # shown as text, not eaten as a tag
    view.set_compact(False)
    assert not view.table.isColumnHidden(QUOTE) and "“" not in view.criterion_note.text()
    view.set_claim(v2_claim())
    assert view.table.item(3, VERDICT).text() == "PASS (any)"


def test_where_the_units_ran_and_the_profile_texts(make_widget):
    units = [{"host": "node-a", "task": "t1"}, {"host": "node-a", "task": "t2"},
             {"host": "node-b", "task": "t3"}]
    view = make_widget(ClaimView, v2_claim() | {"units": units})
    assert view.details.text().endswith(" · 3 units: 2 on node-a, 1 on node-b (Ray tasks)")
    assert units_text([{"host": "here", "task": None}]) == " · 1 unit: 1 on here"
    assert units_text([]) == ""
    assert settings_text({"seeds": 5, "horizon": 1_000_000, "tasks": ["a", "b"],
                          "lr": 0.25}) == "seeds 5; horizon 1000000; tasks a, b; lr 0.25"
    assert exploratory_text({}, {"seeds": 5}, "cpu") == ""
    assert exploratory_text({"seeds": 8}, {"seeds": 5}, "cpu").startswith(
        "Exploratory: seeds changed (8; the cpu profile has 5).")
