"""The 3-D tab: scenes and RMSD computed off the GUI thread (headless), and the OpenGL view
itself (marker ``gl``: in a process of its own on the X display, as `make test` gives)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtGui import QImage

from engine import provenance
from panels.molecules.view import TAB_3D, MoleculesPanel
from tests.panels.conftest import FakeHost
from tests.panels.molecules.test_geometry_and_sequence import peptide_pdb

ROTATION = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])


def two_models(path: Path) -> Path:
    """Model 1 a peptide, model 2 the same peptide rotated 90° and moved."""
    single = peptide_pdb(path.with_suffix(".one.pdb"), chains="A").read_text().splitlines()
    atoms = [line for line in single if line.startswith("ATOM")]
    out = ["MODEL        1", *atoms, "ENDMDL", "MODEL        2"]
    for line in atoms:
        xyz = np.array([float(line[30 + 8 * k:38 + 8 * k]) for k in range(3)])
        x, y, z = xyz @ ROTATION.T + [5.0, 0.0, -3.0]
        out.append(f"{line[:30]}{x:8.3f}{y:8.3f}{z:8.3f}{line[54:]}")
    path.write_text("\n".join([*out, "ENDMDL", "END"]) + "\n")
    return path


def wait_scene(panel, qtbot):
    qtbot.waitUntil(lambda: panel.scene is not None, timeout=20_000)
    return panel.scene


def test_rmsd_of_a_rotated_model_is_zero_and_shown(panel, tmp_path, qtbot):
    assert panel.open_file(two_models(tmp_path / "two.pdb"))
    assert [e.name for e in panel.model.entries] == ["two model 1", "two model 2"]
    panel.tabs.setCurrentIndex(TAB_3D)  # offscreen: no OpenGL 2.1, numbers still come
    scene = wait_scene(panel, qtbot)
    assert scene.kind == "structure" and len(scene.positions) == len(
        panel.model.entries[0].record.atoms)
    assert panel.pin()
    panel.select_row(1)
    qtbot.waitUntil(lambda: panel.rmsd_label.text().startswith("RMSD"), timeout=20_000)
    text = panel.rmsd_label.text()
    assert text.startswith("RMSD to #1: 0.000 Å over 6 CA atoms"), text
    panel.colour_box.setCurrentText("B-factor")
    assert wait_scene(panel, qtbot).colours.shape == (len(scene.positions), 4)


def test_a_residue_chosen_in_the_strip_is_found_among_the_atoms(panel, tmp_path):
    assert panel.open_file(peptide_pdb(tmp_path / "pep.pdb"))  # chains A and B
    panel.select_row(0)
    assert [t.label for t in panel.sequence_strip.tracks] == ["A", "B"]
    panel.sequence_strip.select(1, 1)  # B 2 LYS
    assert panel.residue_label.text() == "B 2 LYS (positive)"
    atoms = panel.model.entries[0].record.atoms
    assert len(panel.highlighted) == 9  # lysine's heavy atoms
    assert {(atoms[i].chain, atoms[i].residue, atoms[i].residue_number)
            for i in panel.highlighted} == {("B", "LYS", 2)}


def test_a_molecule_gets_a_conformer_and_a_different_one_no_rmsd(panel, tmp_path, qtbot):
    smiles = tmp_path / "set.smi"
    smiles.write_text("CCCCO butanol\nCCCCO butanol-again\nc1ccccc1 benzene\n")
    panel.open_file(smiles)
    panel.tabs.setCurrentIndex(TAB_3D)
    scene = wait_scene(panel, qtbot)
    assert len(scene.positions) == 15 and scene.kind == "molecule"  # C4H10O with hydrogens
    panel.pin()
    panel.select_row(1)
    qtbot.waitUntil(lambda: panel.rmsd_label.text().startswith("RMSD"), timeout=20_000)
    assert panel.rmsd_label.text().startswith("RMSD to #1: 0.000 Å over 5 heavy atoms")
    panel.select_row(2)
    qtbot.waitUntil(lambda: "no RMSD" in panel.rmsd_label.text(), timeout=20_000)


def test_the_panel_does_not_import_opengl_torch_or_mdanalysis_until_asked():
    code = ("import sys, panels.molecules.view; print(*(name in sys.modules for name in "
            "('torch', 'pyqtgraph.opengl', 'MDAnalysis', 'anarci')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "QT_QPA_PLATFORM": "offscreen"}, check=True,
                         cwd=Path(__file__).parents[3])
    assert out.stdout.split() == ["False"] * 4


def draw_on_a_display() -> None:
    """Open the 3-D tab on a real display, draw a peptide and a molecule, check pixels."""
    from PySide6.QtWidgets import QApplication

    app = QApplication([])
    folder = Path(tempfile.mkdtemp())
    panel = MoleculesPanel(FakeHost(folder / "runs"))
    panel.resize(1000, 700)
    panel.show()
    panel.open_file(two_models(folder / "two.pdb"))
    panel.tabs.setCurrentIndex(TAB_3D)
    assert panel.viewer_3d is not None, panel.placeholder_3d.text()
    for _ in range(400):
        app.processEvents()
        if panel.scene is not None:
            break
        panel.pool.waitForDone(50)
    viewer = panel.viewer_3d
    assert len(viewer.atoms.pos) == len(panel.scene.positions)
    assert len(viewer.sticks.pos) == 2 * 5  # the CA trace
    panel.sequence_strip.select(0, 1)  # A 2 LYS in yellow
    assert len(viewer.highlight.pos) == 9
    image = viewer.snapshot((200, 150))
    assert image.shape[2] == 4 and (image[..., :3] > 30).any(), "a black frame"
    shot = panel.export_3d(folder / "shot.png")  # drawn again at 192 dpi, provenance inside
    assert QImage(str(shot)).width() == 2 * viewer.width()
    assert provenance.read(shot)["view"]["figure"] == "3d"
    print("3-D view ok", flush=True)
    os._exit(0)  # GL teardown at interpreter exit can crash some drivers


@pytest.mark.gl
def test_the_3d_view_draws_a_structure() -> None:
    if not os.environ.get("DISPLAY"):
        pytest.skip("no X display: gl tests run under Xvfb, as `make test` does")
    done = subprocess.run(
        [sys.executable, "-c", "from tests.panels.molecules.test_molecules_3d import "
         "draw_on_a_display as run; run()"], capture_output=True, text=True, timeout=120,
        env={**os.environ, "QT_QPA_PLATFORM": "xcb"}, cwd=Path(__file__).parents[3])
    assert "3-D view ok" in done.stdout, done.stdout + done.stderr[-3000:]
