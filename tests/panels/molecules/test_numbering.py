"""CDR numbering with ANARCI: trastuzumab's published CDRs in three schemes, the CDRs marked in
the sequence strip and the table (FASTA and the Jain antibodies), and a clear message without
hmmscan while everything else keeps working."""

from __future__ import annotations

import os
import shutil

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor

from panels.molecules import numbering
from panels.molecules.model import ANTIBODIES
from panels.molecules.numbering import MISSING_HMMER, number_sequences, region_of
from panels.molecules.sequence import CDR_BAR, CDR_COLOUR, SequenceStrip, Track
from panels.molecules.view import TAB_SEQUENCE

TRASTUZUMAB_VH = ("EVQLVESGGGLVQPGGSLRLSCAASGFNIKDTYIHWVRQAPGKGLEWVARIYPTNGYTRYADSVKGRFTISADTSKNTA"
                  "YLQMNSLRAEDTAVYYCSRWGGDGFYAMDYWGQGTLVTVSS")
TRASTUZUMAB_VL = ("DIQMTQSPSSLSASVGDRVTITCRASQDVNTAVAWYQQKPGKAPKLLIYSASFLYSGVPSRFSGSRSGTDFTLTISSLQ"
                  "PEDFATYYCQQHYTTPPTFGQGTKVEIK")
NOT_AN_ANTIBODY = "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQAPILSRVGDGTQDNLSGAEKAVQVKVKALPDAQ"
# Published CDRs of trastuzumab (heavy then light) per scheme.
EXPECTED = {
    "imgt": (("GFNIKDTY", "IYPTNGYT", "SRWGGDGFYAMDY"), ("QDVNTA", "SAS", "QQHYTTPPT")),
    "kabat": (("DTYIH", "RIYPTNGYTRYADSVKG", "WGGDGFYAMDY"),
              ("RASQDVNTAVA", "SASFLYS", "QQHYTTPPT")),
    "chothia": (("GFNIKDT", "YPTNGY", "WGGDGFYAMDY"), ("RASQDVNTAVA", "SASFLYS", "QQHYTTPPT")),
}
CI = os.environ.get("CI") == "true"
needs_hmmer = pytest.mark.skipif(shutil.which("hmmscan") is None and not CI,
                                 reason="hmmscan (Debian package hmmer) is not installed")


@needs_hmmer
@pytest.mark.parametrize("scheme", list(EXPECTED))
def test_trastuzumab_cdrs_in_each_scheme(scheme):
    heavy, light, other, gapped = number_sequences(
        [("VH", TRASTUZUMAB_VH), ("VL", TRASTUZUMAB_VL), ("x", NOT_AN_ANTIBODY),
         ("gap", "EV-QL")], scheme)  # a gap would fail hmmscan's whole batch
    assert other is None and gapped is None
    assert (heavy.chain_type, light.chain_type) == ("H", "K")
    assert tuple(heavy.cdr(TRASTUZUMAB_VH, c) for c in ("CDR1", "CDR2", "CDR3")) == \
        EXPECTED[scheme][0]
    assert tuple(light.cdr(TRASTUZUMAB_VL, c) for c in ("CDR1", "CDR2", "CDR3")) == \
        EXPECTED[scheme][1]
    assert len(heavy.labels) == len(TRASTUZUMAB_VH) and heavy.labels[0] == "1"
    if scheme == "kabat":
        assert "52A" in heavy.labels and "100A" in heavy.labels  # insertion codes kept


def test_cdr_ranges_differ_between_chains_outside_imgt():
    assert region_of(31, "H", "kabat") == "CDR1" and region_of(31, "K", "kabat") == "CDR1"
    assert region_of(24, "H", "kabat") == "" and region_of(24, "L", "kabat") == "CDR1"
    assert region_of(105, "H", "imgt") == region_of(105, "L", "imgt") == "CDR3"
    with pytest.raises(ValueError, match="scheme"):
        number_sequences([("a", "EVQ")], "aho")


