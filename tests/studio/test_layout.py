"""Each panel, with its heaviest view open on real data, lays out inside a 1280x800 window:
the window does not grow, every button and label lies inside it, and none cuts its text
("Open in fMRI 4D viewe"; three crowd clips widened the window to 1971 px)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QRect
from PySide6.QtWidgets import QAbstractButton, QAbstractScrollArea, QApplication, QLabel

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
NITIME_FMRI = Path(__import__("nitime").__file__).parent / "data" / "fmri1.nii.gz"
SIZE = (1280, 800)


def open_molecules(window, tmp_path):
    panel = window.open_panel("molecules")
    assert panel.open_file(DATA / "molecules" / "GNEprop_known_abx.tsv") is not False
    panel.tabs.setCurrentIndex(panel.tabs.indexOf(panel.preview.parentWidget()))
    panel.select_row(0)  # the editor: depiction, nearest reference and its long SMILES
    assert panel.nearest_smiles.text()
    return panel


def open_routing(window, tmp_path):
    panel = window.open_panel("routing")
    assert panel.open_design(DATA / "vlsi" / "gcd_nangate45_route.def",
                             DATA / "vlsi" / "Nangate45.lef")
    panel.select_net(panel.model.design.nets[1].name)  # its statistics and checks shown
    return panel


def open_dialogue(window, tmp_path):
    panel = window.open_panel("dialogue")
    assert panel.open_file(DATA / "dialogue" / "hh-rlhf_harmless-base_test.jsonl.gz")
    panel.turns_table.setCurrentCell(1, 2)  # a turn marked on the plot, the run form in front
    panel.tabs.setCurrentIndex(1)
    panel.run_status.setText("scicl.simulate (job-1): running, step 20 / 150 · collapsed 0")
    return panel


def open_sae(window, tmp_path):
    """A small real sae_pc1.train run (as tests/panels/sae builds it), a feature with its
    contexts on the page."""
    from tests.panels.sae.runs import make_sae_run

    run = make_sae_run(tmp_path)
    panel = window.open_panel("sae")
    assert panel.open_path(run)
    panel.show_feature(next(f for f in range(48) if panel.model.contexts(f)))
    panel.set_label(panel.page.feature, "a label long enough to need the room it is given")
    return panel


def open_crowd(window, tmp_path):
    panel = window.open_panel("crowd")
    panel.open_file(DATA / "crowd" / "zara1_crowds_zara01.txt")
    rng = np.random.default_rng(0)
    for name in ("coarse", "generated", "real"):  # three clips side by side
        panel.model.add_clip(name, rng.integers(0, 255, (8, 240, 320, 3), dtype=np.uint8))
    return panel


def open_fmri(window, tmp_path):
    panel = window.open_panel("fmri")
    panel.open_file(NITIME_FMRI)
    return panel


def open_lab(window, tmp_path):
    return window.open_panel("lab")


OPENERS = {"molecules": open_molecules, "routing": open_routing, "dialogue": open_dialogue,
           "crowd": open_crowd, "fmri": open_fmri, "lab": open_lab, "sae": open_sae}


def outside_or_cut(window) -> list[str]:
    """Buttons and labels (not inside a scrolling view) outside the window or eliding."""
    bounds = window.rect()
    found = []
    for widget in window.findChildren(QAbstractButton) + window.findChildren(QLabel):
        if not widget.isVisibleTo(window) or _scrolled(widget, window):
            continue
        text = widget.text().replace("&", "") if isinstance(widget, QAbstractButton) \
            else widget.text()
        rect = QRect(widget.mapTo(window, widget.rect().topLeft()), widget.size())
        if not bounds.contains(rect):
            found.append(f"{type(widget).__name__} {text!r} at {rect.getRect()}: outside")
            continue
        if not text or "<" in text or (isinstance(widget, QLabel) and (
                widget.wordWrap() or not widget.pixmap().isNull())):
            continue
        need = widget.fontMetrics().horizontalAdvance(text.splitlines()[0]) + (
            12 if isinstance(widget, QAbstractButton) else 0)
        if need > widget.width():
            found.append(f"{type(widget).__name__} {text!r}: needs {need} px, has "
                         f"{widget.width()}")
    return found


def _scrolled(widget, window) -> bool:
    parent = widget.parentWidget()
    while parent is not None and parent is not window:
        if isinstance(parent, QAbstractScrollArea):
            return True
        parent = parent.parentWidget()
    return False


@pytest.mark.parametrize("panel_id", sorted(OPENERS))
def test_a_panel_lays_out_inside_1280x800(main_window, qtbot, tmp_path, panel_id) -> None:
    main_window.resize(*SIZE)
    OPENERS[panel_id](main_window, tmp_path)
    for _ in range(20):
        QApplication.processEvents()
    qtbot.wait(300)
    assert (main_window.width(), main_window.height()) == SIZE
    assert outside_or_cut(main_window) == []


def test_the_fmri_generated_row_keeps_readable_slices(main_window, qtbot, tmp_path) -> None:
    """With a generated row the slices shrank to about 70 px under their letters."""
    import json

    import nibabel as nib

    from panels.fmri.view import SLICE_ROW_MIN_PX

    main_window.resize(*SIZE)
    panel = open_fmri(main_window, tmp_path)
    image = nib.load(NITIME_FMRI)
    generated = tmp_path / "run" / "artifacts" / "sub-01_desc-brainworld_bold.nii.gz"
    generated.parent.mkdir(parents=True)
    nib.save(nib.Nifti1Image(np.asarray(image.dataobj)[..., :12].astype(np.float32),
                             image.affine), generated)
    generated.with_name("sub-01_desc-brainworld_bold.json").write_text(json.dumps(
        {"GeneratedBy": [{"Name": "Studio brainworld.generate"}],
         "BrainWorld": {"FirstGeneratedFrame": 0, "ChunkFrames": 4}}))
    panel.open_file(generated)
    qtbot.waitUntil(lambda: panel.active_layer is not None, timeout=20_000)
    for _ in range(20):
        QApplication.processEvents()
    assert (main_window.width(), main_window.height()) == SIZE
    assert panel.ortho.height() >= 2 * SLICE_ROW_MIN_PX
    assert outside_or_cut(main_window) == []
