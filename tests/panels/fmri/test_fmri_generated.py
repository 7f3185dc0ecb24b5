"""Generated runs beside the real one: one cursor and one clock, keep/discard/crop/mask edits
through the host's undo stack (replayed after a restart), QC plots, PDF and MP4 export."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from engine.plots import plot, series
from panels.fmri.generated import (
    CropFrames,
    GeneratedLayer,
    GeneratedLayers,
    MaskRegion,
    SetChunkKept,
    checked_mask,
    decode,
    is_generated,
    write_layer,
)
from panels.fmri.view import FmriPanel, MovieExportError
from tests.panels.conftest import FakeHost
from tests.panels.fmri.test_fmri_panel import _drawn

FIRST, CHUNK, FRAMES = 8, 4, 12
AFFINE = np.array([[-3.0, 0, 0, 30], [0, 3.0, 0, -40], [0, 0, 3.5, -20], [0, 0, 0, 1]])


@pytest.fixture
def runs(tmp_path) -> tuple[Path, Path, np.ndarray, np.ndarray]:
    """A real run (20 frames) and a generated run of 12 frames following its frame 7, with
    the sidecar and QC plots brainworld.generate writes."""
    rng = np.random.default_rng(0)
    real = (100 + rng.standard_normal((9, 10, 7, 20))).astype(np.float32)
    generated = (200 + rng.standard_normal((9, 10, 7, FRAMES))).astype(np.float32)
    real_path = tmp_path / "sub-01_bold.nii.gz"
    nib.save(nib.Nifti1Image(real, AFFINE), real_path)
    folder = tmp_path / "run" / "artifacts"
    folder.mkdir(parents=True)
    gen_path = folder / "sub-01_desc-brainworld_bold.nii.gz"
    nib.save(nib.Nifti1Image(generated, AFFINE), gen_path)
    sidecar = {"GeneratedBy": [{"Name": "Studio brainworld.generate"}],
               "BrainWorld": {"FirstGeneratedFrame": FIRST, "ChunkFrames": CHUNK}}
    (folder / "sub-01_desc-brainworld_bold.json").write_text(json.dumps(sidecar))
    (folder / "power_spectra.json").write_text(json.dumps(plot(
        "power spectra", [series("real", [0.1, 0.2], [1, 2]),
                          series("generated", [0.1, 0.2], [1, 3])])))
    return real_path, gen_path, real, generated


class RecordingHost(FakeHost):
    """Keeps each document's edits like the shell's autosave, and replays them."""

    def __init__(self, run_root: Path) -> None:
        super().__init__(run_root)
        self.saved: dict[str, list[dict]] = {}

    def push_edit(self, document, command, model) -> None:
        self.saved.setdefault(document, []).append(command.to_json())
        command.apply(model)

    def restore_edits(self, document, model, decode) -> int:
        for data in self.saved.get(document, []):
            decode(data).apply(model)
        return len(self.saved.get(document, []))


@pytest.fixture
def host(tmp_path) -> RecordingHost:
    return RecordingHost(tmp_path / "runs")


@pytest.fixture
def panel(show_panel, host) -> FmriPanel:
    return show_panel(host, height=900)


def test_layer_model_edits_round_trip(runs, tmp_path) -> None:
    from engine.io.nifti import open_volume

    _, gen_path, _, generated = runs
    assert is_generated(gen_path) and not is_generated(runs[0])
    layers = GeneratedLayers()
    seen = []
    layers.listeners.append(lambda: seen.append(1))
    layer = GeneratedLayer.open(gen_path, open_volume(gen_path))
    layers.add(layer)
    assert (layer.first_frame, layer.chunk, layer.n_chunks) == (FIRST, CHUNK, 3)
    assert layer.frame_at(FIRST - 1) is None and layer.frame_at(FIRST + 5) == 5
    discard = SetChunkKept(layer.name, 1, kept=False)
    crop = CropFrames(layer.name, 2, 11, layer.crop)
    for command in (discard, crop):
        command.apply(layers)
        assert decode(json.loads(json.dumps(command.to_json()))) == command
    assert layer.frame_at(FIRST + 5) is None and layer.frame_at(FIRST + 1) is None
    assert layer.kept_frames() == [2, 3, 8, 9, 10]
    saved = write_layer(layer, tmp_path / "kept.nii.gz")
    np.testing.assert_allclose(nib.load(saved).get_fdata(), generated[..., [2, 3, 8, 9, 10]])
    np.testing.assert_allclose(nib.load(saved).affine, AFFINE)
    assert json.loads((tmp_path / "kept.json").read_text())["Edits"]["KeptGeneratedFrames"] == [
        2, 3, 8, 9, 10]
    crop.revert(layers)
    discard.revert(layers)
    assert layer.kept_frames() == list(range(FRAMES)) and len(seen) == 5
    with pytest.raises(ValueError, match="not an fMRI layer edit"):
        decode({"type": "set_turn_field"})
    with pytest.raises(IndexError, match="chunk 7"):
        layers.set_chunk_kept(layer.name, 7, False)
    layers.close()


def test_generated_run_shares_cursor_and_clock(panel, qtbot, runs) -> None:
    real_path, gen_path, real, generated = runs
    assert panel.open_file(real_path)
    assert panel.open_file(gen_path)          # recognised from its sidecar: a layer, not a base
    assert panel.model.base.path == real_path and panel.active_layer.path == gen_path
    assert all(view.box.isVisible() for view in panel.compare_planes)
    assert panel.model.n_frames == FIRST + FRAMES and panel.time_slider.maximum() == 19
    panel.set_cursor((3, 4, 2))
    panel.set_time(FIRST + 3)
    result = _drawn(panel, qtbot, cursor=(3, 4, 2), t=FIRST + 3)
    assert result["state"].compare_t == 3
    grid = panel.model.grid
    for plane in range(3):
        expected = grid.plane_slice(panel.model.compare, plane, (3, 4, 2)[plane], 3)
        np.testing.assert_array_equal(panel.compare_planes[plane].base.image, expected)
    assert panel.compare_planes[2].base.image.mean() > 150   # the generated values
    assert panel.planes[2].base.image.mean() < 150           # the real ones
    assert "generated frame 3" in panel.info.text()
    qtbot.waitUntil(lambda: panel.generated_course is not None, timeout=10_000)
    ijk = panel.model.cursor_voxel()
    np.testing.assert_allclose(panel.generated_course, generated[tuple(ijk)])
    x, _ = panel.generated_curve.getData()
    assert x[0] == pytest.approx(FIRST * (panel.model.functional.tr_s or 1.0))
    assert len(x) == FRAMES
    panel.set_time(2)                           # before the generation starts
    result = _drawn(panel, qtbot, t=2)
    assert result["state"].compare_t is None
    assert np.isnan(panel.compare_planes[0].base.image).all()
    assert "power_spectra" in [panel.qc_box.itemText(i) for i in range(panel.qc_box.count())]
    assert panel.qc_view.isVisible() and panel.qc_view.spec()["title"] == "power spectra"


def test_generated_layer_fits_a_laptop_screen_with_titled_rows(panel, runs) -> None:
    """The layer's controls wrap instead of widening the panel past a 1280-pixel screen;
    the two rows say which is real, and the legend lists "generated" only with a layer."""
    real_path, gen_path, _, _ = runs
    legend = panel.course_plot.plotItem.legend
    assert panel.open_file(real_path)
    assert [label.text for _, label in legend.items] == ["voxel"]
    assert panel.planes[0].title.toPlainText() == ""
    assert panel.open_file(gen_path)
    assert panel.minimumSizeHint().width() <= 1280
    assert panel.planes[0].title.toPlainText() == "real"
    assert panel.compare_planes[0].title.toPlainText() == "generated"
    assert [label.text for _, label in legend.items] == ["voxel", "generated"]


def test_keep_discard_crop_are_undoable_and_replayed(panel, qtbot, runs, host,
                                                     make_widget) -> None:
    real_path, gen_path, _, _ = runs
    panel.open_file(real_path)
    panel.open_file(gen_path)
    layer = panel.active_layer
    panel.set_time(FIRST + 5)                  # chunk 1
    assert panel.toggle_chunk()
    assert layer.discarded == {1} and panel.chunk_button.text() == "Keep chunk"
    result = _drawn(panel, qtbot, t=FIRST + 5, compare_t=None)
    assert np.isnan(panel.compare_planes[2].base.image).all()
    assert panel.crop_layer(0, 10)
    assert layer.crop == (0, 10) and panel.crop_stop.value() == 10
    assert not panel.crop_layer(5, 50) and host.errors[-1][0].startswith("Cannot crop")
    edits = host.saved[layer.document]
    assert [e["type"] for e in edits] == ["set_chunk_kept", "crop_frames"]
    decode(edits[1]).revert(panel.layers)      # what the undo stack does
    decode(edits[0]).revert(panel.layers)
    assert layer.discarded == set() and layer.crop == (0, FRAMES)
    _drawn(panel, qtbot, t=FIRST + 5, compare_t=5)
    assert result is not None
    panel.set_time(0)
    assert not panel.toggle_chunk()            # no generated chunk at t = 0

    again = make_widget(FmriPanel, host)       # a restart: the autosaved edits come back
    again.open_file(real_path)
    again.open_generated(gen_path)
    assert again.active_layer.discarded == {1} and again.active_layer.crop == (0, 10)


def test_exports_pdf_and_mp4(panel, qtbot, runs, tmp_path, monkeypatch) -> None:
    real_path, gen_path, _, _ = runs
    panel.open_file(real_path)
    panel.open_file(gen_path)
    _drawn(panel, qtbot)
    pdf = panel.export_figure(tmp_path / "f.pdf")
    assert pdf.read_bytes()[:5] == b"%PDF-"
    from engine import provenance

    made = provenance.read(pdf)  # the generated layer it shows, and from which file
    assert made["view"]["generated"]["layer"] == panel.active_layer.name
    assert str(Path(gen_path).resolve()) in [source["path"] for source in made["sources"]]
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)   # not installed
    with pytest.raises(MovieExportError, match="imageio-ffmpeg"):
        panel.export_figure(tmp_path / "f.mp4")
    frames, opened = [], {}

    def write_frames(path, size, **options):
        opened.update(path=path, size=size, **options)
        while True:
            data = yield
            if data is not None:
                frames.append(data)

    monkeypatch.setitem(sys.modules, "imageio_ffmpeg",
                        types.SimpleNamespace(write_frames=write_frames))
    panel.set_time(4)
    panel.export_movie(tmp_path / "f.mp4", fps=5)
    width, height = opened["size"]
    assert width % 2 == 0 and height % 2 == 0 and opened["fps"] == 5
    assert len(frames) == FIRST + FRAMES
    assert all(len(f) == width * height * 3 for f in frames)
    assert frames[0] != frames[FIRST + 2]
    assert panel.model.t == 4                 # the clock is put back


def test_regenerate_with_another_anatomy_opens_the_result_as_a_layer(panel, qtbot, runs, host,
                                                                     tmp_path) -> None:
    from engine.methods.brainworld import GenerateParams

    real_path, gen_path, _, generated = runs
    panel.open_file(real_path)
    panel.open_file(gen_path)
    assert not panel.regenerate() and "names no checkpoint" in host.errors[-1][1]
    sidecar_path = gen_path.with_name("sub-01_desc-brainworld_bold.json")
    sidecar = json.loads(sidecar_path.read_text())
    sidecar["GeneratedBy"][0]["Checkpoint"] = str(tmp_path / "ckpt")
    sidecar["BrainWorld"].update(StartFrame=4, GeneratedFrames=FRAMES, SamplingSteps=50)
    sidecar_path.write_text(json.dumps(sidecar))
    panel.open_generated(gen_path)             # reopened: the sidecar is read again
    host._params["brainworld.generate"] = GenerateParams
    t1 = tmp_path / "other_T1w.nii.gz"
    assert not panel.regenerate(t1) and "no such file" in host.errors[-1][1]  # not there yet
    nib.save(nib.Nifti1Image(np.ones((9, 10, 7), np.float32), AFFINE), t1)
    assert panel.regenerate(t1)
    submitted = host.submitted[-1]
    assert submitted["method"] == "brainworld.generate"
    assert submitted["params"]["start_frame"] == 4 and submitted["params"]["sampling_steps"] == 50
    assert submitted["inputs"] == {"checkpoint": str(tmp_path / "ckpt"),
                                   "fmri": str(real_path), "t1": str(t1)}
    (job,) = panel.jobs
    assert panel.info.text().startswith("regenerate ")
    assert panel.info.text().endswith(f" with other_T1w.nii.gz ({job}): queued")
    artifacts = Path(host.run_dir(job)) / "artifacts"
    made = artifacts / "sub-01_desc-brainworld_bold.nii.gz"
    nib.save(nib.Nifti1Image(generated[..., :5] * 0 + 7, AFFINE), made)
    made.with_name("sub-01_desc-brainworld_bold.json").write_text(json.dumps(sidecar))
    host.emit(job, "job_result", outputs={"generated": f"artifacts/{made.name}"})
    assert panel.active_layer.path == made and len(panel.layers.layers) == 2
    assert panel.layer_box.count() == 2 and job in panel.active_layer.name
    result = _drawn(panel, qtbot, compare_t=panel._compare_t())
    assert result["compare"] is not None


def _world_of_voxels(shape) -> np.ndarray:
    ijk = np.stack(np.meshgrid(*(np.arange(n) for n in shape), indexing="ij"), -1)
    return ijk @ AFFINE[:3, :3].T + AFFINE[:3, 3]


def test_masks_clear_regions_undoably_and_export_masked(runs, tmp_path) -> None:
    from engine.io.nifti import open_volume

    _, gen_path, _, generated = runs
    layers = GeneratedLayers()
    layer = GeneratedLayer.open(gen_path, open_volume(gen_path))
    layers.add(layer)
    world = _world_of_voxels(generated.shape[:3])
    centre = world[4, 5, 3]
    sphere = MaskRegion(layer.name, checked_mask({"shape": "sphere", "centre_mm": centre,
                                                   "radius_mm": 7.0}))
    low, high = world[0, 0, 0], world[2, 3, 1]
    box = MaskRegion(layer.name, checked_mask({"shape": "box", "low_mm": low, "high_mm": high,
                                                "clear": "inside", "fill": "nan"}))
    atlas = np.zeros(generated.shape[:3], dtype=np.float32)
    atlas[6:, :, :] = 3                      # label 3: the last three i-slices
    nib.save(nib.Nifti1Image(atlas, AFFINE), tmp_path / "atlas.nii.gz")
    labels = MaskRegion(layer.name, checked_mask({"shape": "labels", "labels": [3],
                                                   "path": str(tmp_path / "atlas.nii.gz"),
                                                   "clear": "inside"}))
    in_sphere = np.linalg.norm(world - centre, axis=-1) <= 7.0
    corner = np.zeros(generated.shape[:3], dtype=bool)
    corner[:3, :4, :2] = True                # the box's voxels (axes flipped or not)
    for command in (sphere, box, labels):
        command.apply(layers)
        assert decode(json.loads(json.dumps(command.to_json()))) == command
    frame = layer.masked_frame(5)
    expected = np.where(in_sphere, generated[..., 5], 0.0)
    expected[corner] = np.nan
    expected[6:] = 0.0
    np.testing.assert_array_equal(frame, expected)
    assert 0 < in_sphere.sum() < in_sphere.size and np.isnan(frame).sum() == (
        corner & (atlas == 0)).sum()
    assert np.isnan(layer.masked_course((0, 0, 0), np.ones(3))).all()
    np.testing.assert_array_equal(layer.masked_course((4, 5, 3), generated[4, 5, 3]),
                                  generated[4, 5, 3])
    SetChunkKept(layer.name, 0, kept=False).apply(layers)
    saved = write_layer(layer, tmp_path / "masked.nii.gz")
    written = nib.load(saved).get_fdata()
    np.testing.assert_allclose(written[..., 1], expected)    # kept frame 5, masked
    np.testing.assert_array_equal(np.isnan(written[..., 0]), np.isnan(expected))
    assert (written[..., 0][~in_sphere & ~corner] == 0).all()
    edits = json.loads((tmp_path / "masked.json").read_text())["Edits"]
    assert [m["shape"] for m in edits["Masks"]] == ["sphere", "box", "labels"]
    for command in (labels, box, sphere):
        command.revert(layers)
    assert layer.masks == [] and layer.clearing is None
    np.testing.assert_array_equal(layer.masked_frame(5), generated[..., 5])
    for bad, problem in (({"shape": "cone"}, "shape"),
                         ({"shape": "sphere", "centre_mm": [0, 0], "radius_mm": 1}, "three"),
                         ({"shape": "sphere", "centre_mm": [0, 0, 0], "radius_mm": 0}, "> 0"),
                         ({"shape": "box", "low_mm": [0] * 3, "high_mm": [1] * 3,
                           "clear": "around"}, "clear"),
                         ({"shape": "labels", "path": "x.nii", "fill": "mean"}, "fill")):
        with pytest.raises(ValueError, match=problem):
            checked_mask(bad)
    with pytest.raises(ValueError, match="label image"):
        layers.add_mask(layer.name, {"shape": "labels", "path": str(tmp_path / "gone.nii")})
    assert layer.masks == []                  # a failed mask changes nothing
    with pytest.raises(ValueError, match="no such mask"):
        sphere.revert(layers)
    layers.close()


def test_mask_at_cursor_shows_is_undoable_and_replayed(panel, qtbot, runs, host,
                                                        make_widget, tmp_path) -> None:
    real_path, gen_path, _, generated = runs
    panel.open_file(real_path)
    panel.open_file(gen_path)
    layer = panel.active_layer
    panel.set_cursor((4, 5, 3))
    panel.set_time(FIRST + 2)
    assert panel.mask_at_cursor("sphere", 6.0)
    assert [e["type"] for e in host.saved[layer.document]] == ["mask_region"]
    world = _world_of_voxels(generated.shape[:3])
    in_sphere = np.linalg.norm(world - panel.model.cursor_world(), axis=-1) <= 6.0
    _drawn(panel, qtbot, cursor=(4, 5, 3), t=FIRST + 2)
    grid = panel.model.grid
    for plane in range(3):
        shown = panel.compare_planes[plane].base.image
        np.testing.assert_array_equal(shown, grid.plane_slice(panel.model.compare, plane,
                                                              (4, 5, 3)[plane], 2))
        assert (shown == 0).any() and (shown > 150).any()   # cleared and kept voxels
    np.testing.assert_array_equal(panel.model.compare.frame(2),
                                  np.where(in_sphere, generated[..., 2], 0))
    assert not panel.mask_at_cursor("box", 500.0)       # covers everything: clears nothing
    assert "clears no voxel" in host.errors[-1][1]
    assert not panel.mask_layer({"shape": "labels", "path": str(tmp_path / "none.nii")})
    assert len(host.saved[layer.document]) == 1          # refused masks never reach the stack
    panel.set_cursor((0, 0, 0))                          # outside the sphere: course cleared
    qtbot.waitUntil(lambda: panel.generated_voxel is not None
                    and tuple(panel.generated_voxel) == tuple(grid.to_file(np.zeros(3, int))),
                    timeout=10_000)
    _, shown = panel.generated_curve.getData()
    assert np.nanmax(np.abs(shown)) == 0

    again = make_widget(FmriPanel, host)                 # a restart: the mask comes back
    again.open_file(real_path)
    again.open_generated(gen_path)
    assert again.active_layer.masks == layer.masks
    decode(host.saved[layer.document][0]).revert(panel.layers)   # what the undo stack does
    np.testing.assert_array_equal(panel.model.compare.frame(2), generated[..., 2])


class UndoHost(FakeHost):
    """A FakeHost whose edits go through the shell's own undo history, autosaved."""

    def __init__(self, run_root: Path, workspace) -> None:
        from studio.undo import EditHistory

        super().__init__(run_root)
        self.history = EditHistory(workspace)

    def push_edit(self, document, command, model) -> None:
        self.history.push(document, command, model)

    def restore_edits(self, document, model, decode) -> int:
        return self.history.restore(document, model, decode)

    def forget_edits(self, document) -> None:
        self.history.forget(document)


