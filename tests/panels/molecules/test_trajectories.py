"""Trajectory playback: generation trajectories whose atom count changes (multi-frame XYZ),
sequence trajectories whose length changes (``>t=`` FASTA), MD runs (the AdK PSF/DCD of
MDAnalysisTests read on a worker thread, RMSD to frame 0), and Branching Flows runs launched
from the panel with their artifacts opened when the job ends."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Literal

import numpy as np
import pytest
from pydantic import Field

from engine.api import MethodParams, MethodSpec
from engine.io.molecules import read_molecules, read_xyz_frames
from panels.molecules.trajectory import read_generation, sequence_trajectory
from panels.molecules.view import TAB_3D, TAB_SEQUENCE, MoleculesPanel
from tests.panels.conftest import FakeHost

# Three frames: 2 atoms of noise (unknown element), then CO, then water (times in comments).
FRAMES = [("t=0.000", [("Xx", 0.0, 0.0, 0.0), ("Xx", 3.0, 0.0, 0.0)]),
          ("t=0.500 step 5", [("C", 0.0, 0.0, 0.0), ("O", 1.2, 0.0, 0.0)]),
          ("t=1.000", [("O", 0.0, 0.0, 0.0), ("H", 0.96, 0.0, 0.0), ("H", -0.24, 0.93, 0.0)])]
SEQUENCES = [(0.0, "XX"), (0.25, "XXXXX"), (0.5, "EVQLXXS"), (1.0, "EVQLVESGG")]


def write_xyz(path: Path, frames=FRAMES) -> Path:
    text = "".join(f"{len(atoms)}\n{comment}\n" + "".join(
        f"{e} {x:.3f} {y:.3f} {z:.3f}\n" for e, x, y, z in atoms) for comment, atoms in frames)
    path.write_text(text)
    return path


def write_fasta(path: Path, records=SEQUENCES) -> Path:
    path.write_text("".join(f">t={t:.3f}\n{sequence}\n" for t, sequence in records))
    return path


def test_xyz_frames_may_change_atom_count_and_carry_their_time(tmp_path):
    frames, problems = read_xyz_frames(write_xyz(tmp_path / "gen.xyz"))
    assert problems == [] and [len(f.atoms) for f in frames] == [2, 2, 3]
    assert [f.time for f in frames] == [0.0, 0.5, 1.0] and frames[1].comment == "t=0.500 step 5"
    found = read_molecules(tmp_path / "gen.xyz")  # the molecules among the frames
    assert [m.props for m in found.molecules] == [{"frame": 2, "t": 0.5}, {"frame": 3, "t": 1.0}]
    assert found.problems[0][0] == "line 1"  # the noise frame
    single = read_molecules(write_xyz(tmp_path / "one.xyz", FRAMES[2:]))
    assert single.molecules[0].props == {} and single.molecules[0].name == "t=1.000"
    assert read_generation(tmp_path / "one.xyz") is None


def test_a_generation_trajectory_gives_each_frame_its_own_atoms(tmp_path):
    trajectory = read_generation(write_xyz(tmp_path / "gen.xyz"))
    assert len(trajectory) == 3 and list(trajectory.curve[1]) == [2, 2, 3]
    scene = trajectory.scene(2)
    assert scene.elements == ["O", "H", "H"] and len(scene.lines) == 4  # two O-H bonds
    np.testing.assert_allclose(scene.positions[2], [-0.24, 0.93, 0.0])
    assert trajectory.describe(1) == "frame 2/3 · t=0.500 · 2 atoms"
    assert sequence_trajectory([], "x") is None


def test_generation_playback_follows_the_slider_and_plays(panel, tmp_path, qtbot):
    assert panel.open_file(write_xyz(tmp_path / "gen.xyz"))
    player = panel.player
    assert player.isVisible() and panel.tabs.currentIndex() == TAB_3D
    assert panel.status.text().endswith("3 frames to play")
    assert len(panel.model.entries) == 2  # the grid: frames that are molecules
    assert len(panel.scene.positions) == 2 and player.label.text().startswith("frame 1/3")
    player.set_frame(2)
    assert panel.scene.elements == ["O", "H", "H"]
    assert player.label.text() == "frame 3/3 · t=1.000 · 3 atoms"
    assert player.curve.point_count("current frame") == 1
    player.step()
    assert player.frame == 0 and len(panel.scene.positions) == 2  # loops to the start
    panel.select_row(1)  # water is frame 3
    assert player.frame == 2
    player.fps_box.setValue(50)
    player.play()
    seen = set()
    qtbot.waitUntil(lambda: seen.add(player.frame) or len(seen) == 3, timeout=5000)
    player.pause()
    assert not player.playing and player.play_button.text() == "Play"


def test_a_trajectory_of_noise_still_plays(panel, tmp_path):
    noise = [(f"t={t}", [("Xx", float(i), 0.0, 0.0) for i in range(n)])
             for t, n in ((0.0, 1), (0.5, 4))]
    assert panel.open_file(write_xyz(tmp_path / "noise.xyz", noise))
    assert panel.model.entries == [] and len(panel.player.trajectory) == 2
    panel.player.set_frame(1)
    assert len(panel.scene.positions) == 4


def test_a_sequence_trajectory_strip_grows_with_the_slider(panel, tmp_path):
    assert panel.open_file(write_fasta(tmp_path / "sequence_trajectory_0.fasta"))
    assert panel.tabs.currentIndex() == TAB_SEQUENCE
    strip, player = panel.sequence_strip, panel.player
    assert [t.sequence for t in strip.tracks] == ["XX"]
    player.set_frame(3)
    assert [t.sequence for t in strip.tracks] == ["EVQLVESGG"]
    assert strip.tracks[0].label == "t=1.000" and strip.width() > 9 * 14
    player.set_frame(1)
    assert [t.sequence for t in strip.tracks] == ["XXXXX"]
    assert panel.residue_label.text() == "frame 2/4 · t=0.250 · 5 residues"
    assert list(player.trajectory.curve[1]) == [2, 5, 7, 9]
    plain = tmp_path / "plain.fasta"
    plain.write_text(">a\nEVQ\n>b\nDIQ\n")
    assert panel.open_file(plain) and panel.player.trajectory is None
    assert not panel.player.isVisible()


def adk_files() -> tuple[str, str]:
    from MDAnalysisTests.datafiles import DCD, PSF

    return PSF, DCD


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_md_run_dropped_as_two_files_plays_with_its_rmsd(panel, qtbot):
    import MDAnalysis

    psf, dcd = adk_files()
    panel.open_dropped([dcd, psf])
    qtbot.waitUntil(lambda: panel.player.trajectory is not None, timeout=30_000)
    trajectory = panel.player.trajectory
    assert trajectory.kind == "md" and len(trajectory) == 98
    assert panel.status.text().startswith("adk + adk_dims.dcd: 3341 atoms, 98 frames")
    rmsd = trajectory.curve[1]
    assert rmsd[0] < 1e-6 and 5.0 < rmsd.max() < 8.0  # AdK closes: ~6.8 Å of CA RMSD
    assert [e.kind for e in panel.model.entries] == ["structure"]
    universe = MDAnalysis.Universe(psf, dcd)
    universe.trajectory[50]
    panel.player.set_frame(50)
    np.testing.assert_allclose(panel.scene.positions, universe.atoms.positions, atol=1e-4)
    ca = [i for i, name in enumerate(universe.atoms.names) if name == "CA"]
    np.testing.assert_allclose(panel.scene.lines[:2], universe.atoms.positions[ca[:2]],
                               atol=1e-4)  # the CA trace moves with the frame
    assert panel.player.label.text() == f"frame 51/98 · t={trajectory.times[50]:.3f} · " \
                                        f"RMSD {rmsd[50]:.2f} Å"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_md_files_opened_one_by_one_in_either_order(panel, qtbot):
    psf, dcd = adk_files()  # the window opens each dropped file on its own, in any order
    assert panel.open_file(dcd) and panel.player.trajectory is None
    assert panel.status.text() == "adk_dims.dcd: now open or drop its topology (PSF, PDB, GRO, " \
                                  "PRMTOP)"
    assert panel.open_file(psf)
    qtbot.waitUntil(lambda: panel.player.trajectory is not None, timeout=30_000)
    assert len(panel.player.trajectory) == 98 and panel.md_trajectory_path == ""
    panel.player.set_trajectory(None)
    assert panel.open_file(psf) and panel.status.text().startswith("topology adk.psf")
    assert panel.open_file(dcd)
    qtbot.waitUntil(lambda: panel.player.trajectory is not None, timeout=30_000)
    assert len(panel.player.trajectory) == 98 and panel.topology_path == ""
    assert not panel.host.errors


def test_a_trajectory_that_does_not_fit_its_topology_is_an_error_naming_both(panel, qtbot,
                                                                            tmp_path):
    from tests.panels.molecules.test_geometry_and_sequence import peptide_pdb

    _, dcd = adk_files()
    panel.open_dropped([str(peptide_pdb(tmp_path / "pep.pdb")), dcd])
    qtbot.waitUntil(lambda: bool(panel.host.errors), timeout=30_000)
    title, message = panel.host.errors[-1]
    assert title == "Cannot open the trajectory" and "adk_dims.dcd" in message
    assert "with the topology pep.pdb" in message and panel.player.trajectory is None


class BranchingParams(MethodParams):
    steps: int = Field(10, ge=1, le=1000, description="training steps")
    kind: Literal["circle", "molecules"] = Field("molecules", description="data")


def _never(ctx, params, inputs):
    raise AssertionError("not run in tests")


BRANCHING = [MethodSpec(id=f"branching_flows.{name}", title=name, paper="branching_flows",
                        params=BranchingParams, run=_never)
             for name in ("molecules", "antibodies")]


@pytest.fixture
def run_panel(tmp_path, qapp, make_widget):
    host = FakeHost(tmp_path / "runs", methods=[spec.describe() for spec in BRANCHING])
    host._params.update({spec.id: spec.params for spec in BRANCHING})
    widget = make_widget(MoleculesPanel, host)
    widget.show()
    return widget


def test_branching_flows_molecules_run_opens_samples_and_trajectories(run_panel):
    panel = run_panel
    form = panel.method_form("branching_flows.molecules")
    assert form is not None and form.values() == {"steps": 10, "kind": "molecules"}
    assert panel.method_form("kcgm.calibrate") is None  # not listed by this engine
    panel.choose_run("kcgm.calibrate")
    assert panel.status.text() == "Not started: the engine does not list kcgm.calibrate"
    panel.run_method("branching_flows.molecules", {"steps": 3})
    (submitted,) = panel.host.submitted
    assert submitted["method"] == "branching_flows.molecules" and submitted["inputs"] == {}
    job = next(iter(panel.jobs))
    artifacts = Path(panel.host.run_dir(job)) / "artifacts"
    write_xyz(artifacts / "samples.xyz", FRAMES[1:])
    write_xyz(artifacts / "trajectory_0.xyz")
    write_xyz(artifacts / "trajectory_10.xyz", FRAMES[::-1])
    write_xyz(artifacts / "trajectory_2.xyz", FRAMES[1:])
    panel.host.emit(job, "job_result", outputs={})
    assert [e.smiles for e in panel.model.entries] == ["[C-]#[O+]", "O"]
    assert panel.player.trajectory.name == "trajectory_0.xyz"
    box = panel.player.source_box
    assert [box.itemText(i) for i in range(box.count())] == [
        "trajectory_0.xyz", "trajectory_2.xyz", "trajectory_10.xyz"]
    panel.player.source_chosen.emit("trajectory_10.xyz")
    assert panel.player.trajectory.name == "trajectory_10.xyz"
    assert len(panel.scene.positions) == 3  # its first frame is water
    assert [e.smiles for e in panel.model.entries] == ["[C-]#[O+]", "O"]  # the set stays


def test_branching_flows_antibodies_run_plays_its_sequence_trajectory(run_panel):
    panel = run_panel
    panel.run_method("branching_flows.antibodies", {"steps": 3})
    job = next(iter(panel.jobs))
    artifacts = Path(panel.host.run_dir(job)) / "artifacts"
    (artifacts / "samples.fasta").write_text(">sample 1\nEVQLVESGG\n>sample 2\nDIQMTQ\n")
    write_fasta(artifacts / "sequence_trajectory_0.fasta")
    panel.host.emit(job, "job_result", outputs={})
    assert [e.name for e in panel.model.entries] == ["sample 1", "sample 2"]
    assert panel.player.trajectory.kind == "sequence"
    panel.player.set_frame(2)
    assert [t.sequence for t in panel.sequence_strip.tracks] == ["EVQLXXS"]


def draw_frames_on_a_display() -> None:
    """Play the AdK run and a generation trajectory in a real 3-D view; check the drawn atoms
    follow the frames and the camera stays put while playing."""
    from PySide6.QtWidgets import QApplication

    app = QApplication([])
    folder = Path(tempfile.mkdtemp())
    panel = MoleculesPanel(FakeHost(folder / "runs"))
    panel.resize(1000, 800)
    panel.show()
    panel.open_dropped(list(adk_files()))
    for _ in range(600):
        app.processEvents()
        if panel.player.trajectory is not None:
            break
        panel.pool.waitForDone(50)
    viewer = panel.viewer_3d
    assert viewer is not None, panel.placeholder_3d.text()
    assert len(viewer.atoms.pos) == 3341
    viewer.setCameraPosition(distance=123.0)
    panel.player.set_frame(90)
    assert np.allclose(viewer.atoms.pos, panel.player.trajectory.coordinates[90], atol=1e-4)
    assert viewer.opts["distance"] == 123.0, "the camera jumped between frames"
    image = viewer.snapshot((200, 150))
    assert (image[..., :3] > 30).any(), "a black frame"
    panel.colour_box.setCurrentText("secondary structure")
    panel.style_box.setCurrentText("cartoon")
    assert viewer.cartoon_vertices > 1000 and len(viewer.sticks.pos) == 0
    assert len(viewer.atoms.pos) == 0 and viewer.cartoon.visible()
    before = viewer.cartoon.opts["meshdata"].vertexes().copy()
    panel.player.set_frame(10)
    assert not np.allclose(viewer.cartoon.opts["meshdata"].vertexes(), before)
    for _ in range(20):  # the mesh reaches the GPU at the next paint
        app.processEvents()
    cartoon = viewer.snapshot((200, 150))
    assert (cartoon[..., :3] > 30).any(), "the cartoon is not drawn"
    panel.style_box.setCurrentText("atoms + trace")
    assert not viewer.cartoon.visible() and len(viewer.atoms.pos) == 3341
    panel.open_file(write_xyz(folder / "gen.xyz"))
    panel.player.set_frame(2)
    assert len(viewer.atoms.pos) == 3 and len(viewer.sticks.pos) == 4
    print("3-D playback ok", flush=True)
    os._exit(0)


@pytest.mark.gl
def test_the_3d_view_plays_frames() -> None:
    if not os.environ.get("DISPLAY"):
        pytest.skip("no X display: gl tests run under Xvfb, as `make test` does")
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", "from tests.panels.molecules.test_trajectories "
         "import draw_frames_on_a_display as run; run()"], capture_output=True, text=True,
        timeout=120, env={**os.environ, "QT_QPA_PLATFORM": "xcb"},
        cwd=Path(__file__).parents[3])
    assert "3-D playback ok" in done.stdout, done.stdout + done.stderr[-3000:]