def test_the_strip_draws_a_bar_in_the_cdr_colour(qapp, make_widget):
    strip = make_widget(SequenceStrip)
    track = Track("VH", "ACDE", [1, 2, 3, 4], labels=["1", "2", "3", "3A"],
                  regions=["", "CDR3", "CDR3", ""], scheme="IMGT")
    strip.set_tracks([track])
    image = strip.grab().toImage()
    below = strip.cell(0, 1).bottom() - CDR_BAR + 2
    assert QColor(image.pixel(strip.cell(0, 1).center().x(), below)) == QColor(
        CDR_COLOUR["CDR3"])
    assert QColor(image.pixel(strip.cell(0, 0).center().x(), below)) != QColor(
        CDR_COLOUR["CDR3"])
    assert track.describe(2) == "VH 3 ASP (negative); IMGT 3 CDR3"
    assert track.describe(3) == "VH 4 GLU (negative); IMGT 3A framework"


def antibody_fasta(tmp_path):
    path = tmp_path / "ab.fasta"
    path.write_text(f">tras VH\n{TRASTUZUMAB_VH}\n>tras VL\n{TRASTUZUMAB_VL}\n"
                    f">other\n{NOT_AN_ANTIBODY}\n")
    return path


def table_column(panel, name):
    table = panel.table_model
    column = table.columns.index(name)
    return [table.data(table.index(row, column)) for row in range(table.rowCount())]


@needs_hmmer
def test_panel_numbers_chains_off_the_gui_thread_and_marks_cdrs(panel, tmp_path, qtbot):
    assert panel.open_file(antibody_fasta(tmp_path))
    qtbot.waitUntil(lambda: bool(panel.model.numbering), timeout=30_000)
    assert panel.numbering_label.text().startswith("IMGT: 2 of 3 chain(s) numbered")
    assert table_column(panel, "CDR3") == ["SRWGGDGFYAMDY", "QQHYTTPPT", ""]
    assert table_column(panel, "chain type") == ["heavy", "light", ""]
    panel.tabs.setCurrentIndex(TAB_SEQUENCE)
    panel.select_row(0)
    (track,) = panel.sequence_strip.tracks
    assert "".join(a for a, r in zip(track.sequence, track.regions, strict=True)
                   if r == "CDR1") == "GFNIKDTY"
    start = track.regions.index("CDR3")
    panel.sequence_strip.select(0, start)
    assert panel.residue_label.text().endswith("IMGT 105 CDR3")
    panel.scheme_box.setCurrentIndex(panel.scheme_box.findData("kabat"))
    qtbot.waitUntil(lambda: table_column(panel, "CDR3")[0] == "WGGDGFYAMDY", timeout=30_000)
    assert panel.numbering_label.text().startswith("Kabat: 2 of 3")
    panel.table.sortByColumn(panel.table_model.columns.index("CDR3 length"),
                             Qt.SortOrder.DescendingOrder)
    assert table_column(panel, "CDR3 length")[:2] == ["11", "9"]


def test_without_hmmscan_the_panel_says_what_to_install(panel, tmp_path, monkeypatch):
    monkeypatch.setattr(numbering.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="install hmmer"):
        number_sequences([("VH", TRASTUZUMAB_VH)])
    assert panel.open_file(antibody_fasta(tmp_path))
    assert panel.numbering_label.text() == MISSING_HMMER
    assert "CDR3" not in panel.table_model.columns and panel.table_model.rowCount() == 3
    panel.select_row(0)
    (track,) = panel.sequence_strip.tracks
    assert track.regions is None and track.sequence == TRASTUZUMAB_VH


@needs_hmmer
def test_jain_antibodies_get_cdr_columns_beside_their_measurements(panel, tmp_path, qtbot):
    if not ANTIBODIES.is_dir():
        pytest.skip("../shared/data/antibodies is absent")
    subset = tmp_path / "jain"
    subset.mkdir()
    for name in ("jain2017_sd02.csv", "jain2017_sd03.csv"):  # the first two antibodies
        lines = (ANTIBODIES / name).read_text().splitlines(keepends=True)
        (subset / name).write_text("".join(lines[:3]))
    assert panel.open_antibodies(subset)
    qtbot.waitUntil(lambda: bool(panel.model.numbering), timeout=30_000)
    columns = panel.table_model.columns
    assert columns.index("CDR3") < columns.index("Fab Tm by DSF")
    assert table_column(panel, "name")[0] == "abituzumab VH"
    assert table_column(panel, "CDR3")[0] == "ASFLGRGAMDY"  # IMGT CDR-H3 of abituzumab
    assert len(panel.model.numbering) == 4