def test_a_replaced_or_closed_layer_takes_its_steps_off_the_history(make_widget, qtbot, runs,
                                                                    tmp_path, workspace) -> None:
    """Undo never reaches a layer that is gone (its revert would find no layer, or revert the
    replayed edit twice); the layer's autosaved edits stay for the next opening."""
    real_path, gen_path, _, _ = runs
    host = UndoHost(tmp_path / "runs", workspace)
    panel = make_widget(FmriPanel, host)
    panel.show()
    qtbot.waitExposed(panel)
    panel.open_file(real_path)
    panel.open_file(gen_path)
    document = panel.active_layer.document
    panel.set_time(FIRST + 5)
    assert panel.toggle_chunk()
    assert panel.crop_layer(0, 10)
    stack = host.history.stack
    stack.undo()  # the crop: redo-able, so not saved
    panel.open_generated(gen_path)  # opened again: a new layer, the saved discard replayed
    layer = panel.active_layer
    assert layer.discarded == {1} and layer.crop == (0, FRAMES)
    assert [stack.text(i) for i in range(stack.count())] == [f"Discard chunk 1 of {layer.name}"]
    stack.undo()  # one press, on the layer shown
    assert layer.discarded == set() and not stack.canUndo()
    stack.redo()
    panel.open_file(real_path)  # a new real run: the layers close
    assert stack.count() == 0 and panel.active_layer is None and not host.errors
    assert [e["type"] for e in host.history.saved_edits(document)] == ["set_chunk_kept"]
