"""NIfTI/BIDS reading checked against nibabel on real files and on files written here."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import threading
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from engine.io import FormatError, detect, inspect_file
from engine.io.nifti import Volume, bids_runs, open_volume

NIBABEL_DATA = Path(nib.__file__).parent / "tests" / "data"
NITIME_FMRI = Path(__import__("nitime").__file__).parent / "data" / "fmri1.nii.gz"
REAL_FILES = ["anatomical.nii", "example4d.nii.gz", "example_nifti2.nii.gz", "functional.nii",
              "standard.nii.gz"]


def _reference(path: Path) -> np.ndarray:
    data = np.asarray(nib.load(path).dataobj, dtype=np.float32)
    return data if data.ndim == 4 else data[..., None]


@pytest.mark.parametrize("path", [NIBABEL_DATA / f for f in REAL_FILES] + [NITIME_FMRI],
                         ids=lambda p: p.name)
def test_real_files_match_nibabel(path: Path) -> None:
    volume = open_volume(path)
    reference = _reference(path)
    try:
        assert volume.spatial_shape == reference.shape[:3]
        assert volume.n_frames == reference.shape[3]
        np.testing.assert_allclose(volume.affine, nib.load(path).affine, rtol=1e-6)
        last = volume.n_frames - 1
        np.testing.assert_array_equal(volume.frame(last), reference[..., last])
        for axis in range(3):
            index = reference.shape[axis] // 2
            np.testing.assert_array_equal(volume.slice(axis, index, last),
                                          np.take(reference[..., last], index, axis=axis))
        np.testing.assert_array_equal(volume.time_course((1, 2, 0)), reference[1, 2, 0])
    finally:
        volume.close()


def test_nitime_run_reports_tr_and_nifti2_version() -> None:
    report = inspect_file(NITIME_FMRI)
    assert report["format"] == "nifti" and report["panel"] == "fmri"
    assert report["summary"]["shape"] == [10, 10, 18, 40]
    assert report["summary"]["tr_s"] == pytest.approx(1.35)
    assert report["summary"]["dtype"] == "int16"
    assert len(report["summary"]["affine"]) == 4
    assert inspect_file(NIBABEL_DATA / "example_nifti2.nii.gz")["metadata"]["nifti_version"] == 2
    fsl = inspect_file(NIBABEL_DATA / "example4d.nii.gz")  # FSL 3.3: pixdim 2000, unit "sec"
    assert fsl["summary"]["tr_s"] == pytest.approx(2.0)
    assert fsl["metadata"]["description"] == "FSL3.3 v2.25 NIfTI-1 Single file format"


def _write(path: Path, data: np.ndarray, affine=None, slope=None, inter=None, tr=None) -> Path:
    image = nib.Nifti1Image(data, np.diag([2.0, 2.0, 2.5, 1.0]) if affine is None else affine)
    if slope is not None:
        image.header.set_slope_inter(slope, inter)
    if tr is not None:
        image.header.set_xyzt_units("mm", "msec")
        image.header["pixdim"][4] = tr
    nib.save(image, path)
    return path


def test_int16_scaling_float32_uint8_and_ms_tr(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    raw = rng.integers(-300, 300, size=(6, 5, 4, 3), dtype=np.int16)
    path = _write(tmp_path / "scaled.nii.gz", raw, slope=0.5, inter=10.0, tr=2500)
    volume = open_volume(path)
    np.testing.assert_allclose(volume.frame(2), raw[..., 2] * 0.5 + 10.0)
    assert volume.tr_s == pytest.approx(2.5)
    volume.close()
    floats = rng.normal(size=(7, 6, 5)).astype(np.float32)
    np.testing.assert_array_equal(open_volume(_write(tmp_path / "f.nii", floats)).frame(0),
                                  floats)
    labels = rng.integers(0, 255, size=(4, 4, 4), dtype=np.uint8)
    np.testing.assert_array_equal(open_volume(_write(tmp_path / "u.nii", labels)).frame(0),
                                  labels)


def test_oblique_affine_world_coordinates_match_nibabel(tmp_path: Path) -> None:
    angle = np.deg2rad(20)
    rotation = np.array([[np.cos(angle), -np.sin(angle), 0], [np.sin(angle), np.cos(angle), 0],
                         [0, 0, 1]])
    affine = np.eye(4)
    affine[:3, :3] = rotation @ np.diag([-2.0, 3.0, 4.0])
    affine[:3, 3] = [10.0, -20.0, 5.0]
    volume = open_volume(_write(tmp_path / "oblique.nii", np.zeros((5, 6, 7), np.float32),
                                affine=affine))
    ijk = np.array([[1, 2, 3], [4, 5, 6]])
    np.testing.assert_allclose(volume.voxel_to_world(ijk),
                               nib.affines.apply_affine(affine, ijk))
    np.testing.assert_allclose(volume.world_to_voxel(volume.voxel_to_world(ijk)), ijk,
                               atol=1e-9)
    assert volume.orientation() == nib.aff2axcodes(affine)


def test_gz_frames_come_without_decoding_the_whole_file(tmp_path: Path) -> None:
    data = np.random.default_rng(1).normal(size=(20, 20, 20, 30)).astype(np.float32)
    volume = open_volume(_write(tmp_path / "run.nii.gz", data))
    assert volume.compressed
    np.testing.assert_array_equal(volume.frame(0), data[..., 0])
    assert volume.value((3, 4, 5), 29) == data[3, 4, 5, 29]  # one voxel, before the index
    assert volume.wait_for_index(30) and volume.index_error is None
    assert volume._indexer.returncode == 0  # built by a child: the GIL stays free meanwhile
    np.testing.assert_array_equal(volume.slice(2, 7, 29), data[:, :, 7, 29])
    np.testing.assert_array_equal(volume.values_over_time([(3, 4, 5), (0, 0, 0)]),
                                  data[[3, 0], [4, 0], [5, 0], :].T)
    volume.close()


def test_large_gz_is_converted_once_into_the_cache_and_memory_mapped(tmp_path: Path) -> None:
    data = np.random.default_rng(4).normal(size=(12, 10, 8, 9)).astype(np.float32)
    path = _write(tmp_path / "run.nii.gz", data)
    cache = tmp_path / "cache"
    volume = open_volume(path, convert_dir=cache, convert_min_bytes=0)
    assert volume.wait_for_index(30) and volume.index_error is None
    assert volume.converted_path is not None and volume.converted_path.parent == cache
    assert volume._data is not None  # frames now come from the memory map
    np.testing.assert_array_equal(volume.frame(8), data[..., 8])
    np.testing.assert_array_equal(volume.slice(0, 3, 5), data[3, :, :, 5])
    volume.close()
    again = open_volume(path, convert_dir=cache, convert_min_bytes=0)
    assert again.index_ready and again._indexer is None  # reused: no second pass
    np.testing.assert_array_equal(again.frame(4), data[..., 4])
    again.close()
    small = open_volume(path, convert_dir=tmp_path / "other")  # below the default size
    assert small.wait_for_index(30) and small.converted_path is None
    small.close()


def test_background_pass_reports_its_progress(tmp_path: Path, monkeypatch) -> None:
    """A conversion's progress is its partial copy's share; an index build has none to give
    (None: a busy indicator); both end at 1.0."""
    data = np.random.default_rng(5).normal(size=(12, 10, 8, 9)).astype(np.float32)
    path = _write(tmp_path / "run.nii.gz", data)
    gate, prepare = threading.Event(), Volume._prepare
    monkeypatch.setattr(Volume, "_prepare",
                        lambda self, converted: (gate.wait(), prepare(self, converted)))
    indexed = open_volume(path)
    converted = open_volume(path, convert_dir=tmp_path / "cache", convert_min_bytes=0)
    assert indexed.preparation_progress() is None
    assert converted.preparation_progress() == 0.0
    half = (converted.vox_offset + data.nbytes) // 2
    Path(f"{converted.converting_to}.part").write_bytes(bytes(half))
    assert converted.preparation_progress() == pytest.approx(0.5, abs=0.01)
    gate.set()
    for volume in (indexed, converted):
        assert volume.wait_for_index(30) and volume.preparation_progress() == 1.0
        volume.close()


def test_indexed_frames_are_split_over_handles_at_seek_points(tmp_path: Path,
                                                              monkeypatch) -> None:
    import engine.io.nifti as nifti

    monkeypatch.setattr(nifti, "INDEX_SPACING_BYTES", 64 * 1024)   # several points a frame
    monkeypatch.setattr(nifti, "PARALLEL_MIN_BYTES", 16 * 1024)
    monkeypatch.setattr(nifti, "PARALLEL_READERS", 2)
    data = np.random.default_rng(5).normal(size=(40, 40, 40, 6)).astype(np.float32)
    volume = open_volume(_write(tmp_path / "run.nii.gz", data))
    assert volume.wait_for_index(30) and volume.index_error is None
    assert len(volume._readers) == 2 and len(volume._points) > 6
    frame_bytes = data[..., 0].nbytes
    cuts = volume._cuts(volume.vox_offset + 3 * frame_bytes, frame_bytes, 2)
    assert len(cuts) == 3 and cuts[1] in volume._points    # the second share starts at a point
    for t in (5, 2, 4, 0):
        np.testing.assert_array_equal(volume.frame(t), data[..., t])
    np.testing.assert_array_equal(volume.values_over_time([(1, 2, 3)]), data[1, 2, 3][:, None])
    volume.close()
    assert volume._readers == []


def test_seek_index_is_saved_in_the_cache_and_reused(tmp_path: Path) -> None:
    data = np.random.default_rng(6).normal(size=(12, 10, 8, 9)).astype(np.float32)
    path = _write(tmp_path / "run.nii.gz", data)
    cache = tmp_path / "cache"
    volume = open_volume(path, convert_dir=cache)       # small: indexed, not converted
    assert volume.wait_for_index(30) and volume.converted_path is None
    assert volume._indexer is not None and volume.index_path.parent == cache
    assert volume.index_path.is_file() and volume.index_path.suffix == ".gzidx"
    volume.close()
    again = open_volume(path, convert_dir=cache)
    assert again.wait_for_index(30) and again._indexer is None   # read back: no second pass
    np.testing.assert_array_equal(again.frame(7), data[..., 7])
    again.close()
    again.index_path.write_bytes(b"not an index")
    damaged = open_volume(path, convert_dir=cache)
    assert damaged.wait_for_index(30) and damaged.index_error is None
    assert damaged._indexer is not None                 # rebuilt
    np.testing.assert_array_equal(damaged.frame(8), data[..., 8])
    damaged.close()


def test_reads_from_threads_agree(tmp_path: Path) -> None:
    data = np.random.default_rng(2).normal(size=(10, 10, 10, 12)).astype(np.float32)
    volume = open_volume(_write(tmp_path / "run.nii.gz", data))
    wrong: list[int] = []

    def read(offset: int) -> None:
        for t in range(offset, 12, 3):
            if not np.array_equal(volume.frame(t), data[..., t]):
                wrong.append(t)

    threads = [threading.Thread(target=read, args=(k,)) for k in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []
    volume.close()


def test_bids_folder_with_sidecar_tr(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    (root / "sub-01" / "anat").mkdir(parents=True)
    (root / "sub-01" / "func").mkdir()
    (root / "dataset_description.json").write_text('{"Name": "t", "BIDSVersion": "1.8.0"}')
    _write(root / "sub-01" / "anat" / "sub-01_T1w.nii.gz", np.ones((8, 8, 8), np.float32))
    bold = _write(root / "sub-01" / "func" / "sub-01_task-rest_bold.nii.gz",
                  np.ones((4, 4, 4, 5), np.float32), tr=9999)
    bold.with_name("sub-01_task-rest_bold.json").write_text(json.dumps({"RepetitionTime": 0.8}))
    assert detect(root).name == "bids"
    (run,) = bids_runs(root)
    assert run.anat[0].name == "sub-01_T1w.nii.gz" and run.tr_s == (0.8,)
    assert open_volume(bold).tr_s == pytest.approx(0.8)  # the sidecar wins over the header
    report = inspect_file(root)
    assert report["panel"] == "fmri" and report["summary"]["bold_runs"] == 1
    with pytest.raises(FormatError, match="not a BIDS folder"):
        bids_runs(tmp_path / "ds" / "sub-01" / "anat")


def _bad(path: Path, match: str) -> None:
    with pytest.raises(FormatError, match=match) as error:
        inspect_file(path)
    assert str(path) in str(error.value)
    with pytest.raises(FormatError):
        open_volume(path)


def test_bad_files_raise_clear_errors(tmp_path: Path) -> None:
    data = np.random.default_rng(3).normal(size=(16, 16, 16, 8)).astype(np.float32)
    whole = _write(tmp_path / "whole.nii.gz", data).read_bytes()
    (tmp_path / "truncated.nii.gz").write_bytes(whole[: len(whole) // 2])
    _bad(tmp_path / "truncated.nii.gz", "truncated|gzip")

    text = tmp_path / "notes.nii"
    text.write_text("subject 01, scanned on Monday\n" * 40)
    _bad(text, "not a NIfTI file: it starts with text")

    short = bytearray(_write(tmp_path / "short.nii", data).read_bytes())
    _bad_bytes(tmp_path / "cut.nii", bytes(short[:-1000]), "dimensions need")

    image = nib.Nifti1Image(data, np.eye(4))
    image.header["dim"][1:5] = [30000, 30000, 30000, 30000]
    absurd = tmp_path / "absurd.nii.gz"
    absurd.write_bytes(gzip.compress(image.header.binaryblock + b"\0" * 4 + data.tobytes()))
    _bad(absurd, "absurd dimensions")

    mismatched = tmp_path / "mismatched.nii.gz"
    image.header["dim"][1:5] = [16, 16, 16, 9]
    mismatched.write_bytes(gzip.compress(image.header.binaryblock + b"\0" * 4
                                         + data.tobytes()))
    _bad(mismatched, "do not match")

    with_nans = data.copy()
    with_nans[2, 3, 4, 0] = np.nan
    nan_path = _write(tmp_path / "nans.nii", with_nans)
    _bad(nan_path, "NaN")
    assert open_volume(nan_path, nan="zero").frame(0)[2, 3, 4] == 0.0
    late = data.copy()
    late[1, 1, 1, 2] = late[2, 2, 2, 2] = np.nan   # frame 0 is fine: the file opens
    for suffix in (".nii", ".nii.gz"):
        volume = open_volume(_write(tmp_path / f"late{suffix}", late))
        with pytest.raises(FormatError, match="2 voxels of frame 2 are NaN"):
            volume.frame(2)
        with pytest.raises(FormatError, match="frame 2 is NaN"):
            volume.value((1, 1, 1), 2)
        volume.close()


def _bad_bytes(path: Path, content: bytes, match: str) -> None:
    path.write_bytes(content)
    _bad(path, match)


def test_nothing_stays_open_after_a_failure(tmp_path: Path) -> None:
    data = np.ones((8, 8, 8, 4), np.float32)
    data[..., 0] = np.nan
    path = _write(tmp_path / "nans.nii.gz", data)

    def open_on_the_file() -> list[str]:  # other tests' threads may open and close fds meanwhile
        links = []
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                links.append(os.readlink(f"/proc/self/fd/{fd}"))
        return [link for link in links if link == str(path.resolve())]

    with pytest.raises(FormatError, match="NaN"):
        open_volume(path)
    assert open_on_the_file() == []


@pytest.mark.parametrize("suffix", [".nii", ".nii.gz"])
def test_inspect_checks_a_large_frame_in_chunks_without_holding_it(tmp_path: Path, monkeypatch,
                                                                    suffix: str) -> None:
    import engine.io.nifti as nifti

    data = np.ones((16, 16, 16, 2), dtype=np.float32)
    data[0, 0, 0, 0] = data[15, 15, 15, 0] = np.nan  # in the first and the last chunk
    path = _write(tmp_path / f"big{suffix}", data)
    monkeypatch.setattr(nifti, "CHECK_CHUNK_BYTES", 4096)
    with pytest.raises(FormatError, match="2 voxels of frame 0 are NaN"):
        open_volume(path, index=False)
    volume = open_volume(path, index=False, nan="zero")
    try:
        assert volume._frames == {}  # read through, nothing kept
    finally:
        volume.close()


def test_a_frame_over_the_budget_is_refused_naming_file_budget_and_variable(
        tmp_path: Path, monkeypatch) -> None:
    path = _write(tmp_path / "run.nii.gz", np.zeros((32, 32, 32, 3), dtype=np.int16))
    monkeypatch.setenv("STUDIO_MAX_FRAME_BYTES", str(100_000))  # a frame is 131,072 float32
    with pytest.raises(FormatError, match="STUDIO_MAX_FRAME_BYTES") as refused:
        open_volume(path)
    assert str(path) in str(refused.value) and "frame size budget" in str(refused.value)
    assert inspect_file(path)["summary"]["shape"] == [32, 32, 32, 3]  # inspect holds none
    monkeypatch.setenv("STUDIO_MAX_FRAME_BYTES", str(200_000))
    volume = open_volume(path)
    try:
        assert volume.frame(2).shape == (32, 32, 32)
    finally:
        volume.close()


def test_large_frames_are_not_cached_four_at_a_time(tmp_path: Path, monkeypatch) -> None:
    import engine.io.nifti as nifti

    path = _write(tmp_path / "run.nii.gz", np.zeros((16, 16, 16, 4), dtype=np.float32))
    monkeypatch.setattr(nifti, "FRAME_CACHE_BYTES", 3 * 16**3 * 4)
    volume = open_volume(path, index=False)
    try:
        for t in range(4):
            volume.frame(t)
        assert list(volume._frames) == [1, 2, 3]
    finally:
        volume.close()
