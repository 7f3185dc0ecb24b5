"""Random edit histories of generated fMRI layers (hypothesis): chunks discarded and kept,
crops, masks at the cursor, undo, redo, a second generation of the same file name opened
beside the first, switching the active layer and reopening a layer, through the window's real
undo history and autosave. After every step nothing has escaped to the event loop, each open
layer is a fresh read of its file with its applied edits replayed, the active layer is an open
one (and the one the layer box shows), and a refused edit leaves no step; undoing everything
gives every layer as read."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.panels.conftest import HistoryHost, close_widget
from tests.panels.crowd.edit_checks import escaped_exceptions

pytest.importorskip("PySide6")

FIRST, CHUNK, FRAMES, REAL_FRAMES = 3, 2, 6, 10
AFFINE = np.diag([3.0, 3.0, 3.0, 1.0])
FOLDERS = ("first", "second")  # one file name in each: two layers named alike

operations = st.one_of(
    st.tuples(st.just("open"), st.integers(0, 1)),
    st.tuples(st.just("activate"), st.integers(0, 1)),
    st.tuples(st.just("chunk"), st.integers(0, REAL_FRAMES - 1)),
    st.tuples(st.just("crop"), st.integers(-1, FRAMES), st.integers(0, FRAMES + 1)),
    st.tuples(st.just("mask"), st.sampled_from(["sphere", "box"]), st.sampled_from([3, 6, 100]),
              st.sampled_from(["outside", "inside"]), st.integers(0, 4)),
    st.tuples(st.just("undo")), st.tuples(st.just("redo")),
    st.tuples(st.just("undo")), st.tuples(st.just("redo")),
)


def write_runs(folder: Path) -> tuple[Path, list[Path]]:
    """A real 4-D run and two generated runs (other content, one file name) with sidecars."""
    rng = np.random.default_rng(0)
    real = folder / "sub-01_bold.nii"
    nib.save(nib.Nifti1Image((100 + rng.standard_normal((5, 6, 4, REAL_FRAMES)))
                             .astype(np.float32), AFFINE), real)
    generated = []
    for number, name in enumerate(FOLDERS):
        path = folder / name / "gen_bold.nii"
        path.parent.mkdir()
        nib.save(nib.Nifti1Image((200 * (number + 1) + rng.standard_normal((5, 6, 4, FRAMES)))
                                 .astype(np.float32), AFFINE), path)
        sidecar = {"GeneratedBy": [{"Name": "Studio brainworld.generate"}],
                   "BrainWorld": {"FirstGeneratedFrame": FIRST, "ChunkFrames": CHUNK}}
        path.with_name("gen_bold.json").write_text(json.dumps(sidecar))
        generated.append(path)
    return real, generated


def perform(panel, operation: tuple, generated: list[Path]) -> None:
    name, *args = operation
    if name == "open":
        panel.open_generated(generated[args[0]])
    elif name == "activate":
        layer = next((x for x in panel.layers.layers if x.path == generated[args[0]]), None)
        if layer is not None:
            panel.set_active_layer(layer.name)
    elif name == "chunk":
        panel.set_time(args[0])
        panel.toggle_chunk()
    elif name == "crop":
        panel.crop_layer(*args)
    elif name == "mask":
        shape, radius_mm, clear, voxel = args
        panel.set_cursor((voxel, voxel, min(voxel, 3)))
        panel.mask_at_cursor(shape, radius_mm, clear)
    elif name == "undo":
        panel._host.undo()
    elif name == "redo":
        panel._host.redo()


def edits_of(layer) -> tuple:
    return layer.path, sorted(layer.discarded), tuple(layer.crop), layer.masks


def shown(panel) -> list[tuple]:
    return [edits_of(layer) for layer in panel.layers.layers]


def fresh_replayed(panel, host) -> list[tuple]:
    """Each open layer read afresh from its file, its applied edits replayed onto it."""
    from engine.io.nifti import open_volume
    from panels.fmri.generated import GeneratedLayer, GeneratedLayers

    states = []
    for layer in panel.layers.layers:
        fresh = GeneratedLayers()
        fresh.add(GeneratedLayer.open(layer.path, open_volume(layer.path)))
        fresh.layers[0].name = layer.name
        for command in host.history.applied(layer.document):
            command.apply(fresh)
        states.append(edits_of(fresh.layers[0]))
        fresh.close()
    return states


def check(panel, host) -> None:
    assert fresh_replayed(panel, host) == shown(panel)
    names = [layer.name for layer in panel.layers.layers]
    assert len(set(names)) == len(names)  # an edit names its layer: never two alike
    if panel.active_layer is not None:
        assert panel.active_layer in panel.layers.layers
        assert panel.layer_box.currentText() == panel.active_layer.name
    assert [panel.layer_box.itemText(i) for i in range(panel.layer_box.count())] == names


@given(st.lists(operations, max_size=12))
def test_random_layer_edit_histories_keep_layers_and_history_true(qapp, operations):
    from panels.fmri.view import FmriPanel

    with tempfile.TemporaryDirectory() as tmp, escaped_exceptions() as escaped:
        real, generated = write_runs(Path(tmp))
        host = HistoryHost(Path(tmp) / "runs", Path(tmp) / "workspace")
        panel = FmriPanel(host)
        try:
            assert panel.open_file(real) and panel.open_generated(generated[0])
            for operation in operations:
                index, before = host.history.stack.index(), shown(panel)
                perform(panel, operation, generated)
                assert not escaped, (operation, escaped)
                if operation[0] in ("chunk", "crop", "mask") and \
                        host.history.stack.index() == index:
                    assert shown(panel) == before  # refused: no step, no change
                check(panel, host)

            while host.history.stack.canUndo():
                host.undo()
            assert not escaped
            assert shown(panel) == [(layer.path, [], (0, FRAMES), [])
                                    for layer in panel.layers.layers]
        finally:
            close_widget(panel)


def test_an_edit_of_a_layer_named_like_another_changes_only_that_layer(qapp, tmp_path):
    """Two generations with one file name (other folders): edits name their layer, so the
    second is numbered, its edits land on it, and reopened it gets them back."""
    from panels.fmri.view import FmriPanel

    real, generated = write_runs(tmp_path)
    host = HistoryHost(tmp_path / "runs", tmp_path / "workspace")
    panel = FmriPanel(host)
    try:
        assert panel.open_file(real)
        assert panel.open_generated(generated[0]) and panel.open_generated(generated[1])
        first, second = panel.layers.layers
        assert (first.name, second.name) == ("gen_bold.nii", "gen_bold.nii (2)")
        assert panel.crop_layer(1, 4) and panel.active_layer is second
        assert (first.crop, second.crop) == ((0, FRAMES), (1, 4))
        assert panel.open_generated(generated[1])  # reopened: its edit replayed onto it
        assert [layer.crop for layer in panel.layers.layers] == [(0, FRAMES), (1, 4)]
        host.undo()
        assert [layer.crop for layer in panel.layers.layers] == [(0, FRAMES), (0, FRAMES)]
    finally:
        close_widget(panel)
