"""fMRI viewer: scrubbing a 91x109x91x400 float32 run (1.4 GB) in .nii and .nii.gz.

Each step renders the three orthogonal views the panel draws (``ViewerModel.render``: the
slices in display orientation plus the value under the cursor) at a new time point, on one
thread. For .nii.gz the first view is timed from a cold open, then later frames once the
background pass is done: a seek index (indexed_gzip), or a one-off decompression into the
workspace cache (memory-mapped), the viewer's choice for files of 256 MB and more. The files
are generated into a temporary folder, smooth enough to compress like real data.
``BENCH_FMRI_FRAMES`` shortens the run for a quick check.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

SHAPE = (91, 109, 91)
FRAMES = int(os.environ.get("BENCH_FMRI_FRAMES", "400"))
SCRUB_STEPS = 120


def _write_run(folder: Path) -> tuple[Path, Path]:
    """The same run as .nii and .nii.gz, streamed a frame at a time (never 1.4 GB in RAM)."""
    import nibabel as nib

    header = nib.Nifti1Header()
    header.set_data_shape((*SHAPE, FRAMES))
    header.set_data_dtype(np.float32)
    header.set_qform(np.diag([2.0, 2.0, 2.0, 1.0]) + np.array(
        [[0, 0, 0, -90], [0, 0, 0, -126], [0, 0, 0, -72], [0, 0, 0, 0]]), code=1)
    header.set_xyzt_units("mm", "sec")
    header["pixdim"][4] = 2.0
    header.set_data_offset(352)
    prefix = header.binaryblock + b"\0" * 4
    rng = np.random.default_rng(0)
    axes = np.meshgrid(*(np.linspace(-1, 1, n, dtype=np.float32) for n in SHAPE),
                       indexing="ij")
    brain = np.maximum(0, 1 - sum(a * a for a in axes)) * 1000
    plain, packed = folder / "run.nii", folder / "run.nii.gz"
    compressor = zlib.compressobj(1, zlib.DEFLATED, 31)  # gzip container, fast level
    with open(plain, "wb") as raw, open(packed, "wb") as gz:
        raw.write(prefix)
        gz.write(compressor.compress(prefix))
        for t in range(FRAMES):
            frame = brain * (1 + 0.02 * np.sin(t / 7 + axes[0] * 3))
            frame += rng.normal(0, 4, size=SHAPE).astype(np.float32).round()
            block = np.asarray(frame, dtype=np.float32).tobytes(order="F")
            raw.write(block)
            gz.write(compressor.compress(block))
        gz.write(compressor.flush())
    return plain, packed


def _model(path: Path, convert_dir: Path | None = None):
    from engine.io.nifti import open_volume
    from panels.fmri.model import ViewerModel

    model = ViewerModel()
    model.set_base(open_volume(path, convert_dir=convert_dir, convert_min_bytes=0))
    return model


def _scrub_ms(model, times: list[int]) -> list[float]:
    from panels.fmri.model import ViewState

    spent = []
    for t in times:
        start = time.perf_counter()
        model.render(ViewState(cursor=model.cursor, t=t))
        spent.append((time.perf_counter() - start) * 1e3)
    return spent


def run() -> list[dict]:
    rows = []
    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory(prefix="bench-fmri-") as tmp:
        start = time.perf_counter()
        plain, packed = _write_run(Path(tmp))
        size_gb = (plain.stat().st_size / 1e9, packed.stat().st_size / 1e9)
        rows.append({"name": f"generate {SHAPE}x{FRAMES} float32 (.nii {size_gb[0]:.2f} GB, "
                             f".nii.gz {size_gb[1]:.2f} GB)",
                     "value": time.perf_counter() - start, "unit": "s"})

        model = _model(plain)
        times = [int(t) for t in rng.integers(0, FRAMES, SCRUB_STEPS)]
        spent = _scrub_ms(model, times)
        rows.append({"name": ".nii scrub, 3 orthogonal views per frame (random t)",
                     "value": 1e3 / statistics.mean(spent), "unit": "frames/s",
                     "target": ">= 60", "reference": "raw memmap 2-D slice ~40 us"})
        model.close()

        late = [int(t) for t in rng.integers(FRAMES // 2, FRAMES, SCRUB_STEPS // 2)]
        for mode, cache in (("indexed", None), ("converted", Path(tmp) / "cache")):
            start = time.perf_counter()
            model = _model(packed, cache)
            _scrub_ms(model, [0])
            rows.append({"name": f".nii.gz first view ({mode} mode: open + 3 views)",
                         "value": time.perf_counter() - start, "unit": "s", "target": "< 1",
                         "reference": "nibabel late frame ~5.3 s"})
            model.base.wait_for_index()
            rows.append({"name": f".nii.gz {mode} in the background (after open)",
                         "value": time.perf_counter() - start, "unit": "s",
                         "reference": "indexed_gzip full index ~4.7 s"})
            spent = _scrub_ms(model, late)
            rows.append({"name": f".nii.gz later frames once {mode}, 3 views (median)",
                         "value": statistics.median(spent), "unit": "ms", "target": "< 25"})
            model.close()
    return rows


if __name__ == "__main__":
    for row in run():
        print(f"{row['name']:<72} {row['value']:>10.4g} {row['unit']}")
